"""Where a request's CPU goes, per requirement: a py-spy raw profile as a table of µs per request.

    python -m bench.profile_table RAW_FILE --rps N [--floor-us F]

RAW_FILE is what bench/profile_{create,read,verify}.sh write (py-spy ``-f raw``: one stack per
line, frames outermost first, then a sample count). Each sample is charged to the first rule
below that one of its frames matches, looking from the innermost frame outwards, so a
signature inside the issuer counts as signing and the issuer's own lines as the issuer. With
the worker saturated (closed loop: bench/PROFILE.md), µs per request = share x 10^6 / rps.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

# (label, what it pays for, frame patterns). Order matters: the first match from the
# innermost frame outwards wins.
RULES: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "Ed25519",
        "a receipt's signature and its attestation's, signed at creation; a verify checks one "
        "(docs/receipt-format.md, docs/attestations.md)",
        ("crypto_sign", "nacl/"),
    ),
    (
        "canonical JSON and hashes",
        "the receipt hash over RFC 8785 bytes, the Statement, the idempotency fingerprint, "
        "the API key's hash (keys are stored hashed)",
        ("receipts/canonical.py", "receipts/encoding.py", "receipts/attestation.py", "receipts/apikeys.py"),
    ),
    (
        "compact record",
        "the compact record (the memory target, docs/redis.md): encoding with its round-trip check, decoding on a read",
        ("receipts/compact.py",),
    ),
    (
        "body parsing and checks",
        "the body's JSON, its fields' checks, the content scan (docs/api.md: 4xx for bad input)",
        ("receipts/content_scan.py", "usecases/bodies.py", "parse_create_request", "parse_verify_request"),
    ),
    ("request id", "X-Request-Id on every response (docs/api.md)", ("web/request_ids.py",)),
    ("log line", "one JSON line per request (docs/observability.md)", ("web/access_log.py", "runtime/logs.py")),
    (
        "metrics",
        "request and store metrics, the store's 503 mapping (docs/observability.md)",
        ("prometheus_client/", "runtime/metrics.py", "unavailable_as_503"),
    ),
    (
        "response headers",
        "encoding the headers the API sends: RateLimit, quota, Location, CORS, cache (web/responses.py)",
        ("web/responses.py",),
    ),
    (
        "Redis link",
        "Redis commands packed, written over loopback, replies parsed (kv/link.py, hiredis)",
        ("kv/link.py", "hiredis"),
    ),
    ("store", "key names, script arguments, record checks (kv/)", ("kv/",)),
    (
        "limits and the key",
        "per-address, per-key and monthly limits, the key lookup and failed-auth throttle, "
        "RateLimit fields (docs/limits.md)",
        ("usecases/limiting.py", "receipts/limits.py", "web/auth.py", "web/client_ip.py"),
    ),
    (
        "receipt model",
        "the receipt model: building and chaining a receipt (group commit), its log item, field helpers, ids",
        ("usecases/issuing.py", "receipts/model.py", "transparency/", "receipts/ids.py"),
    ),
    (
        "verifier",
        "a verify's checks: hash recomputation, the chain link, the key's certificate and revocation (docs/api.md)",
        ("receipts/verifier.py", "usecases/verifying.py", "receipts/signing.py", "usecases/signing_keys.py"),
    ),
    ("handlers and envelope", "routes, the response body, the use-case calls around them", ("web/", "usecases/")),
    (
        "Sanic",
        "request parsing, routing, response write: what the ceiling pays too",
        ("sanic/", "http1_", "handle_request", "connection_task", "send (send)", "read (read)"),
    ),
    ("event loop", "asyncio and uvloop", ("asyncio/", "uvloop", "_run_server_forever")),
]
OTHER = ("other", "frames py-spy could not name, the interpreter")


def categorise(stack: str) -> str:
    frames = stack.split(";")
    for frame in reversed(frames):
        for label, _, patterns in RULES:
            if any(pattern in frame for pattern in patterns):
                return label
    return OTHER[0]


def table(path: str) -> tuple[Counter[str], int]:
    counts: Counter[str] = Counter()
    total = 0
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack or not n.isdigit():
                continue
            counts[categorise(stack)] += int(n)
            total += int(n)
    return counts, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_table")
    parser.add_argument("raw")
    parser.add_argument("--rps", type=float, required=True, help="requests per second during the profile")
    args = parser.parse_args(argv)
    counts, total = table(args.raw)
    per_request = 1e6 / args.rps
    about = {label: what for label, what, _ in RULES} | {OTHER[0]: OTHER[1]}
    print(f"{total} samples, {per_request:.0f} µs per request at {args.rps:,.0f}/s\n")
    print("| where | pays for | share | µs per request |\n|---|---|---:|---:|")
    for label, n in sorted(counts.items(), key=lambda item: -item[1]):
        share = n / total
        print(f"| {label} | {about[label]} | {100 * share:.1f} % | {share * per_request:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
