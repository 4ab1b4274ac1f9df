"""The fork check: is a project's main chain one unbroken chain holding every main receipt?

Walks the project's main chain in the store from its tip back through ``prev_receipt_hash``
to the first receipt, and compares it with the receipts the load generator was given (every
201 answer's ``receipt_id`` with chain status ``main``). The chain is whole when the walk
ends at a receipt with no previous hash, every receipt on it is ``main``, no receipt appears
twice, and it holds exactly the main receipts issued: a main receipt missing from the walk
means two receipts were built on the same previous one (a fork).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class ChainCheck:
    issued_main: int
    """201 answers with chain status ``main``."""
    walked: int = 0
    """Receipts on the walk from the tip to the first receipt."""
    missing: list[str] = field(default_factory=list)
    """Issued main receipts that are not on the walk (a fork)."""
    extra: list[str] = field(default_factory=list)
    """Receipts on the walk that the run was not given (another run's, or a lost answer's)."""
    problems: list[str] = field(default_factory=list)
    """A broken link, a non-main receipt on the chain, a cycle, an unreadable receipt."""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.problems) and self.walked >= self.issued_main

    def describe(self) -> str:
        if self.ok:
            return f"one unbroken chain of {self.walked:,} receipts holding all {self.issued_main:,} main receipts"
        parts = [f"{self.walked:,} receipts walked, {self.issued_main:,} main receipts issued"]
        if self.missing:
            parts.append(f"{len(self.missing):,} main receipts off the chain (fork), e.g. {self.missing[:3]}")
        if self.extra:
            parts.append(f"{len(self.extra):,} receipts on the chain that no answer named")
        parts += self.problems[:3]
        return "; ".join(parts)


def main_receipt_ids(bodies: list[str]) -> tuple[list[str], int]:
    """(ids of the 201 answers whose chain status is ``main``, count of the other 201s)."""
    main, other = [], 0
    for body in bodies:
        answer = orjson.loads(body)
        if (answer.get("chain") or {}).get("status") == "main":
            main.append(answer["receipt"]["receipt_id"])
        else:
            other += 1
    return main, other


async def _walk(redis_url: str, cluster: bool, project_id: str, issued: list[str], bound: int) -> ChainCheck:
    from execution_proof.kv.connect import open_store

    check = ChainCheck(issued_main=len(issued))
    store = open_store(redis_url, cluster=cluster)
    try:
        _, current = await store.receipts.read_tip(project_id)
        seen: set[str] = set()
        while current is not None:
            if len(seen) > bound:
                check.problems.append(f"the walk passed {bound:,} receipts (a cycle?)")
                break
            receipt_id = await store.receipts.find_receipt_id_by_hash(project_id, current)
            raw = await store.receipts.get_receipt_json(receipt_id, project_id) if receipt_id else None
            if receipt_id is None or raw is None:
                check.problems.append(f"broken link: no receipt with hash {current}")
                break
            receipt: dict[str, Any] = orjson.loads(raw)
            if receipt.get("receipt_hash") != current:
                check.problems.append(f"{receipt_id}: hash {receipt.get('receipt_hash')} is not {current}")
                break
            if receipt.get("chain_status") != "main":
                check.problems.append(f"{receipt_id} on the main chain has status {receipt.get('chain_status')}")
            if receipt_id in seen:
                check.problems.append(f"{receipt_id} twice on the chain (a cycle)")
                break
            seen.add(receipt_id)
            current = receipt.get("prev_receipt_hash")
    finally:
        await store.close()
    check.walked = len(seen)
    issued_set = set(issued)
    check.missing = sorted(issued_set - seen)
    check.extra = sorted(seen - issued_set)
    return check


def check_chain(redis_url: str, project_id: str, bodies: list[str], *, cluster: bool = False) -> ChainCheck:
    """Walk ``project_id``'s main chain and compare it with the 201 answers in ``bodies``."""
    issued, other = main_receipt_ids(bodies)
    check = asyncio.run(_walk(redis_url, cluster, project_id, issued, bound=len(bodies) + 1000))
    if other:
        check.problems.append(f"{other:,} creates answered 201 with a chain status other than main")
    return check
