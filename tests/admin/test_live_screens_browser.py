"""Issue 40, items 2, 4, 6 and 7 in a real browser (Playwright driving Debian's chromium): the
review screen's heading, tab title and thread state follow its live status; a plan approves by
the key ``a`` and a question's option chooses Answer; the queue's counts follow the rows added
live; ``?`` opens the keys' help on the queue. Each screen is shot at 1280 and 1400 px wide into
artifacts/screenshots."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from nitro_assistants import rules, services
from nitro_assistants.models import Decision, Review, Thread
from nitro_assistants.services.lifecycle import transition
from nitro_assistants.services.mirror import mirror_pending
from tests.admin.conftest import MOVE_ARGS, make_tool_review
from tests.admin.test_browser import shot
from tests.admin.test_claims import pause
from tests.admin.test_decided_screens import TWO_CALLS, decided
from tests.admin.test_inbox_browser import QUEUE, browser, fast_polls, jane, login, static_root
from tests.admin.test_reading_browser import VISIT_PLAN, ask, crm_operations
from tests.factories import ThreadFactory

__all__ = ["browser", "crm_operations", "fast_polls", "jane", "login", "static_root"]

playwright_api = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.django_db(transaction=True)]
WIDTHS = (1280, 1400)


def shots(page: Any, name: str) -> None:
    """The page at each width a reviewer's window has, into artifacts/screenshots."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        shot(page, f"{name}_{width}")


def apply_decision(review: Review) -> None:
    """What a worker writes when the assistant took the decision: the decision applied, the
    review applied, the thread resumed and finished (one transaction, as services do it)."""
    with transaction.atomic():
        held = Review.objects.select_for_update().get(pk=review.pk)
        Decision.objects.filter(review=held).update(
            outcome=Decision.Outcome.APPLIED, applied_at=timezone.now()
        )
        Thread.objects.filter(pk=held.thread_id).update(status=Thread.Status.IDLE)
        transition(held, rules.APPLIED)


def test_heading_title_and_thread_state_follow_the_live_status(
    login: Any, live_server: Any, jane: Any
) -> None:
    review = make_tool_review()
    page = login(jane)
    page.goto(f"{live_server.url}{QUEUE}{review.pk}/review/")
    page.click("input[name='_approve']")
    page.wait_for_selector("text=Decision recorded on review")
    heading = page.locator("#nitro-title")
    assert heading.inner_text() == f"Review #{review.pk} (tool calls), decided"
    assert page.locator("#nitro-thread-status").inner_text() == "interrupted"
    page.evaluate("window.__same_page = true")

    apply_decision(review)
    applied = f"Review #{review.pk} (tool calls), applied"
    page.locator("#nitro-status").filter(has_text="applied").wait_for()
    heading.filter(has_text=applied).wait_for()
    page.locator("#nitro-thread-status").filter(has_text="idle").wait_for()
    assert f"| {applied} |" in page.title()
    assert page.locator(".breadcrumbs").inner_text().endswith(applied)
    assert page.evaluate("window.__same_page") is True
    assert page.locator("#nitro-claim").is_hidden()  # nobody holds a decided review: no empty bar
    # The conversation badges the call with the decision (item 3), not "held for review".
    assert page.locator(".nitro-call-held .nitro-badge").inner_text() == "approved"
    shots(page, "review_applied_live")

    page.reload()  # a fresh load says the same
    assert heading.inner_text() == applied
    assert page.locator("#nitro-thread-status").inner_text() == "idle"
    assert f"| {applied} |" in page.title()
    assert page.locator("#nitro-claim").is_hidden()


def test_a_decided_reviews_calls_are_badged_with_what_was_decided(
    login: Any, live_server: Any, jane: Any
) -> None:
    review = decided(
        make_tool_review(TWO_CALLS),
        Review.Status.APPLIED,
        tool_calls=[
            {"id": "call_1", "action": "edit", "args": {**MOVE_ARGS, "day": "Friday"}},
            {"id": "call_2", "action": "approve"},
            {"id": "call_3", "action": "reject", "message": "Not this one."},
        ],
        outcome=Decision.Outcome.APPLIED,
        applied_at=timezone.now(),
    )
    Thread.objects.filter(pk=review.thread_id).update(status=Thread.Status.IDLE)
    page = login(jane)
    page.goto(f"{live_server.url}{QUEUE}{review.pk}/review/")
    badges = page.locator(".nitro-call-held .nitro-badge")
    assert badges.all_inner_texts() == ["edited", "approved", "rejected"]
    assert page.locator("text=held for review").count() == 0
    shots(page, "review_decided_badges")


def test_a_plan_is_approved_by_the_key_a(
    login: Any, live_server: Any, jane: Any, crm_operations: None
) -> None:
    review = ask("plan", VISIT_PLAN, title="Move the visit", summary="Because she asked.")
    page = login(jane)
    page.goto(f"{live_server.url}{QUEUE}{review.pk}/review/")
    assert page.locator("input[name='_approve']").get_attribute("value") == "Approve plan"
    shots(page, "plan_approve_button")
    page.keyboard.press("a")
    page.wait_for_selector("text=Decision recorded on review")
    assert Decision.objects.get(review=review).answer["decision"] == "approve"


QUESTIONS = [
    {
        "questionId": "day",
        "prompt": "Which day suits Jane?",
        "input": "single_select",
        "options": [
            {"optionId": "thu", "label": "Thursday"},
            {"optionId": "fri", "label": "Friday"},
        ],
        "allowOther": True,
        "multiple": False,
        "optional": False,
    }
]


def test_choosing_a_questions_option_chooses_answer(
    login: Any, live_server: Any, jane: Any
) -> None:
    review = ask("question", QUESTIONS, title="Pick a day", summary="She is flexible.")
    page = login(jane)
    page.goto(f"{live_server.url}{QUEUE}{review.pk}/review/")
    answer = page.locator("input[name='interaction-decision'][value='answer']")
    assert not answer.is_checked()
    page.get_by_label("Friday").check()
    assert answer.is_checked()
    shots(page, "question_option_answers")
    # Dismiss chosen, then an option chosen again: the option means Answer once more.
    page.check("input[name='interaction-decision'][value='cancel']")
    page.get_by_label("Thursday").check()
    assert answer.is_checked()
    page.click("input[name='_decide']")
    page.wait_for_selector("text=Decision recorded on review")
    recorded = Decision.objects.get(review=review).answer
    assert recorded["decision"] == "answer"
    assert recorded["answers"] == [{"questionId": "day", "optionIds": ["thu"]}]


def counts(page: Any) -> tuple[str, str]:
    return (
        page.locator("#changelist-search span.small.quiet").inner_text(),
        page.locator("#changelist-form p.paginator").inner_text(),
    )


def test_the_queues_counts_follow_rows_added_live(login: Any, live_server: Any, jane: Any) -> None:
    for _ in range(6):
        make_tool_review()
    page = login(jane)
    page.goto(f"{live_server.url}{QUEUE}?status=pending")
    assert page.locator("#result_list tbody tr").count() == 6
    assert counts(page)[0].startswith("6 results")
    assert counts(page)[1] == "6 reviews"
    page.evaluate("window.__same_page = true")

    arrived = mirror_pending(ThreadFactory(), None, pause("reply", "A new customer writes in."))
    assert arrived is not None
    page.locator(f'input.action-select[value="{arrived.pk}"]').wait_for()
    page.locator("#changelist-form p.paginator").filter(has_text="7 reviews").wait_for()
    assert page.locator("#result_list tbody tr").count() == 7
    assert counts(page)[0].startswith("7 results")
    assert page.evaluate("window.__same_page") is True
    shots(page, "queue_counts_live")
    # A review decided meanwhile stays on screen, marked closed, and leaves the counts: they say
    # how many the list's filters hold now.
    services.decide(Review.objects.get(pk=arrived.pk), jane, {"reply": {"action": "approve"}})
    page.locator("#changelist-form p.paginator").filter(has_text="6 reviews").wait_for()
    assert counts(page)[0].startswith("6 results")
    assert page.locator("#result_list tbody tr.nitro-row-closed").count() == 1
    assert page.evaluate("window.__same_page") is True


def test_question_mark_opens_the_keys_help_on_the_queue(
    login: Any, live_server: Any, jane: Any
) -> None:
    make_tool_review()
    page = login(jane)
    help_panel = page.locator("#nitro-keys-help")
    assert help_panel.is_hidden()
    page.keyboard.press("?")
    help_panel.wait_for(state="visible")
    assert "Claim the next review" in help_panel.inner_text()
    assert page.locator("#nitro-keys-toggle").get_attribute("aria-expanded") == "true"
    shots(page, "queue_keys_help")
    page.keyboard.press("Escape")
    help_panel.wait_for(state="hidden")
    page.keyboard.press("?")
    help_panel.wait_for(state="visible")
    page.keyboard.press("?")
    help_panel.wait_for(state="hidden")
    # Typed into the search box, "?" is a character, not a key.
    page.fill("#searchbar", "")
    page.locator("#searchbar").press("?")
    assert help_panel.is_hidden()
    assert page.locator("#searchbar").input_value() == "?"
    page.click("#nitro-keys-toggle")  # the button does it too
    help_panel.wait_for(state="visible")
