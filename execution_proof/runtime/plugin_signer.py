"""``plugin:NAME[?ARG]``: an Ed25519 key behind an executable of the operator's, the way to a
cloud KMS or a network HSM without a driver here (docs/keys.md, "A plugin for a cloud KMS").

Each call runs ``execution-proof-signer-NAME`` (found on ``PATH``) once: one JSON request on
its stdin, ``{"version": 1, "op": "public_key" | "sign", "arg": ARG or null,
"message_base64url": ...}`` (the message for ``sign`` only; ARG as written in the URI), and one
JSON document on its stdout: ``{"public_key_base64url": ...}``, ``{"signature_base64url": ...}``
(base64url without padding), or ``{"error": "..."}`` with a non-zero exit status. Its stderr is
this process's. The public key is asked once and kept; every signature is checked against it
before it is returned, so a plugin that answers wrongly is refused, never believed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Mapping
from typing import Any

import orjson

from execution_proof.receipts.encoding import b64url_decode, b64url_encode
from execution_proof.transparency.signer import SignerError, redact, verify_ed25519

PLUGIN_PREFIX = "execution-proof-signer-"
TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 1 << 16
MAX_ERROR_CHARS = 500
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class PluginSigner:
    """The key a ``plugin:`` URI names. Made without running the plugin; every failure (no such
    executable, a time-out after ``TIMEOUT_S``, an error answer, a malformed one, a signature
    that does not verify) is a ``SignerError`` naming the URI and the plugin."""

    def __init__(self, uri: str, environ: Mapping[str, str] | None = None) -> None:
        self._shown = redact(uri)
        name, sep, arg = uri.removeprefix("plugin:").partition("?")
        if not uri.startswith("plugin:") or not _NAME_RE.fullmatch(name):
            raise SignerError(f"{self._shown}: a plugin signer is plugin:NAME[?ARG], NAME of letters, digits, . _ -")
        self.command = PLUGIN_PREFIX + name
        self._arg = arg if sep else None
        self._environ = None if environ is None else dict(environ)
        self._public: bytes | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PluginSigner({self._shown})"

    def public_key(self) -> bytes:
        """The plugin's public key, asked at the first call and kept."""
        with self._lock:
            if self._public is None:
                self._public = self._bytes(self._call("public_key"), "public_key_base64url", 32)
            return self._public

    def sign(self, message: bytes) -> bytes:
        public = self.public_key()
        signature = self._bytes(self._call("sign", message), "signature_base64url", 64)
        if not verify_ed25519(public, message, signature):
            raise SignerError(
                f"{self._shown}: the plugin {self.command} answered a signature that does not verify with its public "
                "key: refused"
            )
        return signature

    def _call(self, op: str, message: bytes | None = None) -> dict[str, Any]:
        environ = os.environ if self._environ is None else self._environ
        executable = shutil.which(self.command, path=environ.get("PATH"))
        if executable is None:
            raise SignerError(f"{self._shown}: no executable {self.command} on PATH")
        request: dict[str, Any] = {"version": 1, "op": op, "arg": self._arg}
        if message is not None:
            request["message_base64url"] = b64url_encode(message)
        try:
            done = subprocess.run(  # noqa: S603 - the operator's own executable, named by its URI
                [executable],
                input=orjson.dumps(request),
                stdout=subprocess.PIPE,
                timeout=TIMEOUT_S,
                env=self._environ,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SignerError(
                f"{self._shown}: the plugin {self.command} did not answer within {TIMEOUT_S:.0f} s"
            ) from None
        except OSError as exc:
            raise SignerError(f"{self._shown}: cannot run the plugin {executable} ({exc.strerror})") from None
        answer = self._answer(done.stdout)
        error = answer.get("error") if answer is not None else None
        if done.returncode != 0 or error is not None:
            if isinstance(error, str) and error:
                said = " ".join(error.split())[:MAX_ERROR_CHARS]
                raise SignerError(f"{self._shown}: the plugin {self.command} failed: {said}")
            raise SignerError(
                f"{self._shown}: the plugin {self.command} exited with status {done.returncode} without an error "
                'document ({"error": "..."} on stdout)'
            )
        if answer is None:
            raise SignerError(f"{self._shown}: the plugin {self.command} did not answer one JSON object on stdout")
        return answer

    @staticmethod
    def _answer(stdout: bytes) -> dict[str, Any] | None:
        if len(stdout) > MAX_ANSWER_BYTES:
            return None
        try:
            answer = orjson.loads(stdout)
        except orjson.JSONDecodeError:
            return None
        return answer if isinstance(answer, dict) else None

    def _bytes(self, answer: dict[str, Any], member: str, length: int) -> bytes:
        try:
            value = b64url_decode(answer.get(member, ""))
        except ValueError:
            raise SignerError(
                f"{self._shown}: the plugin {self.command} answered no {member} (base64url without padding)"
            ) from None
        if len(value) != length:
            raise SignerError(
                f"{self._shown}: the plugin {self.command} answered a {member} of {len(value)} bytes, not {length}"
            )
        return value
