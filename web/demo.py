"""The embedded demo: a project and key made at start-up so a newcomer can try the API."""

from __future__ import annotations

from typing import Any

from kv.store import Store
from web.keys_admin import create_project_key


async def announce_demo_key(app: Any) -> None:
    """Create a demo project and print its key and a curl line (embedded mode only)."""
    store: Store = app.ctx.store
    created = await create_project_key(store, project_name="demo", plan="free")
    host = app.state.host or "127.0.0.1"
    if host in ("0.0.0.0", "::"):  # noqa: S104 - only rewriting a printed URL
        host = "127.0.0.1"
    base = app.ctx.settings.public_base_url or f"http://{host}:{app.state.port}"
    digest = "sha256:" + "0" * 63 + "1"
    print(
        "\n"
        "  Demo project ready (embedded store, ephemeral signing key):\n"
        f"    project_id: {created['project_id']}\n"
        f"    API key:    {created['api_key']}\n"
        "\n"
        "  Try it:\n"
        f"    curl -s -X POST {base}/v1/receipts \\\n"
        f"      -H 'Authorization: Bearer {created['api_key']}' \\\n"
        "      -H 'Content-Type: application/json' \\\n"
        f'      -d \'{{"input_hash": "{digest}", "tags": {{"workflow_stage": "demo"}}}}\'\n',
        flush=True,
    )
