"""What a review screen says once its review moves on (issue 40, items 2-4), read from the
rendered HTML and the live poll's JSON: the heading, the tab's title and the thread's state
agree with the status; each held call is badged with what was decided on it; a plan approves in
one click and a chosen option means Answer."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from nitro_assistants.models import Decision, Review, Thread
from tests.admin.conftest import MOVE_ARGS, make_tool_review, review_url, stamp
from tests.admin.test_reading_browser import VISIT_PLAN, ask, crm_operations

__all__ = ["crm_operations"]
from tests.factories import DecisionFactory

pytestmark = pytest.mark.django_db
LIVE = reverse("admin:nitro_assistants_review_live")


def text_of(html: str, pattern: str) -> str:
    found = re.search(pattern, html, re.S)
    assert found, pattern
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def decided(review: Review, status: str, **decision: Any) -> Review:
    Review.objects.filter(pk=review.pk).update(status=status)
    DecisionFactory(review=review, **decision)
    return Review.objects.get(pk=review.pk)


# -- item 2: heading, title and thread state follow the status -----------------------------------


def test_an_applied_review_says_applied_in_its_heading_title_and_thread_state(
    reviewer_client: Client,
) -> None:
    review = make_tool_review()
    decided(
        review,
        Review.Status.APPLIED,
        tool_calls=[{"id": "call_1", "action": "approve"}],
        outcome=Decision.Outcome.APPLIED,
    )
    Thread.objects.filter(pk=review.thread_id).update(status=Thread.Status.IDLE)
    html = reviewer_client.get(review_url(review)).content.decode()
    title = f"Review #{review.pk} (tool calls), applied"
    assert text_of(html, r'<h1 id="nitro-title"[^>]*>(.*?)</h1>') == title
    assert text_of(html, r"<title>(.*?)</title>").split(" | ")[1] == title
    assert text_of(html, r'<span id="nitro-status"[^>]*>(.*?)</span>') == "applied"
    assert text_of(html, r'<span id="nitro-thread-status"[^>]*>(.*?)</span>') == "idle"


def test_the_live_poll_sends_the_title_and_the_threads_state_with_the_status(
    reviewer_client: Client,
) -> None:
    review = make_tool_review()
    decided(
        review,
        Review.Status.APPLIED,
        tool_calls=[{"id": "call_1", "action": "approve"}],
        outcome=Decision.Outcome.APPLIED,
    )
    Thread.objects.filter(pk=review.thread_id).update(status=Thread.Status.IDLE)
    state = reviewer_client.get(LIVE, {"review": review.pk}).json()["review"]
    assert state["status_label"] == "applied"
    assert state["title"] == f"Review #{review.pk} (tool calls), applied"
    assert (state["thread_status"], state["thread_status_label"]) == ("idle", "idle")
    # The page draws its heading from the same words the poll sends.
    html = reviewer_client.get(review_url(review)).content.decode()
    assert text_of(html, r'<h1 id="nitro-title"[^>]*>(.*?)</h1>') == state["title"]


# -- item 3: a decided call is badged with its decision ------------------------------------------

TWO_CALLS = [
    {
        "id": f"call_{n}",
        "name": name,
        "args": dict(MOVE_ARGS),
        "allowed_decisions": ["approve", "edit", "reject", "respond"],
    }
    for n, name in enumerate(["reschedule_appointment", "notify_customer", "cancel_order"], 1)
]


def badges(html: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>", "", b).strip()
        for b in re.findall(
            r'<div class="nitro-call nitro-call-held">\s*<div>(.*?)</div>', html, re.S
        )
    ]


def test_a_pending_review_badges_its_calls_held_for_review(reviewer_client: Client) -> None:
    review = make_tool_review(TWO_CALLS)
    html = reviewer_client.get(review_url(review)).content.decode()
    assert badges(html) == [
        "reschedule_appointment held for review",
        "notify_customer held for review",
        "cancel_order held for review",
    ]


def test_a_decided_review_badges_each_call_with_what_was_decided(reviewer_client: Client) -> None:
    review = decided(
        make_tool_review(TWO_CALLS),
        Review.Status.APPLIED,
        tool_calls=[
            {"id": "call_1", "action": "edit", "args": {**MOVE_ARGS, "day": "Friday"}},
            {"id": "call_2", "action": "approve"},
            {"id": "call_3", "action": "reject", "message": "Not this one."},
        ],
    )
    html = reviewer_client.get(review_url(review)).content.decode()
    assert badges(html) == [
        "reschedule_appointment edited",
        "notify_customer approved",
        "cancel_order rejected",
    ]
    assert "held for review" not in html
    respond = decided(
        make_tool_review(),
        Review.Status.DECIDED,
        tool_calls=[{"id": "call_1", "action": "respond", "message": "Done by hand."}],
    )
    assert badges(reviewer_client.get(review_url(respond)).content.decode()) == [
        "reschedule_appointment responded"
    ]


def test_a_superseded_review_badges_its_calls_with_its_status(reviewer_client: Client) -> None:
    review = make_tool_review(status=Review.Status.SUPERSEDED)
    html = reviewer_client.get(review_url(review)).content.decode()
    assert badges(html) == ["reschedule_appointment superseded"]


# -- item 4: a plan approves in one click, a chosen option means Answer ---------------------------


def test_a_plan_has_a_one_click_approve_plan_button_that_approves_it(
    reviewer_client: Client, crm_operations: None
) -> None:
    review = ask("plan", VISIT_PLAN, title="Move the visit", summary="Because she asked.")
    response = reviewer_client.get(review_url(review))
    html = response.content.decode()
    assert 'name="_approve" value="Approve plan"' in html
    assert "<dt><kbd>a</kbd></dt><dd>Approve plan: decide and submit at once</dd>" in html
    # The steps' fields as the screen shows them; no decision chosen: the button says it.
    shown = {
        step.add_prefix(name): step.initial.get(name)
        for step in response.context["form"].steps
        for name in step.fields
        if step.initial.get(name) is not None
    }
    response = reviewer_client.post(
        review_url(review), {**stamp(review), **shown, "_approve": "Approve plan"}
    )
    assert response.status_code == 302, response.content.decode()
    decision = Decision.objects.get(review=review)
    assert decision.answer["decision"] == "approve"


def test_a_plan_with_problems_has_no_one_click_approval(reviewer_client: Client) -> None:
    review = ask("plan", VISIT_PLAN, title="Move the visit", summary="Because she asked.")
    Review.objects.filter(pk=review.pk).update(
        payload={**review.payload, "problems": ["Step move: unknown operation"]}
    )
    html = reviewer_client.get(review_url(review)).content.decode()
    assert 'name="_approve"' not in html


QUESTIONS = [
    {
        "questionId": "day",
        "prompt": "Which day suits Jane?",
        "input": "single_select",
        "options": [
            {"optionId": "thu", "label": "Thursday"},
            {"optionId": "fri", "label": "Friday"},
        ],
        "allowOther": False,
        "multiple": False,
        "optional": False,
    }
]


def test_a_question_answered_without_choosing_answer_is_answered(reviewer_client: Client) -> None:
    review = ask("question", QUESTIONS, title="Pick a day", summary="She is flexible.")
    response = reviewer_client.post(
        review_url(review), {**stamp(review), "q-0-options": "fri", "_decide": "1"}
    )
    assert response.status_code == 302, response.content.decode()
    answer = Decision.objects.get(review=review).answer
    assert answer["decision"] == "answer"
    assert answer["answers"] == [{"questionId": "day", "optionIds": ["fri"]}]


def test_a_question_with_nothing_chosen_still_asks_for_a_decision(
    reviewer_client: Client,
) -> None:
    review = ask("question", QUESTIONS, title="Pick a day", summary="She is flexible.")
    response = reviewer_client.post(review_url(review), {**stamp(review), "_decide": "1"})
    assert response.status_code == 400
    assert not Decision.objects.filter(review=review).exists()
