"""``run_started``: recorded once per run, by the delivery that counts its first attempt.

The run's attempt is counted by a compare-and-set (``QuerySet.update()``), then the event
recorded through the audit chain, before the server is called. These tests hold what the trail
says on either database.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from nitro_assistants import services
from nitro_assistants.models import AuditChain, Event, Run
from nitro_assistants.services import chain_verify, runs
from nitro_assistants.testing import FakeAssistant, run_result
from tests.reliability.test_concurrent_decisions import race

pytestmark = pytest.mark.django_db(transaction=True)


def started(run: Run) -> list[Event]:
    return list(Event.objects.filter(verb="run_started", run_id=run.pk))


def test_the_first_delivery_records_run_started_linked_into_the_threads_chain(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    fake_assistant.results = [run_result(reply="Hello")]
    run = services.start_run("walkthrough", "hi")
    with CaptureQueriesContext(connection) as queries:
        claimed = runs.claim_run(str(run.pk))  # as the task gets it: the pk as text
    assert claimed.attempts == 1 and claimed.status == Run.Status.RUNNING
    assert claimed.thread.status == "busy"
    (event,) = started(run)
    assert (event.thread_id, event.actor_id, event.review_id) == (run.thread_id, None, None)
    verbs = list(Event.objects.filter(thread=run.thread).order_by("seq").values_list("verb", "seq"))
    assert verbs == [("thread_opened", 1), ("run_requested", 2), ("run_started", 3)]
    head = AuditChain.objects.get(chain=str(run.thread.thread_id))
    assert (head.seq, head.hash) == (3, event.hash)
    result = chain_verify.verify()
    assert result.ok, result.broken
    if connection.vendor == "postgresql":
        # The attempt counted (one UPDATE), the run read with its thread, the event appended.
        assert len(queries) == 3


def test_a_redelivery_counts_its_attempt_and_records_no_second_run_started(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    """A worker died after counting its attempt: the next delivery sees attempts 2 and writes
    no ``run_started`` (the run had started); a finished run's delivery changes nothing."""
    fake_assistant.results = [run_result(reply="Hello")]
    run = services.start_run("walkthrough", "hi")
    runs.claim_run(run.pk)
    again = runs.claim_run(run.pk)
    assert again.attempts == 2
    assert len(started(run)) == 1
    fake_assistant.results = [run_result(reply="Hello")]
    finished = services.execute_run(run.pk)
    assert finished.status == Run.Status.SUCCEEDED
    assert services.execute_run(run.pk).attempts == finished.attempts  # finished: not counted
    assert len(started(run)) == 1
    assert chain_verify.verify().ok


def test_run_started_on_a_thread_with_an_earlier_run(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    """The second run of a thread: its event chains after the first run's whole trail."""
    fake_assistant.results = [run_result(reply="One"), run_result(reply="Two")]
    first = services.execute_run(services.start_run("walkthrough", "hi").pk)
    second = services.start_run(first.thread, "again")
    services.execute_run(second.pk)
    (event,) = started(second)
    last = Event.objects.filter(thread=first.thread).order_by("-seq").first()
    assert last is not None and event.seq is not None
    assert event.seq < last.seq  # the run's own events follow it
    result = chain_verify.verify()
    assert result.ok, result.broken


def test_no_such_run_is_does_not_exist_and_writes_nothing(enqueued: list[Any]) -> None:
    with pytest.raises(Run.DoesNotExist):
        runs.claim_run(uuid.uuid4())
    assert not Event.objects.filter(verb="run_started").exists()


@pytest.mark.postgresql("row locks: two deliveries of one run at the same moment")
def test_two_deliveries_at_once_record_one_run_started(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    runs_ = [services.start_run("walkthrough", "hi") for _ in range(4)]
    jobs = [functools.partial(runs.claim_run, run.pk) for run in runs_ for _ in range(2)]
    results = race(*jobs)
    assert [r for r in results if isinstance(r, Exception)] == []
    for run in runs_:
        # Both attempts counted (each delivery read the run after both counts, or between).
        assert Run.objects.get(pk=run.pk).attempts == 2
        assert len([r for r in results if r.pk == run.pk]) == 2
        assert len(started(run)) == 1
    result = chain_verify.verify()
    assert result.ok, result.broken
