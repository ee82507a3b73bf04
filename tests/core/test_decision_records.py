"""Decision records end to end against the real LangGraph server: what was proposed, shown and
decided, and what then ran there, read back from the thread."""

from __future__ import annotations

from typing import Any

import pytest

import nitro_assistants
from nitro_assistants import services, signals
from nitro_assistants.models import Decision, Event, Review, Run
from nitro_assistants.services import chain_verify
from nitro_assistants.services.evidence import decision_record, record_decision

pytestmark = [pytest.mark.server, pytest.mark.django_db]

MOVE = (
    'tools: [{"name": "reschedule_appointment", '
    '"args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"}}]'
)


def run_now(thread: Any, message: str, capture: Any) -> Run:
    with capture(execute=True):
        run = services.start_run(thread, message)
    with capture(execute=True):
        return services.execute_run(run.pk)


def decide_and_resume(review: Review, user: Any, decision: dict[str, Any], capture: Any) -> Event:
    with capture(execute=True):
        record = services.decide(review, user, decision)
    with capture(execute=True):
        services.execute_resume(record.pk)
    record.refresh_from_db()
    assert record.outcome == Decision.Outcome.APPLIED, record.error
    return Event.objects.get(verb="decision_recorded", review=review)


@pytest.fixture
def mismatches() -> Any:
    log: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        log.append(kwargs)

    signals.execution_mismatched.connect(receiver)
    yield log
    signals.execution_mismatched.disconnect(receiver)


def test_an_approved_call_is_recorded_with_what_ran(
    server_settings: Any,
    enqueued: list[Any],
    mismatches: list[Any],
    django_user_model: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    alice = django_user_model.objects.create(username="alice")
    run_now("walkthrough", MOVE, django_capture_on_commit_callbacks)
    review = Review.objects.get(status="pending")
    call = review.tool_calls[0]
    event = decide_and_resume(
        review,
        alice,
        {"tool_calls": [{"id": call["id"], "action": "approve"}]},
        django_capture_on_commit_callbacks,
    )
    record = event.data
    assert event.actor is None and event.review == review
    assert record["shown"] == {"revision": review.revision, "digest": review.digest}
    assert record["decided"]["by"] == "alice" and record["decided"]["user"] == alice.pk
    assert record["decided"]["actions"] == ["approve"]
    assert record["proposed"]["tool_calls"] == [
        {"id": call["id"], "name": "reschedule_appointment", "args": call["args"]}
    ]
    assert record["edits"] == []
    [ran] = record["executed"]["tool_calls"]
    assert ran["ran"] is True and ran["status"] == "success"
    assert ran["args"] == {"appointment_id": 42, "day": "Tuesday", "time": "10:00"}
    assert "Tuesday" in ran["result"]
    assert record["mismatches"] == [] and mismatches == []
    assert chain_verify.verify().ok


def test_an_edited_call_shows_the_diff_and_the_args_that_ran(
    server_settings: Any,
    enqueued: list[Any],
    mismatches: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run_now("walkthrough", MOVE, django_capture_on_commit_callbacks)
    review = Review.objects.get(status="pending")
    call = review.tool_calls[0]
    edited = {**call["args"], "day": "Thursday", "time": "15:30"}
    event = decide_and_resume(
        review,
        None,
        {"tool_calls": [{"id": call["id"], "action": "edit", "args": edited}]},
        django_capture_on_commit_callbacks,
    )
    record = event.data
    assert record["edits"] == [
        {
            "id": call["id"],
            "name": "reschedule_appointment",
            "args": {
                "day": {"from": "Tuesday", "to": "Thursday"},
                "time": {"from": "10:00", "to": "15:30"},
            },
        }
    ]
    [ran] = record["executed"]["tool_calls"]
    assert ran["args"] == edited and ran["ran"] is True
    assert "Thursday" in ran["result"]
    assert record["mismatches"] == [] and mismatches == []


def test_a_rejected_call_is_recorded_as_not_run(
    server_settings: Any,
    enqueued: list[Any],
    mismatches: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run_now("walkthrough", MOVE, django_capture_on_commit_callbacks)
    review = Review.objects.get(status="pending")
    call = review.tool_calls[0]
    event = decide_and_resume(
        review,
        None,
        {"tool_calls": [{"id": call["id"], "action": "reject", "message": "Not on a Tuesday"}]},
        django_capture_on_commit_callbacks,
    )
    record = event.data
    [ran] = record["executed"]["tool_calls"]
    assert ran["status"] == "error" and "was not executed" in ran["result"]
    assert record["decided"]["actions"] == ["reject"]
    assert record["mismatches"] == [] and mismatches == []


def test_a_delivered_reply_is_recorded_with_its_delivery(
    server_settings: Any,
    enqueued: list[Any],
    mismatches: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    run_now("walkthrough", "reply: See you Tuesday at 10.", django_capture_on_commit_callbacks)
    review = Review.objects.get(status="pending", kind="reply")
    event = decide_and_resume(
        review,
        None,
        {"reply": {"action": "edit", "content": "See you Thursday at 15:30."}},
        django_capture_on_commit_callbacks,
    )
    record = event.data
    assert record["proposed"]["reply"] == "See you Tuesday at 10."
    assert record["edits"][0]["content"][2:] == [
        "@@ -1 +1 @@",
        "-See you Tuesday at 10.",
        "+See you Thursday at 15:30.",
    ]
    sent = record["executed"]["reply"]
    assert sent["content"] == "See you Thursday at 15:30."
    assert sent["delivery"]["status"] == "delivered" and sent["delivery"]["tool"] == "send_sms"
    assert record["mismatches"] == [] and mismatches == []


def test_an_approved_call_that_ran_with_other_args_is_flagged(
    server_settings: Any,
    enqueued: list[Any],
    mismatches: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """What ran is read from the server, not from the decision: a call the server ran with
    other args than approved (here the thread of an edit to Friday, held against a decision
    that approved the call as proposed) is flagged on the record and signalled."""
    run_now("walkthrough", MOVE, django_capture_on_commit_callbacks)
    review = Review.objects.get(status="pending")
    call = review.tool_calls[0]
    friday = {**call["args"], "day": "Friday"}
    decide_and_resume(
        review,
        None,
        {"tool_calls": [{"id": call["id"], "action": "edit", "args": friday}]},
        django_capture_on_commit_callbacks,
    )
    record = Decision.objects.get(review=review)
    record.tool_calls = [{"id": call["id"], "action": "approve"}]  # what was approved
    thread = review.thread
    state = nitro_assistants.assistants()["walkthrough"].thread_state(
        thread_id=str(thread.thread_id)
    )["values"]
    with django_capture_on_commit_callbacks(execute=True):
        event = record_decision(record, review, None, state["messages"], state=state)
    expected = (
        f"reschedule_appointment ({call['id']}) ran with other args than approved: "
        '{"day": {"from": "Tuesday", "to": "Friday"}}'
    )
    assert event.data["mismatches"] == [expected]
    assert event.data["mismatch_kinds"][0]["kind"] == "other_args"
    assert [m["mismatches"] for m in mismatches] == [[expected]]
    assert mismatches[0]["decision"] == record
    assert chain_verify.verify().ok


def test_a_partial_edit_is_compared_merged_into_the_held_call(
    server_settings: Any,
    enqueued: list[Any],
    mismatches: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """An edit that names only the changed argument runs as the held call with that key
    replaced: the record compares that merged call with what ran (no "ran with other args"),
    and its diff names the changed key only, whether the edit is stored as given or merged."""
    run_now("walkthrough", MOVE, django_capture_on_commit_callbacks)
    review = Review.objects.get(status="pending")
    call = review.tool_calls[0]
    event = decide_and_resume(
        review,
        None,
        {"tool_calls": [{"id": call["id"], "action": "edit", "args": {"day": "Thursday"}}]},
        django_capture_on_commit_callbacks,
    )
    record = event.data
    merged = {**call["args"], "day": "Thursday"}
    [ran] = record["executed"]["tool_calls"]
    assert ran["args"] == merged and ran["status"] == "success"
    assert record["edits"] == [
        {
            "id": call["id"],
            "name": "reschedule_appointment",
            "args": {"day": {"from": "Tuesday", "to": "Thursday"}},
        }
    ]
    assert record["mismatches"] == [] and record["mismatch_kinds"] == [] and mismatches == []
    # The same decision stored already merged reads the same: merging a full edit changes nothing.
    decision = Decision.objects.get(review=review)
    decision.tool_calls = [{"id": call["id"], "action": "edit", "args": merged}]
    state = nitro_assistants.assistants()["walkthrough"].thread_state(
        thread_id=str(review.thread.thread_id)
    )["values"]
    again = decision_record(decision, review, state["messages"], state=state)
    assert again["edits"] == record["edits"] and again["mismatches"] == []


def test_a_tool_that_failed_is_an_errored_mismatch(
    server_settings: Any,
    enqueued: list[Any],
    mismatches: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """A call approved that ran and failed (its tool message has ``status: "error"``) did not do
    what was decided: the record says which tool, its call id and the error, and the signal is
    sent."""
    run_now(
        "refunds",
        'tools: [{"name": "void_order", "args": {"order_id": 7}}]',
        django_capture_on_commit_callbacks,
    )
    review = Review.objects.get(status="pending")
    call = review.tool_calls[0]
    event = decide_and_resume(
        review,
        None,
        {"tool_calls": [{"id": call["id"], "action": "approve"}]},
        django_capture_on_commit_callbacks,
    )
    record = event.data
    [ran] = record["executed"]["tool_calls"]
    assert ran["ran"] is True and ran["status"] == "error"
    expected = f"void_order ({call['id']}) was approved but failed: order 7 is already shipped"
    assert record["mismatches"] == [expected]
    assert record["mismatch_kinds"] == [
        {
            "kind": "errored",
            "message": expected,
            "id": call["id"],
            "name": "void_order",
            "error": "order 7 is already shipped",
        }
    ]
    [sent] = mismatches
    assert sent["mismatches"] == [expected] and sent["decision"].review == review
    assert sent["mismatch_kinds"][0]["kind"] == "errored"
    assert chain_verify.verify().ok
