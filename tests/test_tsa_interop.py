"""Time-stamps as real TSAs send them (docs/log.md, "Time evidence": we accept what OpenSSL accepts): the local
OpenSSL TSA (tests/local_tsa.py) in every configuration a TSA may use, its tokens also
re-encoded in BER and re-signed with faults (tests/tsa_tokens.py); for every token our
verdict (transparency/timestamps.py) is OpenSSL's (``openssl ts -verify``), accepted or refused,
but for the four differences docs/log.md names, each tested here."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from asn1crypto import tsp
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID

from execution_proof.transparency import timestamps
from execution_proof.transparency.timestamps import _TimeStampResp
from tests import tsa_tokens
from tests.local_tsa import LocalTsa

pytestmark = pytest.mark.slow  # openssl processes (the TSA and its checks) in every test

TEXT = "example.org/log\n42\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"
OTHER_TEXT = TEXT.replace("\n42\n", "\n43\n")

ACCEPTED = {
    "plain": {},
    "chain": {"chain": True},
    "chain, ESSCertID chain": {"chain": True, "ess_cert_id_chain": True},
    "ESSCertID v1": {"ess_cert_id_alg": "sha1"},
    "ESSCertIDv2 SHA-512": {"ess_cert_id_alg": "sha512"},
    "signed over SHA-512": {"signer_digest": "sha512"},
    "RSA, chain, ESSCertID v1 chain": {
        "key": "rsa",
        "chain": True,
        "ess_cert_id_chain": True,
        "ess_cert_id_alg": "sha1",
    },
}
REFUSED = {
    "no certificates": ({"certs": False}, "carries no certificate"),
    "chain not sent": ({"chain": True, "send_chain": False}, "does not verify against the roots"),
    "expired certificate": ({"expired": True}, "does not verify against the roots"),
}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("interop")
    (path / "text").write_text(TEXT)
    (path / "other-text").write_text(OTHER_TEXT)
    return path


@pytest.fixture(scope="module")
def tsas(work: Path) -> dict[str, LocalTsa]:
    configurations = {**ACCEPTED, **{name: options for name, (options, _) in REFUSED.items()}}
    return {
        name: LocalTsa(work / f"tsa-{n}", name=f"TSA {n}", **options)
        for n, (name, options) in enumerate(configurations.items())
    }


def stamp(tsa: LocalTsa, work: Path, digest: str = "sha256") -> bytes:
    """The TSA's response to ``openssl ts -query -cert`` over TEXT with that imprint."""
    return tsa.reply(tsa_tokens.query(work, work / "text", digest))


def ours(response: bytes, roots: Path, text: str = TEXT) -> tuple[bool, str]:
    try:
        timestamps.verify_token(response, text, timestamps.load_roots(roots.read_bytes()))
    except timestamps.StampError as exc:
        return False, str(exc)
    return True, ""


def agree(response: bytes, tsa: LocalTsa, work: Path, *, roots: Path | None = None, data: str = "text") -> bool:
    """Our verdict and OpenSSL's on the response, which must be the same; the verdict."""
    roots = roots or tsa.roots_pem
    mine, reason = ours(response, roots, OTHER_TEXT if data == "other-text" else TEXT)
    theirs = tsa_tokens.openssl_ok(work, response, work / data, roots)
    assert mine == theirs, f"ours {mine} ({reason}), openssl {theirs}"
    return mine


@pytest.mark.parametrize("name", sorted(ACCEPTED))
@pytest.mark.parametrize("digest", ["sha256", "sha384", "sha512"])
def test_a_configuration_verifies_as_openssl_says_in_der_and_ber(
    tsas: dict[str, LocalTsa], work: Path, name: str, digest: str
) -> None:
    tsa = tsas[name]
    der = stamp(tsa, work, digest)
    info = tsp.TSTInfo.load(
        bytes(_TimeStampResp.load(der)["time_stamp_token"]["content"]["encap_content_info"]["content"])
    )
    assert info["message_imprint"]["hash_algorithm"]["algorithm"].native == digest
    ber = tsa_tokens.to_ber(der)
    assert ber != der and b"\x30\x80" in ber
    for response in (der, ber):
        assert agree(response, tsa, work)
        assert not agree(response, tsa, work, data="other-text")
        assert not agree(response, tsa, work, roots=tsas["plain" if name != "plain" else "chain"].roots_pem)
        assert not agree(tsa_tokens.tampered(response), tsa, work)


def test_the_chain_is_sent_in_openssl_order_and_read_in_any(tsas: dict[str, LocalTsa], work: Path) -> None:
    """``-chain`` tokens list signer, intermediate, root (not DER set order for one of the
    two orders below): rfc3161-client refused them; both orders verify here."""
    tsa = tsas["chain"]
    der = stamp(tsa, work)
    certificates = [c.dump() for c in _TimeStampResp.load(der)["time_stamp_token"]["content"]["certificates"]]
    expected = [tsa.tsa_cert, tsa.intermediate, tsa.ca_cert]
    assert certificates == [c.public_bytes(Encoding.DER) for c in expected if c is not None]
    assert certificates != sorted(certificates) or certificates[::-1] != sorted(certificates)
    assert agree(der, tsa, work) and agree(tsa_tokens.to_ber(der, reverse_certificates=True), tsa, work)
    assert agree(tsa_tokens.to_ber(der, reverse_certificates=False), tsa, work)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_configuration_we_refuse_openssl_refuses(tsas: dict[str, LocalTsa], work: Path, name: str) -> None:
    tsa, reason = tsas[name], REFUSED[name][1]
    der = stamp(tsa, work)
    for response in (der, tsa_tokens.to_ber(der)):
        assert not agree(response, tsa, work)
        assert reason in ours(response, tsa.roots_pem)[1]


def _resigned(
    tsa: LocalTsa,
    work: Path,
    usages: list[Any] | None,
    critical: bool = True,
    name: str = "",
    key_encipherment: bool = False,
    **kwargs: Any,
) -> bytes:
    """A token of the TSA re-signed with its key under another certificate of its issuer
    (the TSTInfo names the TSA: the certificate has its name unless ``name``)."""
    key = tsa.tsa_key
    certificate = tsa.leaf(name or tsa.name, key, usages, critical, key_encipherment=key_encipherment)
    return tsa_tokens.resign(stamp(tsa, work), certificate, key, **kwargs)


def test_resigned_tokens_are_refused_for_their_one_fault_only(tsas: dict[str, LocalTsa], work: Path) -> None:
    tsa = tsas["plain"]
    stamping = [ExtendedKeyUsageOID.TIME_STAMPING]
    # The control: re-signed as a TSA would, under a proper certificate, both accept it.
    assert agree(_resigned(tsa, work, stamping), tsa, work)
    faults = {
        "no extended key usage": _resigned(tsa, work, None),
        "not for time-stamping": _resigned(tsa, work, stamping, critical=False),
        "other extended key usages": _resigned(tsa, work, [*stamping, ExtendedKeyUsageOID.SERVER_AUTH]),
        "does not name its signer's certificate": _resigned(tsa, work, stamping, ess_names=tsa.tsa_cert),
        "tsa names another certificate": _resigned(tsa, work, stamping, name="Another TSA"),
        "key usage is not digitalSignature": _resigned(tsa, work, stamping, key_encipherment=True),
        "names no signing certificate": _resigned(tsa, work, stamping, ess=False),
    }
    for reason, response in faults.items():
        assert not agree(response, tsa, work), reason
        assert not agree(tsa_tokens.to_ber(response), tsa, work), reason
        assert reason in ours(response, tsa.roots_pem)[1]


def test_an_altered_tstinfo_is_refused(tsas: dict[str, LocalTsa], work: Path) -> None:
    """A byte of the signed TSTInfo changed (a digit of its genTime, the only ASCII time in
    it): messageDigest no longer holds."""
    tsa = tsas["plain"]
    der = stamp(tsa, work)
    info = bytes(_TimeStampResp.load(der)["time_stamp_token"]["content"]["encap_content_info"]["content"])
    moment = tsp.TSTInfo.load(info)["gen_time"].contents
    assert info.count(moment) == 1 and moment[:2] == b"20"
    altered_info = info.replace(moment, b"19" + moment[2:])
    assert altered_info != info and der.count(info) == 1
    altered = der.replace(info, altered_info)
    assert not agree(altered, tsa, work)
    assert "messageDigest is not the hash of its TSTInfo" in ours(altered, tsa.roots_pem)[1]
    assert hashlib.sha256(altered).digest() != hashlib.sha256(der).digest()


def test_where_we_differ_from_openssl(tsas: dict[str, LocalTsa], work: Path) -> None:
    """Three of the four differences docs/log.md names (the fourth, RSASSA-PSS: below).
    Signed attributes reordered after signing (a SET out of DER order): RFC 5652 signs
    their DER, sorted, and we check that too; OpenSSL checks only the order received. A token without certificates: OpenSSL accepts it
    given the TSA's certificate with -untrusted; we take no signer certificate from outside
    the token (the request asks for it, and a kept token must verify with only a root). An
    intermediate given as the root: a trust anchor to us, to OpenSSL with -partial_chain."""
    tsa = tsas["plain"]
    reordered = tsa_tokens.to_ber(stamp(tsa, work), reverse_attributes=True)
    assert ours(reordered, tsa.roots_pem) == (True, "")
    assert not tsa_tokens.openssl_ok(work, reordered, work / "text", tsa.roots_pem)
    bare_tsa = tsas["no certificates"]
    bare = stamp(bare_tsa, work)
    assert tsa_tokens.openssl_ok(work, bare, work / "text", bare_tsa.roots_pem, untrusted=bare_tsa.dir / "tsa.pem")
    assert "carries no certificate" in ours(bare, bare_tsa.roots_pem)[1]
    chain_tsa = tsas["chain"]
    chained = stamp(chain_tsa, work)
    assert chain_tsa.intermediate is not None
    pinned = work / "intermediate.pem"
    pinned.write_bytes(chain_tsa.intermediate.public_bytes(Encoding.PEM))
    assert ours(chained, pinned) == (True, "")
    assert not tsa_tokens.openssl_ok(work, chained, work / "text", pinned)
    assert tsa_tokens.openssl_ok(work, chained, work / "text", pinned, None, "-partial_chain")


def test_malformed_ber_is_refused_with_a_reason(tsas: dict[str, LocalTsa], work: Path) -> None:
    ber = tsa_tokens.to_ber(stamp(tsas["plain"], work))
    roots = tsas["plain"].roots_pem
    assert "truncated" in ours(ber[:-2], roots)[1]  # the outer end-of-contents missing
    assert "bytes after its end" in ours(ber + b"\x00", roots)[1]
    assert "not a TimeStampResp" in ours(b"\x30\x80\x02\x01\x00\x00\x00", roots)[1]
    assert "nests deeper" in ours(b"\x30\x80" * 80 + b"\x00\x00" * 80, roots)[1]


def test_an_rsassa_pss_token_verifies_as_openssl_cms_says(tsas: dict[str, LocalTsa], work: Path) -> None:
    """The fourth difference: a TSA signing with RSASSA-PSS. OpenSSL's TS verifier (PKCS #7
    code, PKCS #1 v1.5 only) refuses every such token; its CMS verifier, on the same token,
    agrees with us: the good one holds, a flipped signature bit does not."""
    tsa = tsas["RSA, chain, ESSCertID v1 chain"]
    certificate = tsa.leaf(tsa.name, tsa.tsa_key, [ExtendedKeyUsageOID.TIME_STAMPING])
    pss = tsa_tokens.resign(stamp(tsa, work), certificate, tsa.tsa_key, pss=True)
    assert (
        _TimeStampResp.load(pss)["time_stamp_token"]["content"]["signer_infos"][0]["signature_algorithm"][
            "algorithm"
        ].native
        == "rsassa_pss"
    )
    for response, good in ((pss, True), (tsa_tokens.tampered(pss), False), (tsa_tokens.to_ber(pss), True)):
        assert ours(response, tsa.roots_pem)[0] is good
        assert tsa_tokens.openssl_cms_ok(work, response, tsa.roots_pem) is good
        assert not tsa_tokens.openssl_ok(work, response, work / "text", tsa.roots_pem)


@pytest.mark.parametrize("encoding", ["der", "ber"])
def test_a_corrupted_byte_anywhere_gives_a_reason_never_a_crash(
    tsas: dict[str, LocalTsa], work: Path, encoding: str
) -> None:
    """Every byte of a token flipped in turn (asn1crypto parses lazily: a malformed part
    must surface as StampError wherever it is read). What still verifies says what the
    original says (an unsigned byte: the token's own copy of the root, which the chain does
    not use); every flip in the signed parts (the TSTInfo, the TSA's certificate, the
    signature) is refused."""
    tsa = tsas["chain, ESSCertID chain"]
    der = stamp(tsa, work)
    good = tsa_tokens.to_ber(der) if encoding == "ber" else der
    roots = timestamps.load_roots(tsa.roots_pem.read_bytes())
    original = timestamps.verify_token(good, TEXT, roots)
    signed = _TimeStampResp.load(der)["time_stamp_token"]["content"]
    parts = [bytes(signed["encap_content_info"]["content"])[:100], tsa.tsa_cert.public_bytes(Encoding.DER)]
    parts.append(signed["signer_infos"][0]["signature"].native)
    must_refuse = set()
    for part in parts:
        assert good.count(part) == 1
        start = good.index(part)
        must_refuse |= set(range(start, start + len(part)))
    still = []
    for at in range(len(good)):
        corrupted = good[:at] + bytes([good[at] ^ 0x41]) + good[at + 1 :]
        try:
            assert timestamps.verify_token(corrupted, TEXT, roots) == original, at
        except timestamps.StampError:
            continue
        still.append(at)
    assert not must_refuse & set(still)
    root = good.index(tsa.ca_cert.public_bytes(Encoding.DER))
    elsewhere = [at for at in still if not root <= at < root + len(tsa.ca_cert.public_bytes(Encoding.DER))]
    # Outside the root's copy only unsigned, unused bytes: SignedData's digestAlgorithms set,
    # the SignerInfo's version, its digest algorithm's NULL parameters (about 20 bytes).
    assert len(elsewhere) < 30, elsewhere
