"""One table of documents and the verdict and reason each must get (docs/verdicts.md), run by
every surface: the library (``execution_proof.verify``), the command line (``verify --json``)
and the ``/verify`` page in a real Chromium.

The table is tests/data/verdict_table.json, made by tests/verdict_table.py (fixed keys, a small
log, its checkpoint, cosignatures and C2SP tlog-proofs built with the project's own code); the
first test holds the committed file to what the generator makes. Each row names its document,
the pinned material it is checked against (a trust root pinning the log, one without a log, or a
saved key set) and the expected verdict and reason. ERROR is "could not verify": the library
raises ``InvalidInput``, ``verify --json`` prints ``"verdict": "ERROR"`` and exits 2, and the page
shows ``data-verdict="error"`` without a reason. NOT VERIFIED is ``data-verdict="error"`` with
``data-reason`` on the page. The page is given the pinned file as its "Saved key set" and the
document dropped on it, on a page that says the service runs a log: it must check everything
offline and ask for nothing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import execution_proof
from tests import verdict_table
from tests.conftest import REPO
from tests.servers import run_cli, serving
from tests.test_verify_page import Page, browser, drop_file  # noqa: F401  (the module fixture)

TABLE_FILE = verdict_table.OUTPUT
TABLE: dict[str, Any] = json.loads(TABLE_FILE.read_text(encoding="utf-8"))
ROWS: list[dict[str, Any]] = TABLE["rows"]
EXIT = {"VALID": 0, "INVALID": 1, "NOT VERIFIED": 1, "ERROR": 2}
PAGE_VERDICT = {"VALID": "valid", "INVALID": "invalid", "NOT VERIFIED": "error", "ERROR": "error"}
REASONS: dict[str, set[str | None]] = {
    "VALID": {None, "signature_only"},
    "INVALID": {
        "bad_signature",
        "hash_mismatch",
        "bad_chain",
        "receipt_changed",
        "bad_log_proof",
        "bad_checkpoint_signature",
        "bad_timestamp",
    },
    "NOT VERIFIED": {
        "pending",
        "no_log_proof",
        "no_quorum",
        "no_keys",
        "no_key_certificate",
        "chain_unavailable",
        "deleted",
    },
    "ERROR": {None},
}
STATIC = REPO / "execution_proof" / "static"


def by_row(function: Any) -> Any:
    return pytest.mark.parametrize("row", ROWS, ids=[row["name"] for row in ROWS])(function)


# ---------------------------------------------------------------- the table itself


def test_the_committed_table_is_what_the_generator_makes() -> None:
    """Nobody edits the table by hand: change tests/verdict_table.py and run
    ``python -m tests.verdict_table``."""
    assert TABLE_FILE.read_text(encoding="utf-8") == verdict_table.render(verdict_table.build_table())


def test_every_row_expects_a_verdict_and_reason_of_the_closed_lists() -> None:
    for row in ROWS:
        expect = row["expect"]
        assert set(expect) == {"verdict", "reason"}, row["name"]
        assert expect["reason"] in REASONS[expect["verdict"]], row["name"]
        assert row["pin"] in TABLE["pins"], row["name"]
    assert {TABLE["pins"][name]["kind"] for name in TABLE["pins"]} == {"trust_root", "keys"}
    seen = {(row["expect"]["verdict"], row["expect"]["reason"]) for row in ROWS}
    for wanted in (
        ("VALID", None),
        ("ERROR", None),
        ("NOT VERIFIED", "no_log_proof"),
        ("NOT VERIFIED", "pending"),
        ("NOT VERIFIED", "no_quorum"),
        ("INVALID", "bad_signature"),
        ("INVALID", "bad_log_proof"),
        ("INVALID", "bad_checkpoint_signature"),
    ):
        assert wanted in seen, wanted


def test_the_rows_differ_from_the_valid_bundle_only_where_they_say() -> None:
    """The ERROR rows about a bundle's members are the valid bundle with that one change, so
    what makes them unreadable is the change and nothing else."""
    rows = {row["name"]: row["document"] for row in ROWS}
    good = rows["bundle with its log proof"]
    assert rows["bundle: format renamed to forlat"] == {
        ("forlat" if name == "format" else name): value for name, value in good.items()
    }
    assert rows["bundle: format deleted"] == {name: value for name, value in good.items() if name != "format"}
    assert rows["bundle: version 99"] == {**good, "version": 99}
    assert rows["bundle: an unknown member"] == {**good, "note": "hello"}
    assert rows["bundle whose log proof is null"]["log"] == {**good["log"], "proof": None}
    assert rows["bare receipt, log pinned"] == good["receipt"]


# ---------------------------------------------------------------- the library and the command line


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each pin and each row's document, written as a user would have them."""
    folder = tmp_path_factory.mktemp("verdict-table")
    out = {}
    for name, pin in TABLE["pins"].items():
        out[f"pin:{name}"] = folder / f"{name}.json"
        out[f"pin:{name}"].write_text(json.dumps(pin["document"], indent=2) + "\n")
    for number, row in enumerate(ROWS):
        out[row["name"]] = folder / f"document-{number:02d}.json"
        out[row["name"]].write_text(json.dumps(row["document"], indent=2) + "\n")
    return out


def pin_of(row: dict[str, Any], files: dict[str, Path]) -> tuple[str, Path]:
    """The option that pins the row's material (``trust_root`` or ``keys``) and its file."""
    kind = TABLE["pins"][row["pin"]]["kind"]
    return kind, files[f"pin:{row['pin']}"]


@by_row
def test_the_library(row: dict[str, Any], files: dict[str, Path]) -> None:
    kind, pin = pin_of(row, files)
    expect = row["expect"]
    options = {"trust_root": pin} if kind == "trust_root" else {"keys": pin}
    if expect["verdict"] == "ERROR":
        with pytest.raises(execution_proof.InvalidInput):
            execution_proof.verify(files[row["name"]], **options)  # type: ignore[arg-type]
        return
    report = execution_proof.verify(files[row["name"]], **options)  # type: ignore[arg-type]
    assert (report.verdict, getattr(report, "reason", "(no reason)")) == (expect["verdict"], expect["reason"])
    assert report.ok is (expect["verdict"] == "VALID")


@pytest.mark.slow
@by_row
def test_the_command_line(row: dict[str, Any], files: dict[str, Path]) -> None:
    kind, pin = pin_of(row, files)
    expect = row["expect"]
    option = "--trust-root" if kind == "trust_root" else "--keys"
    done = run_cli(
        "verify", str(files[row["name"]]), option, str(pin), "--json", entry=(sys.executable, "-m", "execution_proof")
    )
    assert done.returncode == EXIT[expect["verdict"]], done.stdout + done.stderr
    document = json.loads(done.stdout)  # exactly one JSON document, whatever happened
    assert document["verdict"] == expect["verdict"], done.stdout
    if expect["verdict"] == "ERROR":
        assert document["error"]["kind"] == "InvalidInput", done.stdout
    else:
        assert document.get("reason", "(no reason)") == expect["reason"], done.stdout
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------- the page


class _PageOnly(BaseHTTPRequestHandler):
    """/verify (as the service serves it, saying it runs a log) and its static files; any other
    path answers 404 and is recorded, so a test can tell that the page asked for nothing."""

    asked: list[str]

    def do_GET(self) -> None:
        from execution_proof.web.pages import VERIFY_PAGE_HEADERS

        path = self.path.split("?", 1)[0]
        name = path.removeprefix("/static/")
        if path == "/verify":
            page = (STATIC / "verify.html").read_text(encoding="utf-8").replace("<body", '<body data-log="on"', 1)
            self._send(200, page.encode(), "text/html; charset=utf-8", VERIFY_PAGE_HEADERS)
        elif path.startswith("/static/") and "/" not in name and (STATIC / name).is_file():
            kind = {"js": "text/javascript", "css": "text/css"}.get(name.rsplit(".", 1)[-1], "application/octet-stream")
            self._send(200, (STATIC / name).read_bytes(), kind, {})
        else:
            self.asked.append(self.path)
            body = json.dumps({"ok": False, "error": {"code": "not_found", "message": "not here"}}).encode()
            self._send(404, body, "application/json", {})

    def _send(self, status: int, body: bytes, kind: str, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def page_site() -> Iterator[tuple[str, list[str]]]:
    asked: list[str] = []
    handler = type("Handler", (_PageOnly,), {"asked": asked})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    with serving(server) as url:
        yield url, asked


@pytest.mark.slow
@by_row
def test_the_page(
    row: dict[str, Any],
    files: dict[str, Path],
    browser: Any,  # noqa: F811
    page_site: tuple[str, list[str]],
) -> None:
    from playwright.sync_api import expect

    base, asked = page_site
    asked.clear()
    _, pin = pin_of(row, files)
    text = files[row["name"]].read_text()
    tab = Page(browser, base)
    try:
        tab.open()
        tab.page.set_input_files("#keys-file", str(pin))
        drop_file(tab, "#bundle-drop", text, "document.json")
        expect(tab.page.locator("#receipt-input")).to_have_value(text)
        tab.page.click("#verify-button")
        verdict, shown = tab.verdict()
        wanted = row["expect"]
        reason = tab.page.locator("#verdict").get_attribute("data-reason")
        assert (verdict, reason) == (PAGE_VERDICT[wanted["verdict"]], wanted["reason"]), shown
        if wanted["verdict"] == "ERROR":
            assert shown.startswith("Could not verify"), shown
        elif wanted["verdict"] == "NOT VERIFIED":
            assert shown.startswith(f"Not verified ({wanted['reason']})"), shown
        assert tab.api_requests() == [] and asked == [], "a dropped document with pinned material is checked offline"
    finally:
        tab.close()
