"""Records in the layout the release before the index buckets wrote (docs/redis.md,
"Migration"): planted by that release's own issue script (tests/assets/issue_receipt_v0.lua,
kept byte for byte) with the keys and arguments its ``Store`` passed, so tests can check the
current code on exactly what production holds until those records age out.

Old layout, per receipt: ``r:`` the receipt's JSON, ``h:`` receipt hash -> receipt id,
``i:`` replay key -> ``"<receipt_id> <fingerprint>"``, and one sorted set per indexed hash,
``x:…:i:<hex>`` / ``x:…:o:<hex>``, holding receipt ids scored by creation ms.
"""

from __future__ import annotations

from typing import Any

import orjson

from kv import keys
from kv.store import Store
from tests.conftest import ASSETS

OLD_ISSUE_SCRIPT = (ASSETS / "issue_receipt_v0.lua").read_text()


async def plant_old_receipt(
    store: Store,
    receipt: dict[str, Any],
    *,
    built_on_tip: str | None,
    on_main: bool,
    replay_key: str,
    fingerprint: str,
    receipt_json: bytes | None = None,
) -> None:
    """Write ``receipt`` as the old release did (one call of its issue script); raises
    unless the script answers "issued"."""
    project_id, receipt_id = receipt["project_id"], receipt["receipt_id"]
    input_hash, output_hash = receipt.get("input_hash"), receipt.get("output_hash")
    has_input, has_output = isinstance(input_hash, str), isinstance(output_hash, str)
    input_key = keys.search_index_key(project_id, "input_hash", input_hash if has_input else "")
    output_key = keys.search_index_key(project_id, "output_hash", output_hash) if has_output else input_key
    indexed = ("i" if has_input else "") + ("o" if has_input and has_output else "")
    script = store.client.register_script(OLD_ISSUE_SCRIPT)
    reply: Any = await script(
        keys=[
            keys.project_key(project_id),
            keys.idempotency_key(project_id, replay_key),
            keys.receipt_key(receipt_id),
            keys.receipt_hash_key(project_id, receipt["receipt_hash"]),
            keys.key_minute_counter_key(project_id, "sha256:" + "0" * 64, "1"),
            keys.project_month_counter_key(project_id, "202601"),
            input_key,
            output_key,
        ],
        args=[
            built_on_tip or "",
            receipt_json if receipt_json is not None else orjson.dumps(receipt),
            receipt_id,
            receipt["receipt_hash"],
            "1" if on_main else "0",
            fingerprint,
            10**9,
            120,
            10**9,
            3600,
            "",
            keys.receipt_created_ms(receipt_id),
            indexed,
        ],
    )
    assert int(reply[0]) == 0, reply
