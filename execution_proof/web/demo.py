"""The embedded demo: a project and key made at start-up so a newcomer can try the API."""

from __future__ import annotations

from typing import Any

from execution_proof.usecases.services import Services


def demo_base_url(app: Any, listen_url: str | None) -> str:
    """Where a newcomer reaches this server: ``PUBLIC_BASE_URL``, else the address it listens on
    (``listen_url``, as ``service.py serve`` bound it; a wildcard host is shown as loopback)."""
    services: Services = app.ctx.services
    if services.settings.public_base_url:
        return str(services.settings.public_base_url).rstrip("/")
    url = listen_url or f"http://{app.state.host or '127.0.0.1'}:{app.state.port}"
    for wildcard in ("//0.0.0.0:", "//[::]:"):
        url = url.replace(wildcard, "//127.0.0.1:")
    return str(url)


async def announce_demo_key(app: Any, listen_url: str | None) -> None:
    """Create a demo project and print its key and the first commands to try (embedded mode
    only); ``listen_url``: where the server listens, when ``service.py serve`` bound it."""
    services: Services = app.ctx.services
    created = await services.demo.create()
    base = demo_base_url(app, listen_url)
    key = created.api_key
    digest = "sha256:" + "0" * 63 + "1"
    print(
        "\n"
        "  Demo project ready (embedded store, ephemeral signing key):\n"
        f"    project_id: {created.project_id}\n"
        f"    API key:    {key}\n"
        "\n"
        "  Create a receipt:\n"
        f"    curl -s -X POST {base}/v1/receipts \\\n"
        f"      -H 'Authorization: Bearer {key}' \\\n"
        "      -H 'Content-Type: application/json' \\\n"
        f'      -d \'{{"input_hash": "{digest}", "tags": {{"workflow_stage": "demo"}}}}\'\n'
        "  Read it (public; the receipt_id is in the create response):\n"
        f"    curl -s {base}/v1/receipts/RECEIPT_ID\n"
        "  Verify it against your hash:\n"
        f"    curl -s -X POST {base}/v1/verify \\\n"
        f"      -H 'Authorization: Bearer {key}' \\\n"
        "      -H 'Content-Type: application/json' \\\n"
        f'      -d \'{{"receipt_id": "RECEIPT_ID", "input_hash": "{digest}"}}\'\n'
        f"  Verify in a browser:  {base}/verify\n"
        f"  API reference:        {base}/docs\n",
        flush=True,
    )
