"""The inbox in a real browser (Playwright driving Debian's chromium): two reviewers in two
browser contexts see each other's claims appear without a reload, take a review over, go to the
next review, watch a decision's outcome arrive, and see the pending count, live. Screenshots of
the queue and of a claimed review go to docs/screenshots."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nitro_assistants import services
from nitro_assistants.models import Claim, Event, Review, Thread
from nitro_assistants.services.mirror import mirror_pending
from tests.admin.conftest import VIEW_PERMISSIONS, _staff, make_reply_review, make_tool_review
from tests.admin.test_browser import CHROMIUM, browser, static_root  # noqa: F401 - fixtures
from tests.admin.test_claims import pause
from tests.factories import ThreadFactory

playwright_api = pytest.importorskip("playwright.sync_api")

DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
QUEUE = "/admin/nitro_assistants/review/"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture(autouse=True)
def fast_polls(settings: Any) -> None:
    # The change token in Redis, as a site with a shared cache runs it: every change the
    # browsers wait for below reaches them through it (the other browser tests poll the
    # fallback, the database).
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "LIVE_POLL_SECONDS": 0.5,
        "LIVE_CACHE": "live",
    }


@pytest.fixture
def jane(django_user_model: Any) -> Any:
    user = _staff(django_user_model, "jane", [*VIEW_PERMISSIONS, "decide_review"])
    user.first_name, user.last_name = "Jane", "Doe"
    user.save()
    return user


@pytest.fixture
def sam(django_user_model: Any) -> Any:
    user = _staff(django_user_model, "sam", [*VIEW_PERMISSIONS, "decide_review"])
    user.first_name, user.last_name = "Sam", "Lee"
    user.save()
    return user


@pytest.fixture
def login(browser: Any, live_server: Any, static_root: Path) -> Iterator[Any]:  # noqa: F811
    contexts: list[Any] = []
    errors: list[str] = []

    def open_as(user: Any) -> Any:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{live_server.url}/admin/login/?next={QUEUE}")
        page.fill("#id_username", user.username)
        page.fill("#id_password", "pw")
        page.click("input[type=submit]")
        page.wait_for_url(f"**{QUEUE}")
        return page

    yield open_as
    for context in contexts:
        context.close()
    assert errors == []


def claim_cell(page: Any, review: Review) -> Any:
    return page.locator(f'.nitro-claim[data-review="{review.pk}"]')


def test_two_reviewers_see_each_others_claims_live_and_take_over(
    login: Any, live_server: Any, jane: Any, sam: Any
) -> None:
    first = make_tool_review(ask="Can I move my appointment to Tuesday?")
    make_reply_review("Your parcel ships on Friday.")
    jane_page, sam_page = login(jane), login(sam)
    assert claim_cell(sam_page, first).inner_text() == "—"

    jane_page.goto(f"{live_server.url}{QUEUE}{first.pk}/review/")
    jane_page.wait_for_selector("#nitro-claim.nitro-claim-mine")
    # Sam's queue shows Jane's claim without a reload.
    claim_cell(sam_page, first).filter(has_text="Jane · 0 min").wait_for()
    # The queue's columns need the width the app sidebar takes at 1400 px: folded, as a
    # reviewer working the queue would.
    sam_page.click("#toggle-nav-sidebar")
    sam_page.screenshot(path=str(DOCS_SCREENSHOTS / "queue_claims.png"), full_page=True)
    sam_page.click("#toggle-nav-sidebar")

    sam_page.goto(f"{live_server.url}{QUEUE}{first.pk}/review/")
    banner = sam_page.locator("#nitro-claim")
    assert "Jane Doe has this review" in banner.inner_text()
    assert Claim.objects.get(review=first).user == jane  # opening it did not take it
    sam_page.screenshot(path=str(DOCS_SCREENSHOTS / "claimed_review.png"), full_page=True)

    sam_page.click("#nitro-take-over button")
    sam_page.wait_for_selector("#nitro-claim.nitro-claim-mine")
    assert Claim.objects.get(review=first).user == sam
    assert Event.objects.filter(review=first, verb="review_taken_over", actor=sam).exists()
    # Jane's open screen says so, and stops renewing her claim.
    jane_page.locator("#nitro-claim-text").filter(
        has_text="Sam Lee took this review over from you"
    ).wait_for()
    assert jane_page.locator("#nitro-claim").get_attribute("class").endswith("nitro-claim-other")
    # Sam leaves the review (his screen releases it): Jane's screen, still open, claims it again.
    sam_page.goto(f"{live_server.url}{QUEUE}")
    jane_page.wait_for_selector("#nitro-claim.nitro-claim-mine")
    assert Claim.objects.get(review=first).user == jane
    claim_cell(sam_page, first).filter(has_text="Jane · ").wait_for()


def test_next_review_by_key_and_button_skips_claimed_ones(
    login: Any, live_server: Any, jane: Any, sam: Any
) -> None:
    oldest = make_tool_review()
    second = make_reply_review("Second in line.")
    third = make_reply_review("Third in line.")
    services.claims.claim_review(oldest, jane)
    page = login(sam)
    page.keyboard.press("n")  # claim next, from the queue
    page.wait_for_url(f"**{QUEUE}{second.pk}/review/**")
    assert Claim.objects.get(review=second).user == sam
    page.click("#nitro-next-review")  # and on to the one after, from the review screen
    page.wait_for_url(f"**{QUEUE}{third.pk}/review/**")

    page.goto(f"{live_server.url}{QUEUE}")
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.locator("#result_list tr.nitro-row-focus input.action-select").get_attribute(
        "value"
    ) == str(second.pk)
    page.keyboard.press("x")
    assert page.locator(f'input.action-select[value="{second.pk}"]').is_checked()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**{QUEUE}{second.pk}/review/")


def test_a_decisions_outcome_and_the_next_pause_appear_without_reload(
    login: Any, live_server: Any, jane: Any
) -> None:
    review = make_tool_review()
    page = login(jane)
    page.goto(f"{live_server.url}{QUEUE}{review.pk}/review/")
    page.click("input[name='_approve']")
    page.wait_for_selector("text=Decision recorded on review")
    outcome = page.locator("#nitro-outcome")
    assert outcome.inner_text() == "pending"  # no worker has applied it yet
    page.evaluate("window.__same_page = true")

    decision = Review.objects.get(pk=review.pk).decision
    services.fail_resume(decision.pk, "The assistant refused the resume")
    outcome.filter(has_text="failed — The assistant refused the resume").wait_for()
    page.locator("#nitro-status").filter(has_text="failed").wait_for()

    # The assistant's next pause, mirrored as a worker mirrors it (an event, a new token).
    mirror_pending(review.thread, None, pause("reply", "Anything else I can help with?"))
    page.locator("#nitro-live-now").filter(has_text="now waits on: reply").wait_for()
    assert "Anything else I can help with?" in page.locator("#nitro-live-now").inner_text()
    assert page.evaluate("window.__same_page") is True  # nothing reloaded the page
    # Submitting the decision did not also post a release of the claim: on SQLite the two
    # would contend for the database ("database is locked" on one of them).
    assert Claim.objects.get(review=review).active()


def test_the_pending_count_on_the_index_and_live_in_the_sidebar(
    login: Any, live_server: Any, jane: Any
) -> None:
    make_tool_review(), make_reply_review("One more.")
    page = login(jane)
    page.goto(f"{live_server.url}/admin/")
    badge = page.locator("#content-main [data-nitro-count]")
    assert badge.inner_text() == "2"
    page.goto(f"{live_server.url}{QUEUE}")
    page.evaluate("window.__same_page = true")
    arrived = mirror_pending(ThreadFactory(), None, pause("reply", "A new customer writes in."))
    assert arrived is not None
    # The new review appears in the queue, and the sidebar count moves, without a reload.
    page.locator(f'input.action-select[value="{arrived.pk}"]').wait_for()
    page.locator("#nav-sidebar [data-nitro-count]").filter(has_text="3").wait_for()
    assert page.locator("#result_list tr.nitro-row-new").count() == 1
    services.decide(Review.objects.get(pk=arrived.pk), jane, {"reply": {"action": "approve"}})
    page.locator("#nav-sidebar [data-nitro-count]").filter(has_text="2").wait_for()
    row = page.locator(f'input.action-select[value="{arrived.pk}"]').locator("xpath=ancestor::tr")
    row.locator("td.field-status").filter(has_text="decided").wait_for()
    assert "nitro-row-closed" in (row.get_attribute("class") or "")
    assert page.evaluate("window.__same_page") is True


def test_with_next_after_decision_the_outcome_follows_on_the_next_review(
    settings: Any, login: Any, live_server: Any, jane: Any
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "NEXT_AFTER_DECISION": True}
    first = make_tool_review()
    second = make_reply_review("Second in line.")
    page = login(jane)
    page.keyboard.press("n")
    page.wait_for_url(f"**{QUEUE}{first.pk}/review/**")
    page.click("input[name='_approve']")
    page.wait_for_url(f"**{QUEUE}{second.pk}/review/?decided={first.pk}**")
    assert Claim.objects.get(review=second).user == jane
    strip = page.locator("#nitro-decided")
    strip.filter(has_text="pending").wait_for()
    page.evaluate("window.__same_page = true")
    decision = Review.objects.get(pk=first.pk).decision
    services.fail_resume(decision.pk, "The assistant refused the resume")
    page.locator("#nitro-decided-outcome").filter(
        has_text="failed — The assistant refused the resume"
    ).wait_for()
    assert page.evaluate("window.__same_page") is True


def test_an_empty_queue_shows_the_first_review_that_arrives(login: Any, jane: Any) -> None:
    page = login(jane)
    assert page.locator("#result_list").count() == 0
    page.evaluate("window.__same_page = true")
    # A review arrives as the mirror makes one (its event replaces the change token).
    arrived = mirror_pending(ThreadFactory(status=Thread.Status.INTERRUPTED), None, pause("tool"))
    assert arrived is not None
    box = page.locator(f'input.action-select[value="{arrived.pk}"]')
    box.wait_for()
    box.check()  # Django's actions work on it: the counter follows
    assert page.locator(".action-counter").inner_text().startswith("1 of 1 selected")
    page.locator("#nav-sidebar [data-nitro-count]").filter(has_text="1").wait_for()
    assert page.evaluate("window.__same_page") is True


def test_rows_added_live_are_counted_selected_and_acted_on(login: Any, jane: Any) -> None:
    first = make_tool_review()
    page = login(jane)
    page.evaluate("window.__same_page = true")
    counter = page.locator(".action-counter")
    toggle = page.locator("#action-toggle")
    page.check(f'input.action-select[value="{first.pk}"]')
    assert counter.inner_text().startswith("1 of 1 selected")
    assert toggle.is_checked()

    arrived = mirror_pending(ThreadFactory(), None, pause("reply", "A new customer writes in."))
    assert arrived is not None
    box = page.locator(f'input.action-select[value="{arrived.pk}"]')
    box.wait_for()
    # The new row counts in the total, and "all" is no longer all.
    counter.filter(has_text="1 of 2 selected").wait_for()
    assert not toggle.is_checked()
    box.check()
    assert counter.inner_text().startswith("2 of 2 selected")
    assert toggle.is_checked()
    # The select-all box clears and ticks the new row too, and the counter follows.
    toggle.uncheck()
    assert not box.is_checked() and counter.inner_text().startswith("0 of 2 selected")
    toggle.check()
    assert box.is_checked() and counter.inner_text().startswith("2 of 2 selected")
    assert "selected" in (box.locator("xpath=ancestor::tr").get_attribute("class") or "")
    # Shift-click ranges reach it: untick both, tick the first, shift-tick the new one.
    toggle.uncheck()
    page.check(f'input.action-select[value="{first.pk}"]')
    box.click(modifiers=["Shift"])
    assert counter.inner_text().startswith("2 of 2 selected")
    assert page.evaluate("window.__same_page") is True

    # The action sees the new row as selected.
    page.select_option("select[name='action']", "approve_selected")
    page.click("button[name='index']")
    page.wait_for_selector("text=Approve these 2 reviews?")
    listed = page.locator(".nitro-bulk-list").inner_text()
    assert f"#{first.pk}" in listed and f"#{arrived.pk}" in listed
