"""Services in this process against the real LangGraph server (no worker): the mirror matches."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection

import nitro_assistants
from nitro_assistants import services
from nitro_assistants.exceptions import InteractionDecisionError
from nitro_assistants.models import Decision, Delivery, Review, Run
from tests.core.conftest import sent

pytestmark = [pytest.mark.server, pytest.mark.django_db]

MOVE = 'tools: [{"name": "reschedule_appointment", "args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"}}]'


def run_now(thread: Any, message: str, capture: Any) -> Run:
    """start_run, then the task's work right here (the enqueued task is not sent)."""
    with capture(execute=True):
        run = services.start_run(thread, message)
    with capture(execute=True):
        return services.execute_run(run.pk)


def test_new_message_supersedes_the_pending_review(
    server_settings: Any,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = run_now("walkthrough", MOVE, django_capture_on_commit_callbacks)
    assert run.status == Run.Status.INTERRUPTED
    review = Review.objects.get(status="pending")
    remote = nitro_assistants.assistants()["walkthrough"].under_review(
        thread_id=str(run.thread.thread_id)
    )
    assert remote is not None
    assert review.interrupt_ids == remote.interrupt_ids
    assert review.tool_calls == remote.tool_calls

    run = run_now(run.thread, "reply: Never mind, keep Monday.", django_capture_on_commit_callbacks)
    review.refresh_from_db()
    assert review.status == Review.Status.SUPERSEDED
    assert len(sent(signal_log, "review_superseded")) == 1
    # The server dropped the pause too: the new run paused on its reply draft instead.
    new = Review.objects.get(status="pending")
    assert new.kind == "reply"
    assert new.reply is not None
    assert new.reply["content"] == "Never mind, keep Monday."
    assert len(sent(signal_log, "review_requested")) == 2


def test_failed_delivery_is_signalled_once(
    server_settings: Any,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = run_now("walkthrough", "reply: FAIL this one", django_capture_on_commit_callbacks)
    review = Review.objects.get(status="pending", kind="reply")
    with django_capture_on_commit_callbacks(execute=True):
        decision = services.decide(review, None, {"reply": {"action": "approve"}})
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(decision.pk)
    with django_capture_on_commit_callbacks(execute=True):
        services.sync_thread(run.thread)
        services.sweep_deliveries()
    delivery = Delivery.objects.get()
    assert delivery.status == "failed"
    assert "SMS gateway refused" in delivery.error
    assert [kw["delivery"] for kw in sent(signal_log, "delivery_failed")] == [delivery]
    assert sent(signal_log, "delivery_delivered") == []


@pytest.mark.django_db(transaction=True)
def test_eight_reviewers_deciding_at_once_make_one_decision(
    server_settings: Any, enqueued: list[Any], django_user_model: Any
) -> None:
    run = run_now("walkthrough", MOVE, lambda execute: _Immediate())
    review = Review.objects.get(status="pending")
    users = [django_user_model.objects.create(username=f"reviewer{i}") for i in range(8)]
    barrier = threading.Barrier(8)
    outcomes: list[str] = []

    def decide(user: Any) -> None:
        barrier.wait()
        try:
            services.decide(
                review,
                user,
                {"tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}]},
            )
            outcomes.append("decided")
        except services.ReviewNotPendingError as exc:
            outcomes.append(str(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(user,)) for user in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Counter(outcomes) == {"decided": 1, f"Review #{review.pk} was already decided.": 7}
    decision = Decision.objects.get()
    resumes = [args for name, args in enqueued if name == "nitro_assistants.resume_thread"]
    assert resumes == [(decision.pk,)]
    services.execute_resume(decision.pk)
    remote = nitro_assistants.assistants()["walkthrough"].list_runs(
        thread_id=str(run.thread.thread_id)
    )
    assert [
        r["metadata"].get("reviewer_id") for r in remote if r["metadata"].get("reviewer_id")
    ] == [decision.reviewer_id]


class _Immediate:
    """on_commit already runs callbacks at commit with a transactional database."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_graph_error_fails_the_run_once(
    server_settings: Any,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = run_now("plain", "error: the calendar is on fire", django_capture_on_commit_callbacks)
    assert run.status == Run.Status.FAILED
    assert "the calendar is on fire" in run.error
    assert [kw["run"] for kw in sent(signal_log, "run_failed")] == [run]
    run.thread.refresh_from_db()
    assert run.thread.status == "error"


def test_per_call_review_covers_every_held_call(
    server_settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    both = (
        'tools: [{"name": "reschedule_appointment", "args": {"appointment_id": 42, "day": "Tuesday",'
        ' "time": "10:00"}}, {"name": "cancel_appointment", "args": {"appointment_id": 7}}]'
    )
    run = run_now("per_call", both, django_capture_on_commit_callbacks)
    review = Review.objects.get(thread=run.thread, status="pending")
    assert len(review.interrupt_ids) == 2
    assert [c["name"] for c in review.tool_calls] == [
        "reschedule_appointment",
        "cancel_appointment",
    ]
    ids = [c["id"] for c in review.tool_calls]
    # The server publishes the tool's argument schema in the pause's response_schema: an edit
    # the held value's type allows (a number for a number) but the schema does not (an integer)
    # is refused, naming the argument, before anything is stored (issue 34).
    assert review.payload["args_schemas"][ids[0]]["properties"]["appointment_id"]["type"] == (
        "integer"
    )
    with pytest.raises(InteractionDecisionError, match="is not of type 'integer'") as raised:
        services.decide(
            review,
            None,
            {
                "tool_calls": [
                    {"id": ids[0], "action": "edit", "args": {"appointment_id": 42.5}},
                    {"id": ids[1], "action": "reject"},
                ]
            },
        )
    assert raised.value.field == "tool_calls[0].args.appointment_id"
    assert not Decision.objects.filter(review=review).exists()
    with django_capture_on_commit_callbacks(execute=True):
        decision = services.decide(
            review,
            None,
            {
                "tool_calls": [
                    {"id": ids[0], "action": "edit", "args": {"day": "Wednesday"}},
                    {"id": ids[1], "action": "reject", "message": "keep it"},
                ]
            },
        )
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(decision.pk)
    decision.refresh_from_db()
    assert decision.outcome == "applied"
    assert decision.run is not None
    assert "moved to Wednesday at 10:00" in decision.run.reply
    run.thread.refresh_from_db()
    assert run.thread.status == "idle"
    assert not Review.objects.filter(thread=run.thread, status="pending").exists()


def test_an_interaction_is_mirrored_with_its_revision_and_digest(
    server_settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    questions = [{"questionId": "q1", "prompt": "Which day suits you?", "input": "text"}]
    ask = json.dumps({"kind": "question", "title": "Pick a day", "content": questions})
    run = run_now("interactions", f"ask: {ask}", django_capture_on_commit_callbacks)
    review = Review.objects.get(thread=run.thread, status="pending")
    assert review.kind == "question"
    assert review.revision == 1
    assert review.payload["interaction"]["questions"] == questions
    assert review.interaction_id == review.payload["interaction"]["interactionId"]
    canonical = json.dumps(questions, sort_keys=True, separators=(",", ":"))
    assert review.digest == hashlib.sha256(canonical.encode()).hexdigest()
    with django_capture_on_commit_callbacks(execute=True):
        services.sync_thread(run.thread)  # the same pause: no new revision
    assert Review.objects.filter(thread=run.thread).count() == 1


def test_sync_follows_a_review_decided_elsewhere(
    server_settings: Any,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = run_now("walkthrough", MOVE, django_capture_on_commit_callbacks)
    old = Review.objects.get(thread=run.thread, status="pending")
    assistant = nitro_assistants.assistants()["walkthrough"]
    assistant.review(  # another app (or a person with the raw API) resumes the thread
        thread_id=str(run.thread.thread_id),
        reviewer_id="elsewhere",
        interrupt_id=old.interrupt_id,
        tool_calls=[{"id": old.tool_calls[0]["id"], "action": "approve"}],
    )
    with django_capture_on_commit_callbacks(execute=True):
        services.sync_thread(run.thread)
    old.refresh_from_db()
    assert old.status == Review.Status.SUPERSEDED
    new = Review.objects.get(thread=run.thread, status="pending")
    assert new.kind == "reply"
    assert new.run is None  # found by the sync, not by a run of ours
    assert [kw["reason"] for kw in sent(signal_log, "review_superseded")] == ["replaced"]
    assert [kw["review"] for kw in sent(signal_log, "review_requested")] == [old, new]
    run.thread.refresh_from_db()
    assert run.thread.messages == assistant.thread_messages(thread_id=str(run.thread.thread_id))
