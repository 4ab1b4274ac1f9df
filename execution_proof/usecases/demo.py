"""The embedded demo: a project and key made at start-up so a newcomer can try the API at
once (the server prints them with the first commands to try)."""

from __future__ import annotations

from dataclasses import dataclass

from execution_proof.kv.accounts import create_project_key
from execution_proof.kv.store_keys import KeyStore


@dataclass(frozen=True, slots=True)
class DemoProject:
    project_id: str
    api_key: str
    """Shown once, on the server's own output; never stored or logged."""


class Demo:
    """Makes the demo project (embedded mode with an ephemeral signing key only)."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys

    async def create(self) -> DemoProject:
        created = await create_project_key(self.keys, project_name="demo", plan="free")
        return DemoProject(created["project_id"], created["api_key"])
