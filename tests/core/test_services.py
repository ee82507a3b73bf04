"""Services against a scripted assistant: what is stored, sent and enqueued, and when."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.utils import timezone

from nitro_assistants import services
from nitro_assistants.exceptions import ReviewSupersededError, RunError, ThreadResumptionError
from nitro_assistants.models import Decision, Delivery, Event, Review, Run, Thread
from nitro_assistants.testing import FakeAssistant, reply_review, run_result
from tests.core.conftest import sent, tool_review
from tests.factories import DeliveryFactory, ReviewFactory, ThreadFactory

pytestmark = pytest.mark.django_db


def test_start_run_records_then_enqueues_after_commit(
    django_capture_on_commit_callbacks: Any, fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        run = services.start_run("walkthrough", "Can I move my appointment?")
        assert enqueued == []  # nothing leaves before commit
    assert len(callbacks) == 1
    assert enqueued == [("nitro_assistants.run_thread", (str(run.pk),))]
    assert run.status == Run.Status.QUEUED
    assert run.input == {"messages": [{"role": "user", "content": "Can I move my appointment?"}]}
    assert list(run.thread.events.values_list("verb", flat=True)) == [
        "thread_opened",
        "run_requested",
    ]


def test_start_run_refuses_no_messages(fake_assistant: FakeAssistant) -> None:
    with pytest.raises(RunError):
        services.start_run("walkthrough", [])
    assert not Thread.objects.exists()


def test_execute_run_mirrors_a_pause_once(
    django_capture_on_commit_callbacks: Any,
    fake_assistant: FakeAssistant,
    enqueued: list[Any],
    signal_log: list[Any],
) -> None:
    run = services.start_run("walkthrough", "Can I move my appointment?")
    pause = tool_review()
    fake_assistant.results = [run_result(pause)]
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_run(run.pk)
        services.execute_run(run.pk)  # delivered twice: finished runs are left alone
    run.refresh_from_db()
    assert run.status == Run.Status.INTERRUPTED
    assert len(fake_assistant.called("run")) == 1
    assert fake_assistant.called("run")[0]["metadata"] == {"nitro_run_id": str(run.pk)}
    review = Review.objects.get()
    assert (review.kind, review.status, review.interrupt_ids) == (
        "tool_calls",
        "pending",
        [pause.interrupt_id],
    )
    assert review.tool_calls[0]["name"] == "reschedule_appointment"
    assert run.thread.__class__.objects.get().status == Thread.Status.INTERRUPTED
    assert [kw["review"].pk for kw in sent(signal_log, "review_requested")] == [review.pk]


def test_redelivered_run_finds_the_remote_run_by_its_metadata(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    run = services.start_run("walkthrough", "hello")
    # A first delivery created the remote run, then the worker died before recording it.
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, attempts=1)
    fake_assistant.remote_runs = [
        {"run_id": "r-1", "status": "success", "metadata": {"nitro_run_id": str(run.pk)}}
    ]
    services.execute_run(run.pk)
    run.refresh_from_db()
    assert fake_assistant.called("run") == []
    assert fake_assistant.called("join_run") == [
        {"thread_id": str(run.thread.thread_id), "run_id": "r-1"}
    ]
    assert (run.remote_run_id, run.status, run.attempts) == ("r-1", Run.Status.SUCCEEDED, 2)


def test_transient_errors_propagate_and_others_fail_the_run(
    django_capture_on_commit_callbacks: Any,
    fake_assistant: FakeAssistant,
    enqueued: list[Any],
    signal_log: list[Any],
) -> None:
    run = services.start_run("walkthrough", "hello")
    fake_assistant.fail_next("run", RunError("connection refused", transient=True))  # type: ignore[call-arg]
    with pytest.raises(RunError):
        services.execute_run(run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert sent(signal_log, "run_failed") == []

    fake_assistant.fail_next("run", RunError("422: assistant not found", transient=False))  # type: ignore[call-arg]
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_run(run.pk)
    run.refresh_from_db()
    assert (run.status, run.error) == (Run.Status.FAILED, "422: assistant not found")
    assert [kw["error"] for kw in sent(signal_log, "run_failed")] == ["422: assistant not found"]


def test_new_message_supersedes_the_pending_review(
    django_capture_on_commit_callbacks: Any,
    fake_assistant: FakeAssistant,
    enqueued: list[Any],
    signal_log: list[Any],
) -> None:
    review = ReviewFactory()
    with django_capture_on_commit_callbacks(execute=True):
        services.start_run(review.thread, "Actually, never mind")
    review.refresh_from_db()
    assert review.status == Review.Status.SUPERSEDED
    assert [(kw["review"].pk, kw["reason"]) for kw in sent(signal_log, "review_superseded")] == [
        (review.pk, "new_message")
    ]
    with pytest.raises(services.ReviewNotPendingError):
        services.decide(review, None, {"tool_calls": [{"id": "call_1", "action": "approve"}]})


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        ({"tool_calls": [{"id": "call_1", "action": "launch"}]}, "Invalid review action `launch`"),
        ({"tool_calls": [{"id": "call_9", "action": "approve"}]}, "not under review"),
        ({"tool_calls": []}, "needs a decision; missing: `call_1`"),
        ({"tool_calls": [{"id": "call_1", "action": "edit"}]}, "needs `args`"),
        (
            {"tool_calls": [{"id": "call_1", "action": "edit", "args": {"nope": 1}}]},
            "no argument `nope`",
        ),
        ({"tool_calls": [{"id": "call_1", "action": "respond"}]}, "needs a `message`"),
        (
            {"reply": {"action": "approve"}},
            "A reply review was sent, but the thread is paused on tool calls",
        ),
        ({"tool_calls": [{"id": "call_1", "action": "approve"}] * 2}, "more than once"),
    ],
)
def test_decide_validates_before_storing_anything(
    fake_assistant: FakeAssistant, enqueued: list[Any], decision: dict[str, Any], message: str
) -> None:
    review = ReviewFactory()
    with pytest.raises(ThreadResumptionError, match=message):
        services.decide(review, None, decision)
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert not Decision.objects.exists()
    assert not Run.objects.exists()
    assert not Event.objects.exists()


def test_reply_review_never_allows_respond(enqueued: list[Any]) -> None:
    review = ReviewFactory(reply=True)
    with pytest.raises(
        ThreadResumptionError,
        match="Invalid review action `respond` for the reply; allowed: approve, edit, reject",
    ):
        services.decide(review, None, {"reply": {"action": "respond", "message": "x"}})


def test_decide_records_then_resumes_once(
    django_capture_on_commit_callbacks: Any,
    fake_assistant: FakeAssistant,
    enqueued: list[Any],
    signal_log: list[Any],
    admin_user: Any,
) -> None:
    review = ReviewFactory(reply=True)
    with django_capture_on_commit_callbacks(execute=True):
        decision = services.decide(
            review, admin_user, {"reply": {"action": "edit", "content": "Tuesday 10:00 it is."}}
        )
    assert enqueued == [("nitro_assistants.resume_thread", (decision.pk,))]
    assert sent(signal_log, "review_decided")[0]["decision"] == decision
    with pytest.raises(services.ReviewNotPendingError, match="already decided"):
        services.decide(review, admin_user, {"reply": {"action": "approve"}})

    fake_assistant.results = [run_result(messages=[{"type": "ai", "id": "ai-2", "content": "x"}])]
    services.execute_resume(decision.pk)
    services.execute_resume(decision.pk)  # redelivered: applied already
    assert len(fake_assistant.called("review")) == 1
    call = fake_assistant.called("review")[0]
    assert call["reply"] == {"action": "edit", "content": "Tuesday 10:00 it is."}
    assert call["interrupt_id"] == review.interrupt_id
    assert call["reviewer_id"] == "admin"
    decision.refresh_from_db()
    review.refresh_from_db()
    assert (decision.outcome, review.status) == ("applied", "applied")
    assert decision.run is not None
    assert decision.run.status == Run.Status.SUCCEEDED


def test_stale_resume_supersedes_the_review(
    django_capture_on_commit_callbacks: Any,
    fake_assistant: FakeAssistant,
    enqueued: list[Any],
    signal_log: list[Any],
) -> None:
    review = ReviewFactory()
    decision = services.decide(
        review, None, {"tool_calls": [{"id": "call_1", "action": "approve"}]}
    )
    fake_assistant.fail_next("review", ReviewSupersededError("no longer paused"))
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(decision.pk)
    decision.refresh_from_db()
    review.refresh_from_db()
    assert (decision.outcome, review.status) == ("superseded", "superseded")
    assert len(sent(signal_log, "review_superseded")) == 1
    assert sent(signal_log, "run_failed") == []


def test_a_resume_the_server_applied_is_recorded_applied_though_its_stream_showed_nothing(
    django_capture_on_commit_callbacks: Any,
    fake_assistant: FakeAssistant,
    enqueued: list[Any],
    signal_log: list[Any],
) -> None:
    review = ReviewFactory()
    decision = services.decide(
        review, None, {"tool_calls": [{"id": "call_1", "action": "approve"}]}
    )
    fake_assistant.fail_next("review", ReviewSupersededError("no update in the stream"))
    fake_assistant.applied = run_result(
        reply_review()
    )  # a checkpoint carries the decision's metadata
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(decision.pk)
    decision.refresh_from_db()
    review.refresh_from_db()
    assert (decision.outcome, review.status) == ("applied", "applied")
    (asked,) = fake_assistant.called("resume_outcome")
    assert asked["metadata"] == {
        "reviewer_id": decision.reviewer_id,
        "reviewed_at": decision.decided_at.isoformat(),
    }
    assert sent(signal_log, "review_superseded") == []
    assert Review.objects.get(status="pending").kind == "reply"


def test_a_resume_that_applied_nothing_while_its_pause_is_pending_is_retried(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    review = ReviewFactory()
    decision = services.decide(
        review, None, {"tool_calls": [{"id": "call_1", "action": "approve"}]}
    )
    fake_assistant.fail_next("review", ReviewSupersededError("no update in the stream"))
    fake_assistant.pending = tool_review(review.interrupt_ids[0])  # still pending on the server
    with pytest.raises(ThreadResumptionError, match="still pending") as caught:
        services.execute_resume(decision.pk)
    assert caught.value.transient
    decision.refresh_from_db()
    assert decision.outcome == Decision.Outcome.PENDING


def test_a_review_whose_interrupt_id_is_too_long_is_refused_not_a_500(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    review = ReviewFactory(interrupt_ids=["f" * 80])  # mirrored before such ids were refused
    with pytest.raises(ThreadResumptionError, match="longer than 64 characters"):
        services.decide(review, None, {"tool_calls": [{"id": "call_1", "action": "approve"}]})
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert not Decision.objects.exists() and not Run.objects.filter(kind="resume").exists()


def test_sync_finds_a_pause_that_appeared_and_one_that_vanished(
    django_capture_on_commit_callbacks: Any, fake_assistant: FakeAssistant, signal_log: list[Any]
) -> None:
    thread = ThreadFactory()
    fake_assistant.pending = reply_review()
    with django_capture_on_commit_callbacks(execute=True):
        services.sync_thread(thread)
        services.sync_thread(thread)  # same pause: same review
    review = Review.objects.get()
    assert review.kind == "reply"
    assert review.reply is not None
    assert review.reply["content"] == "See you Tuesday."
    fake_assistant.pending = None
    with django_capture_on_commit_callbacks(execute=True):
        services.sync_thread(thread)
    review.refresh_from_db()
    assert review.status == Review.Status.SUPERSEDED
    assert len(sent(signal_log, "review_requested")) == 1
    assert len(sent(signal_log, "review_superseded")) == 1


def stamped(status: str, **stamp: Any) -> dict[str, Any]:
    return {
        "type": "ai",
        "id": "ai-9",
        "content": "See you Tuesday.",
        "response_metadata": {"delivery": {"status": status, "tool": "send_sms", **stamp}},
    }


def test_delivery_outcomes_are_signalled_once(
    django_capture_on_commit_callbacks: Any, fake_assistant: FakeAssistant, signal_log: list[Any]
) -> None:
    thread = ThreadFactory()
    for status, stamp in [
        ("pending", {"attempts": 0}),
        ("failed", {"attempts": 2, "error": "gateway refused"}),
        ("failed", {"attempts": 2, "error": "gateway refused"}),
    ]:
        fake_assistant.state = {"values": {"messages": [stamped(status, **stamp)]}}
        with django_capture_on_commit_callbacks(execute=True):
            services.sync_thread(thread)
    with django_capture_on_commit_callbacks(execute=True):
        services.sweep_deliveries()
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.error, delivery.attempts) == ("failed", "gateway refused", 2)
    assert [kw["error"] for kw in sent(signal_log, "delivery_failed")] == ["gateway refused"]
    assert sent(signal_log, "delivery_pending") == []


def test_sweep_alerts_pending_past_the_limit_once(
    django_capture_on_commit_callbacks: Any, signal_log: list[Any], settings: Any
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "DELIVERY_PENDING_AFTER": 60}
    now = timezone.now()
    old = DeliveryFactory(first_seen_at=now - datetime.timedelta(seconds=61))
    DeliveryFactory(first_seen_at=now - datetime.timedelta(seconds=30))  # not yet
    DeliveryFactory(status="delivered", first_seen_at=now - datetime.timedelta(hours=1))
    failed = DeliveryFactory(status="failed", error="nope", first_seen_at=now)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.sweep_deliveries(now) == {"pending": 1, "failed": 1}
        assert services.sweep_deliveries(now) == {"pending": 0, "failed": 0}
    assert [kw["delivery"].pk for kw in sent(signal_log, "delivery_pending")] == [old.pk]
    assert sent(signal_log, "delivery_pending")[0]["pending_for"] == pytest.approx(61, abs=1)
    assert [kw["delivery"].pk for kw in sent(signal_log, "delivery_failed")] == [failed.pk]


# -- thread metadata ----------------------------------------------------------------------------

CUSTOMER = {"customer_name": "Jane Doe", "phone": "+1 555 0100"}


def statements(work: Any) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        work()
    return len(queries)


def test_a_new_threads_metadata_is_stored_and_sent_with_the_run_creating_it(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    # In the INSERT the thread gets anyway: no statement more than a thread without metadata.
    plain = statements(lambda: services.start_run("walkthrough", "hello"))
    described = statements(lambda: services.start_run("walkthrough", "hello", metadata=CUSTOMER))
    assert described == plain
    run = Run.objects.get(thread__metadata__customer_name="Jane Doe")
    assert run.thread.metadata == CUSTOMER
    assert run.input == {"messages": [{"role": "user", "content": "hello"}]}  # nothing to patch
    services.execute_run(run.pk)
    (call,) = [
        c for c in fake_assistant.called("run") if c["thread_id"] == str(run.thread.thread_id)
    ]
    assert call["thread_metadata"] == CUSTOMER
    assert call["metadata"] == {"nitro_run_id": str(run.pk)}  # the run's own stay apart
    assert fake_assistant.called("update_thread") == []  # no request of its own


def test_metadata_given_for_an_existing_thread_is_merged_here_and_on_the_server(
    fake_assistant: FakeAssistant, enqueued: list[Any], settings: Any
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "THREAD_SUBJECT": ["customer_name"]}
    first = services.start_run("walkthrough", "hello", metadata={"phone": "+1 555 0100"})
    services.execute_run(first.pk)
    thread = Thread.objects.get()
    assert "Jane" not in thread.subject  # no customer_name yet: the first message describes it
    run = services.start_run(thread, "it's Jane", metadata={"customer_name": "Jane Doe"})
    thread.refresh_from_db()
    assert thread.metadata == CUSTOMER
    assert thread.subject == "Jane Doe"  # recomputed as the metadata changed
    assert run.input["thread_metadata"] == {"customer_name": "Jane Doe"}
    services.execute_run(run.pk)
    assert fake_assistant.called("update_thread") == [
        {"thread_id": str(thread.thread_id), "metadata": {"customer_name": "Jane Doe"}}
    ]
    # Sent before the run, which carries the whole metadata in case it creates the thread.
    names = [name for name, _ in fake_assistant.calls]
    assert names.index("update_thread") < len(names) - 1 - names[::-1].index("run")
    assert fake_assistant.called("run")[-1]["thread_metadata"] == CUSTOMER


def test_metadata_that_is_not_a_dict_is_refused(fake_assistant: FakeAssistant) -> None:
    with pytest.raises(RunError, match="metadata is a dict"):
        services.start_run("walkthrough", "hello", metadata=["Jane"])  # type: ignore[arg-type]
    assert not Thread.objects.exists()
