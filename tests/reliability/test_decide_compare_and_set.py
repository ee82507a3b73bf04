"""``services.decide`` without the review's lock (PostgreSQL, issue 21): the review is read, the
decision checked, and one statement writes the decision, its resume run, the review's status and
the events only while the review and its policy handling are still as read. Each test makes
another writer move the review at the worst moment, between the read and that statement (in a
thread of its own, its own connection): the statement writes nothing, the lock decides as it
always did, and nothing is recorded, enqueued or signalled twice, or for a decision that lost.

The moment is reached through ``reviews._unchanged_gate``, which builds the statement's
condition after the read and before the statement is sent: the competing writer runs for real
there, nothing of ``decide`` is replaced."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from nitro_assistants import services, signals, tasks
from nitro_assistants.exceptions import (
    InteractionConflictError,
    PolicyForbiddenError,
    ReviewNotPendingError,
)
from nitro_assistants.models import Decision, Event, Review, ReviewHandling, Run
from nitro_assistants.services import chain, reviews
from tests.factories import ReviewFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("the compare-and-set is PostgreSQL's; SQLite decides under its lock"),
]

APPROVE = {"tool_calls": [{"id": "call_1", "action": "approve"}]}
REJECT = {"tool_calls": [{"id": "call_1", "action": "reject", "message": "no"}]}


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Decision pks whose resume was enqueued, each checked to be committed when it was sent
    (read from another connection: a resume sent before its decision commits finds none)."""
    sent: list[int] = []

    def delay(decision_pk: int) -> None:
        committed = elsewhere(lambda: Decision.objects.filter(pk=decision_pk).exists())
        assert committed is True, f"decision {decision_pk} was enqueued before it committed"
        sent.append(decision_pk)

    monkeypatch.setattr(tasks.resume_thread, "delay", delay)
    return sent


@pytest.fixture
def decided_signals() -> Iterator[list[int]]:
    """The review pks ``review_decided`` was sent for."""
    sent: list[int] = []

    def receiver(sender: Any, review: Review, **kwargs: Any) -> None:
        sent.append(review.pk)

    signals.review_decided.connect(receiver, weak=False)
    yield sent
    signals.review_decided.disconnect(receiver)


def reviewer(name: str, group: Group | None = None) -> Any:
    user = get_user_model().objects.create_user(name, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="decide_review"))
    if group is not None:
        user.groups.add(group)
    return get_user_model().objects.get(pk=user.pk)  # its permissions read afresh


def elsewhere(job: Callable[[], Any]) -> Any:
    """Run ``job`` to the end in a thread with its own connection (committed when it returns);
    its value, or the exception it raised."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(job())
        except Exception as exc:
            result.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    assert not worker.is_alive()
    return result[0]


@pytest.fixture
def between(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], Any]], list[Any]]:
    """``between(job)``: the next decide runs ``job`` elsewhere after its read and before its
    statement (once); what ``job`` returned lands in the list returned."""

    def arrange(job: Callable[[], Any]) -> list[Any]:
        done: list[Any] = []
        started: list[bool] = []
        real = reviews._unchanged_gate

        def gate(*args: Any, **kwargs: Any) -> Any:
            if not started:  # the first decide's; the job's own decide goes straight on
                started.append(True)
                done.append(elsewhere(job))
            return real(*args, **kwargs)

        monkeypatch.setattr(reviews, "_unchanged_gate", gate)
        return done

    return arrange


def test_a_decide_sends_two_statements_and_enqueues_after_they_commit(
    enqueued: list[int], decided_signals: list[int]
) -> None:
    review = ReviewFactory()
    jane = reviewer("jane")
    assert jane.has_perm("nitro_assistants.decide_review")  # as the view checks, first
    with CaptureQueriesContext(connection) as queries:
        decision = services.decide(review, jane, APPROVE, via="admin")
    assert len(queries) == 2
    assert not any(q["sql"] in ("BEGIN", "COMMIT") for q in queries.captured_queries)
    assert enqueued == [decision.pk]  # checked committed when it was sent
    assert decided_signals == [review.pk]
    review.refresh_from_db()
    assert review.status == Review.Status.DECIDED
    assert Decision.objects.get(review=review).run.kind == Run.Kind.RESUME
    assert chain.verify().ok


def test_decided_by_someone_else_meanwhile_refuses_and_records_nothing_more(
    between: Callable[..., list[Any]], enqueued: list[int], decided_signals: list[int]
) -> None:
    review = ReviewFactory()
    jane, sam = reviewer("jane"), reviewer("sam")
    other = between(lambda: services.decide(review, sam, REJECT, via="admin"))

    with pytest.raises(ReviewNotPendingError):
        services.decide(review, jane, APPROVE, via="admin")

    (won,) = other
    assert isinstance(won, Decision)
    assert list(Decision.objects.filter(review=review)) == [won]
    assert won.decided_by_id == sam.pk
    assert Run.objects.filter(thread=review.thread, kind=Run.Kind.RESUME).count() == 1
    assert Event.objects.filter(review=review, verb="review_decided").count() == 1
    assert enqueued == [won.pk]
    assert decided_signals == [review.pk]
    assert chain.verify().ok


def test_the_same_persons_second_click_meanwhile_gets_the_decision_already_recorded(
    between: Callable[..., list[Any]], enqueued: list[int], decided_signals: list[int]
) -> None:
    review = ReviewFactory()
    jane = reviewer("jane")
    first = between(lambda: services.decide(review, jane, APPROVE, via="admin"))

    again = services.decide(review, jane, APPROVE, via="admin")

    assert isinstance(first[0], Decision)
    assert again.pk == first[0].pk
    assert Decision.objects.filter(review=review).count() == 1
    assert enqueued == [first[0].pk]
    assert decided_signals == [review.pk]


def test_superseded_by_a_new_message_meanwhile_refuses_and_records_nothing(
    between: Callable[..., list[Any]], enqueued: list[int], decided_signals: list[int]
) -> None:
    review = ReviewFactory()
    jane = reviewer("jane")

    def new_message() -> Any:
        with transaction.atomic():
            return services.supersede_pending_review(review.thread, reason="new_message")

    superseded = between(new_message)

    with pytest.raises(ReviewNotPendingError):
        services.decide(review, jane, APPROVE, via="admin")

    assert superseded[0].pk == review.pk
    review.refresh_from_db()
    assert review.status == Review.Status.SUPERSEDED
    assert not Decision.objects.filter(review=review).exists()
    assert not Run.objects.filter(thread=review.thread, kind=Run.Kind.RESUME).exists()
    assert not Event.objects.filter(review=review, verb="review_decided").exists()
    assert enqueued == [] and decided_signals == []
    assert chain.verify().ok


def test_escalated_to_another_group_meanwhile_is_refused_as_the_lock_would(
    between: Callable[..., list[Any]], enqueued: list[int], decided_signals: list[int]
) -> None:
    """A deadline's escalation changes only the handling (the review's row is locked, not
    written): the handling's own check fails the statement."""
    staff, leads = Group.objects.create(name="Staff"), Group.objects.create(name="Leads")
    review = ReviewFactory()
    ReviewHandling.objects.create(review=review, group=staff, approvals_required=1)
    jane = reviewer("jane", staff)

    def escalate() -> int:
        with transaction.atomic():
            Review.objects.select_for_update(no_key=True).get(pk=review.pk)
            return ReviewHandling.objects.filter(review=review).update(
                group=leads, stage=ReviewHandling.Stage.ESCALATED
            )

    assert between(escalate) is not None

    with pytest.raises(PolicyForbiddenError, match="Leads"):
        services.decide(review, jane, APPROVE, via="admin")

    assert not Decision.objects.filter(review=review).exists()
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert enqueued == [] and decided_signals == []


def test_revised_by_a_writer_holding_the_row_is_checked_again_as_it_left_it(
    enqueued: list[int], decided_signals: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other writer commits only once the statement waits for its lock: the statement's
    snapshot is older than that commit, and the row is read again as it was left."""
    review = ReviewFactory()
    jane = reviewer("jane")
    holding, release = threading.Event(), threading.Event()
    waited: list[bool] = []
    pid: list[int] = []

    def revise() -> None:
        try:
            with transaction.atomic():
                Review.objects.select_for_update(no_key=True).get(pk=review.pk)
                Review.objects.filter(pk=review.pk).update(revision=F("revision") + 1)
                holding.set()
                release.wait(10)
                with connection.cursor() as cursor:  # commit only once decide waits for it
                    for _ in range(200):
                        cursor.execute(
                            "SELECT %s = ANY(pg_blocking_pids(%s))",
                            [
                                connection.connection.info.backend_pid,
                                pid[0],
                            ],
                        )
                        if cursor.fetchone()[0]:
                            waited.append(True)
                            break
                        threading.Event().wait(0.05)
        finally:
            connection.close()

    worker = threading.Thread(target=revise)
    real = reviews._unchanged_gate

    def gate(*args: Any, **kwargs: Any) -> Any:
        pid.append(connection.connection.info.backend_pid)
        worker.start()
        holding.wait(10)
        release.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(reviews, "_unchanged_gate", gate)
    connection.ensure_connection()

    with pytest.raises(InteractionConflictError):
        services.decide(review, jane, APPROVE, via="admin")
    worker.join(10)

    assert waited == [True]  # the statement did wait for the revising writer
    assert not Decision.objects.filter(review=review).exists()
    review.refresh_from_db()
    assert (review.status, review.revision) == (Review.Status.PENDING, 2)
    assert enqueued == [] and decided_signals == []


def test_inside_the_callers_transaction_the_resume_waits_for_its_commit(
    enqueued: list[int], decided_signals: list[int]
) -> None:
    """A host deciding inside its own transaction: the statement is part of it (the review's
    row stays locked until it commits), and the resume and the signal wait for that commit."""
    review = ReviewFactory()
    jane = reviewer("jane")
    with transaction.atomic():
        decision = services.decide(review, jane, APPROVE, via="admin")
        assert enqueued == [] and decided_signals == []
        blocked = elsewhere(lambda: _decided_meanwhile(review.pk))
        assert blocked == "locked"  # another decider waits for this transaction
    assert enqueued == [decision.pk]
    assert decided_signals == [review.pk]


def _decided_meanwhile(pk: int) -> str:
    """Whether the review's row is locked by another transaction (not waiting for it)."""
    try:
        with transaction.atomic():
            Review.objects.select_for_update(nowait=True).get(pk=pk)
    except OperationalError:
        return "locked"
    return "free"
