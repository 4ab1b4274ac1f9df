"""The verification page's witness checks, in a real Chromium.

First, the page's own module (static/verify-log.js) against the Python it mirrors: cosignatures
made by transparency/cosignature.py (valid, forged, future-dated, by unknown keys, repeated,
beyond 2^63 - 1), checkpoints with a good, forged or missing log signature, and policies with
k-of-n and nested groups, each pair run through ``policy.check_quorum`` and the page's
``checkQuorum``; malformed policies must fail with the same message in both.

Then the whole page: a real ``service.py serve`` (embedded store, its own integrator) whose
``LOG_WITNESS_POLICY`` names two real ``service.py witness serve`` processes with a quorum of
2. The page shows both cosignatures and "quorum met"; a pasted policy whose quorum needs a
third witness shows "NOT met"; a bundle with a forged cosignature shows which one fails.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import orjson
import pytest

from execution_proof.transparency import cosignature, note, policy
from execution_proof.transparency.cosignature import Cosigner
from tests.conftest import REPO, hash_of
from tests.servers import ServicePool, run_cli, serving
from tests.test_verify_page import Page, browser, drop_file  # noqa: F401  (the module fixture)
from tests.test_witness import start_witness, stop_witness

pytestmark = pytest.mark.slow

ORIGIN = "agree.example/log"
NOW = 1_790_000_000
NAMES = ("w1", "w2", "w3", "w4")
SKEW = policy.COSIGNATURE_SKEW_S

# Runs in the page: every policy parsed, every (policy, note) pair checked, every malformed
# policy's error; BigInt times come back as decimal strings.
HARNESS = """
async ({ policies, notes, now, malformed }) => {
  const m = await import('/verify-log.js');
  const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  const out = { policies: {}, results: {}, malformed: [] };
  const parsed = {};
  for (const [name, text] of Object.entries(policies)) {
    const p = await m.parsePolicy(text);
    parsed[name] = p;
    out.policies[name] = {
      logs: p.logs.map((l) => [l.key.name, hex(l.key.keyId), l.url]),
      witnesses: [...p.witnesses.values()].map((w) => [w.name, w.key.name, hex(w.key.keyId), w.url]),
      groups: [...p.groups].map(([n, g]) => [n, g.threshold, g.members]),
      quorum: p.quorum,
    };
  }
  for (const [pn, p] of Object.entries(parsed)) {
    for (const [nn, text] of Object.entries(notes)) {
      const r = await m.checkQuorum(text, p, now);
      out.results[pn + '|' + nn] = {
        ok: r.ok,
        reason: r.reason,
        cosigned: Object.fromEntries([...r.cosigned].map(([k, v]) => [k, String(v)])),
        lines: r.lines.map((l) => [l.keyName, l.witness, l.time === null ? null : String(l.time), l.status]),
      };
    }
  }
  for (const text of malformed) {
    try {
      await m.parsePolicy(text);
      out.malformed.push(null);
    } catch (e) {
      out.malformed.push([e.constructor.name, e.message]);
    }
  }
  return out;
}
"""


# ---------------------------------------------------------------- the module, against Python


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def static_site() -> Iterator[str]:
    """static/ over http://127.0.0.1 (a secure context, so WebCrypto has Ed25519)."""
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(REPO / "execution_proof" / "static"))
    )
    with serving(server) as url:
        yield url


def seeded(label: str) -> bytes:
    """A fixed Ed25519 seed for the corpus's keys."""
    return hashlib.sha256(f"page witnesses corpus: {label}".encode()).digest()


def forge(line: str) -> str:
    """The signature line with the last byte of its signature flipped."""
    name, blob = line.rstrip("\n").rsplit(" ", 1)
    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1
    return f"{name} {base64.b64encode(bytes(raw)).decode()}\n"


def with_blob(cosigner: Cosigner, blob: bytes) -> str:
    return f"\u2014 {cosigner.name} {base64.b64encode(cosigner.key.key_id + blob).decode()}\n"


@pytest.fixture(scope="module")
def corpus() -> dict[str, Any]:
    # Fixed keys: a malformed case below upper-cases a key id, which changes nothing for an id
    # of digits only (a random key made one about once in 40 runs).
    log = note.Signer(ORIGIN, seeded("log"))
    other_log = note.Signer(ORIGIN, seeded("other log"))
    w = {name: Cosigner(f"witness.example/{name}", seeded(name)) for name in NAMES}
    stranger = Cosigner("witness.example/stranger", seeded("stranger"))
    imposter = Cosigner("witness.example/w1", seeded("imposter"))  # w1's name, another key
    text = note.Checkpoint(ORIGIN, 1234, hashlib.sha256(b"root").digest()).text()
    other_text = note.Checkpoint(ORIGIN, 1235, hashlib.sha256(b"root 2").digest()).text()
    signed = log.signature_line(text.encode())

    def of(*lines: str) -> str:
        return text + "\n" + "".join(lines)

    notes = {
        "two": of(signed, w["w1"].cosign(text, NOW - 100), w["w2"].cosign(text, NOW - 50)),
        "forged_w2": of(signed, w["w1"].cosign(text, NOW - 100), forge(w["w2"].cosign(text, NOW - 50))),
        "future_w3": of(
            signed, w["w1"].cosign(text, NOW - 100), w["w3"].cosign(text, NOW + SKEW + 1), w["w2"].cosign(text, NOW)
        ),
        # A witness's clock a little ahead (up to LOG_COSIGNATURE_SKEW_S) still counts.
        "ahead_within_skew": of(signed, w["w1"].cosign(text, NOW + SKEW), w["w2"].cosign(text, NOW + 120)),
        "unknown_keys": of(
            signed, stranger.cosign(text, NOW - 1), imposter.cosign(text, NOW - 1), w["w2"].cosign(text, 7)
        ),
        "other_checkpoint": of(signed, w["w1"].cosign(text, NOW - 9), w["w2"].cosign(other_text, NOW - 9)),
        "repeated_future_last": of(signed, w["w1"].cosign(text, NOW - 10), w["w1"].cosign(text, NOW + SKEW + 10)),
        "repeated_forged_last": of(signed, w["w1"].cosign(text, NOW - 10), forge(w["w1"].cosign(text, NOW - 5))),
        "beyond_2_63": of(signed, w["w1"].cosign(text, NOW - 1), w["w2"].cosign(text, 2**63)),
        "short_blob": of(signed, w["w1"].cosign(text, NOW - 1), with_blob(w["w2"], bytes(10))),
        "all_four": of(signed, *(w[name].cosign(text, NOW - 3) for name in NAMES)),
        "cosignatures_first": of(w["w3"].cosign(text, NOW - 3), w["w4"].cosign(text, NOW - 3), signed),
        "no_log_signature": of(w["w1"].cosign(text, NOW - 3), w["w2"].cosign(text, NOW - 3)),
        "forged_log_signature": of(forge(signed), w["w1"].cosign(text, NOW - 3), w["w2"].cosign(text, NOW - 3)),
        "other_log_also": of(other_log.signature_line(text.encode()), signed, w["w1"].cosign(text, NOW - 3)),
        "no_cosignatures": of(signed),
        "not_a_note": "agree.example/log\n1234\n",
        "bad_base64": of(signed, "\u2014 witness.example/w1 !!!!\n"),
        "tab": text.replace("\n", "\t", 1) + "\n" + signed,
    }

    def witnesses(*names: str, alias: dict[str, str] | None = None) -> list[str]:
        return [f"witness {(alias or {}).get(n, n)} {w[n].key.encode()} https://{n}.example/" for n in names]

    log_line = f"log {log.verifier.encode()} https://agree.example/"
    policies = {
        "two_of_three": "\n".join([log_line, *witnesses("w1", "w2", "w3"), "group g 2 w1 w2 w3", "quorum g"]),
        "all_three": "\n".join([log_line, *witnesses("w1", "w2", "w3"), "group all3 all w1 w2 w3", "quorum all3"]),
        "single": "\n".join([log_line, *witnesses("w1"), "quorum w1"]) + "\n",
        "none": f"{log_line}\nquorum none\n",
        "nested": "\n".join(
            [log_line, *witnesses(*NAMES), "group a any w1 w2", "group b all w3 w4", "group top all a b", "quorum top"]
        ),
        "nested_k": "\n".join(
            [log_line, *witnesses(*NAMES), "group a 2 w1 w2", "group b 1 w3 w4", "group top any a b", "quorum top"]
        ),
        "aliases": "\n".join(
            [
                "# a comment, then a blank line",
                "",
                f"  {log_line}\t",
                *witnesses("w1", "w2", alias={"w1": "alpha", "w2": "beta"}),
                "\tgroup\tk 2   alpha beta  ",
                "quorum k",
            ]
        ),
        "no_log": "\n".join([*witnesses("w1", "w2"), "group g any w1 w2", "quorum g"]),
        "other_log": "\n".join([f"log {other_log.verifier.encode()}", *witnesses("w1"), "quorum w1"]),
        # Two witnesses whose keys share a name: one's cosignature must not count for the other.
        "same_key_names": "\n".join(
            [log_line, f"witness wa {w['w1'].key.encode()}", f"witness wb {imposter.key.encode()}", "quorum wb"]
        ),
    }
    key = w["w1"].key.encode()
    name, kid, data = key.split("+", 2)  # base64 may hold "+" too
    assert kid.upper() != kid, "the upper-cased key id below must differ from the key's"
    malformed = [
        "",
        "# only a comment\n",
        "quorum none\nquorum none\n",
        "quorum w1\n",
        "quorum\n",
        "bogus line\nquorum none\n",
        "quorum none\r\n",
        f"log {log.verifier.encode()} a b\nquorum none\n",
        f"log {key}\nquorum none\n",
        f"witness w1 {log.verifier.encode()}\nquorum w1\n",
        f"witness w1 {name}+00000000+{data}\nquorum w1\n",
        f"witness w1 {name}+{kid.upper()}+{data}\nquorum w1\n",
        f"witness w1 {name}+{kid}+{data[:-2]}\nquorum w1\n",
        f"witness w1 {name}+{kid}\nquorum w1\n",
        f"witness w1 +{kid}+{data}\nquorum w1\n",
        f"witness w1 {key} url extra\nquorum w1\n",
        f"witness w1 {key}\nwitness w2 {key}\nquorum w1\n",
        f"witness none {key}\nquorum none\n",
        f"witness w1 {key}\nwitness w1 {w['w2'].key.encode()}\nquorum w1\n",
        f"witness it's {key}\nwitness it's {w['w2'].key.encode()}\nquorum none\n",
        f"witness w1 {key}\ngroup g 1 w1 w1\nquorum g\n",
        f"witness w1 {key}\ngroup g 1 w2\nquorum g\n",
        f"witness w1 {key}\ngroup g 1 none\nquorum g\n",
        f"witness w1 {key}\ngroup g 0 w1\nquorum g\n",
        f"witness w1 {key}\ngroup g 2 w1\nquorum g\n",
        f"witness w1 {key}\ngroup g 01 w1\nquorum g\n",
        f"witness w1 {key}\ngroup g some w1\nquorum g\n",
        f"witness w1 {key}\ngroup w1 any w1\nquorum w1\n",
        f"witness w1 {key}\ngroup g any\nquorum w1\n",
        f"witness w1 {key}\n" + "".join(f"group g{n} any w1\n" for n in range(2)) + "quorum w1\n",
        # One witness in two groups would count twice towards a quorum (tlog-policy: each
        # name is a member at most once).
        f"witness w1 {key}\nwitness w2 {w['w2'].key.encode()}\ngroup a any w1\ngroup b any w1 w2\n"
        "group top 2 a b\nquorum top\n",
        f"witness w1 {key}\ngroup a any w1\ngroup b any a\ngroup c any a\nquorum c\n",
        f"witness w1 {key}\nquorum w1\ngroup g any w1\nquorum g\n",
        # Only spaces and tabs separate words; DEL is a control character; thresholds are
        # ASCII digits (each once crashed parse_policy or was accepted).
        "\u00a0\nquorum none\n",
        f"witness\u00a0w1 {key}\nquorum w1\n",
        "quorum none\u007f\n",
        f"witness w1 {key}\ngroup g \u00b2 w1\nquorum g\n",
        f"witness w1 {key}\ngroup g \u0661 w1\nquorum g\n",
    ]
    return {"notes": notes, "policies": policies, "malformed": malformed, "w": w, "log": log}


@pytest.fixture(scope="module")
def agreement(browser: Any, static_site: str, corpus: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(static_site + "/")
        args = {
            "policies": corpus["policies"],
            "notes": corpus["notes"],
            "now": str(NOW),
            "malformed": corpus["malformed"],
        }
        result: dict[str, Any] = page.evaluate(HARNESS, args)
    finally:
        context.close()
    return result


def test_the_page_parses_every_policy_as_python_does(agreement: dict[str, Any], corpus: dict[str, Any]) -> None:
    for name, text in corpus["policies"].items():
        expected = policy.parse_policy(text)
        got = agreement["policies"][name]
        assert got["logs"] == [[k.name, k.key_id.hex(), url] for k, url in expected.logs], name
        assert got["witnesses"] == [
            [w.name, w.key.name, w.key.key_id.hex(), w.url] for w in expected.witnesses.values()
        ], name
        assert got["groups"] == [[n, t, m] for n, (t, m) in expected.groups.items()], name
        assert got["quorum"] == expected.quorum, name


def test_a_malformed_policy_fails_with_pythons_message(agreement: dict[str, Any], corpus: dict[str, Any]) -> None:
    for text, got in zip(corpus["malformed"], agreement["malformed"], strict=True):
        with pytest.raises(policy.PolicyError) as raised:
            policy.parse_policy(text)
        assert got == ["PolicyError", str(raised.value)], text


def test_the_page_checks_every_quorum_as_python_does(agreement: dict[str, Any], corpus: dict[str, Any]) -> None:
    outcomes = set()
    for policy_name, text in corpus["policies"].items():
        parsed = policy.parse_policy(text)
        for note_name, note_text in corpus["notes"].items():
            expected = policy.check_quorum(note_text, parsed, NOW)
            got = agreement["results"][f"{policy_name}|{note_name}"]
            where = f"{policy_name} on {note_name}"
            assert got["ok"] == expected.ok, where
            assert got["reason"] == expected.reason, where
            assert got["cosigned"] == {k: str(v) for k, v in expected.cosigned.items()}, where
            outcomes.add((expected.ok, bool(expected.cosigned)))
    # The corpus is not all one answer: met and not met, with and without counted cosignatures.
    assert outcomes == {(True, True), (True, False), (False, True), (False, False)}


def test_a_cosignature_counts_only_for_the_witness_whose_key_made_it(agreement: dict[str, Any]) -> None:
    """wa and wb use keys of the same name (witness.example/w1): wa's cosignature does not
    meet a quorum of wb, and the imposter key's does (in Python and on the page)."""
    results = {
        key.split("|")[1]: value for key, value in agreement["results"].items() if key.startswith("same_key_names|")
    }
    assert not results["two"]["ok"] and results["two"]["cosigned"] == {"wa": str(NOW - 100)}
    assert results["unknown_keys"]["ok"] and results["unknown_keys"]["cosigned"] == {"wb": str(NOW - 1)}


def test_the_expected_answers_on_the_two_of_three_policy(agreement: dict[str, Any]) -> None:
    """Spot checks that do not lean on Python: what each kind of cosignature must come to."""
    results = {
        key.split("|")[1]: value for key, value in agreement["results"].items() if key.startswith("two_of_three|")
    }
    assert results["two"]["ok"] and set(results["two"]["cosigned"]) == {"w1", "w2"}
    assert results["two"]["cosigned"]["w1"] == str(NOW - 100)
    assert not results["forged_w2"]["ok"] and set(results["forged_w2"]["cosigned"]) == {"w1"}
    assert results["future_w3"]["ok"] and set(results["future_w3"]["cosigned"]) == {"w1", "w2"}
    assert results["future_w3"]["reason"] == "the quorum is met (cosigned by w1, w2)"
    assert results["ahead_within_skew"]["ok"] and results["ahead_within_skew"]["cosigned"] == {
        "w1": str(NOW + SKEW),
        "w2": str(NOW + 120),
    }
    assert not results["unknown_keys"]["ok"] and set(results["unknown_keys"]["cosigned"]) == {"w2"}
    assert not results["other_checkpoint"]["ok"]
    assert not results["repeated_future_last"]["ok"]
    assert "dated in the future, not counted: w1" in results["repeated_future_last"]["reason"]
    assert results["no_log_signature"]["reason"].startswith("no log of the policy signed the checkpoint")
    assert "does not verify" in results["forged_log_signature"]["reason"]

    def statuses(name: str) -> list[str]:
        return [line[3] for line in results[name]["lines"]]

    assert statuses("two") == ["log", "valid", "valid"]
    assert statuses("forged_w2") == ["log", "valid", "invalid"]
    assert statuses("future_w3") == ["log", "valid", "future", "valid"]
    assert statuses("unknown_keys") == ["log", "unknown", "unknown", "valid"]
    assert statuses("repeated_future_last") == ["log", "superseded", "future"]
    assert statuses("repeated_forged_last") == ["log", "valid", "invalid"]
    assert statuses("beyond_2_63") == ["log", "valid", "invalid"]
    assert results["beyond_2_63"]["lines"][2][2] == str(2**63)
    assert statuses("short_blob") == ["log", "valid", "invalid"]
    assert results["two"]["lines"][1][:2] == ["witness.example/w1", "w1"]


# ---------------------------------------------------------------- the page, end to end

PAGE_ORIGIN = "page.example/log"


@pytest.fixture(scope="module")
def witnessed_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """An embedded-store service whose log sends each checkpoint to two witness processes."""
    folder = tmp_path_factory.mktemp("page-witnesses")
    signer = note.Signer.generate(PAGE_ORIGIN)
    cosigners: dict[str, tuple[Cosigner, str]] = {}
    processes = []
    try:
        for name in ("w1", "w2"):
            cosigner = Cosigner.generate(f"witness.example/{name}")
            key_file = folder / f"{name}.key"
            key_file.write_text(cosigner.encode() + "\n")
            key_file.chmod(0o600)  # --key-file is file:, which refuses a key others may read
            process, base = start_witness(key_file, folder / f"{name}.state", {PAGE_ORIGIN: signer.verifier})
            processes.append(process)
            cosigners[name] = (cosigner, base)
        lines = [f"log {signer.verifier.encode()}"]
        lines += [f"witness {name} {c.key.encode()} {base}" for name, (c, base) in cosigners.items()]
        text = "\n".join([*lines, "group both 2 w1 w2", "quorum both"]) + "\n"
        (folder / "policy.txt").write_text(text)
        third = Cosigner.generate("witness.example/w3")
        needs_three = "\n".join([*lines, f"witness w3 {third.key.encode()}", "group all3 all w1 w2 w3", "quorum all3"])
        env = {
            "LOG_SIGNING_KEY": signer.encode(),
            "LOG_ORIGIN": PAGE_ORIGIN,
            "LOG_WITNESS_POLICY": str(folder / "policy.txt"),
            # Local witnesses answer in milliseconds; the room is for a loaded machine.
            "LOG_WITNESS_TIMEOUT_MS": "10000",
        }
        with ServicePool(folder) as pool:
            service = pool.start(redis_url=None, receipt_root=None, env=env)
            demo_key = re.search(r"eps_[A-Za-z0-9_-]{43}", service.stdout() + service.stderr())
            assert demo_key is not None, "the embedded server prints a demo key"
            yield {
                "base": service.base_url,
                "api_key": demo_key.group(0),
                "policy": policy.parse_policy(text),
                "needs_three": needs_three,
            }
    finally:
        for process in processes:
            stop_witness(process)


def create_logged(site: dict[str, Any], label: str) -> dict[str, Any]:
    """A receipt whose proof's checkpoint carries both cosignatures (checked in Python first)."""
    headers = {"Authorization": f"Bearer {site['api_key']}", "Prefer": "wait=10"}
    created = httpx.post(
        site["base"] + "/v1/receipts", headers=headers, json={"input_hash": hash_of(label)}, timeout=30
    )
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    assert "proof" in body["log"], f"no checkpoint covered the receipt within 10 s: {body['log']}"
    return body


def cosignature_times(site: dict[str, Any], receipt_id: str) -> dict[str, int]:
    proof = httpx.get(f"{site['base']}/v1/receipts/{receipt_id}/log-proof", timeout=10)
    assert proof.status_code == 200, proof.text
    checked = policy.check_quorum(note.parse_tlog_proof(proof.text).checkpoint, site["policy"], 2**40)
    assert checked.ok, checked.reason
    assert set(checked.cosigned) == {"w1", "w2"}
    return checked.cosigned


def utc(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def cosignature_rows(tab: Page) -> dict[str, tuple[str, str]]:
    rows = tab.page.locator("#verdict ul.cosignatures li[data-witness]")
    return {
        str(rows.nth(i).get_attribute("data-witness")): (
            str(rows.nth(i).get_attribute("data-status")),
            rows.nth(i).inner_text(),
        )
        for i in range(rows.count())
    }


def test_the_page_shows_both_cosignatures_and_the_quorum_met(browser: Any, witnessed_site: dict[str, Any]) -> None:  # noqa: F811
    from playwright.sync_api import expect

    body = create_logged(witnessed_site, "page-quorum")
    receipt_id = body["receipt"]["receipt_id"]
    times = cosignature_times(witnessed_site, receipt_id)
    tab = Page(browser, witnessed_site["base"])
    try:
        tab.open(f"?receipt_id={receipt_id}")
        expect(tab.page.locator("#policy-input")).to_be_visible()  # the service runs a log
        verdict, text = tab.verdict()
        assert verdict == "valid", text
        assert tab.checks()["log"] is True and tab.checks()["log_quorum"] is True
        rows = cosignature_rows(tab)
        assert set(rows) == {"w1", "w2"}
        for name, at in times.items():
            status, row = rows[name]
            assert status == "valid"
            assert row == f"{name} (witness.example/{name}), cosigned {utc(at)}: verifies, counted."
        assert (
            "Witness quorum met: 2 counted cosignatures (w1, w2) meet the policy's quorum, group both: 2 of w1, w2."
            in text
        )
        assert "Policy: the one this service publishes (GET /v1/log)" in text
        assert (
            "As execution-proof verify --trust-root (or --log-policy) says it: the quorum is met (cosigned by w1, w2)."
            in text
        )
        assert "independent witnesses saw this checkpoint consistent with every one they saw before" in text
        assert "What it does not prove" in text
        assert ("GET", "/v1/log") in tab.api_requests()

        # The same receipt against a pasted policy that needs a third witness: nothing is
        # wrong, but the quorum is not met (NOT VERIFIED, shown as "error" with its reason).
        tab.page.fill("#policy-input", witnessed_site["needs_three"])
        tab.page.click("#verify-button")
        verdict, text = tab.verdict()
        assert (verdict, tab.reason()) == ("error", "no_quorum"), text
        assert tab.checks()["log"] is True and tab.checks()["log_quorum"] is False
        assert {name: status for name, (status, _) in cosignature_rows(tab).items()} == {"w1": "valid", "w2": "valid"}
        assert (
            "Witness quorum NOT met: 2 counted cosignatures (w1, w2) do not meet the policy's quorum, "
            "group all3: 3 of w1, w2, w3." in text
        )
        assert "Policy: the one you pasted on this page (the policy this service publishes was not used)." in text
        assert "the quorum 'all3' is NOT met (valid cosignatures: w1, w2)" in text

        # A pasted policy that does not parse is an error before anything is checked.
        tab.page.fill("#policy-input", "quorum nobody\n")
        tab.page.click("#verify-button")
        verdict, text = tab.verdict()
        assert verdict == "error", text
        assert (
            "The pasted witness policy is not a C2SP tlog-policy: line 1: the quorum names nothing defined above."
            in text
        )
    finally:
        tab.close()


def test_a_bundle_with_a_forged_cosignature_and_its_time_stamps(browser: Any, witnessed_site: dict[str, Any]) -> None:  # noqa: F811
    body = create_logged(witnessed_site, "page-bundle")
    receipt_id = body["receipt"]["receipt_id"]
    bundle = httpx.get(f"{witnessed_site['base']}/v1/receipts/{receipt_id}/bundle", timeout=10).json()
    assert policy.check_quorum(
        note.parse_tlog_proof(bundle["log"]["proof"]).checkpoint, witnessed_site["policy"], 2**40
    ).ok
    # The page counts time-stamps and reads none of them: any two entries will do.
    bundle["timestamps"] = [{"tsa": "https://tsa.example/", "response_base64": "MAA="}] * 2
    tab = Page(browser, witnessed_site["base"])
    try:
        tab.open()
        verdict, text = tab.paste_and_verify(orjson.dumps(bundle).decode())
        assert verdict == "valid", text
        assert tab.checks()["log_quorum"] is True
        assert (
            "2 RFC 3161 time-stamps: check them with execution-proof verify --trust-root FILE (its TSA roots)." in text
        )

        proof = bundle["log"]["proof"]
        w2_line = next(line for line in proof.split("\n") if line.startswith("\u2014 witness.example/w2 "))
        forged = dict(bundle, log=dict(bundle["log"], proof=proof.replace(w2_line + "\n", forge(w2_line))))
        verdict, text = tab.paste_and_verify(orjson.dumps(forged).decode())
        # A cosignature that does not verify is not counted: below the quorum, not evidence.
        assert (verdict, tab.reason()) == ("error", "no_quorum"), text
        assert tab.checks()["log"] is True, "the log's own signature is untouched"
        assert tab.checks()["log_quorum"] is False
        rows = cosignature_rows(tab)
        assert rows["w1"][0] == "valid" and rows["w2"][0] == "invalid"
        assert "does NOT verify (forged, damaged or made for another checkpoint): not counted." in rows["w2"][1]
        assert "Witness quorum NOT met: 1 counted cosignature (w1) does not meet the policy's quorum" in text
    finally:
        tab.close()


def test_a_trust_root_pins_the_log_by_id_offline_for_documents(
    browser: Any,  # noqa: F811
    witnessed_site: dict[str, Any],
    tmp_path: Any,
) -> None:
    """The trust root `execution-proof trust-root` writes, given as the "Saved key set": a
    receipt id is checked with its log proof from the service (and no key or log request);
    the same receipt pasted alone is NOT VERIFIED no_log_proof with no request at all, and its
    bundle is valid with no request at all."""
    from playwright.sync_api import expect

    path = tmp_path / "trust-root.json"
    made = run_cli("trust-root", "--base-url", witnessed_site["base"], "--out", str(path))
    assert made.returncode == 0, made.stderr
    body = create_logged(witnessed_site, "page-trust-root")
    receipt = body["receipt"]
    bundle = httpx.get(f"{witnessed_site['base']}/v1/receipts/{receipt['receipt_id']}/bundle", timeout=10).json()
    tab = Page(browser, witnessed_site["base"])
    try:
        tab.open()
        tab.page.set_input_files("#keys-file", str(path))
        expect(tab.page.locator("#keys-status")).to_contain_text("and the log page.example/log with its witness policy")
        tab.requests.clear()
        verdict, text = tab.paste_and_verify(receipt["receipt_id"])
        assert (verdict, tab.reason()) == ("valid", None), text
        assert tab.checks()["log"] is True and tab.checks()["log_quorum"] is True
        assert 'the trust root "trust-root.json"' in text
        assert tab.api_requests() == [
            ("GET", f"/v1/receipts/{receipt['receipt_id']}"),
            # The receipt's key with its certificate, judged against the pinned roots.
            ("GET", f"/v1/public-key?kid={receipt['sig_kid']}"),
            ("GET", f"/v1/receipts/{receipt['receipt_id']}/log-proof"),
        ]

        tab.requests.clear()
        verdict, text = tab.paste_and_verify(orjson.dumps(receipt).decode())
        assert (verdict, tab.reason()) == ("error", "no_log_proof"), text
        # Offline, a bare receipt carries no key certificate: its key cannot be judged either.
        assert tab.checks()["log"] is False and tab.checks()["signature"] is False
        assert "Not verified (no_log_proof)" in text and "execution-proof bundle RECEIPT_ID" in text

        tab.page.fill("#receipt-input", "")
        drop_file(tab, "#bundle-drop", orjson.dumps(bundle).decode(), "bundle.json")
        tab.wait_for_loaded_document()
        tab.page.click("#verify-button")
        verdict, text = tab.verdict()
        assert (verdict, tab.reason()) == ("valid", None), text
        assert tab.checks()["log"] is True and tab.checks()["log_quorum"] is True
        assert tab.api_requests() == [], "a pasted or dropped document is checked offline against the trust root"
    finally:
        tab.close()


def test_the_published_witnesses_are_the_policys(witnessed_site: dict[str, Any]) -> None:
    """What the page reads from GET /v1/log: the policy text and its witnesses."""
    info = httpx.get(witnessed_site["base"] + "/v1/log", timeout=10).json()
    assert policy.parse_policy(info["policy"]).witnesses.keys() == {"w1", "w2"}
    assert [w["name"] for w in info["witnesses"]] == ["w1", "w2"]
    assert all(cosignature.CosignerKey.parse(w["vkey"]) for w in info["witnesses"])
