"""Every Redis key the service uses, built in one pure module.

All keys of one project carry the project's slot tag in braces (``{TAG}``), so every
multi-key script touches a single Redis Cluster hash slot. The tag is derived from the
project id, and receipt ids carry it too (see ``receipts.ids``), so a public read by
receipt id finds the slot without another lookup. API-key records are single-key reads,
keyed by the key's hash.
"""

from __future__ import annotations

from receipts.ids import receipt_slot_tag, slot_tag


def _hex(hash_str: str) -> str:
    return hash_str.removeprefix("sha256:")


def project_key(project_id: str) -> str:
    """Hash: name, created_at, ``tip`` (the main chain tip, absent before the first receipt)."""
    return f"p:{{{slot_tag(project_id)}}}:{project_id}"


def project_api_keys_key(project_id: str) -> str:
    """Set of the project's API-key hashes (for listing, revoking and reissuing)."""
    return f"pk:{{{slot_tag(project_id)}}}:{project_id}"


def receipt_key(receipt_id: str) -> str:
    """String: the receipt's JSON bytes, exactly as every read returns them."""
    return f"r:{{{receipt_slot_tag(receipt_id)}}}:{receipt_id}"


def receipt_hash_key(project_id: str, receipt_hash: str) -> str:
    """String: the receipt id for a receipt hash, within the project's slot."""
    return f"h:{{{slot_tag(project_id)}}}:{_hex(receipt_hash)}"


def idempotency_key(project_id: str, replay_key: str) -> str:
    """String: ``<receipt_id> <fingerprint>`` for a replay key of the project."""
    return f"i:{{{slot_tag(project_id)}}}:{project_id}:{replay_key}"


def api_key_key(key_hash: str) -> str:
    """Hash: project_id, actor_id, plan, revoked ("0"/"1"), created_at."""
    return f"k:{_hex(key_hash)}"


def key_minute_counter_key(project_id: str, key_hash: str, window_id: str) -> str:
    """Integer: requests made with one API key in one minute window (project's slot)."""
    return f"m:{{{slot_tag(project_id)}}}:{_hex(key_hash)[:32]}:{window_id}"


def project_month_counter_key(project_id: str, month_id: str) -> str:
    """Integer: receipts the project issued in one calendar month (``YYYYMM``)."""
    return f"q:{{{slot_tag(project_id)}}}:{project_id}:{month_id}"


def ip_counter_key(ip_bucket: str, scope: str, window_id: str) -> str:
    """Integer: requests from one client address in one window, in the address's own slot."""
    return f"ip:{{{ip_bucket}}}:{scope}:{window_id}"
