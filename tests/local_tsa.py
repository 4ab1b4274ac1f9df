"""A real RFC 3161 time-stamp authority on loopback, for the tests: ``openssl ts -reply``
behind a small HTTP endpoint (``POST /``, ``application/timestamp-query`` in,
``application/timestamp-reply`` out), with a CA and a TSA certificate made here.

``LocalTsa(tmp_path)`` makes a root CA and a TSA certificate it signs (extended key usage
timeStamping, critical, as RFC 3161 requires); ``roots_pem`` is the file a verifier trusts.
Its options configure it as TSAs are configured (see ``LocalTsa.__init__``): an intermediate
CA and the chain sent (``-chain``) or not, ESSCertID v1 or v2 and for the chain or not, the
signature's digest, no certificates, an RSA key, an expired certificate.
``mode`` makes the endpoint misbehave: "no_eku" (the token signed under a certificate of the
same CA without the timeStamping usage), "rejection" (PKIStatus rejection), "garbage" (bytes
that are not DER), "other_imprint" (a token over another message), "other_nonce" (a token
with another nonce), "error_500". tests/tsa_tokens.py makes more tokens from its answers.
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
from cryptography.hazmat.primitives.asymmetric import ec, rsa
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


def _write_key(path: Path, key: Any) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


class LocalTsa:
    def __init__(
        self,
        directory: Path,
        *,
        name: str = "Local Test TSA",
        chain: bool = False,
        send_chain: bool = True,
        ess_cert_id_chain: bool = False,
        ess_cert_id_alg: str = "sha256",
        signer_digest: str = "sha256",
        certs: bool = True,
        key: str = "ec",
        expired: bool = False,
    ) -> None:
        """``chain``: the TSA's certificate is issued by an intermediate CA (with a
        timeStamping usage, as commercial TSAs' are), and, with ``send_chain``, ``openssl ts
        -reply -chain`` puts the intermediate and the root in every token after the TSA's own
        certificate; ``ess_cert_id_chain``: the ESSCertIDs name them too; ``ess_cert_id_alg``:
        sha1 makes OpenSSL write an ESS signingCertificate (v1), others a signingCertificateV2;
        ``certs`` False: the TSA answers as if certReq were false (no certificate at all);
        ``key`` "rsa" or "ec"; ``expired``: the TSA's certificate expired before it signs."""
        self.openssl = openssl_binary()
        self.name = name
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.UTC)

        def new_key() -> Any:
            if key == "rsa":
                return rsa.generate_private_key(public_exponent=65537, key_size=2048)
            return ec.generate_private_key(ec.SECP256R1())

        def ca(common_name: str, ca_key: Any, issuer: x509.Certificate | None, issuer_key: Any) -> x509.Certificate:
            builder = (
                x509.CertificateBuilder()
                .subject_name(_name(common_name))
                .issuer_name(issuer.subject if issuer else _name(common_name))
                .public_key(ca_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=40))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(
                    x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
                )
            )
            if issuer is not None:
                builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), False)
            return builder.sign(issuer_key, hashes.SHA256())

        ca_key = new_key()
        ca_cert = ca(f"{name} Root", ca_key, None, ca_key)
        issuer_cert, issuer_key = ca_cert, ca_key
        self.intermediate: x509.Certificate | None = None
        if chain:
            intermediate_key = new_key()
            self.intermediate = ca(f"{name} Intermediate", intermediate_key, ca_cert, ca_key)
            issuer_cert, issuer_key = self.intermediate, intermediate_key

        def leaf(
            common_name: str,
            key: Any,
            usages: list[x509.ObjectIdentifier] | None,
            critical: bool = True,
            valid: tuple[int, int] = (-1, 30),
            key_encipherment: bool = False,
        ) -> x509.Certificate:
            builder = (
                x509.CertificateBuilder()
                .subject_name(_name(common_name))
                .issuer_name(issuer_cert.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now + datetime.timedelta(days=valid[0]))
                .not_valid_after(now + datetime.timedelta(days=valid[1]))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(
                    x509.KeyUsage(True, True, key_encipherment, False, False, False, False, False, False), True
                )
            )
            if usages:
                builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical)
            return builder.sign(issuer_key, hashes.SHA256())

        stamping = [ExtendedKeyUsageOID.TIME_STAMPING]
        tsa_key, plain_key = new_key(), new_key()
        tsa_cert = leaf(name, tsa_key, stamping, valid=(-30, -1) if expired else (-1, 30))
        plain_cert = leaf(f"{name} (not for time-stamping)", plain_key, None)
        self.ca_cert, self.tsa_cert, self.tsa_key = ca_cert, tsa_cert, tsa_key
        self.issuer_key = issuer_key
        self.leaf = leaf
        """Makes more certificates under the TSA's issuer (tests/tsa_tokens.py re-signs with them)."""
        (directory / "plain.pem").write_bytes(plain_cert.public_bytes(serialization.Encoding.PEM))
        _write_key(directory / "plain.key", plain_key)
        self.roots_pem = directory / "roots.pem"
        self.roots_pem.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        (directory / "tsa.pem").write_bytes(tsa_cert.public_bytes(serialization.Encoding.PEM))
        _write_key(directory / "tsa.key", tsa_key)
        self.chain_pem: Path | None = None
        certs_line = ""
        if self.intermediate is not None:
            self.chain_pem = directory / "chain.pem"
            chain_certs = [self.intermediate, ca_cert]
            self.chain_pem.write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain_certs))
            if send_chain:
                certs_line = "certs = $dir/chain.pem"
        self.certs = certs
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
{certs_line}
signer_digest = {signer_digest}
default_policy = {POLICY_OID}
digests = sha256, sha384, sha512
accuracy = secs:1
ordering = yes
tsa_name = yes
ess_cert_id_chain = {"yes" if ess_cert_id_chain else "no"}
ess_cert_id_alg = {ess_cert_id_alg}
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
            query_file.write_bytes(_altered(query, self.mode, self.certs))
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
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()  # stop() waits a poll
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _altered(query: bytes, mode: str, certs: bool = True) -> bytes:
    """The query as the TSA answers it: another imprint (same nonce) or another nonce (same
    imprint) in the misbehaving modes, found in the DER and replaced in place; without
    ``certs``, certReq false (the TSA then sends no certificate)."""
    asked = tsp.TimeStampReq.load(query)
    if not certs:
        return tsp.TimeStampReq(
            {**{k: v for k, v in asked.native.items() if k != "cert_req"}, "cert_req": False}
        ).dump()
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
