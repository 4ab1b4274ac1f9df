"""BER to definite lengths, pure (transparency/timestamps.py reads time-stamp tokens with it).

TSAs may answer in BER (RFC 3161 allows it; streaming CMS encoders write indefinite lengths
and chunked OCTET STRINGs). asn1crypto 1.5.1 reads most of that but not an indefinite length
as a CHOICE's alternative (a SignerInfo's sid) nor a chunked eContent, so a token is first
rewritten here: every indefinite length made definite, every constructed OCTET STRING
joined. Nothing else changes: sets keep their order, and an element with neither inside is
kept byte for byte (a certificate, a signed attribute value: signed as written).
"""

from __future__ import annotations

from execution_proof.errors import Error


class BerError(Error, ValueError):
    """Not a BER element (the message says what is wrong)."""


def definite(data: bytes, depth: int = 0) -> tuple[bytes, int]:
    """The first BER element of ``data`` with every indefinite length made definite and
    every constructed OCTET STRING joined into one (and how many bytes of ``data`` it took).
    An element with neither inside is returned as it was, byte for byte (a certificate, a
    signed value). asn1crypto 1.5.1 reads neither as a CHOICE's alternative (a SignerInfo's
    sid) or as the eContent, where BER encoders write them."""
    if depth > 64:
        raise BerError("the encoding nests deeper than 64 levels")
    at = 1
    if data[:1] and data[0] & 0x1F == 0x1F:  # a high tag number: more tag bytes, the last without 0x80
        while at < len(data) and data[at] & 0x80:
            at += 1
        at += 1
    if at >= len(data):
        raise BerError("the encoding is truncated")
    tag, first, at = data[:at], data[at], at + 1
    if first == 0x80:
        if not tag[0] & 0x20:
            raise BerError("the encoding has a primitive element of indefinite length")
        children = []
        while data[at : at + 2] != b"\x00\x00":
            if at >= len(data):
                raise BerError("the encoding is truncated")
            child, used = definite(data[at:], depth + 1)
            children.append(child)
            at += used
        return joined(tag, children), at + 2
    size = 0 if first < 0x80 else first & 0x7F
    start = at + size
    end = start + (first if first < 0x80 else int.from_bytes(data[at:start], "big"))
    if end > len(data):
        raise BerError("the encoding is truncated")
    if not tag[0] & 0x20 or (b"\x80" not in data[start:end] and tag != b"\x24"):
        return data[:end], end  # primitive, or surely nothing to change inside
    children = []
    while start < end:
        child, used = definite(data[start:end], depth + 1)
        children.append(child)
        start += used
    rebuilt = joined(tag, children)
    return (data[:end] if rebuilt[len(tag) :] == data[len(tag) : end] else rebuilt), end


def joined(tag: bytes, children: list[bytes]) -> bytes:
    """An element from its (definite) children; a constructed OCTET STRING as one."""
    if tag != b"\x24":
        return der(tag, b"".join(children))
    octets = b""
    for child in children:
        if child[:1] != b"\x04":
            raise BerError("the encoding has a constructed OCTET STRING of something else")
        first = child[1]
        octets += child[2 + (0 if first < 0x80 else first & 0x7F) :]
    return der(b"\x04", octets)


def der(tag: bytes, content: bytes) -> bytes:
    length = len(content)
    if length < 0x80:
        return tag + bytes([length]) + content
    encoded = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return tag + bytes([0x80 | len(encoded)]) + encoded + content
