"""The registry of receipt keys (``store.signing_keys``): the receipt roots, every key
certificate and every revocation, shared by every process of a deployment (docs/keys.md).

Three hashes, kid → the document's JSON, and a version that every change moves, all in one
hash slot: a process reads the version every ``KEY_STATE_S`` and the hashes only when it
moved. A certificate or revocation is also queued for the transparency log (in the log's own
queue, kv/store_log.py) *before* it is published here: a key is never in use without its
log entry on the way.
"""

from __future__ import annotations

from dataclasses import dataclass

from execution_proof.kv import keys
from execution_proof.kv.link import Link, LuaScript
from execution_proof.kv.records import RedisClient, unavailable_as_503

ROOTS, CERTIFICATES, REVOCATIONS, VERSION = "roots", "certificates", "revocations", "version"


@dataclass(frozen=True, slots=True)
class RegistryRead:
    """The registry as read at one ``version``: kid → JSON bytes per kind."""

    version: int
    roots: dict[str, bytes]
    certificates: dict[str, bytes]
    revocations: dict[str, bytes]


def _text(raw: dict[bytes, bytes] | dict[str, bytes]) -> dict[str, bytes]:
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in raw.items()}


class KeyRegistry:
    def __init__(self, client: RedisClient, link: Link, is_cluster: bool, *, publish: LuaScript) -> None:
        self.client = client
        self.link = link
        self.is_cluster = is_cluster
        self._publish = publish

    async def _put(self, kind: str, kid: str, document: bytes, *, only_new: bool) -> bool:
        keys_ = [keys.signing_keys_key(kind), keys.signing_keys_key(VERSION)]
        return bool(int(await self.link.run_script(self._publish, keys_, [kid, document, "1" if only_new else "0"])))

    @unavailable_as_503
    async def add_root(self, kid: str, document: bytes) -> bool:
        """Record a receipt root (once); True when it was new."""
        return await self._put(ROOTS, kid, document, only_new=True)

    @unavailable_as_503
    async def add_certificate(self, kid: str, document: bytes) -> bool:
        """Publish a key certificate (once per kid); True when it was new."""
        return await self._put(CERTIFICATES, kid, document, only_new=True)

    @unavailable_as_503
    async def put_revocation(self, kid: str, document: bytes) -> None:
        """Publish a revocation of ``kid`` (replacing an earlier one: the caller keeps the
        earliest ``revoked_after``)."""
        await self._put(REVOCATIONS, kid, document, only_new=False)

    @unavailable_as_503
    async def version(self) -> int:
        return int(await self.link.send("GET", keys.signing_keys_key(VERSION)) or 0)

    @unavailable_as_503
    async def read(self) -> RegistryRead:
        """Everything, at one version (one round trip, one slot)."""
        pipe = self.client.pipeline(transaction=not self.is_cluster)
        pipe.get(keys.signing_keys_key(VERSION))
        for kind in (ROOTS, CERTIFICATES, REVOCATIONS):
            pipe.hgetall(keys.signing_keys_key(kind))
        version, roots, certificates, revocations = await pipe.execute()
        return RegistryRead(int(version or 0), _text(roots), _text(certificates), _text(revocations))

    @unavailable_as_503
    async def forget(self, certificates: list[str], revocations: list[str]) -> None:
        """Drop certificates and revocations past retention (the version moves)."""
        if not certificates and not revocations:
            return
        pipe = self.client.pipeline(transaction=not self.is_cluster)
        if certificates:
            pipe.hdel(keys.signing_keys_key(CERTIFICATES), *certificates)
        if revocations:
            pipe.hdel(keys.signing_keys_key(REVOCATIONS), *revocations)
        pipe.incr(keys.signing_keys_key(VERSION))
        await pipe.execute()
