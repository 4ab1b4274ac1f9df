"""The verification page brings its verdict into view, in a real Chromium at 1280x720.

The form is taller than a laptop screen, so the verdict starts below the fold. Once shown (after
a check opened as ``/verify?receipt_id=…``, and after a manual check) the whole verdict must be
inside the viewport; with ``prefers-reduced-motion: reduce`` it is there at once (no smooth
scroll), and the focus never moves to it (screen readers hear it through ``aria-live``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RedisServer, hash_of
from tests.servers import ServicePool, create_key_cli
from tests.test_verify_page import Page, browser  # noqa: F401  (the module fixture)

pytestmark = pytest.mark.slow

LAPTOP = {"width": 1280, "height": 720}


@pytest.fixture(scope="module")
def receipt_site(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A running service and one real receipt on it."""
    with ServicePool(tmp_path_factory.mktemp("verify-scroll")) as pool:
        service = pool.start(redis_url=redis_server.url)
        key = create_key_cli(redis_server.url, project="verify-scroll", plan="pro")
        created = httpx.post(
            service.base_url + "/v1/receipts",
            headers={"Authorization": f"Bearer {key['api_key']}"},
            json={"input_hash": hash_of("scroll")},
            timeout=10,
        )
        assert created.status_code in (200, 201), created.text
        yield {"base": service.base_url, "receipt_id": created.json()["receipt"]["receipt_id"]}


def geometry(tab: Page) -> dict[str, float]:
    """Where the verdict is: in the viewport (top, bottom), in the document (offset_top), the scroll."""
    box = tab.page.locator("#verdict").evaluate(
        "(v) => { const r = v.getBoundingClientRect();"
        " return { top: r.top, bottom: r.bottom, offset_top: r.top + window.scrollY,"
        " scroll_y: window.scrollY, inner_height: window.innerHeight,"
        " page_height: document.documentElement.scrollHeight }; }"
    )
    return {name: float(value) for name, value in box.items()}


def assert_fully_visible(tab: Page) -> dict[str, float]:
    at = geometry(tab)
    assert at["top"] >= 0, at
    assert at["bottom"] <= at["inner_height"], at
    return at


def assert_started_below_the_fold(at: dict[str, float]) -> None:
    """Without a scroll the verdict would not be (wholly) visible: the test can fail."""
    assert at["page_height"] > at["inner_height"], at
    assert at["offset_top"] + (at["bottom"] - at["top"]) > at["inner_height"], at
    assert at["scroll_y"] > 0, at


def test_verdict_from_the_url_scrolls_into_view(browser: Any, receipt_site: dict[str, Any]) -> None:  # noqa: F811
    from playwright.sync_api import expect

    tab = Page(browser, receipt_site["base"], viewport=LAPTOP)
    tab.open(f"?receipt_id={receipt_site['receipt_id']}")
    verdict, text = tab.verdict()
    assert verdict == "valid", text
    # A smooth scroll takes a moment: wait until the whole verdict is in view (it retries), then measure.
    expect(tab.page.locator("#verdict")).to_be_in_viewport(ratio=1.0)
    assert_started_below_the_fold(assert_fully_visible(tab))
    assert tab.page.evaluate("document.activeElement === document.body"), "the verdict took the focus"
    tab.close()


def test_manual_check_scrolls_at_once_with_reduced_motion(browser: Any, receipt_site: dict[str, Any]) -> None:  # noqa: F811
    tab = Page(browser, receipt_site["base"], viewport=LAPTOP)
    tab.context.close()
    tab.context = browser.new_context(viewport=LAPTOP, reduced_motion="reduce")
    tab.page = tab.context.new_page()
    tab.page.on("pageerror", lambda e: tab.errors.append(str(e)))
    tab.open()
    before = geometry(tab)
    assert before["scroll_y"] == 0
    assert before["bottom"] > before["inner_height"], f"the verdict is in view before any check: {before}"
    verdict, text = tab.paste_and_verify(receipt_site["receipt_id"])
    assert verdict == "valid", text
    # No smooth scroll: by the time the verdict is read, the page has already jumped to it.
    assert_started_below_the_fold(assert_fully_visible(tab))
    assert tab.page.evaluate("document.activeElement.id") == "verify-button", "the focus stays on the button"
    tab.close()


def test_an_error_verdict_is_brought_into_view_too(browser: Any, receipt_site: dict[str, Any]) -> None:  # noqa: F811
    from playwright.sync_api import expect

    tab = Page(browser, receipt_site["base"], viewport=LAPTOP)
    tab.open("?receipt_id=rcpt_01KF0HJ080NOSUCHRECEIPT0000")
    verdict, text = tab.verdict()
    assert verdict == "error", text
    expect(tab.page.locator("#verdict")).to_be_in_viewport(ratio=1.0)
    assert_started_below_the_fold(assert_fully_visible(tab))
    # The browser logs the 404 response itself; that is not a page error.
    tab.errors = [e for e in tab.errors if "404" not in e]
    tab.close()


def test_the_page_does_not_move_under_someone_typing(browser: Any, receipt_site: dict[str, Any]) -> None:  # noqa: F811
    """The receipt read is held until the user has typed into another field: the verdict is
    then shown (and announced) without scrolling, and the focus stays in that field."""
    tab = Page(browser, receipt_site["base"], viewport=LAPTOP)
    held: list[Any] = []
    tab.page.route("**/v1/receipts/*", lambda route: held.append(route))
    tab.open()
    tab.page.fill("#receipt-input", receipt_site["receipt_id"])
    tab.page.click("#verify-button")
    deadline = time.monotonic() + 10
    while not held:  # the page's request, caught by the route (events arrive while playwright waits)
        assert time.monotonic() < deadline, "the page never asked for the receipt"
        tab.page.wait_for_timeout(20)
    tab.page.click("#input-salt")
    tab.page.keyboard.type("00")
    before = geometry(tab)
    held[0].continue_()
    verdict, text = tab.verdict()
    assert verdict in ("valid", "error"), text
    after = geometry(tab)
    assert after["scroll_y"] == before["scroll_y"], (before, after)
    assert after["bottom"] > after["inner_height"], f"the verdict was in view anyway: {after}"
    assert tab.page.evaluate("document.activeElement.id") == "input-salt"
    tab.close()
