"""The ``/verify`` page under a version 2 trust root, in a real Chromium: a receipt asked for by
its id is checked through its key's certificate, which the page fetches with
``GET /v1/public-key?kid=K`` and judges against the pinned receipt roots (docs/verify-page.md).

A stub serves the page's files, the receipt and the key set of a service with receipt roots
(tests/verdict_table.py's fixed-seed root and the key it certifies). The dropped documents of
the shared verdict table are run by tests/test_verdict_table.py; these cases are the ones that
need the service: the key's certificate fetched, the service's own revocations applied, a kid
the service does not list.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from execution_proof.receipts.key_certificates import Root
from tests.conftest import REPO
from tests.servers import serving
from tests.test_verify_page import Page, browser  # noqa: F401  (the module fixture)
from tests.verdict_table import Roots, receipts, trust_root_v2

STATIC = REPO / "execution_proof" / "static"


class Site:
    """What the stub answers: the receipts by id, and the key set (``keys`` is replaced per test)."""

    def __init__(self) -> None:
        self.roots = Roots()
        first, second = receipts(self.roots.ring())
        self.receipts = {r["receipt_id"]: r for r in (first, second)}
        self.asked: list[str] = []
        self.revocations: list[dict[str, str]] = []
        self.listed = True

    def key_set(self, kid: str | None) -> tuple[int, Any]:
        ring = self.roots.ring()
        pinned = Root.of(self.roots.root.public_key())
        body = dict(ring.with_roots({pinned.kid: pinned.public_key}, self.revocations).public_keys_json())
        if kid is not None and (not self.listed or kid not in ring.keys):
            return 404, {"ok": False, "error": {"code": "not_found", "message": "no such key"}}
        return 200, body


def handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            name = parts.path.removeprefix("/static/")
            if parts.path == "/verify":
                self._send(200, (STATIC / "verify.html").read_bytes(), "text/html; charset=utf-8")
                return
            if parts.path.startswith("/static/") and "/" not in name and (STATIC / name).is_file():
                kind = {"js": "text/javascript", "css": "text/css"}.get(name.rsplit(".", 1)[-1], "text/plain")
                self._send(200, (STATIC / name).read_bytes(), kind)
                return
            site.asked.append(self.path)
            if parts.path == "/v1/public-key":
                kid = parse_qs(parts.query).get("kid", [None])[0]
                status, body = site.key_set(kid)
            elif parts.path.startswith("/v1/receipts/") and parts.path.removeprefix("/v1/receipts/") in site.receipts:
                status, body = 200, {"ok": True, "receipt": site.receipts[parts.path.removeprefix("/v1/receipts/")]}
            else:
                status, body = 404, {"ok": False, "error": {"code": "not_found", "message": "not here"}}
            self._send(status, json.dumps(body).encode(), "application/json")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def site() -> Iterator[tuple[Site, str]]:
    state = Site()
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), handler(state))) as url:
        yield state, url


@pytest.fixture
def pins(tmp_path: Path) -> Path:
    path = tmp_path / "trust-root.json"
    path.write_text(json.dumps(trust_root_v2(Roots().root, None)))
    return path


def check_by_id(browser: Any, url: str, pins: Path, receipt_id: str) -> tuple[str, str | None, dict[str, str], Page]:  # noqa: F811
    """Open the page, pin the trust root, ask for ``receipt_id``: (verdict, reason, each check's
    data-state, the tab)."""
    tab = Page(browser, url)
    tab.open()
    tab.page.set_input_files("#keys-file", str(pins))
    tab.page.fill("#receipt-input", receipt_id)
    tab.page.click("#verify-button")
    verdict, _ = tab.verdict()
    items = tab.page.locator("#verdict li[data-check]")
    states = {
        str(items.nth(i).get_attribute("data-check")): str(items.nth(i).get_attribute("data-state"))
        for i in range(items.count())
        if items.nth(i).get_attribute("data-state") is not None
    }
    return verdict, tab.reason(), states, tab


@pytest.mark.slow
def test_a_receipt_by_id_verifies_through_its_keys_certificate(
    browser: Any,  # noqa: F811
    site: tuple[Site, str],
    pins: Path,
) -> None:
    state, url = site
    receipt = next(iter(state.receipts.values()))
    verdict, reason, states, tab = check_by_id(browser, url, pins, receipt["receipt_id"])
    try:
        assert (verdict, reason) == ("valid", None), tab.page.locator("#verdict").inner_text()
        assert states == {"key_certificate": "ok"}
        text = tab.page.locator("#verdict").inner_text()
        assert "certified by the pinned root" in text and "certified by a receipt root your trust root pins" in text
        kid = receipt["sig_kid"]
        assert tab.api_requests() == [
            ("GET", f"/v1/receipts/{receipt['receipt_id']}"),
            ("GET", f"/v1/public-key?kid={kid}"),
        ]
    finally:
        tab.close()


@pytest.mark.slow
def test_a_revocation_the_service_publishes_makes_it_invalid(
    browser: Any,  # noqa: F811
    site: tuple[Site, str],
    pins: Path,
) -> None:
    state, url = site
    state.revocations = [state.roots.revocation()]  # covers the second receipt, not the first
    first, second = state.receipts.values()
    verdict, reason, states, tab = check_by_id(browser, url, pins, second["receipt_id"])
    try:
        assert (verdict, reason) == ("invalid", "bad_signature")
        assert states == {"key_certificate": "revoked"}
        assert "is revoked by root-" in tab.page.locator("#verdict").inner_text()
    finally:
        tab.close()
    verdict, reason, states, tab = check_by_id(browser, url, pins, first["receipt_id"])
    try:
        assert (verdict, reason, states) == ("valid", None, {"key_certificate": "ok"})
    finally:
        tab.close()


@pytest.mark.slow
def test_a_key_the_service_does_not_list_is_not_verified(
    browser: Any,  # noqa: F811
    site: tuple[Site, str],
    pins: Path,
) -> None:
    state, url = site
    state.listed = False
    receipt = next(iter(state.receipts.values()))
    verdict, reason, states, tab = check_by_id(browser, url, pins, receipt["receipt_id"])
    try:
        assert (verdict, reason) == ("error", "no_key_certificate")
        assert states == {"key_certificate": "no_key_certificate"}
        assert "execution-proof bundle RECEIPT_ID" in tab.page.locator("#verdict").inner_text()
        # Chromium itself logs the 404 it was answered; the page's own code logged nothing.
        assert tab.errors == ["Failed to load resource: the server responded with a status of 404 (Not Found)"]
        tab.errors.clear()
    finally:
        tab.close()
