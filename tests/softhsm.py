"""A real PKCS#11 token for tests: a SoftHSM2 token in the test's own directory.

``softhsm_token(tmp_path)`` writes a ``softhsm2.conf`` whose token directory is under
``tmp_path``, points ``SOFTHSM2_CONF`` at it (in this process, and in ``token.env`` for
subprocesses), initialises one token (user PIN 1234, SO PIN 5678) and writes the user PIN to a
file readable by its owner only. ``token.uri("root")`` is the ``pkcs11:`` signer URI of an
object of that label, with ``module-path`` and ``pin-source=file:``.

SoftHSM2 reads its configuration when the library is initialised, so the sessions this process
holds (runtime/pkcs11_signer.py) are closed first: a token made for one test is never looked
for in another test's directory. Without ``softhsm2-util`` or the SoftHSM2 module the test is
skipped with the reason, or fails under REQUIRE_REAL_SERVICES=1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from tests.conftest import missing_binary

PIN = "1234"
SO_PIN = "5678"
MODULE_CANDIDATES = (
    "/usr/lib/softhsm/libsofthsm2.so",
    "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
    "/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
    "/usr/lib64/pkcs11/libsofthsm2.so",
    "/usr/local/lib/softhsm/libsofthsm2.so",
    "/opt/homebrew/lib/softhsm/libsofthsm2.so",
)
_PATH_SAFE = ":[]@!$'()*+,=&"
"""RFC 7512's characters a path attribute's value may hold as they are (``/`` is encoded)."""
_QUERY_SAFE = ":[]@!$'()*+,=/?|"


@dataclass(frozen=True)
class Token:
    """An initialised SoftHSM2 token: its label, the module that reaches it, and the files
    that configure it."""

    label: str
    module: str
    conf: Path
    pin_file: Path
    env: dict[str, str] = field(default_factory=dict)
    """What a subprocess needs to see this token (``SOFTHSM2_CONF``)."""
    pin: str = PIN

    def uri(self, object: str, *, pin_value: bool = False) -> str:
        """The ``pkcs11:`` URI of the object labelled ``object`` in this token: the module's
        path and the PIN's file in its query (``pin_value``: the PIN itself instead)."""
        pin = f"pin-value={self.pin}" if pin_value else f"pin-source=file:{quote(str(self.pin_file), _QUERY_SAFE)}"
        return (
            f"pkcs11:token={quote(self.label, _PATH_SAFE)};object={quote(object, _PATH_SAFE)}"
            f"?module-path={quote(self.module, _QUERY_SAFE)}&{pin}"
        )


def softhsm_module() -> str | None:
    """The SoftHSM2 PKCS#11 module's path (``SOFTHSM2_MODULE`` first), or None."""
    named = os.environ.get("SOFTHSM2_MODULE")
    candidates = (named, *MODULE_CANDIDATES) if named else MODULE_CANDIDATES
    return next((path for path in candidates if Path(path).is_file()), None)


def softhsm_token(tmp_path: Path, label: str = "eps") -> Token:
    """A fresh SoftHSM2 token labelled ``label`` under ``tmp_path`` (see the module's doc)."""
    util = shutil.which("softhsm2-util")
    if util is None:
        missing_binary("softhsm2-util", "the PKCS#11 tests use a real SoftHSM2 token (Debian: softhsm2)")
    module = softhsm_module()
    if module is None:
        missing_binary("libsofthsm2.so", "the PKCS#11 tests load the SoftHSM2 module (Debian: softhsm2)")
    assert util is not None and module is not None
    home = tmp_path / "softhsm"
    tokens = home / "tokens"
    tokens.mkdir(parents=True, exist_ok=True)
    conf = home / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n")
    pin_file = home / "pin"
    fd = os.open(pin_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(PIN + "\n")
    _close_open_sessions()
    os.environ["SOFTHSM2_CONF"] = str(conf)
    env = {"SOFTHSM2_CONF": str(conf)}
    done = subprocess.run(
        [util, "--init-token", "--free", "--label", label, "--pin", PIN, "--so-pin", SO_PIN],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return Token(label=label, module=module, conf=conf, pin_file=pin_file, env=env)


def _close_open_sessions() -> None:
    """Close what this process holds open in any token (only if the signers were imported):
    the next initialisation of the module reads the new configuration."""
    signers = sys.modules.get("execution_proof.runtime.pkcs11_signer")
    if signers is not None:
        signers.close_all()
