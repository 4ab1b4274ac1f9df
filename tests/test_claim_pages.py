"""The claim pages (docs/claims.md, "Pages"): rendered from templates, accessible, no inline handlers, and
no third-party script except the configured human-verification widget."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from execution_proof.kv.store import Store
from execution_proof.runtime.settings import Settings
from execution_proof.web.app import create_app
from tests.conftest import missing_binary

STATIC = Path(__file__).resolve().parent.parent / "execution_proof" / "static"
WIDGET = "https://widget.example.test/v0/api.js"
CONTACT = "keys@example.test"
WARNING = "Store it now: it is shown only once."
INLINE_HANDLER = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)


@pytest.fixture
async def page_store() -> AsyncIterator[Store]:
    store = Store(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    yield store
    await store.close()


@pytest.fixture
def page_client(page_store: Store, receipt_root: str) -> Any:
    def make(**overrides: Any) -> Any:
        values: dict[str, Any] = {
            "redis_url": "redis://injected-by-tests",
            "receipt_root": receipt_root,
            "payment_webhook_secrets": ("whsec_x",),
            "human_check_secret": "hc-secret",
            "human_check_site_key": "0x4AAAA-site-key",
            "human_check_script_url": WIDGET,
            "operator_contact": CONTACT,
            **overrides,
        }
        return create_app(Settings(**values), store=page_store).asgi_client

    return make


async def get(client: Any, path: str) -> Any:
    _, response = await client.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/html")
    return response


def assert_safe_markup(text: str) -> None:
    assert not INLINE_HANDLER.search(text), INLINE_HANDLER.search(text)
    assert "javascript:" not in text.lower()
    for tag in re.findall(r"<script\b[^>]*>", text):
        assert "src=" in tag, f"inline script: {tag}"
    assert re.findall(r"<script>[^<]", text) == []
    for url in re.findall(r'(?:src|href)="(https?://[^"]+)"', text):
        assert url == WIDGET, f"third-party resource {url}"


def assert_private_page(response: Any) -> None:
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]


async def test_free_claim_page(page_client: Any) -> None:
    response = await get(page_client(), "/claim/free")
    text = response.text
    assert 'data-sitekey="0x4AAAA-site-key"' in text
    assert f'<script src="{WIDGET}" async defer></script>' in text
    assert '<script src="/static/claim.js"></script>' in text
    assert CONTACT in text
    assert f'href="mailto:{CONTACT}"' in text
    assert WARNING in text
    assert '<label for="api-key">' in text
    assert 'id="free-claim-button" type="submit" disabled' in text
    assert 'aria-live="polite"' in text
    assert "one free key per address per utc day" in text.lower()
    assert_safe_markup(text)
    assert_private_page(response)
    csp = response.headers["content-security-policy"]
    assert "script-src 'self' https://widget.example.test;" in csp
    assert "frame-src https://widget.example.test;" in csp


@pytest.mark.parametrize(
    "overrides", [{"human_check_site_key": None}, {"human_check_secret": None}], ids=["no-site-key", "no-secret"]
)
async def test_free_claim_page_without_configuration(page_client: Any, overrides: dict[str, Any]) -> None:
    response = await get(page_client(**overrides), "/claim/free")
    text = response.text
    assert "Free keys are not available here" in text
    assert WIDGET not in text
    assert "data-sitekey" not in text
    assert CONTACT in text
    assert_safe_markup(text)
    assert "frame-src 'none'" in response.headers["content-security-policy"]


async def test_success_page(page_client: Any) -> None:
    response = await get(page_client(), "/claim/success?session_id=cs_test_a1B2c3")
    text = response.text
    assert 'data-session-id="cs_test_a1B2c3"' in text
    assert 'value="cs_test_a1B2c3"' in text
    assert f'data-contact="{CONTACT}"' in text
    assert '<label for="session-id">Checkout session id</label>' in text
    assert '<label for="api-key">' in text
    assert WARNING in text
    assert 'role="status" aria-live="polite"' in text
    assert "reissue" in text
    assert "7 days" in text
    assert WIDGET not in text, "the success page loads no third-party script"
    assert_safe_markup(text)
    assert_private_page(response)
    assert "script-src 'self';" in response.headers["content-security-policy"]


async def test_success_page_escapes_and_refuses_bad_ids(page_client: Any) -> None:
    client = page_client(operator_contact='Ops <ops@example.test> & "billing"')
    response = await get(client, "/claim/success?session_id=%3Cscript%3Ealert(1)%3C/script%3E")
    text = response.text
    assert "<script>alert" not in text
    assert "alert(1)" not in text, "an invalid session id is not echoed at all"
    assert 'data-session-id=""' in text
    assert "holds no valid checkout session id" in text
    assert "Ops &lt;ops@example.test&gt; &amp; &#34;billing&#34;" in text
    assert "mailto:" not in text
    assert_safe_markup(text)


async def test_success_page_without_payments(page_client: Any) -> None:
    text = (await get(page_client(payment_webhook_secrets=()), "/claim/success?session_id=cs_1")).text
    assert "Paid keys are not available here" in text
    assert CONTACT in text
    assert 'id="claim-form"' not in text


async def test_page_assets_are_served(page_client: Any) -> None:
    client = page_client()
    for name, media in [("claim.js", "javascript"), ("claim.css", "text/css")]:
        _, response = await client.get(f"/static/{name}")
        assert response.status_code == 200
        assert media in response.headers["content-type"]
    script = (STATIC / "claim.js").read_text()
    assert "innerHTML" not in script, "results are set as text, never as markup"
    assert '"/v1/claim"' in script
    assert '"/v1/claim/free"' in script
    for callback in ("epsHumanCheckPassed", "epsHumanCheckExpired", "epsHumanCheckFailed"):
        assert f"window.{callback} =" in script


def test_claim_script_parses() -> None:
    node = shutil.which("node")
    if node is None:
        missing_binary("node", "the claim page script is syntax-checked with node --check")
    assert node is not None
    result = subprocess.run([node, "--check", str(STATIC / "claim.js")], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


# --- the page script's behaviour, in node with a small DOM stand-in ---------------------------

HARNESS = r"""
// Runs static/claim.js against a tiny DOM stand-in. argv: script path, scenario JSON.
import { readFileSync } from "node:fs";
const [script, scenarioJson] = process.argv.slice(2);
const scenario = JSON.parse(scenarioJson);
const elements = {};
function el(id, extra = {}) {
  const e = { id, hidden: false, disabled: false, value: "", textContent: "", dataset: {}, listeners: {},
    addEventListener(type, fn) { (this.listeners[type] ||= []).push(fn); }, focus() {}, select() {}, ...extra };
  elements[id] = e; return e;
}
for (const id of ["claim-result", "api-key", "key-plan", "key-project", "key-actor", "copy-key", "copy-status",
  "free-claim-form", "free-claim-button", "check-status", "claim-form", "session-id", "claim-button"]) el(id);
el("key-box", { hidden: true });
Object.assign(elements["claim-form"].dataset, scenario.formData || {});
elements["session-id"].value = (scenario.formData || {}).sessionId || "";
elements["free-claim-button"].disabled = true;
const delays = [], calls = [], resets = [];
globalThis.document = { body: { dataset: { page: scenario.page } }, getElementById: (id) => elements[id] || null,
  execCommand: () => true };
globalThis.window = globalThis;
globalThis.isSecureContext = true;
globalThis.addEventListener = () => {};
globalThis.turnstile = { reset: (w) => resets.push(w) };
globalThis.setTimeout = (fn, ms) => { delays.push(ms / 1000); Promise.resolve().then(fn); };
const replies = scenario.replies.slice();
globalThis.fetch = async (path, init) => {
  calls.push({ path, body: JSON.parse(init.body) });
  const r = replies.shift() || { status: 599, body: {} };
  return { status: r.status, headers: { get: (h) => (r.headers || {})[h] ?? null }, json: async () => r.body };
};
(0, eval)(readFileSync(script, "utf8"));
const tick = async () => { for (let i = 0; i < 200; i++) await new Promise((r) => setImmediate(r)); };
await tick();
for (const step of scenario.steps || []) {
  if (step.call) globalThis[step.call](...(step.args || []));
  if (step.submit) for (const fn of elements[step.submit].listeners.submit || []) fn({ preventDefault() {} });
  await tick();
}
const out = (id) => ({ hidden: elements[id].hidden, disabled: elements[id].disabled, text: elements[id].textContent, value: elements[id].value });
console.log(JSON.stringify({ calls, delays, resets, result: out("claim-result"), keyBox: out("key-box"), key: out("api-key"),
  freeButton: out("free-claim-button"), claimForm: out("claim-form"), freeForm: out("free-claim-form") }));
"""
PENDING = {"status": 409, "body": {"error": {"code": "claim_pending", "message": "being processed"}}}
KEY = {
    "status": 200,
    "body": {"ok": True, "api_key": "eps_K", "plan": "pro", "project_id": "prj_1", "actor_id": "act_1"},
}
FORM = {"sessionId": "cs_1", "contact": CONTACT, "claimWindowDays": "7"}


def run_page_script(tmp_path: Path, scenario: dict[str, Any]) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        missing_binary("node", "the claim page script runs in node against a DOM stand-in")
    assert node is not None
    harness = tmp_path / "harness.mjs"
    harness.write_text(HARNESS)
    result = subprocess.run(
        [node, str(harness), str(STATIC / "claim.js"), json.dumps(scenario)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_success_page_polls_then_shows_the_key_once(tmp_path: Path) -> None:
    replies = [{"status": 404, "body": {"error": {"code": "claim_pending"}}}, PENDING, KEY]
    out = run_page_script(tmp_path, {"page": "claim-success", "formData": FORM, "replies": replies})
    assert [c["body"] for c in out["calls"]] == [{"session_id": "cs_1"}] * 3
    assert out["delays"] == [2, 3]
    assert (out["key"]["value"], out["keyBox"]["hidden"], out["claimForm"]["hidden"]) == ("eps_K", False, True)
    assert "shown only once" in out["result"]["text"]


def test_success_page_reopened_never_shows_a_key(tmp_path: Path) -> None:
    replies = [{"status": 409, "body": {"error": {"code": "already_claimed", "message": "x"}}}]
    out = run_page_script(tmp_path, {"page": "claim-success", "formData": FORM, "replies": replies})
    assert len(out["calls"]) == 1
    assert "already revealed" in out["result"]["text"]
    assert "reissue" in out["result"]["text"]
    assert CONTACT in out["result"]["text"]
    assert (out["key"]["value"], out["keyBox"]["hidden"]) == ("", True)


def test_success_page_gives_up_politely(tmp_path: Path) -> None:
    out = run_page_script(tmp_path, {"page": "claim-success", "formData": FORM, "replies": [PENDING] * 20})
    assert len(out["calls"]) == 8
    assert out["delays"] == [2, 3, 5, 8, 13, 20, 30], "7 tries in the first minute, under the claim limit"
    assert "still being processed" in out["result"]["text"]
    assert CONTACT in out["result"]["text"]


def test_success_page_expired_and_rate_limited(tmp_path: Path) -> None:
    expired = [{"status": 410, "body": {"error": {"code": "claim_expired"}}}]
    out = run_page_script(tmp_path, {"page": "claim-success", "formData": FORM, "replies": expired})
    assert "claim window (7 days)" in out["result"]["text"]
    assert CONTACT in out["result"]["text"]
    limited = {"status": 429, "body": {"error": {"code": "rate_limited"}}, "headers": {"Retry-After": "20"}}
    out = run_page_script(tmp_path, {"page": "claim-success", "formData": FORM, "replies": [limited, KEY]})
    assert out["delays"] == [20], "a 429 waits out its Retry-After"
    assert out["key"]["value"] == "eps_K"


def test_free_page_flow(tmp_path: Path) -> None:
    steps = [
        {"submit": "free-claim-form"},
        {"call": "epsHumanCheckPassed", "args": ["tok-1"]},
        {"submit": "free-claim-form"},
    ]
    out = run_page_script(tmp_path, {"page": "claim-free", "replies": [KEY], "steps": steps})
    assert out["calls"] == [{"path": "/v1/claim/free", "body": {"turnstile_token": "tok-1"}}], (
        "no request before the check"
    )
    assert (out["key"]["value"], out["keyBox"]["hidden"], out["freeForm"]["hidden"]) == ("eps_K", False, True)


def test_free_page_refusals_reset_the_widget(tmp_path: Path) -> None:
    limited = {
        "status": 429,
        "body": {"error": {"code": "rate_limited", "message": "already received its free API key today"}},
    }
    steps = [
        {"call": "epsHumanCheckPassed", "args": ["tok-1"]},
        {"submit": "free-claim-form"},
        {"submit": "free-claim-form"},
    ]
    out = run_page_script(tmp_path, {"page": "claim-free", "replies": [limited], "steps": steps})
    assert len(out["calls"]) == 1, "a used token is not sent again"
    assert out["resets"] == ["#human-check"]
    assert out["freeButton"]["disabled"] is True
    assert out["result"]["text"] == "Complete the human check first."
    failed = {"status": 500, "body": {"error": {"code": "internal_error"}}}
    out = run_page_script(tmp_path, {"page": "claim-free", "replies": [failed], "steps": steps[:2]})
    assert "Nothing was used up" in out["result"]["text"]
    assert out["key"]["value"] == ""
