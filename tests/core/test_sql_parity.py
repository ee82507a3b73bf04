"""Each statement of ``nitro_assistants.services.sql`` held equal to the ORM form it replaces
(STYLE.md 13; the compiled locked reads have theirs in tests/core/test_rows.py, the audit chain's
appends in tests/core/test_audit_chain.py, the queued row writes in tests/core/test_writes.py).

Two rows set up alike, one written by the ORM and one by the statement, must end alike (their
columns, apart from the primary key and the moment each was written) and the statement must
answer what the ORM answers. Where a statement is PostgreSQL's only (the service takes the ORM
elsewhere), its test is marked so; the rest run on SQLite too (``NITRO_TEST_DB=sqlite``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db.models import F, Max, Model, Value
from django.db.models.functions import Coalesce
from django.db.models.signals import post_save
from django.utils import timezone

from nitro_assistants import services
from nitro_assistants.admin import metrics
from nitro_assistants.models import Claim, Decision, Event, Review, Run, Thread
from nitro_assistants.services import chain_append, chain_verify
from nitro_assistants.services.audit import build_event, record_event
from nitro_assistants.services.claims import pending_decidable
from nitro_assistants.services.sql import claims as sql_claims
from nitro_assistants.services.sql import ids
from nitro_assistants.services.sql import live as sql_live
from nitro_assistants.services.sql import metrics as sql_metrics
from nitro_assistants.services.sql import runs as sql_runs
from tests.factories import DecisionFactory, ReviewFactory, RunFactory

pytestmark = pytest.mark.django_db

#: Columns that differ between two rows written alike: who they are, and when each was written.
UNLIKE = frozenset(
    {"id", "pk", "thread_id", "run_id", "review_id", "created_at", "updated_at", "started_at"}
)


def columns(model: type[Model], pk: Any, unlike: frozenset[str] = UNLIKE) -> dict[str, Any]:
    """The row ``pk`` of ``model`` as stored, without the columns that identify it."""
    row = model._default_manager.filter(pk=pk).values().get()
    return {name: value for name, value in row.items() if name not in unlike}


# -- the attempt count of execute_resume ---------------------------------------------------------


def _decided(case: str) -> Decision:
    review = ReviewFactory(status=Review.Status.DECIDED)
    run = None
    if case != "no run":
        started = timezone.now() - dt.timedelta(hours=1) if case == "started before" else None
        run = RunFactory(thread=review.thread, kind=Run.Kind.RESUME, attempts=1, started_at=started)
    outcome = Decision.Outcome.APPLIED if case == "applied" else Decision.Outcome.PENDING
    return DecisionFactory(review=review, run=run, outcome=outcome)


def _orm_count(decision_pk: Any) -> int:
    """What :func:`sql.runs.count_decided_attempt` replaces."""
    return Run.objects.filter(
        decision__pk=decision_pk, decision__outcome=Decision.Outcome.PENDING
    ).update(
        attempts=F("attempts") + 1,
        status=Run.Status.RUNNING,
        started_at=Coalesce("started_at", Value(timezone.now())),
    )


@pytest.mark.parametrize("case", ["pending", "started before", "applied", "no run"])
def test_the_attempt_count_is_the_orm_update(case: str) -> None:
    by_orm, by_sql = _decided(case), _decided(case)
    assert sql_runs.count_decided_attempt(by_sql.pk) == _orm_count(by_orm.pk)
    assert (by_orm.run_id is None) is (by_sql.run_id is None)
    if by_orm.run_id is None:
        return
    orm_run, sql_run = Run.objects.get(pk=by_orm.run_id), Run.objects.get(pk=by_sql.run_id)
    assert columns(Run, sql_run.pk) == columns(Run, orm_run.pk)
    assert (sql_run.started_at is None) is (orm_run.started_at is None)
    if case == "started before":  # kept, not moved to now
        assert sql_run.started_at == by_sql.run.started_at
    if case == "pending":
        assert (sql_run.attempts, sql_run.status) == (2, Run.Status.RUNNING)
    if case == "applied":
        assert (sql_run.attempts, sql_run.status) == (1, Run.Status.QUEUED)


def test_the_attempt_count_takes_the_pk_as_a_task_gives_it() -> None:
    decision = _decided("pending")
    assert sql_runs.count_decided_attempt(str(decision.pk)) == 1


# -- claims --------------------------------------------------------------------------------------


@pytest.fixture
def reviewer() -> Any:
    return get_user_model().objects.create_user("reviewer")


def _claim_columns(review: Review) -> dict[str, Any]:
    return columns(Claim, Claim.objects.get(review=review).pk, frozenset({"id", "review_id"}))


def test_a_claim_inserted_unless_claimed_is_the_one_save_inserts(reviewer: Any) -> None:
    now = timezone.now()
    until = now + dt.timedelta(minutes=5)
    by_orm, by_sql = ReviewFactory(), ReviewFactory()
    saved = Claim(review=by_orm, user=reviewer, claimed_at=now, expires_at=until, changed_at=now)
    saved.save(force_insert=True)
    inserted = sql_claims.insert_unless_claimed(
        Claim(review=by_sql, user=reviewer, claimed_at=now, expires_at=until, changed_at=now)
    )
    assert inserted is not None
    assert inserted.pk == Claim.objects.get(review=by_sql).pk
    assert (inserted._state.adding, inserted._state.db) == (saved._state.adding, saved._state.db)
    assert _claim_columns(by_sql) == _claim_columns(by_orm)
    # A review with a claim keeps it: nothing written, None (save() would raise IntegrityError).
    other = get_user_model().objects.create_user("other")
    again = Claim(review=by_sql, user=other, claimed_at=now, expires_at=until, changed_at=now)
    assert sql_claims.insert_unless_claimed(again) is None
    assert Claim.objects.get(review=by_sql).user_id == reviewer.pk


@pytest.mark.postgresql("claim_review renews by this statement on PostgreSQL only")
@pytest.mark.parametrize("live", [True, False])
def test_a_renewal_is_the_orm_update_and_read(reviewer: Any, live: bool) -> None:
    now = timezone.now()
    until = now + dt.timedelta(minutes=5)
    then = now - dt.timedelta(minutes=10)
    expires = now + dt.timedelta(minutes=1) if live else now - dt.timedelta(minutes=1)
    by_orm, by_sql = ReviewFactory(), ReviewFactory()
    for review in (by_orm, by_sql):
        Claim.objects.create(
            review=review, user=reviewer, claimed_at=then, expires_at=expires, changed_at=then
        )
    renewed = Claim.objects.filter(
        review_id=by_orm.pk, user_id=reviewer.pk, expires_at__gt=now
    ).update(expires_at=until, changed_at=now)
    expected = Claim.objects.get(review_id=by_orm.pk) if renewed else None
    got = sql_claims.renew(Claim(review=by_sql, user=reviewer, claimed_at=now, expires_at=until))
    assert (got is None) is (expected is None)
    assert _claim_columns(by_sql) == _claim_columns(by_orm)
    if got is not None and expected is not None:
        assert got.pk == Claim.objects.get(review=by_sql).pk
        assert {f.attname: getattr(got, f.attname) for f in Claim._meta.concrete_fields} == {
            **{f.attname: getattr(expected, f.attname) for f in Claim._meta.concrete_fields},
            "id": got.pk,
            "review_id": by_sql.pk,
        }


@pytest.mark.postgresql("claim_review takes the claim with its event in one statement on PG")
def test_the_first_claim_with_its_event_is_the_orm_insert_and_record_event(
    reviewer: Any,
) -> None:
    now = timezone.now()
    until = now + dt.timedelta(minutes=5)
    by_orm, by_sql = ReviewFactory(), ReviewFactory()
    for review in (by_orm, by_sql):  # their chains have a head, as every thread's has
        record_event(review.thread, "thread_opened")
    Claim.objects.create(
        review=by_orm, user=reviewer, claimed_at=now, expires_at=until, changed_at=now
    )
    record_event(by_orm.thread, "review_claimed", review=by_orm, actor=reviewer)

    claim = Claim(review=by_sql, user=reviewer, claimed_at=now, expires_at=until, changed_at=now)
    gate = sql_claims.first_claim_gate(claim, str(by_sql.thread.thread_id))
    event = build_event(by_sql.thread, "review_claimed", review=by_sql, actor=reviewer)
    assert chain_append.append_gated([event], gate)
    assert gate.returned == Claim.objects.get(review=by_sql).pk
    assert _claim_columns(by_sql) == _claim_columns(by_orm)
    unlike = UNLIKE | {"at", "hash", "prev_hash", "data"}
    orm_event = Event.objects.filter(thread=by_orm.thread).latest("seq")
    assert columns(Event, event.pk, unlike) == columns(Event, orm_event.pk, unlike)
    assert event.data == orm_event.data
    # A review claimed already: the gate writes nothing, and no event is appended.
    second = Claim(review=by_sql, user=reviewer, claimed_at=now, expires_at=until)
    gate = sql_claims.first_claim_gate(second, str(by_sql.thread.thread_id))
    late = build_event(by_sql.thread, "review_claimed", review=by_sql, actor=reviewer)
    assert not chain_append.append_gated([late], gate)
    assert Event.objects.filter(thread=by_sql.thread, verb="review_claimed").count() == 1
    assert chain_verify.verify().ok


# -- the decision's id ----------------------------------------------------------------------------


@pytest.mark.postgresql("decide takes the id from the sequence on PostgreSQL only")
def test_the_decision_id_comes_from_the_sequence_the_orm_inserts_use() -> None:
    next_id = ids.next_id(Decision)
    assert next_id is not None
    first = DecisionFactory()
    taken = Review.objects.annotate(n=next_id).values_list("n", flat=True).get(pk=first.review_id)
    assert taken > first.pk
    assert DecisionFactory().pk == taken + 1  # the ORM's next insert skips the id taken


def test_no_decision_id_is_taken_where_there_is_no_sequence() -> None:
    from django.db import connection

    assert (ids.next_id(Decision) is None) is (connection.vendor != "postgresql")


# -- the admin's figures ------------------------------------------------------------------------


@pytest.mark.postgresql("the metrics page counts tool-call actions in SQL on PostgreSQL only")
def test_the_tool_call_actions_are_counted_as_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    since = timezone.now() - dt.timedelta(days=1)
    for calls in (
        [{"id": "a", "action": "approve"}, {"id": "b", "action": "reject"}],
        [{"id": "c", "action": "approve"}, {"id": "d"}, "not a call", 7],
        {"not": "a list"},
        [],
        None,
    ):
        DecisionFactory(tool_calls=calls, reply={"action": "edit"})
    DecisionFactory(tool_calls=[{"action": "approve"}], decided_at=since - dt.timedelta(hours=1))
    in_sql = metrics._action_counts(since)
    monkeypatch.setattr(sql_metrics, "tool_call_actions", lambda since: None)
    in_python = metrics._action_counts(since)
    assert in_sql == in_python
    assert in_sql["approve"] == 2 and in_sql["edit"] == 5


def test_the_live_marker_is_the_four_orm_reads(reviewer: Any) -> None:
    staff = Group.objects.create(name="Staff")
    staff.permissions.add(Permission.objects.get(codename="decide_review"))
    reviewer.is_staff = True
    reviewer.save()
    reviewer.groups.add(staff)
    reviews = [ReviewFactory(), ReviewFactory(), ReviewFactory(status=Review.Status.DECIDED)]
    record_event(reviews[0].thread, "thread_opened")
    now = timezone.now()
    Claim.objects.create(
        review=reviews[0], user=reviewer, claimed_at=now, expires_at=now, changed_at=now
    )

    def orm() -> tuple[Any, ...]:
        return (
            Event.objects.aggregate(m=Max("pk"))["m"],
            Claim.objects.aggregate(m=Max("changed_at"))["m"],
            Review.objects.aggregate(m=Max("pk"))["m"],
            pending_decidable(reviewer).count(),
        )

    assert sql_live.marker(pending_decidable(reviewer)) == orm()
    assert orm()[3] == 2


def test_the_live_marker_of_an_empty_installation(reviewer: Any) -> None:
    assert sql_live.marker(pending_decidable(reviewer)) == (None, None, None, 0)


# -- a new thread in one statement -----------------------------------------------------------------


def _started(watch: bool) -> Run:
    """start_run of a new thread: one statement on PostgreSQL, or, with a receiver watching the
    app's rows (as a host's history does), ``save()`` row by row."""

    def receiver(**kwargs: Any) -> None:
        pass

    connect: Callable[..., Any] = post_save.connect if watch else (lambda *a, **k: None)
    for model in (Thread, Run, Event):
        connect(receiver, sender=model, weak=False, dispatch_uid=f"parity-{model.__name__}")
    try:
        return services.start_run(
            "walkthrough", "Move me to Tuesday", context={"tz": "UTC"}, metadata={"n": 1}
        )
    finally:
        for model in (Thread, Run, Event):
            post_save.disconnect(sender=model, dispatch_uid=f"parity-{model.__name__}")


def test_a_new_thread_is_written_as_save_writes_it(enqueued: list[Any]) -> None:
    fast, saved = _started(watch=False), _started(watch=True)
    assert columns(Run, fast.pk) == columns(Run, saved.pk)
    assert columns(Thread, fast.thread_id) == columns(Thread, saved.thread_id)
    event_unlike = UNLIKE | {"at", "hash", "prev_hash", "data"}
    fast_events = Event.objects.filter(thread_id=fast.thread_id).order_by("seq")
    saved_events = Event.objects.filter(thread_id=saved.thread_id).order_by("seq")
    assert [columns(Event, e.pk, event_unlike) for e in fast_events] == [
        columns(Event, e.pk, event_unlike) for e in saved_events
    ]
    assert [e.data for e in fast_events] == [e.data for e in saved_events]
    assert chain_verify.verify().ok
