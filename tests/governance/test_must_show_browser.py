"""The review screen in a real browser (Playwright driving Debian's chromium) for a held call
whose argument a policy rule says must be shown, mirrored from the real LangGraph server: the
argument is folded, Approve is refused until it is opened, and opening it is what lets the
approval through; without JavaScript it is drawn open and approving works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nitro_assistants.models import Decision, Review
from tests.admin.test_browser import CHROMIUM, browser, shot, static_root
from tests.core.conftest import enqueued
from tests.governance.conftest import reviewer
from tests.governance.test_browser import log_in
from tests.governance.test_must_show_server import PATH, held_on_the_server

__all__ = ["browser", "enqueued", "static_root"]

pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.server,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]

FOLD = f'details[data-nitro-path="{PATH}"]'


def screen(browser: Any, *, javascript: bool = True) -> Iterator[Any]:
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, java_script_enabled=javascript
    )
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


@pytest.fixture
def window(browser: Any, static_root: Path) -> Iterator[Any]:
    yield from screen(browser)


@pytest.fixture
def window_without_script(browser: Any, static_root: Path) -> Iterator[Any]:
    yield from screen(browser, javascript=False)


@pytest.fixture
def review(
    server_settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> Review:
    reviewer("ann")
    return held_on_the_server(django_capture_on_commit_callbacks)


def url(review: Review) -> str:
    return f"/admin/nitro_assistants/review/{review.pk}/review/"


def test_approve_is_refused_until_the_folded_argument_is_opened(
    window: Any, live_server: Any, review: Review
) -> None:
    page = window
    log_in(page, live_server, "ann", url(review))
    page.locator("html[data-nitro-previews=ready]").wait_for(state="attached")
    fold = page.locator(FOLD)
    assert fold.count() == 1
    assert fold.evaluate("details => details.open") is False  # folded again by the script
    assert page.locator("#nitro-must-show").inner_text().count(PATH) == 1
    shot(page, "must-show-folded")

    with page.expect_navigation():
        page.click("input[name=_approve]")
    assert f"Approving needs `{PATH}` shown" in page.locator(".errorlist").first.inner_text()
    assert not Decision.objects.exists()

    page.locator("html[data-nitro-previews=ready]").wait_for(state="attached")
    page.locator(FOLD).locator("summary").click()
    assert page.locator(FOLD).evaluate("details => details.open") is True
    opened = page.locator("input[name=opened]").input_value()
    assert PATH in opened
    with page.expect_navigation():
        page.click("input[name=_approve]")
    decision = Decision.objects.get(review=review)
    assert decision.shown == [PATH]
    assert [item["action"] for item in decision.tool_calls] == ["approve"]


def test_without_javascript_the_argument_is_drawn_open_and_approve_works(
    window_without_script: Any, live_server: Any, review: Review
) -> None:
    page = window_without_script
    log_in(page, live_server, "ann", url(review))
    assert page.locator(FOLD).evaluate("details => details.open") is True
    with page.expect_navigation():
        page.click("input[name=_approve]")
    assert Decision.objects.get(review=review).shown == [PATH]
