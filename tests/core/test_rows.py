"""The hot path's locked reads compiled once (nitro_assistants.services.sql.reads, issue 21) return
what the ORM queries they replace return: the same statement, field values, related objects
(cached as select_related caches them) and annotations, DoesNotExist on a missing row. Each test
runs twice: on the Django release the compiled reads were verified on, and as on any other
release (the guard's list emptied), where a read is the queryset's own ``get()`` (issue 35)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import django
import pytest
from django.contrib.auth.models import Group, User
from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef, Q
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nitro_assistants import rules
from nitro_assistants.models import Decision, Review, ReviewHandling, Run, Thread
from nitro_assistants.services import decisions, mirror, resumes, runs, stops
from nitro_assistants.services.sql import reads
from tests.factories import DecisionFactory, ReviewFactory, RunFactory, ThreadFactory

pytestmark = pytest.mark.django_db

#: The guard's list as the package ships it (the fixture below empties it for half the tests).
SHIPPED_VERIFIED_DJANGO = reads.VERIFIED_DJANGO


@pytest.fixture(autouse=True, params=["verified", "unverified"])
def django_release(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``unverified``: as on a Django release reads.Read was not verified on, which takes the
    ORM fallback instead of the compiled read."""
    if request.param == "unverified":
        monkeypatch.setattr(reads, "VERIFIED_DJANGO", ())
    assert reads.compiled_reads() is (request.param == "verified")
    return str(request.param)


def test_the_installed_django_is_one_the_compiled_reads_were_verified_on() -> None:
    """Moving requirements.txt to another Django release fails here first: verify the reads
    on it (this module) and add it to reads.VERIFIED_DJANGO, or the hot path runs the ORM."""
    assert tuple(django.VERSION[:2]) in SHIPPED_VERIFIED_DJANGO


def snapshot(obj: models.Model | None, seen: frozenset[int] = frozenset()) -> Any:
    """Everything a loaded instance holds: its class, field values (as loaded), annotations and,
    recursively, the related objects cached on it (a loop back names the instance only)."""
    if obj is None:
        return None
    if isinstance(obj, list):
        return [snapshot(item, seen) for item in obj]
    if id(obj) in seen:
        return ("seen", type(obj).__name__, obj.pk)
    seen = seen | {id(obj)}
    # The id a decision would have is taken from the sequence by each read: never the same.
    values = {k: v for k, v in vars(obj).items() if k not in ("_state", decisions.DECISION_ID)}
    cached = {k: snapshot(v, seen) for k, v in sorted(obj._state.fields_cache.items())}
    return (type(obj), obj._state.db, obj._state.adding, values, cached)


def same_read(orm: Callable[[], Any], fast: Callable[[], Any]) -> Any:
    """Both reads in a transaction, one statement each and the same one; their results alike."""
    with transaction.atomic():
        with CaptureQueriesContext(connection) as orm_sql:
            expected = orm()
        with CaptureQueriesContext(connection) as fast_sql:
            got = fast()
    assert [q["sql"] for q in fast_sql.captured_queries] == [
        q["sql"] for q in orm_sql.captured_queries
    ]
    assert len(fast_sql.captured_queries) == 1
    assert snapshot(got) == snapshot(expected)
    return got


def a_thread() -> Thread:
    return ThreadFactory(
        metadata={"customer": {"id": 7, "tags": ["vip", "é"]}},
        context={"tz": "Europe/Paris", "n": 1.5},
        values={"messages": [{"role": "user", "content": "hi"}]},
        synced_at=timezone.now() - dt.timedelta(minutes=3),
    )


def test_a_locked_run_with_its_thread() -> None:
    run = RunFactory(thread=a_thread(), attempts=2, remote_run_id="r-1")
    got = same_read(
        lambda: (
            Run.objects.select_for_update(of=("self",), no_key=True)
            .select_related("thread")
            .annotate(**{stops.SUSPECTED: stops.suspected_for_run()})
            .get(pk=run.pk)
        ),
        lambda: runs._LOCKED_RUN.get(run.pk),
    )
    assert got.input == {"messages": [{"role": "user", "content": "hi"}]}
    assert got.thread.metadata == {"customer": {"id": 7, "tags": ["vip", "é"]}}
    assert isinstance(got.thread.thread_id, uuid.UUID)
    assert isinstance(got.thread.synced_at, dt.datetime)
    assert getattr(got, stops.SUSPECTED) is False  # no stop: execute_run reads no more
    same_read(  # the pk as a task's argument gives it: a string
        lambda: (
            Run.objects.select_for_update(of=("self",), no_key=True)
            .select_related("thread")
            .annotate(**{stops.SUSPECTED: stops.suspected_for_run()})
            .get(pk=str(run.pk))
        ),
        lambda: runs._LOCKED_RUN.get(str(run.pk)),
    )


def _resuming(pk: Any) -> Decision:
    return (
        Decision.objects.select_for_update(of=("self",))
        .select_related("run", "review", "review__thread")
        .get(pk=pk)
    )


@pytest.mark.parametrize("with_run", [True, False])
def test_a_locked_decision_with_its_run_review_and_thread(with_run: bool) -> None:
    review = ReviewFactory(thread=a_thread(), status=Review.Status.DECIDED)
    run = RunFactory(thread=review.thread, kind=Run.Kind.RESUME) if with_run else None
    record = DecisionFactory(
        review=review,
        run=run,
        tool_calls=[{"id": "call_1", "action": "approve"}],
        answer={"answers": {"a": 1}},
    )
    got = same_read(lambda: _resuming(record.pk), lambda: resumes._RESUMING.get(record.pk))
    assert got.review.payload == review.payload
    assert got.review.thread.context == {"tz": "Europe/Paris", "n": 1.5}
    assert got.answer == {"answers": {"a": 1}}
    assert (got.run is not None) is with_run
    with CaptureQueriesContext(connection) as more:
        assert got.review.decision is got  # cached both ways, as select_related does
        if run is not None:
            assert got.run.decision is got
    assert more.captured_queries == []


def _deciding_orm(pk: Any, user: Any) -> Review:
    queryset = decisions._deciding_reviews()  # with the decision's id on PostgreSQL
    if getattr(user, "pk", None):
        member = User.groups.through.objects.filter(
            user_id=user.pk, group_id=OuterRef("handling__group_id")
        )
        queryset = queryset.annotate(reviewer_in_group=Exists(member))
    return queryset.get(pk=pk)


@pytest.mark.parametrize("member", [True, False])
def test_a_review_being_decided_with_its_decision_handling_and_membership(member: bool) -> None:
    group = Group.objects.create(name="Staff")
    user = User.objects.create_user("rita")
    if member:
        user.groups.add(group)
    review = ReviewFactory(thread=a_thread())
    ReviewHandling.objects.create(
        review=review, group=group, rule={"id": 3, "group": "Staff"}, approvals_required=2
    )
    DecisionFactory(review=review)
    got = same_read(
        lambda: _deciding_orm(review.pk, user),
        lambda: decisions._locked_for_decision(review.pk, user),
    )
    assert got.reviewer_in_group is member
    if connection.vendor == "postgresql":  # the id its decision would be inserted with
        assert isinstance(getattr(got, decisions.DECISION_ID), int)
    with CaptureQueriesContext(connection) as more:
        assert got.handling.rule == {"id": 3, "group": "Staff"}
        assert got.decision.review is got
        assert got.thread.metadata["customer"]["id"] == 7
    assert more.captured_queries == []


@pytest.mark.parametrize("who", ["user", "anonymous"])
def test_a_review_without_a_decision_or_a_handling(who: str) -> None:
    from django.contrib.auth.models import AnonymousUser

    user = User.objects.create_user("rita") if who == "user" else AnonymousUser()
    review = ReviewFactory(thread=a_thread())
    got = same_read(
        lambda: _deciding_orm(review.pk, user),
        lambda: decisions._locked_for_decision(review.pk, user),
    )
    assert getattr(got, "reviewer_in_group", None) is (False if who == "user" else None)
    with CaptureQueriesContext(connection) as more:
        with pytest.raises(Review.decision.RelatedObjectDoesNotExist):
            got.decision  # noqa: B018
        with pytest.raises(ReviewHandling.DoesNotExist):
            got.handling  # noqa: B018
        assert not hasattr(got, "decision")
    assert more.captured_queries == []


def test_a_threads_unapplied_reviews_as_its_reviews_manager_gives_them() -> None:
    """The mirror's read of a thread's open reviews (:func:`mirror.unapplied_reviews`, a
    ``reads.Rows``) against the ORM query it replaced: the same statement, rows, order, and
    each review's thread the caller's own instance."""
    thread = a_thread()
    ReviewFactory(thread=thread, status=Review.Status.APPLIED)
    ReviewFactory(thread=thread, status=Review.Status.SUPERSEDED)
    decided = DecisionFactory(review__thread=thread).review
    answered, done = (
        ReviewFactory(thread=thread, kind=Review.Kind.QUESTION, status="answered") for _ in range(2)
    )
    DecisionFactory(review=answered)  # its decision not applied yet: still the server's pause
    DecisionFactory(review=done, outcome=Decision.Outcome.APPLIED)
    pending = ReviewFactory(thread=thread, status=Review.Status.PENDING)
    ReviewFactory(status=Review.Status.PENDING)  # another thread's
    got = same_read(
        lambda: list(
            thread.reviews.filter(
                Q(status__in=sorted(rules.UNAPPLIED_STATUSES))
                | Q(decision__outcome=Decision.Outcome.PENDING)
            ).order_by("-pk")
        ),
        lambda: mirror.unapplied_reviews(thread),
    )
    assert [review.pk for review in got] == [pending.pk, answered.pk, decided.pk]
    assert all(review.thread is thread for review in got)
    assert mirror.unapplied_reviews(ThreadFactory()) == []


def test_a_missing_row_raises_does_not_exist_as_get_does() -> None:
    user = User.objects.create_user("rita")
    with transaction.atomic():
        with pytest.raises(Run.DoesNotExist, match=r"^Run matching query does not exist\.$"):
            runs._LOCKED_RUN.get(uuid.uuid4())
        with pytest.raises(Decision.DoesNotExist, match=r"^Decision matching query does not exist"):
            resumes._RESUMING.get(987654)
        with pytest.raises(Review.DoesNotExist, match=r"^Review matching query does not exist"):
            decisions._locked_for_decision(987654, user)
        with pytest.raises(ValueError, match="expected a number"):
            resumes._RESUMING.get("not a pk")


@pytest.mark.postgresql("FOR UPDATE OF: SQLite has no row locks")
def test_the_statements_lock_only_their_own_table() -> None:
    user = User.objects.create_user("rita")
    record = DecisionFactory(review=ReviewFactory(), run=RunFactory())
    with transaction.atomic(), CaptureQueriesContext(connection) as sql:
        runs._LOCKED_RUN.get(record.run_id)
        resumes._RESUMING.get(record.pk)
        decisions._locked_for_decision(record.review_id, user)
    # With the strength the queryset asks for: a run's and a review's rows are referenced by
    # others' inserts (FOR NO KEY UPDATE lets their foreign-key checks through).
    tails = [q["sql"].rsplit(" FOR ", 1)[1] for q in sql.captured_queries]
    assert tails == [
        'NO KEY UPDATE OF "nitro_assistants_run"',
        'UPDATE OF "nitro_assistants_decision"',
        'NO KEY UPDATE OF "nitro_assistants_review"',
    ]


def test_a_read_is_compiled_once_per_connection(
    monkeypatch: pytest.MonkeyPatch, django_release: str
) -> None:
    read = reads.Read(lambda: Thread.objects.select_for_update(of=("self",)))
    thread = a_thread()
    compiled: list[object] = []
    real = reads.CompiledRead.__init__

    def counting(self: Any, *args: Any) -> None:
        compiled.append(self)
        real(self, *args)

    monkeypatch.setattr(reads.CompiledRead, "__init__", counting)
    with transaction.atomic():
        assert read.get(thread.pk).metadata == thread.metadata
        assert read.get(thread.pk).pk == thread.pk
    # On an unverified release nothing is compiled: the ORM's get() runs each time.
    assert len(compiled) == (1 if django_release == "verified" else 0)


@pytest.mark.postgresql("FOR UPDATE outside a transaction: SQLite drops it")
@pytest.mark.django_db(transaction=True)
def test_a_locked_read_needs_a_transaction_as_the_orm_does() -> None:
    run = RunFactory()
    with pytest.raises(TransactionManagementError, match="outside of a transaction"):
        Run.objects.select_for_update(of=("self",)).select_related("thread").get(pk=run.pk)
    with pytest.raises(TransactionManagementError, match="outside of a transaction"):
        runs._LOCKED_RUN.get(run.pk)
