"""Pauses of graphs of their own mirrored, decided, dismissed and failed through the services,
against the real LangGraph server (tests/graphs/dialects.py, docs/protocol.md §9)."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from nitro_assistants import services
from nitro_assistants.exceptions import (
    InteractionConflictError,
    InteractionDecisionError,
    ThreadResumptionError,
)
from nitro_assistants.models import Decision, Event, Review, Run
from tests.core.conftest import sent
from tests.core.test_server import run_now

pytestmark = [pytest.mark.server, pytest.mark.django_db]


def decide_and_apply(review: Review, body: dict[str, Any], capture: Any) -> Decision:
    with capture(execute=True):
        decision = services.decide(review, None, body)
    with capture(execute=True):
        services.execute_resume(decision.pk)
    decision.refresh_from_db()
    return decision


def pending(thread: Any) -> Review:
    return Review.objects.get(thread=thread, status="pending")


def test_an_agent_inbox_pause_is_mirrored_and_an_edit_applied(
    server_settings: Any,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = run_now("inbox", "refund please", django_capture_on_commit_callbacks)
    assert run.status == Run.Status.INTERRUPTED
    review = pending(run.thread)
    assert review.kind == "inbox"
    (pause,) = review.payload["pauses"]
    assert pause["action_request"]["args"] == {"order_id": 1234, "amount": 50.0}
    assert pause["config"]["allow_accept"] is False
    assert len(sent(signal_log, "review_requested")) == 1

    # A type the config forbids: refused with the field at fault, nothing stored.
    with pytest.raises(ThreadResumptionError, match="does not allow `accept`"):
        services.decide(review, None, {"answer": {"type": "accept", "args": None}})
    assert not Decision.objects.filter(review=review).exists()

    # A number edited into a text (issue 34's type confusion): a field error, nothing stored.
    confused = {
        "type": "edit",
        "args": {"action": "send_refund", "args": {"order_id": 1234, "amount": "5000"}},
    }
    with pytest.raises(InteractionDecisionError, match="must be a number") as raised:
        services.decide(review, None, {"answer": confused})
    assert raised.value.field == "answer.args.args.amount"
    assert not Decision.objects.filter(review=review).exists()

    edit = {
        "type": "edit",
        "args": {"action": "send_refund", "args": {"order_id": 1234, "amount": 20}},
    }
    decision = decide_and_apply(review, {"answer": edit}, django_capture_on_commit_callbacks)
    assert decision.outcome == "applied"
    assert decision.answer == {"answers": {review.interrupt_id: edit}}
    assert decision.actions == ["edit"]
    assert decision.run is not None and decision.run.reply == "refund sent: order 1234 amount 20"
    review.refresh_from_db()
    assert review.status == "applied"
    assert [e.verb for e in Event.objects.filter(review=review).order_by("pk")] == [
        "review_requested",
        "review_decided",
        "review_applied",
        "decision_recorded",
    ]
    record = Event.objects.get(review=review, verb="decision_recorded").data
    assert record["proposed"] == {"pauses": review.payload["pauses"]}
    assert record["decided"]["answer"] == decision.answer


def test_sequential_pauses_are_new_reviews_and_a_stale_answer_is_superseded(
    server_settings: Any,
    enqueued: list[Any],
    django_capture_on_commit_callbacks: Any,
    django_user_model: Any,
) -> None:
    alice = django_user_model.objects.create_user("alice")
    run = run_now("plain_interrupt", "hi", django_capture_on_commit_callbacks)
    first = pending(run.thread)
    assert first.kind == "interrupt"
    assert first.payload["pauses"][0]["value"] == "Approve a refund of $50?"
    with django_capture_on_commit_callbacks(execute=True):
        decision = services.decide(first, alice, {"answer": True})
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(decision.pk)
    decision.refresh_from_db()
    assert decision.outcome == "applied"
    second = pending(run.thread)
    assert second.pk != first.pk and second.interrupt_ids != first.interrupt_ids
    assert second.payload["pauses"][0]["options"] == ["UPS", "DHL"]

    # The same decision again (a double submit): the one already recorded, nothing new.
    with django_capture_on_commit_callbacks(execute=True):
        again = services.decide(first, alice, {"answer": True})
    assert again.pk == decision.pk
    assert Decision.objects.filter(review__thread=run.thread).count() == 1

    # A decision recorded on the second pause, but another tool answers it first: superseded.
    with django_capture_on_commit_callbacks(execute=True):
        late = services.decide(second, None, {"answer": "UPS"})
    url = f"{server_settings.url}/threads/{run.thread.thread_id}/runs/wait"
    body = {"assistant_id": "plain_interrupt", "command": {"resume": {second.interrupt_id: "DHL"}}}
    requests.post(url, json=body, timeout=30).raise_for_status()
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(late.pk)
    late.refresh_from_db()
    second.refresh_from_db()
    assert (late.outcome, second.status) == ("superseded", "superseded")


def test_parallel_pauses_are_answered_in_part_then_the_rest(
    server_settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    run = run_now("parallel", "hi", django_capture_on_commit_callbacks)
    review = pending(run.thread)
    left, right = review.interrupt_ids
    with pytest.raises(ThreadResumptionError, match="name the interrupt_id"):
        services.decide(review, None, {"answer": "yes"})
    partial = decide_and_apply(
        review, {"interrupt_id": left, "answer": "yes"}, django_capture_on_commit_callbacks
    )
    assert partial.outcome == "applied"
    rest = pending(run.thread)
    assert rest.interrupt_ids == [right]  # the other, still pending and decidable
    done = decide_and_apply(
        rest, {"answers": {right: {"size": "S"}}}, django_capture_on_commit_callbacks
    )
    assert done.run is not None and done.run.reply == "left='yes' right={'size': 'S'}"


def test_an_answer_outside_the_options_is_refused_and_nothing_recorded(
    server_settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    """Issue 34: "FedEx" to interrupt({"question": ..., "options": ["UPS", "DHL"]}) reached
    the graph. It is refused by services.decide, naming the options, with nothing stored."""
    run = run_now("plain_interrupt", "hi", django_capture_on_commit_callbacks)
    decide_and_apply(pending(run.thread), {"answer": True}, django_capture_on_commit_callbacks)
    review = pending(run.thread)
    assert review.payload["pauses"][0]["options"] == ["UPS", "DHL"]
    events = Event.objects.count()
    with pytest.raises(InteractionDecisionError, match="allowed: UPS, DHL") as caught:
        services.decide(review, None, {"answer": "FedEx"})
    assert caught.value.field == "answer"
    assert not Decision.objects.filter(review=review).exists()
    assert Event.objects.count() == events
    review.refresh_from_db()
    assert review.status == "pending"
    done = decide_and_apply(review, {"answer": "DHL"}, django_capture_on_commit_callbacks)
    assert done.run is not None and done.run.reply == "approved=True carrier='DHL'"


def test_a_response_schema_answer_is_checked_before_it_is_stored(
    server_settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    run = run_now("schema", "hi", django_capture_on_commit_callbacks)
    review = pending(run.thread)
    with pytest.raises(ThreadResumptionError, match="'quantity' is a required property"):
        services.decide(review, None, {"answer": {"size": "M"}})
    done = decide_and_apply(
        review, {"answer": {"size": "L", "quantity": 3}}, django_capture_on_commit_callbacks
    )
    assert done.run is not None and done.run.reply == "ordered 3 x L"


def test_dismiss_ends_the_pause_audited(
    server_settings: Any,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = run_now("plain_interrupt", "hi", django_capture_on_commit_callbacks)
    review = pending(run.thread)
    with django_capture_on_commit_callbacks(execute=True):
        services.dismiss(review, None)
    review.refresh_from_db()
    assert review.status == "dismissed" and review.closed_at is not None
    assert Event.objects.filter(review=review, verb="review_dismissed").count() == 1
    assert [kw["reason"] for kw in sent(signal_log, "review_superseded")] == ["dismissed"]
    client = services.clients.assistant_for("plain_interrupt")
    assert client.under_review(thread_id=str(run.thread.thread_id)) is None
    with pytest.raises(InteractionConflictError):
        services.decide(review, None, {"answer": True})


def test_a_thread_the_graph_is_stuck_on_is_shown_as_failed_never_decidable(
    server_settings: Any,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = run_now("inbox", "refund please", django_capture_on_commit_callbacks)
    review = pending(run.thread)
    url = f"{server_settings.url}/threads/{run.thread.thread_id}/runs/wait"
    body = {
        "assistant_id": "inbox",
        "command": {"resume": {review.interrupt_id: [{"type": "accept"}]}},
    }
    assert "__error__" in requests.post(url, json=body, timeout=30).json()
    with django_capture_on_commit_callbacks(execute=True):
        services.sync_thread(run.thread)
    review.refresh_from_db()
    assert review.status == "failed"
    assert review.payload["error"] == "ValueError('accept is not allowed')"
    run.thread.refresh_from_db()
    assert run.thread.status == "error"
    assert [kw["error"] for kw in sent(signal_log, "run_failed")] == [review.payload["error"]]
    with pytest.raises(InteractionConflictError):
        services.decide(review, None, {"answer": {"type": "ignore", "args": None}})
    with django_capture_on_commit_callbacks(execute=True):
        services.sync_thread(run.thread)  # still stuck: the same review, failed once
    assert Review.objects.filter(thread=run.thread).count() == 1
    assert len(sent(signal_log, "run_failed")) == 1
    with django_capture_on_commit_callbacks(execute=True):
        services.dismiss(review, None)  # the way out
    review.refresh_from_db()
    assert review.status == "dismissed"
