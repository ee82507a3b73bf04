"""A run's and a resume's mirror read the thread's open reviews after taking the thread's lock
(``select_for_update``), in a statement of their own after it: under READ COMMITTED that
statement sees what the lock's previous holder committed.

Each test has another writer (a real service call, in a thread and connection of its own) hold
the thread's lock with the reviews changed, and commit only once the mirror waits for that
lock: the mirror then acts on the reviews as that writer left them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from nitro_assistants import services, tasks
from nitro_assistants.models import Decision, Event, Review, Run
from nitro_assistants.services import chain_verify
from nitro_assistants.testing import FakeAssistant, run_result
from tests.core.conftest import tool_review

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("row locks: a writer holds the thread's lock while the mirror waits"),
]

APPROVE = {"tool_calls": [{"id": "call_1", "action": "approve"}]}


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs and resumes the services enqueue are run by the tests themselves."""
    for task in (tasks.run_thread, tasks.resume_thread, tasks.collect_run, tasks.sync_thread):
        monkeypatch.setattr(task, "delay", lambda *args, **kwargs: None)


def holding_until_waited_for(job: Callable[[], Any]) -> Callable[[], list[Any]]:
    """Start ``job`` in a thread of its own, inside a transaction it keeps open once ``job``
    returns (holding the locks ``job`` took) until this thread's connection waits for one of
    them; returns when ``job`` has returned. Call what it returns to join the thread: [``job``'s
    value, whether this connection waited for it]."""
    waiter = connection.connection.info.backend_pid
    holding = threading.Event()
    outcome: list[Any] = []

    def run() -> None:
        try:
            with transaction.atomic():
                outcome.append(job())
                holding.set()
                waited = False
                with connection.cursor() as cursor:
                    for _ in range(200):
                        cursor.execute(
                            "SELECT %s = ANY(pg_blocking_pids(%s))",
                            [connection.connection.info.backend_pid, waiter],
                        )
                        if cursor.fetchone()[0]:
                            waited = True
                            break
                        threading.Event().wait(0.05)
                outcome.append(waited)
        except Exception as exc:
            outcome.append(exc)
            holding.set()
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    assert holding.wait(30)

    def join() -> list[Any]:
        worker.join(30)
        assert not worker.is_alive()
        return outcome

    return join


def during_server_call(
    fake: FakeAssistant, method: str, job: Callable[[], Any]
) -> list[Callable[[], list[Any]]]:
    """The next call of ``fake.<method>`` (the server's call of a run or a resume) first has
    ``job`` take and hold its locks elsewhere (:func:`holding_until_waited_for`)."""
    started: list[Callable[[], list[Any]]] = []
    real = getattr(fake, method)

    def call(*args: Any, **kwargs: Any) -> Any:
        if not started:
            started.append(holding_until_waited_for(job))
        return real(*args, **kwargs)

    setattr(fake, method, call)
    return started


def reviewer(user_model: Any) -> Any:
    """A staff user who may decide reviews, read afresh (its permissions not cached)."""
    jane = user_model.objects.create_user("jane", is_staff=True)
    jane.user_permissions.add(Permission.objects.get(codename="decide_review"))
    return user_model.objects.get(pk=jane.pk)


def open_reviews_read_after_the_threads_lock(queries: CaptureQueriesContext) -> bool:
    """The reviews were read once, in a statement after the one that locked the thread."""
    sent = [q["sql"] for q in queries.captured_queries]
    locks = [
        i
        for i, sql in enumerate(sent)
        if sql.startswith('SELECT "nitro_assistants_thread') and "FOR NO KEY UPDATE" in sql
    ]
    reads = [i for i, sql in enumerate(sent) if sql.startswith('SELECT "nitro_assistants_review')]
    return len(locks) == 1 and len(reads) == 1 and locks[0] < reads[0]


def test_a_new_message_committed_while_a_runs_mirror_waits_is_seen_by_it(
    fake_assistant: FakeAssistant,
) -> None:
    """The pause the run's mirror records was shown (by a sync) as a pending review, which a
    new message supersedes while the mirror waits for the thread: read before that commit, the
    mirror would take the superseded review for the pause's own and leave no pending review."""
    run = services.start_run("walkthrough", "Move me to Tuesday")
    thread = run.thread
    fake_assistant.pending = tool_review("int-1")
    services.sync_thread(thread.pk)  # the server already shows the pause: a review for it
    shown = Review.objects.get(thread=thread, status=Review.Status.PENDING)
    fake_assistant.results = [run_result(tool_review("int-1"))]
    started = during_server_call(
        fake_assistant, "run", lambda: services.start_run(thread, "Actually, never mind")
    )
    connection.ensure_connection()

    with CaptureQueriesContext(connection) as queries:
        services.execute_run(run.pk)

    (join,) = started
    new_run, waited = join()
    assert waited is True  # the mirror's statement did wait for the new message's commit
    assert isinstance(new_run, Run)
    shown.refresh_from_db()
    assert shown.status == Review.Status.SUPERSEDED
    pending = Review.objects.get(thread=thread, status=Review.Status.PENDING)
    assert pending.pk != shown.pk and pending.interrupt_ids == ["int-1"]
    assert Run.objects.get(pk=run.pk).status == Run.Status.INTERRUPTED
    assert chain_verify.verify().ok
    assert open_reviews_read_after_the_threads_lock(queries)


def test_a_sync_committed_while_a_resumes_mirror_waits_is_seen_by_it(
    fake_assistant: FakeAssistant, django_user_model: Any
) -> None:
    """The resume paused again; a sync mirrors that pause while the resume's mirror waits for
    the thread: read before that commit, the mirror would record the pause a second time (and
    fail on the one-pending rule). The review the resume applies is not open once applied."""
    run = services.start_run("walkthrough", "Move me to Tuesday")
    thread = run.thread
    fake_assistant.results = [run_result(tool_review("int-1"))]
    services.execute_run(run.pk)
    first = Review.objects.get(thread=thread, status=Review.Status.PENDING)
    decision = services.decide(first, reviewer(django_user_model), APPROVE, via="admin")

    fake_assistant.results = [run_result(tool_review("int-2"))]
    fake_assistant.pending = tool_review("int-2")
    started = during_server_call(fake_assistant, "review", lambda: services.sync_thread(thread.pk))
    connection.ensure_connection()

    with CaptureQueriesContext(connection) as queries:
        services.execute_resume(decision.pk)

    (join,) = started
    synced, waited = join()
    assert waited is True
    assert synced.pk == thread.pk
    assert Decision.objects.get(pk=decision.pk).outcome == Decision.Outcome.APPLIED
    first.refresh_from_db()
    assert first.status == Review.Status.APPLIED
    (second,) = Review.objects.filter(thread=thread, status=Review.Status.PENDING)
    assert second.interrupt_ids == ["int-2"]
    assert Event.objects.filter(review=second, verb="review_requested").count() == 1
    assert chain_verify.verify().ok
    assert open_reviews_read_after_the_threads_lock(queries)


def test_without_anyone_meanwhile_the_reviews_are_read_once_after_the_lock(
    fake_assistant: FakeAssistant, django_user_model: Any
) -> None:
    """The same flow with nobody else on the thread: the open reviews are read once, after the
    thread's lock, for the run and for the resume (the applied review leaves them)."""
    run = services.start_run("walkthrough", "Move me to Tuesday")
    fake_assistant.results = [run_result(tool_review("int-1")), run_result(tool_review("int-2"))]
    with CaptureQueriesContext(connection) as queries:
        services.execute_run(run.pk)
    assert open_reviews_read_after_the_threads_lock(queries)
    first = Review.objects.get(thread=run.thread, status=Review.Status.PENDING)
    decision = services.decide(first, reviewer(django_user_model), APPROVE)
    with CaptureQueriesContext(connection) as queries:
        services.execute_resume(decision.pk)
    assert open_reviews_read_after_the_threads_lock(queries)
    first.refresh_from_db()
    assert first.status == Review.Status.APPLIED
    (second,) = Review.objects.filter(thread=run.thread, status=Review.Status.PENDING)
    assert second.interrupt_ids == ["int-2"] and second.pk != first.pk


def test_the_review_a_resume_applies_is_closed_to_its_mirrors_read(
    fake_assistant: FakeAssistant, django_user_model: Any
) -> None:
    """The read comes before the resume's own writes, which leaves out the review it applies
    (no longer open once applied): a resume that pauses on the same interrupt id again gets a
    review of its own."""
    run = services.start_run("walkthrough", "Move me to Tuesday")
    fake_assistant.results = [run_result(tool_review("int-1")), run_result(tool_review("int-1"))]
    services.execute_run(run.pk)
    first = Review.objects.get(thread=run.thread, status=Review.Status.PENDING)
    decision = services.decide(first, reviewer(django_user_model), APPROVE)
    with CaptureQueriesContext(connection) as queries:
        services.execute_resume(decision.pk)
    first.refresh_from_db()
    assert first.status == Review.Status.APPLIED
    (again,) = Review.objects.filter(thread=run.thread, status=Review.Status.PENDING)
    assert again.pk != first.pk and again.interrupt_ids == ["int-1"]
    assert open_reviews_read_after_the_threads_lock(queries)
