"""The public verification page (GET /verify) in a real Chromium against a real service.

One service process (its own certified key active) on the session's redis-server, plus a
second one before it, briefly, whose key (listed, not active, in the first one's keys) is used to
issue an older receipt. Chromium opens http://127.0.0.1 (a secure context, so WebCrypto and
Ed25519 exist), and every check happens in the page's own JavaScript; the tests only read
``<output id="verdict" data-verdict=…>`` and record which requests the page made.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from execution_proof.receipts.signing import load_key_ring, new_key_set
from execution_proof.receipts.verifier import recompute_hash_or_none
from tests.conftest import REPO, RedisServer, missing_binary
from tests.servers import ServicePool, create_key_cli

CHROMIUM = "/usr/bin/chromium"
JSON = "application/json"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # A name that is not localhost, for the insecure-context test.
    "--host-resolver-rules=MAP insecure.test 127.0.0.1",
]
VERDICT_TIMEOUT_MS = 15_000
INPUT_BYTES = b"the raw input data\n" * 300_000  # ~5.7 MB: more than one 4 MiB chunk
SALT = bytes(range(16))


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- static checks (no browser)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def page_tags() -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed((REPO / "execution_proof" / "static" / "verify.html").read_text())
    return parser.tags


def test_page_has_no_inline_script_no_third_party_and_labels_every_control() -> None:
    tags = page_tags()
    for tag, attrs in tags:
        assert not any(name.startswith("on") for name in attrs), f"inline handler on <{tag}>"
        assert "style" not in attrs, f"inline style on <{tag}>"
        if tag == "script":
            assert attrs.get("src", "").startswith("/static/"), "inline or third-party script"  # type: ignore[union-attr]
        if tag == "link":
            assert str(attrs.get("href")).startswith(("/static/", "data:"))
    ids = {attrs["id"] for _, attrs in tags if attrs.get("id")}
    labelled = {attrs["for"] for tag, attrs in tags if tag == "label"}
    controls = [attrs["id"] for tag, attrs in tags if tag in {"input", "textarea", "select", "progress"}]
    assert controls
    assert set(controls) <= labelled, "every control has a <label for>"
    assert "verdict" in ids
    verdict = next(attrs for tag, attrs in tags if attrs.get("id") == "verdict")
    assert verdict.get("aria-live") == "polite"
    viewport = [attrs for tag, attrs in tags if tag == "meta" and attrs.get("name") == "viewport"]
    assert viewport
    assert "width=device-width" in str(viewport[0]["content"])


def test_every_help_line_names_the_execution_proof_command() -> None:
    """What the page tells a user to run (its HTML and every line its scripts write) is the
    installed command, `execution-proof VERB`, never `service.py` (a clone's entry)."""
    static = REPO / "execution_proof" / "static"
    named = 0
    for path in [static / "verify.html", *sorted(static.glob("verify*.js"))]:
        text = path.read_text()
        assert "service.py" not in text, path.name
        for found in re.finditer(r"(\S+) (verify|hash|bundle|trust-root|submit)\b (--|FILE|RECEIPT_ID|-)", text):
            assert found.group(1).endswith("execution-proof"), f"{path.name}: {found.group(0)}"
            named += 1
    assert named >= 8, "the help lines name the command"


# ---------------------------------------------------------------- the service and the browser


@pytest.fixture(scope="module")
def site(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A running service and receipts on it: a retired-key one, then two chained main ones."""
    folder = tmp_path_factory.mktemp("verify-page")
    with ServicePool(folder) as pool:
        old = pool.start(redis_url=redis_server.url)
        key = create_key_cli(redis_server.url, project="verify-page", plan="pro")
        headers = {"Authorization": f"Bearer {key['api_key']}", "Content-Type": "application/json"}
        with httpx.Client(base_url=old.base_url, timeout=10) as http:
            created = http.post("/v1/receipts", headers=headers, json={"input_hash": sha(b"first")})
            assert created.status_code in (200, 201), created.text
            retired = created.json()["receipt"]
        assert retired["sig_kid"].startswith("key-")
        old.stop()
        service = pool.start(redis_url=redis_server.url)
        with httpx.Client(base_url=service.base_url, timeout=10) as http:
            second = http.post(
                "/v1/receipts", headers=headers, json={"input_hash": sha(b"second"), "tags": {"stage": "test"}}
            )
            assert second.status_code in (200, 201), second.text
            third = http.post(
                "/v1/receipts",
                headers=headers,
                json={
                    "input_hash": sha(INPUT_BYTES),
                    "output_hash": sha(b"out"),
                    "code_ref": "git:abc \u00e9\U0001f600",
                },
            )
            assert third.status_code in (200, 201), third.text
            newest = third.json()["receipt"]
            assert newest["sig_kid"].startswith("key-") and newest["sig_kid"] != retired["sig_kid"]
            salted = http.post("/v1/receipts", headers=headers, json={"input_hash": sha(SALT + b"secret")})
            assert salted.status_code in (200, 201), salted.text
        yield {
            "base": service.base_url,
            "port": service.port,
            "retired": retired,
            "second": second.json()["receipt"],
            "newest": newest,
            "salted": salted.json()["receipt"],
        }


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_binary("chromium", "playwright (pip install -e '.[test]') drives the page in a real browser")
    if shutil.which(CHROMIUM) is None:
        missing_binary("chromium", "the verification page is tested in a real browser (apt-get install chromium)")
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield instance
        instance.close()


class Page:
    """One browser tab on the page, recording its requests and console errors."""

    def __init__(self, browser: Any, base: str, viewport: dict[str, int] | None = None) -> None:
        self.context = browser.new_context(viewport=viewport or {"width": 1000, "height": 900})
        self.page = self.context.new_page()
        self.base = base
        self.requests: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append((r.method, r.url)))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)

    def open(self, query: str = "") -> None:
        self.page.goto(self.base + "/verify" + query, wait_until="load")

    def api_requests(self) -> list[tuple[str, str]]:
        """Requests other than the page itself and its static files, as (method, path?query)."""
        out = []
        for method, url in self.requests:
            parts = urlsplit(url)
            assert f"{parts.scheme}://{parts.netloc}" == self.base, f"request to another origin: {url}"
            if parts.path == "/verify" or parts.path.startswith("/static/"):
                continue
            out.append((method, parts.path + (f"?{parts.query}" if parts.query else "")))
        return out

    def verdict(self) -> tuple[str, str]:
        # Locators, not wait_for_function: the page's CSP forbids evaluating strings as code.
        done = ", ".join(f'#verdict[data-verdict="{kind}"]' for kind in ("valid", "invalid", "error"))
        self.page.locator(done).wait_for(timeout=VERDICT_TIMEOUT_MS)
        element = self.page.locator("#verdict")
        return str(element.get_attribute("data-verdict")), str(element.inner_text())

    def reason(self) -> str | None:
        """The verdict's ``data-reason`` (docs/verdicts.md): set for INVALID and NOT VERIFIED only."""
        value: str | None = self.page.locator("#verdict").get_attribute("data-reason")
        return value

    def checks(self) -> dict[str, bool]:
        items = self.page.locator("#verdict li[data-check]")
        return {
            str(items.nth(i).get_attribute("data-check")): items.nth(i).get_attribute("data-ok") == "true"
            for i in range(items.count())
        }

    def wait_for_loaded_document(self) -> None:
        from playwright.sync_api import expect

        expect(self.page.locator("#receipt-input")).to_have_value(re.compile("eps-receipt-bundle"))

    def paste_and_verify(self, text: str) -> tuple[str, str]:
        self.page.fill("#receipt-input", text)
        self.page.click("#verify-button")
        return self.verdict()

    def close(self) -> None:
        assert not self.errors, f"console errors: {self.errors}"
        self.context.close()


@pytest.fixture
def tab(browser: Any, site: dict[str, Any]) -> Iterator[Page]:
    page = Page(browser, site["base"])
    yield page
    page.close()


# ---------------------------------------------------------------- the cases


@pytest.mark.slow
def test_page_headers_forbid_inline_and_foreign_code(site: dict[str, Any]) -> None:
    response = httpx.get(site["base"] + "/verify")
    assert response.status_code == 200
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "connect-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert "default-src 'none'" in csp
    for asset in ("verify.js", "verify-core.js", "sha256.js", "verify.css"):
        assert httpx.get(site["base"] + "/static/" + asset).status_code == 200, asset


@pytest.mark.slow
def test_genuine_receipt_by_url_is_valid_and_reads_only_the_receipt_and_keys(tab: Page, site: dict[str, Any]) -> None:
    receipt_id = site["newest"]["receipt_id"]
    tab.open(f"?receipt_id={receipt_id}")
    verdict, text = tab.verdict()
    assert verdict == "valid", text
    assert tab.reason() is None
    for words in (
        "Self-consistency",
        "Signature",
        "Key id",
        site["newest"]["sig_kid"],
        "active signing key",
        receipt_id,
    ):
        assert words in text, words
    assert tab.checks() == {
        "format": True,
        "self_consistency": True,
        "key": True,
        "signature": True,
        "chain_extent": True,
        "no_file": True,
    }
    assert sorted(tab.api_requests()) == sorted([("GET", f"/v1/receipts/{receipt_id}"), ("GET", "/v1/public-key")])


@pytest.mark.slow
def test_tampered_pasted_receipt_is_invalid_and_names_self_consistency(tab: Page, site: dict[str, Any]) -> None:
    tab.open()
    tampered = dict(site["newest"], code_ref="git:other")
    verdict, text = tab.paste_and_verify(json.dumps({"ok": True, "receipt": tampered}))
    assert verdict == "invalid", text
    assert tab.reason() == "bad_signature"
    assert "Self-consistency" in text
    checks = tab.checks()
    assert checks["self_consistency"] is False
    assert checks["signature"] is True  # the hash was left alone: the signature over it still holds
    # A pasted receipt needs only the keys.
    assert tab.api_requests() == [("GET", "/v1/public-key")]


@pytest.mark.slow
def test_pasted_id_with_matching_local_files_is_valid(tab: Page, site: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "input.bin").write_bytes(INPUT_BYTES)
    (tmp_path / "output.bin").write_bytes(b"out")
    tab.open()
    tab.page.set_input_files("#input-file", str(tmp_path / "input.bin"))
    tab.page.set_input_files("#output-file", str(tmp_path / "output.bin"))
    verdict, text = tab.paste_and_verify(site["newest"]["receipt_id"])
    assert verdict == "valid", text
    assert "Input file hash" in text
    assert "Output file hash" in text
    assert sha(INPUT_BYTES) in text
    assert tab.checks()["input_hash"] is True
    assert tab.checks()["output_hash"] is True
    # The files were hashed locally: nothing was uploaded, only the two reads happened.
    assert sorted(tab.api_requests()) == sorted(
        [("GET", f"/v1/receipts/{site['newest']['receipt_id']}"), ("GET", "/v1/public-key")]
    )


@pytest.mark.slow
def test_non_matching_local_file_is_invalid_and_names_the_file_hash(
    tab: Page, site: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "other.bin").write_bytes(INPUT_BYTES + b"!")
    tab.open()
    tab.page.set_input_files("#input-file", str(tmp_path / "other.bin"))
    verdict, text = tab.paste_and_verify(site["newest"]["receipt_id"])
    assert verdict == "invalid", text
    assert tab.reason() == "hash_mismatch"
    assert "Input file hash" in text
    assert "not the file the receipt was issued for" in text
    checks = tab.checks()
    assert checks["input_hash"] is False
    assert checks["self_consistency"] is True
    assert checks["signature"] is True


@pytest.mark.slow
@pytest.mark.parametrize(("salt", "expected"), [(SALT.hex(), "valid"), ("", "invalid"), ("zz", "error")])
def test_salted_input_hash(tab: Page, site: dict[str, Any], tmp_path: Path, salt: str, expected: str) -> None:
    """A blinded input hash (sha256(salt || file)) matches only with the salt; a bad salt is an error."""
    (tmp_path / "secret.bin").write_bytes(b"secret")
    tab.open()
    tab.page.set_input_files("#input-file", str(tmp_path / "secret.bin"))
    tab.page.fill("#input-salt", salt)
    verdict, text = tab.paste_and_verify(site["salted"]["receipt_id"])
    assert verdict == expected, text
    if expected == "error":
        assert "salt must be hexadecimal" in text
        assert tab.api_requests() == []
    else:
        assert tab.checks()["input_hash"] is (expected == "valid")


@pytest.mark.slow
def test_unknown_id_is_an_error(tab: Page) -> None:
    tab.open("?receipt_id=rcpt_01KF0HJ080NOSUCHRECEIPT0000")
    verdict, text = tab.verdict()
    assert verdict == "error", text
    assert tab.reason() is None  # could not verify: no reason
    assert "Not found" in text
    # The browser logs the 404 response itself; that is not a page error.
    tab.errors = [e for e in tab.errors if "404" not in e]


@pytest.mark.slow
def test_a_receipt_answered_for_another_id_is_refused(
    tab: Page, site: dict[str, Any], redis_server: RedisServer
) -> None:
    """Receipt A's stored bytes under id B: the service refuses the read (500), and the page,
    should anything hand it A when it asked for B, refuses that too."""
    from execution_proof.kv.keys import receipt_key
    from execution_proof.receipts.ids import new_receipt_id

    genuine = site["second"]
    other = new_receipt_id(genuine["project_id"])
    with redis.Redis.from_url(redis_server.url) as client:
        client.set(receipt_key(other), client.get(receipt_key(genuine["receipt_id"])))
    tab.open(f"?receipt_id={other}")
    verdict, text = tab.verdict()
    assert verdict == "error", text
    assert "HTTP 500" in text and genuine["receipt_id"] not in text
    # The browser logs the 500 response itself; that is not a page error.
    tab.errors = [e for e in tab.errors if "500" not in e]

    body = json.dumps({"ok": True, "receipt": genuine})
    tab.page.route(f"**/v1/receipts/{other}", lambda route: route.fulfill(status=200, content_type=JSON, body=body))
    tab.open(f"?receipt_id={other}")
    verdict, text = tab.verdict()
    assert verdict == "error", text
    assert f"answered with the receipt {genuine['receipt_id']} when asked for {other}" in text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "words"),
    [("{not json", "not valid JSON"), ("hello", "neither a receipt id"), ('{"a": "b"}', "neither a receipt")],
)
def test_malformed_input_is_an_error(tab: Page, text: str, words: str) -> None:
    tab.open()
    verdict, shown = tab.paste_and_verify(text)
    assert verdict == "error", shown
    assert words in shown
    assert tab.api_requests() == []


@pytest.mark.slow
def test_receipt_signed_by_retired_key_is_valid_and_says_retired(tab: Page, site: dict[str, Any]) -> None:
    tab.open(f"?receipt_id={site['retired']['receipt_id']}")
    verdict, text = tab.verdict()
    assert verdict == "valid", text
    assert "retired" in text
    assert site["retired"]["sig_kid"] in text


def make_bundle(site: dict[str, Any]) -> dict[str, Any]:
    """A bundle built by hand from the public reads, in the format the bundle endpoint returns."""
    base = site["base"]
    with httpx.Client(base_url=base, timeout=10) as http:
        receipt = http.get(f"/v1/receipts/{site['newest']['receipt_id']}").json()["receipt"]
        keys = http.get("/v1/public-key").json()
        chain = []
        prev = receipt["prev_receipt_hash"]
        while prev is not None:
            answer = http.get(f"/v1/receipts/{prev}", params={"project_id": receipt["project_id"]})
            assert answer.status_code == 200, answer.text
            chain.append(answer.json()["receipt"])
            prev = chain[-1]["prev_receipt_hash"]
    assert [r["receipt_id"] for r in chain] == [site["second"]["receipt_id"], site["retired"]["receipt_id"]]
    return {
        "format": "eps-receipt-bundle",
        "version": 1,
        "created_at": "2026-11-21T00:00:00.000Z",
        "service": base,
        "receipt": receipt,
        "keys": keys,
        "chain": chain,
        "chain_complete": True,
    }


def forge_bundle(bundle: dict[str, Any], input_hash: str) -> dict[str, Any]:
    """The bundle with its receipt rewritten to commit to ``input_hash``, re-hashed, and every
    receipt re-signed by a stranger's key of the same kid, which the bundle carries in place of
    the service's keys: consistent with itself, so only pinning the keys can tell."""
    forged: dict[str, Any] = json.loads(json.dumps(bundle))
    receipts = [forged["receipt"], *forged["chain"]]
    strangers = {kid: load_key_ring(new_key_set(kid)) for kid in {r["sig_kid"] for r in receipts}}
    forged["receipt"]["input_hash"] = input_hash
    forged["receipt"]["receipt_hash"] = recompute_hash_or_none(forged["receipt"])
    for receipt in receipts:
        receipt["signature"] = strangers[receipt["sig_kid"]].sign(receipt["receipt_hash"])
    forged["keys"] = {
        "keys": [key for ring in strangers.values() for key in ring.public_keys_json()["keys"]],
        "active_kid": bundle["keys"]["active_kid"],
    }
    return forged


def drop_file(tab: Page, selector: str, text: str, name: str) -> None:
    """Drop a file on a drop zone, as a user dragging it from a file manager would."""
    handle = tab.page.evaluate_handle(
        """([text, name]) => { const dt = new DataTransfer();
             dt.items.add(new File([text], name, {type: 'application/json'})); return dt; }""",
        [text, name],
    )
    tab.page.dispatch_event(selector, "drop", {"dataTransfer": handle})


def verify_bundle(tab: Page, bundle: dict[str, Any]) -> tuple[str, str]:
    tab.page.fill("#receipt-input", "")  # so that waiting for the loaded bundle waits for this one
    drop_file(tab, "#bundle-drop", json.dumps(bundle), "bundle.json")
    tab.wait_for_loaded_document()
    tab.page.click("#verify-button")
    return tab.verdict()


def published_keys(site: dict[str, Any]) -> dict[str, Any]:
    keys: dict[str, Any] = httpx.get(site["base"] + "/v1/public-key").json()
    return keys


def unreachable_keys(tab: Page, how: str) -> None:
    """Make GET /v1/public-key fail: the service unreachable, or a copy of the page served by
    something that is not the service (404)."""
    if how == "unreachable":
        tab.page.route("**/v1/public-key", lambda route: route.abort("connectionrefused"))
    else:
        tab.page.route("**/v1/public-key", lambda route: route.fulfill(status=404, content_type="text/html", body="no"))


def ignore_failed_key_fetch(tab: Page) -> None:
    # The browser logs the failed request itself; that is not a page error.
    tab.errors = [e for e in tab.errors if "Failed to load resource" not in e]


@pytest.mark.slow
def test_chosen_bundle_is_valid_against_the_published_keys(tab: Page, site: dict[str, Any], tmp_path: Path) -> None:
    bundle_path = tmp_path / "bundle.json"
    bundle_path.write_text(json.dumps(make_bundle(site)))
    tab.open()
    tab.requests.clear()
    tab.page.set_input_files("#bundle-file", str(bundle_path))
    tab.wait_for_loaded_document()
    tab.page.click("#verify-button")
    verdict, text = tab.verdict()
    assert verdict == "valid", text
    checks = tab.checks()
    for name in (
        "bundle_keys",
        "chain_receipt_1",
        "chain_link_1",
        "chain_receipt_2",
        "chain_link_2",
        "self_consistency",
        "signature",
    ):
        assert checks[name] is True, name
    assert "back to the start of the chain" in text
    # The bundle's own chain is checked locally; the one request pins its keys.
    assert tab.api_requests() == [("GET", "/v1/public-key")]


@pytest.mark.slow
def test_dropped_genuine_bundle_is_valid_and_names_the_key_pinning(tab: Page, site: dict[str, Any]) -> None:
    tab.open()
    tab.requests.clear()
    verdict, text = verify_bundle(tab, make_bundle(site))
    assert verdict == "valid", text
    assert tab.checks()["bundle_keys"] is True
    assert "Bundle keys" in text
    assert "equal the keys this service publishes (GET /v1/public-key)" in text
    assert tab.api_requests() == [("GET", "/v1/public-key")]


@pytest.mark.slow
def test_forged_bundle_with_a_strangers_key_is_invalid(tab: Page, site: dict[str, Any]) -> None:
    forged = forge_bundle(make_bundle(site), sha(b"what the forger wants certified"))
    tab.open()
    verdict, text = verify_bundle(tab, forged)
    assert verdict == "invalid", text
    assert tab.reason() == "bad_signature"
    checks = tab.checks()
    assert checks["bundle_keys"] is False
    assert checks["self_consistency"] is True  # re-hashed: only the keys give it away
    assert checks["signature"] is False  # checked with the published key, not the carried one
    assert "not this service's keys" in text
    assert site["newest"]["sig_kid"] in text and site["retired"]["sig_kid"] in text  # the kids whose keys differ

    # A kid the service does not publish is not this service's key either.
    extra = make_bundle(site)
    stranger = load_key_ring(new_key_set("someone-else")).public_keys_json()["keys"]
    extra["keys"] = {**extra["keys"], "keys": [*extra["keys"]["keys"], *stranger]}
    verdict, text = verify_bundle(tab, extra)
    assert verdict == "invalid", text
    assert tab.checks()["bundle_keys"] is False
    assert "someone-else" in text and "not published by this service" in text


@pytest.mark.slow
@pytest.mark.parametrize("how", ["unreachable", "not-the-service"])
def test_bundle_without_published_keys_is_not_verified(tab: Page, site: dict[str, Any], how: str) -> None:
    """No published keys and no key file: every check runs against the bundle's own keys, but
    the verdict is never valid, for a genuine bundle and a forged one alike."""
    unreachable_keys(tab, how)
    tab.open()
    for bundle in (make_bundle(site), forge_bundle(make_bundle(site), sha(b"forged"))):
        verdict, text = verify_bundle(tab, bundle)
        assert verdict == "error", text
        assert tab.reason() == "no_keys"
        assert (
            "The signatures match the keys the bundle carries, but those keys were not checked against the "
            "service's published keys: NOT verified. Give this page your trust root (execution-proof trust-root) "
            'or a saved key set as the "Saved key set", or open it on the service.'
        ) in text
        checks = tab.checks()
        assert checks["bundle_keys"] is False
        for name in ("self_consistency", "signature", "chain_receipt_1", "chain_link_2"):
            assert checks[name] is True, name
    ignore_failed_key_fetch(tab)


@pytest.mark.slow
def test_saved_key_file_pins_the_bundle_without_any_request(tab: Page, site: dict[str, Any], tmp_path: Path) -> None:
    """Offline: the JSON of GET /v1/public-key saved earlier (the file `verify --keys` takes)
    pins the keys; the page asks nothing of the (unreachable) service."""
    keys_path = tmp_path / "saved-keys.json"
    keys_path.write_text(json.dumps(published_keys(site)))
    unreachable_keys(tab, "unreachable")
    tab.open()
    tab.requests.clear()
    tab.page.set_input_files("#keys-file", str(keys_path))
    verdict, text = verify_bundle(tab, make_bundle(site))
    assert verdict == "valid", text
    assert tab.checks()["bundle_keys"] is True
    assert "saved-keys.json" in text
    verdict, text = verify_bundle(tab, forge_bundle(make_bundle(site), sha(b"forged")))
    assert verdict == "invalid", text
    assert tab.checks()["bundle_keys"] is False
    assert tab.api_requests() == [], "a saved key set replaces the key request"


@pytest.mark.slow
def test_dropped_key_file_pins_and_a_malformed_one_is_an_error(tab: Page, site: dict[str, Any], tmp_path: Path) -> None:
    unreachable_keys(tab, "unreachable")
    tab.open()
    drop_file(tab, "#keys-drop", json.dumps(published_keys(site)), "dropped-keys.json")
    verdict, text = verify_bundle(tab, make_bundle(site))
    assert verdict == "valid", text
    assert "dropped-keys.json" in text
    drop_file(tab, "#keys-drop", json.dumps({"not": "keys"}), "wrong.json")
    verdict, text = verify_bundle(tab, make_bundle(site))
    assert verdict == "error", text
    assert '"wrong.json" is not a saved key set' in text
    assert tab.api_requests() == []


@pytest.mark.slow
def test_dropped_bundle_with_a_broken_link_is_invalid(tab: Page, site: dict[str, Any]) -> None:
    bundle = make_bundle(site)
    bundle["chain"] = [bundle["chain"][1]]  # skip the middle receipt: the link no longer matches
    tab.open()
    tab.requests.clear()
    verdict, text = verify_bundle(tab, bundle)
    assert verdict == "invalid", text
    assert tab.reason() == "bad_chain"
    checks = tab.checks()
    assert checks["bundle_keys"] is True
    assert checks["chain_receipt_1"] is True  # the entry itself is genuine...
    assert checks["chain_link_1"] is False  # ...but it is not the receipt's predecessor
    assert "link is broken" in text
    assert tab.api_requests() == [("GET", "/v1/public-key")]


@pytest.mark.slow
def test_insecure_context_is_explained(browser: Any, site: dict[str, Any]) -> None:
    page = Page(browser, f"http://insecure.test:{site['port']}")
    page.open(f"?receipt_id={site['newest']['receipt_id']}")
    verdict, text = page.verdict()
    assert verdict == "error", text
    assert "secure context" in text
    assert page.page.locator("#support").is_visible()
    page.close()


@pytest.mark.slow
def test_phone_viewport_screenshot(browser: Any, site: dict[str, Any]) -> None:
    page = Page(browser, site["base"], viewport={"width": 390, "height": 844})
    page.open(f"?receipt_id={site['newest']['receipt_id']}")
    verdict, _ = page.verdict()
    assert verdict == "valid"
    # Readable on a phone: nothing wider than the screen.
    assert page.page.evaluate("document.documentElement.scrollWidth") <= 390
    folder = Path(tempfile.mkdtemp(prefix="verify-page-"))
    shot = folder / "verify-phone.png"
    page.page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 0
    assert re.match(rb"\x89PNG", shot.read_bytes())
    print(f"phone screenshot: {shot}")
    page.close()


@pytest.mark.slow
def test_bundle_from_the_bundle_endpoint_verifies_offline_with_saved_keys(
    tab: Page, site: dict[str, Any], tmp_path: Path
) -> None:
    """The service's own GET /v1/receipts/{id}/bundle (docs/bundles.md) is what the page expects,
    and with a saved key set it verifies without any request."""
    answer = httpx.get(f"{site['base']}/v1/receipts/{site['newest']['receipt_id']}/bundle")
    assert answer.status_code == 200, answer.text
    (tmp_path / "bundle.json").write_bytes(answer.content)
    (tmp_path / "keys.json").write_text(json.dumps(published_keys(site)))
    tab.open()
    tab.requests.clear()
    tab.page.set_input_files("#keys-file", str(tmp_path / "keys.json"))
    tab.page.set_input_files("#bundle-file", str(tmp_path / "bundle.json"))
    tab.wait_for_loaded_document()
    tab.page.click("#verify-button")
    verdict, text = tab.verdict()
    assert verdict == "valid", text
    assert tab.checks()["bundle_keys"] is True
    assert tab.checks()["chain_link_2"] is True
    assert f'signed by the retired key "{site["retired"]["sig_kid"]}"' in text  # the oldest chain entry
    assert tab.requests == []


@pytest.mark.slow
def test_saved_key_file_replaces_the_key_request_for_ids_and_pasted_receipts(
    tab: Page, site: dict[str, Any], tmp_path: Path
) -> None:
    """The saved key set is what the signatures are checked with: a set without the signing key
    makes a genuine receipt invalid, and the page never asks for GET /v1/public-key."""
    keys = published_keys(site)
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    stale = {"keys": [k for k in keys["keys"] if k["kid"] != site["newest"]["sig_kid"]], "active_kid": None}
    (tmp_path / "stale-keys.json").write_text(json.dumps(stale))
    receipt = site["newest"]
    tab.open()
    tab.requests.clear()
    tab.page.set_input_files("#keys-file", str(tmp_path / "keys.json"))
    assert "keys.json" in tab.page.locator("#keys-status").inner_text()
    verdict, text = tab.paste_and_verify(receipt["receipt_id"])
    assert verdict == "valid", text
    assert 'the saved key set "keys.json"' in text
    verdict, text = tab.paste_and_verify(json.dumps(receipt))
    assert verdict == "valid", text
    tab.page.set_input_files("#keys-file", str(tmp_path / "stale-keys.json"))
    verdict, text = tab.paste_and_verify(json.dumps(receipt))
    assert verdict == "invalid", text
    assert tab.checks()["key"] is False
    assert tab.api_requests() == [("GET", f"/v1/receipts/{receipt['receipt_id']}")]
