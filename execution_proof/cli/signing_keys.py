"""``signing-key``: receipt roots and the keys they certify (docs/keys.md).

``signing-key root new --signer URI`` makes a receipt root where the URI says (in the token, a
new ``file:`` of mode 0600, or the plugin's key) and prints one JSON object: ``{"kid",
"public_key_base64url", "sha256_fingerprint", "signer"}``, the URI to configure as
``RECEIPT_ROOT_KEY`` without its ``pin-value``. It makes a key only: it runs on the light
install.

``signing-key list`` prints the registry of the deployment at ``REDIS_URL``: ``{"roots":
[...], "keys": [{"kid", "root_kid", "not_before", "not_after", "state"}]}``, ``state`` one of
``active``, ``expired``, ``revoked``. ``signing-key revoke KID [--after TIME] [--reason
TEXT]`` has the root that certified KID (``RECEIPT_ROOT_KEY``, or ``--signer URI``) sign a
revocation from the later of ``--after`` and now + 2 x ``KEY_STATE_S``, queues it for the
transparency log, publishes it, and returns once that instant has passed (every process has
stopped signing with KID by then), printing the revocation.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson


def add_parsers(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    signing = verbs.add_parser("signing-key", help="receipt roots and the keys they certify")
    actions = signing.add_subparsers(dest="action", required=True)
    root = actions.add_parser("root", help="receipt roots (RECEIPT_ROOT_KEY)").add_subparsers(
        dest="root_action", required=True
    )
    new = root.add_parser(
        "new",
        help="make a receipt root and print its JSON: kid, public key, SHA-256 fingerprint and the signer URI to "
        "configure (runs on the light install)",
    )
    new.add_argument(
        "--signer",
        required=True,
        metavar="URI",
        help="where: pkcs11:... (made in the token, never extractable), file:/ABSOLUTE/PATH (a new file, mode 0600, "
        "holding the base64url seed), plugin:NAME[?ARG] (the plugin's key); env: cannot be created",
    )
    new.set_defaults(run=_root_new)
    listing = actions.add_parser("list", help="the deployment's receipt roots and certified keys, as JSON")
    listing.set_defaults(run=_list)
    revoke = actions.add_parser(
        "revoke",
        help="revoke a receipt key: receipts it signs from --after on (at the earliest in 2 seconds) do not count",
    )
    revoke.add_argument("kid", metavar="KID", help="the key (key-...), as signing-key list shows it")
    revoke.add_argument(
        "--after",
        metavar="TIME",
        help="receipts created at or after this time (YYYY-MM-DDTHH:MM:SS.mmmZ) no longer count; "
        "default and earliest: now + 2 seconds",
    )
    revoke.add_argument("--reason", default="", help="why (public: it is logged; at most 200 characters)")
    revoke.add_argument("--signer", metavar="URI", help="the root that certified KID (default: RECEIPT_ROOT_KEY)")
    revoke.set_defaults(run=_revoke)


def _root_new(args: argparse.Namespace) -> int:
    """The root's JSON on stdout; exit 2 with one line naming the URI (PIN removed) when it
    cannot be made (nothing is made then)."""
    from execution_proof.receipts.encoding import b64url_encode
    from execution_proof.receipts.key_certificates import root_kid
    from execution_proof.runtime.signers import make_key, root_text, without_pin
    from execution_proof.transparency.signer import SignerError

    try:
        public = make_key(args.signer, text_of=root_text).public_key()
    except SignerError as exc:
        print(f"error: --signer {exc}", file=sys.stderr)
        return 2
    made = {
        "kid": root_kid(public),
        "public_key_base64url": b64url_encode(public),
        "sha256_fingerprint": "sha256:" + hashlib.sha256(public).hexdigest(),
        "signer": without_pin(args.signer),
    }
    print(orjson.dumps(made).decode())
    return 0


NEEDS_REDIS = "error: signing-key list and revoke need REDIS_URL (the registry of an embedded server lives in it)"


def _list(args: argparse.Namespace) -> int:
    from execution_proof.cli.stores import run_on_store
    from execution_proof.runtime.settings import load_settings

    async def action(store: Any) -> int:
        from execution_proof.usecases.signing_keys import KeyState

        state = KeyState.parse(await store.signing_keys.read())
        print(orjson.dumps(state.listing(int(time.time() * 1000))).decode())
        return 0

    settings = _settings(load_settings)
    return 2 if settings is None else run_on_store(settings, NEEDS_REDIS, action)


def _revoke(args: argparse.Namespace) -> int:
    from execution_proof.cli.stores import run_on_store
    from execution_proof.receipts.key_certificates import KEY_KID_RE, MAX_REASON, KeyDocumentError, time_ms
    from execution_proof.runtime.settings import load_settings
    from execution_proof.runtime.signers import open_root
    from execution_proof.transparency.signer import SignerError, redact

    settings = _settings(load_settings)
    if settings is None:
        return 2
    if not KEY_KID_RE.fullmatch(args.kid):
        print(f"error: {args.kid[:80]!r} is not a receipt key's kid (key- and 16 hex)", file=sys.stderr)
        return 2
    if len(args.reason) > MAX_REASON:
        print(f"error: --reason is longer than {MAX_REASON} characters", file=sys.stderr)
        return 2
    try:
        after = time_ms(args.after) if args.after else 0
    except KeyDocumentError as exc:
        print(f"error: --after: {exc}", file=sys.stderr)
        return 2
    uri = args.signer or settings.receipt_root
    if uri is None:
        print(
            "error: no root: set RECEIPT_ROOT_KEY or give --signer URI (the root that certified the key)",
            file=sys.stderr,
        )
        return 2
    try:
        root = open_root(uri)
        root.public_key()
    except SignerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    async def action(store: Any) -> int:
        from execution_proof.usecases.signing_keys import KEY_STATE_S, revoke_key

        now = int(time.time() * 1000)
        earliest = now + int(2 * KEY_STATE_S * 1000)
        try:
            revocation = await revoke_key(
                store.signing_keys,
                root,
                args.kid,
                after_ms=max(after, earliest),
                reason=args.reason,
                log_queue=store.log_queue if store.receipts.log is not None else None,
                log_identity=store.receipts.log,
            )
        except (LookupError, PermissionError) as exc:
            print(f"error: {redact(str(exc))}", file=sys.stderr)
            return 2
        wait_s = (time_ms(revocation.revoked_after) - int(time.time() * 1000)) / 1000
        if wait_s > 0:
            await asyncio.sleep(wait_s + 0.01)
        print(orjson.dumps(revocation.to_json()).decode())
        return 0

    return run_on_store(settings, NEEDS_REDIS, action)


def _settings(load: Callable[[], Any]) -> Any:
    from execution_proof.runtime.settings import ConfigError

    try:
        return load()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
