"""Inbox and interrupt pauses through the decide API, on the real LangGraph server
(tests/graphs/dialects.py, docs/protocol.md §9): listed with their pauses, decided with
``answer``/``answers``, refused before anything is stored, dismissed."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from nitro_assistants import services
from nitro_assistants.models import Decision, Review
from tests.core.conftest import enqueued
from tests.core.test_server import run_now
from tests.interactions.conftest import assert_error
from tests.interactions.test_reviews_api import DECIDE, Caller

__all__ = ["enqueued"]  # the fixture

pytestmark = [pytest.mark.server, pytest.mark.django_db]


@pytest.fixture
def real(settings: Any, langgraph_server: Any) -> Any:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "BASE_URL": langgraph_server.url}
    return langgraph_server


@pytest.fixture
def bot(client: Client, grant: Any) -> Caller:
    return Caller(client, grant(User.objects.create_user("bot"), DECIDE))


def test_an_inbox_review_is_shown_and_decided_through_the_api(
    real: Any, bot: Caller, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    run = run_now("inbox", "refund", django_capture_on_commit_callbacks)
    review = Review.objects.get(thread=run.thread, status="pending")
    shown = bot.get(f"reviews/{review.pk}").json()
    (pause,) = shown["pauses"]
    assert shown["kind"] == "inbox" and pause["interruptId"] == review.interrupt_id
    assert pause["allowed"] == ["edit", "response", "ignore"]
    assert pause["actionRequest"]["action"] == "send_refund"

    refused = bot.decide(review, {"answer": {"type": "accept", "args": None}})
    body = assert_error(refused, 400, "invalid_json", field="answer")
    assert "does not allow `accept`" in body["message"]
    assert not Decision.objects.filter(review=review).exists()

    with django_capture_on_commit_callbacks(execute=True):
        answered = bot.decide(review, {"answer": {"type": "response", "args": "Check first"}})
    assert answered.status_code == 200, answered.content
    again = bot.decide(review, {"answer": {"type": "response", "args": "Check first"}})
    assert again.status_code == 200  # the same decision again: the one recorded
    decision = Decision.objects.get(review=review)
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(decision.pk)
    decision.refresh_from_db()
    assert decision.run is not None and decision.run.reply == "noted: Check first"


def test_parallel_pauses_answered_together_and_dismiss_through_the_api(
    real: Any, bot: Caller, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    run = run_now("parallel", "hi", django_capture_on_commit_callbacks)
    review = Review.objects.get(thread=run.thread, status="pending")
    left, right = review.interrupt_ids
    assert [p["interruptId"] for p in bot.get(f"reviews/{review.pk}").json()["pauses"]] == [
        left,
        right,
    ]
    with django_capture_on_commit_callbacks(execute=True):
        decided = bot.decide(review, {"answers": {left: "go", right: {"size": "S"}}})
    assert decided.status_code == 200, decided.content
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(Decision.objects.get(review=review).pk)
    assert Decision.objects.get(review=review).run.reply == "left='go' right={'size': 'S'}"

    other = run_now("plain_interrupt", "hi", django_capture_on_commit_callbacks)
    pending = Review.objects.get(thread=other.thread, status="pending")
    with django_capture_on_commit_callbacks(execute=True):
        dismissed = bot.post(f"reviews/{pending.pk}/dismiss", {})
    assert dismissed.status_code == 200 and dismissed.json()["status"] == "dismissed"
    assert_error(bot.post(f"reviews/{pending.pk}/dismiss", {}), 409, "conflict")


def test_an_answer_outside_the_options_is_a_400_on_answer_and_nothing_recorded(
    real: Any, bot: Caller, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    """Issue 34: an answer that is not one of the pause's options never reaches the graph."""
    run = run_now("plain_interrupt", "hi", django_capture_on_commit_callbacks)
    first = Review.objects.get(thread=run.thread, status="pending")
    with django_capture_on_commit_callbacks(execute=True):
        assert bot.decide(first, {"answer": True}).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(Decision.objects.get(review=first).pk)
    review = Review.objects.get(thread=run.thread, status="pending")
    (pause,) = bot.get(f"reviews/{review.pk}").json()["pauses"]
    assert pause["options"] == ["UPS", "DHL"]

    refused = bot.decide(review, {"answer": "FedEx"})
    body = assert_error(refused, 400, "invalid_json", field="answer")
    assert "allowed: UPS, DHL" in body["message"]
    assert not Decision.objects.filter(review=review).exists()

    with django_capture_on_commit_callbacks(execute=True):
        answered = bot.decide(review, {"answer": "UPS"})
    assert answered.status_code == 200, answered.content
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(Decision.objects.get(review=review).pk)
    assert Decision.objects.get(review=review).run.reply == "approved=True carrier='UPS'"
