"""``signing-key``: receipt roots and the keys they certify (docs/keys.md).

``signing-key root new --signer URI`` makes a receipt root where the URI says (in the token, a
new ``file:`` of mode 0600, or the plugin's key) and prints one JSON object: ``{"kid",
"public_key_base64url", "sha256_fingerprint", "signer"}``, the URI to configure as
``RECEIPT_ROOT_KEY`` without its ``pin-value``. It makes a key only: it runs on the light
install.
"""

from __future__ import annotations

import argparse
import hashlib
import sys

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
