"""Row writes queued to ride on the audit statement (nitro_assistants.services.sql.writes).

What the queue must never change: every statement sees what it saw when each write was its own
statement (a read after a queued write sees it, a savepoint rolled back takes it back), and a
write that was made is not lost when the block raises. What it saves: the writes and the events
describing them are one statement."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from nitro_assistants import services
from nitro_assistants.models import AuditChain, Event, Review, Run, Stop, Thread
from nitro_assistants.services import chain_verify, claims
from nitro_assistants.services.audit import events_batched, record_event
from nitro_assistants.services.sql import writes
from nitro_assistants.testing import FakeAssistant
from tests.factories import ReviewFactory, RunFactory, ThreadFactory

pytestmark = pytest.mark.django_db(transaction=True)
postgresql = pytest.mark.postgresql("the queue is PostgreSQL's (data-modifying CTEs)")


def statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries]


def started_chain(thread: Thread) -> Thread:
    record_event(thread, "thread_opened")  # the head exists from its first event on
    return thread


@postgresql
def test_writes_ride_on_the_events_statement() -> None:
    thread = started_chain(ThreadFactory())
    run = RunFactory(thread=thread)
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), events_batched():
        thread.status = Thread.Status.BUSY
        writes.save(thread, ["status"])
        run.reply = "Done"
        writes.save(run, ["reply"])
        record_event(thread, "run_succeeded", run=run)
    sent = statements(queries)
    assert len(sent) == 3, sent  # BEGIN, one statement, COMMIT
    assert "UPDATE" in sent[1] and "INSERT INTO" in sent[1]
    assert Thread.objects.get(pk=thread.pk).status == Thread.Status.BUSY
    assert Run.objects.get(pk=run.pk).reply == "Done"
    assert chain_verify.verify().ok


@postgresql
def test_a_read_after_a_queued_write_sees_it() -> None:
    thread = ThreadFactory(status=Thread.Status.IDLE)
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), events_batched():
        thread.status = Thread.Status.ERROR
        writes.save(thread, ["status"])
        seen = Thread.objects.get(pk=thread.pk).status
    assert seen == Thread.Status.ERROR
    sent = statements(queries)
    assert sent[1].startswith("WITH w0 AS (UPDATE") and sent[2].startswith("SELECT")


@postgresql
def test_writes_of_one_row_are_merged_and_an_insert_takes_later_saves() -> None:
    thread = started_chain(ThreadFactory())
    with transaction.atomic(), events_batched():
        thread.status = Thread.Status.BUSY
        writes.save(thread, ["status"])
        thread.subject = "Order 42"
        writes.save(thread, ["subject"])
        run = writes.insert(Run(thread=thread, kind=Run.Kind.RUN, input={}))
        run.reply = "later"
        writes.save(run, ["reply"])
        queue = writes.pending(connection.alias)
        assert queue is not None and len(queue.writes) == 2
        record_event(thread, "run_requested", run=run)
    stored = Thread.objects.get(pk=thread.pk)
    assert (stored.status, stored.subject) == (Thread.Status.BUSY, "Order 42")
    assert Run.objects.get(pk=run.pk).reply == "later"


@postgresql
def test_a_savepoint_rolled_back_takes_its_queued_write_back() -> None:
    thread = ThreadFactory(status=Thread.Status.IDLE)
    before = Thread.objects.get(pk=thread.pk).subject
    with transaction.atomic(), events_batched():
        try:
            with transaction.atomic():
                thread.subject = "rolled back"
                writes.save(thread, ["subject"])
                raise RuntimeError("abandoned")
        except RuntimeError:
            pass
        thread.status = Thread.Status.BUSY
        writes.save(thread, ["status"])
    stored = Thread.objects.get(pk=thread.pk)
    assert (stored.subject, stored.status) == (before, Thread.Status.BUSY)


@postgresql
def test_a_block_that_raises_keeps_the_writes_it_made_but_writes_no_event() -> None:
    thread = started_chain(ThreadFactory(subject="before"))
    events = Event.objects.count()
    with transaction.atomic():
        try:
            with events_batched():
                thread.subject = "written"
                writes.save(thread, ["subject"])
                record_event(thread, "not_written")
                raise ValueError("after the write")
        except ValueError:
            pass
    assert Thread.objects.get(pk=thread.pk).subject == "written"
    assert Event.objects.count() == events


def test_outside_a_transaction_a_write_is_sent_at_once() -> None:
    thread = ThreadFactory(subject="before")
    with events_batched():
        thread.subject = "now"
        writes.save(thread, ["subject"])
        assert Thread.objects.get(pk=thread.pk).subject == "now"
        assert writes.pending(connection.alias) is None


@postgresql
def test_a_new_thread_its_run_and_events_are_one_statement(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    """One statement for the rows, the stop check inside it (issue 36: whether a stop refuses
    a run of the assistant; the thread's INSERT selects nothing while one does)."""
    with CaptureQueriesContext(connection) as queries:
        run = services.start_run("walkthrough", "Hello", metadata={"customer": "Ada"})
    (written,) = statements(queries)
    assert Stop._meta.db_table in written
    assert Thread._meta.db_table in written and Run._meta.db_table in written
    thread = Thread.objects.get(pk=run.thread_id)
    assert thread.metadata == {"customer": "Ada"}
    assert Run.objects.get(pk=run.pk).input == {"messages": [{"role": "user", "content": "Hello"}]}
    assert list(thread.events.order_by("seq").values_list("verb", flat=True)) == [
        "thread_opened",
        "run_requested",
    ]
    assert AuditChain.objects.get(chain=str(thread.thread_id)).seq == 2
    assert chain_verify.verify().ok
    services.execute_run(run.pk)  # the worker's part: its events chain after the two
    assert chain_verify.verify().ok


@postgresql
@pytest.mark.parametrize("scope", ["all", "assistant"])
def test_a_stop_refuses_the_one_statement_and_nothing_is_written(
    fake_assistant: FakeAssistant, enqueued: list[Any], scope: str
) -> None:
    """The stop check rides in the new thread's statement: a stop of everything or of the
    assistant leaves no thread, run, event or chain head behind, and the refusal names the stop
    as the check before it did. A stop of another assistant refuses nothing."""
    from django.contrib.auth import get_user_model

    from nitro_assistants.exceptions import RunsStoppedError
    from nitro_assistants.services import stops

    staff = get_user_model().objects.create_user("ops", is_staff=True, is_superuser=True)
    stops.stop(staff, scope="assistant", assistant="elsewhere", reason="not this one")
    stop = stops.stop(
        staff, scope=scope, assistant="walkthrough" if scope == "assistant" else "", reason="fire"
    )
    counts = [model.objects.count() for model in (Thread, Run, Event, AuditChain)]
    with pytest.raises(RunsStoppedError) as refused:
        services.start_run("walkthrough", "Hello")
    assert refused.value.stop == stop and "fire" in str(refused.value)
    assert [model.objects.count() for model in (Thread, Run, Event, AuditChain)] == counts
    assert [name for name, _ in enqueued if name == "nitro_assistants.run_thread"] == []
    stops.resume(stop, staff)
    run = services.start_run("walkthrough", "Hello")
    assert ("nitro_assistants.run_thread", (str(run.pk),)) in enqueued
    assert Run.objects.get(pk=run.pk).thread.assistant_key == "walkthrough"
    assert chain_verify.verify().ok


@postgresql
def test_a_first_claim_is_one_statement_and_a_renewal_two() -> None:
    from django.contrib.auth import get_user_model

    review = ReviewFactory(status=Review.Status.PENDING)
    started_chain(review.thread)
    user = get_user_model().objects.create_user("ada", is_staff=True)
    with CaptureQueriesContext(connection) as queries:
        first = claims.claim_review(review, user)
    assert len(statements(queries)) == 1
    assert first.pk is not None and first.user_id == user.pk
    assert review.thread.events.filter(verb="review_claimed").count() == 1
    with CaptureQueriesContext(connection) as queries:
        renewed = claims.claim_review(review, user)
    assert len(statements(queries)) == 2
    assert renewed.pk == first.pk and renewed.expires_at >= first.expires_at
    other = get_user_model().objects.create_user("bob", is_staff=True)
    held = claims.claim_review(review, other)
    assert held.user_id == user.pk  # a live claim stays its holder's
    assert review.thread.events.filter(verb="review_claimed").count() == 1
    assert chain_verify.verify().ok
