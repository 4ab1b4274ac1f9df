"""A real RFC 3161 time-stamp authority on loopback, for the tests: ``openssl ts -reply``
behind a small HTTP endpoint (``POST /``, ``application/timestamp-query`` in,
``application/timestamp-reply`` out), with a CA and a TSA certificate made here.

``LocalTsa(tmp_path)`` makes a root CA and a TSA certificate it signs (extended key usage
timeStamping, critical, as RFC 3161 requires); ``roots_pem`` is the file a verifier trusts.
``mode`` makes the endpoint misbehave: "no_eku" (the token signed under a certificate of the
same CA without the timeStamping usage), "rejection" (PKIStatus rejection), "garbage" (bytes
that are not DER), "other_imprint" (a token over another message), "other_nonce" (a token
with another nonce), "error_500".
"""

from __future__ import annotations

import datetime
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from asn1crypto import tsp
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.conftest import missing_binary

POLICY_OID = "1.3.6.1.4.1.99999.1"
TST_INFO_OID = "1.2.840.113549.1.9.16.1.4"
QUERY_TYPE = "application/timestamp-query"
REPLY_TYPE = "application/timestamp-reply"


def openssl_binary() -> str:
    path = shutil.which("openssl")
    if path is None:
        missing_binary("openssl", "an RFC 3161 time-stamp authority run locally (openssl ts -reply)")
        pytest.skip("openssl is not installed")
    return path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


class LocalTsa:
    def __init__(self, directory: Path, *, name: str = "Local Test TSA") -> None:
        self.openssl = openssl_binary()
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"{name} Root"))
            .issuer_name(_name(f"{name} Root"))
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(ca_key, hashes.SHA256())
        )

        def leaf(common_name: str, key: ec.EllipticCurvePrivateKey, eku: bool) -> x509.Certificate:
            builder = (
                x509.CertificateBuilder()
                .subject_name(_name(common_name))
                .issuer_name(ca_cert.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(True, True, False, False, False, False, False, False, False), True)
            )
            if eku:
                builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), True)
            return builder.sign(ca_key, hashes.SHA256())

        tsa_key, plain_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
        tsa_cert, plain_cert = leaf(name, tsa_key, True), leaf(f"{name} (not for time-stamping)", plain_key, False)
        self.ca_cert, self.tsa_cert = ca_cert, tsa_cert
        (directory / "plain.pem").write_bytes(plain_cert.public_bytes(serialization.Encoding.PEM))
        _write_key(directory / "plain.key", plain_key)
        self.roots_pem = directory / "roots.pem"
        self.roots_pem.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        (directory / "tsa.pem").write_bytes(tsa_cert.public_bytes(serialization.Encoding.PEM))
        _write_key(directory / "tsa.key", tsa_key)
        (directory / "serial").write_text("01\n")
        self.config = directory / "tsa.cnf"
        self.config.write_text(
            f"""[ tsa ]
default_tsa = tsa_config1

[ tsa_config1 ]
dir = {directory}
serial = $dir/serial
crypto_device = builtin
signer_cert = $dir/tsa.pem
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = {POLICY_OID}
digests = sha256, sha384, sha512
accuracy = secs:1
ordering = yes
tsa_name = yes
ess_cert_id_chain = no
ess_cert_id_alg = sha256
"""
        )
        self.mode = "ok"
        self.requests: list[bytes] = []
        self._lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.url = ""

    # -- answering

    def reply(self, query: bytes) -> bytes:
        """``openssl ts -reply`` for ``query`` (DER TimeStampReq), as this TSA's mode says."""
        with self._lock, tempfile.TemporaryDirectory(dir=self.dir) as work:
            query_file, reply_file = Path(work) / "q.tsq", Path(work) / "r.tsr"
            query_file.write_bytes(_altered(query, self.mode))
            command = ["ts", "-reply", "-config", str(self.config), "-queryfile", str(query_file)]
            subprocess.run([self.openssl, *command, "-out", str(reply_file)], check=True, capture_output=True)
            if self.mode == "no_eku":
                return self._signed_by_plain_certificate(reply_file, Path(work))
            return reply_file.read_bytes()

    def _signed_by_plain_certificate(self, reply_file: Path, work: Path) -> bytes:
        """The same TSTInfo, signed (``openssl cms -sign``) under a certificate of the same CA
        that lacks the timeStamping usage: what a key stolen from another service could make."""
        token, info, resigned = work / "token.der", work / "tstinfo.der", work / "resigned.der"
        signer = ["-signer", str(self.dir / "plain.pem"), "-inkey", str(self.dir / "plain.key"), "-md", "sha256"]
        sign = ["cms", "-sign", "-binary", "-nodetach", "-in", str(info), "-econtent_type", TST_INFO_OID, *signer]
        steps = [
            ["ts", "-reply", "-in", str(reply_file), "-token_out", "-out", str(token)],
            ["cms", "-verify", "-noverify", "-inform", "DER", "-in", str(token), "-binary", "-out", str(info)],
            [*sign, "-outform", "DER", "-out", str(resigned)],
        ]
        for step in steps:
            subprocess.run([self.openssl, *step], check=True, capture_output=True)
        granted = bytes.fromhex("3003020100")
        return _der_sequence(granted + resigned.read_bytes())

    # -- the endpoint

    def start(self) -> LocalTsa:
        tsa = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                query = self.rfile.read(length)
                tsa.requests.append(query)
                if self.headers.get("Content-Type") != QUERY_TYPE:
                    self._answer(415, b"want application/timestamp-query", "text/plain")
                elif tsa.mode == "error_500":
                    self._answer(500, b"broken", "text/plain")
                elif tsa.mode == "garbage":
                    self._answer(200, b"\x30\x03not der at all", REPLY_TYPE)
                elif tsa.mode == "rejection":
                    # PKIStatusInfo { status rejection(2) }: a TimeStampResp with no token.
                    self._answer(200, bytes.fromhex("3005300302 0102".replace(" ", "")), REPLY_TYPE)
                else:
                    try:
                        self._answer(200, tsa.reply(query), REPLY_TYPE)
                    except subprocess.CalledProcessError as exc:
                        self._answer(400, exc.stderr or b"openssl failed", "text/plain")

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _altered(query: bytes, mode: str) -> bytes:
    """The query as the TSA answers it: another imprint (same nonce) or another nonce (same
    imprint) in the misbehaving modes, found in the DER and replaced in place."""
    asked = tsp.TimeStampReq.load(query)
    if mode == "other_imprint":
        digest = asked["message_imprint"]["hashed_message"].native
        return query.replace(digest, bytes(b ^ 0xFF for b in digest))
    if mode == "other_nonce" and asked["nonce"].native is not None:
        nonce = asked["nonce"].contents
        return query.replace(nonce, nonce[:-1] + bytes([nonce[-1] ^ 1]))
    return query


def _der_sequence(content: bytes) -> bytes:
    length = len(content)
    if length < 0x80:
        return b"\x30" + bytes([length]) + content
    encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return b"\x30" + bytes([0x80 | len(encoded)]) + encoded + content
