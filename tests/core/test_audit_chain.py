"""The audit trail's hash chain: written by every event, broken by any edit made by hand."""

from __future__ import annotations

import datetime
import functools
import threading
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nitro_assistants import hashchain, signals
from nitro_assistants.models import AuditChain, Event, Review, Thread
from nitro_assistants.services import api_keys, chain_verify, decide
from nitro_assistants.services.audit import events_batched, record_event
from nitro_assistants.services.sql import events as sql_events
from tests.factories import ReviewFactory, ThreadFactory
from tests.reliability.test_concurrent_decisions import race

pytestmark = pytest.mark.django_db


def use_key(settings: Any, key: str) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "AUDIT_KEY": key}


def cut_behind_a_forged_checkpoint(
    thread: Thread, through: int, *, sign_with: str | None = None
) -> Event:
    """What someone who can write to the database (and not read AUDIT_KEY) does to remove a
    chain's first ``through`` events: delete them with the ORM, then append a checkpoint that
    says they were pruned, chained to the head and the head moved, as the app would (the
    hashing is public). ``sign_with``: signed, with a key of their own."""
    key = str(thread.thread_id)
    last = Event.objects.get(thread=thread, seq=through)
    Event.objects.filter(thread=thread, seq__lte=through).delete()
    head = AuditChain.objects.get(chain=key)
    at = timezone.now()
    data: dict[str, Any] = {
        "before": hashchain.timestamp(at),
        "events": through,
        "first_seq": 1,
        "from_hash": "",
        "through_seq": through,
        "through_hash": last.hash,
        "pruned_at": hashchain.timestamp(at),
    }
    if sign_with is not None:
        data["signature"] = hashchain.sign_checkpoint(sign_with, key, data)
    content = hashchain.canonical(chain=key, verb=hashchain.PRUNED, data=data, at=at)
    hash_ = hashchain.link_hash(head.hash, content)
    forged = Event.objects.create(
        thread=thread,
        verb=hashchain.PRUNED,
        data=data,
        at=at,
        seq=head.seq + 1,
        prev_hash=head.hash,
        hash=hash_,
    )
    AuditChain.objects.filter(chain=key).update(seq=head.seq + 1, hash=hash_)
    return forged


def trail(thread: Any, verbs: int = 5) -> list[Event]:
    events = []
    for i in range(verbs):
        events.append(record_event(thread, f"step_{i}", n=i, note="é ✓"))
    return events


def execute(sql: str, params: list[Any]) -> None:
    table = Event._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(sql.format(table=table), params)


def test_an_empty_database_verifies() -> None:
    result = chain_verify.verify()
    assert result.ok and result.events == 0 and result.chains == 0


def test_events_are_chained_per_thread_and_verify() -> None:
    first, second = ThreadFactory(), ThreadFactory()
    a = trail(first, 3)
    b = trail(second, 2)
    record_event(None, "api_key_created", key="abc")
    for events in (a, b):
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[0].prev_hash == ""
        assert [e.prev_hash for e in events[1:]] == [e.hash for e in events[:-1]]
    head = AuditChain.objects.get(chain=str(first.thread_id))
    assert (head.seq, head.hash) == (3, a[-1].hash)
    stored = Event.objects.get(pk=a[1].pk)
    assert (stored.seq, stored.prev_hash, stored.hash) == (2, a[0].hash, a[1].hash)
    result = chain_verify.verify()
    assert result.ok, result.broken
    assert (result.events, result.chains) == (6, 3)


def test_a_batch_is_one_insert_and_one_head_query_per_thread() -> None:
    first, second = ThreadFactory(), ThreadFactory()
    trail(first, 1)
    with CaptureQueriesContext(connection) as queries, events_batched():
        for thread in (first, second, first):
            record_event(thread, "batched")
    writes = [q["sql"] for q in queries.captured_queries]
    # A head per thread (two), then the INSERT (which moves the heads on PostgreSQL).
    assert len(writes) == (3 if connection.vendor == "postgresql" else 5), writes
    assert chain_verify.verify().ok


def test_an_edited_event_is_named() -> None:
    events = trail(ThreadFactory())
    execute("UPDATE {table} SET data = %s WHERE id = %s", ['{"n": 99}', events[2].pk])
    result = chain_verify.verify()
    assert not result.ok
    assert result.broken is not None
    assert result.broken.pk == events[2].pk
    assert "was changed" in result.broken.problem


def test_a_moved_timestamp_is_an_edit() -> None:
    events = trail(ThreadFactory())
    later = timezone.now() + datetime.timedelta(days=1)
    execute("UPDATE {table} SET at = %s WHERE id = %s", [later, events[1].pk])
    result = chain_verify.verify()
    assert result.broken is not None and result.broken.pk == events[1].pk


def test_a_deleted_event_is_named_by_the_one_after_it() -> None:
    events = trail(ThreadFactory())
    execute("DELETE FROM {table} WHERE id = %s", [events[2].pk])
    result = chain_verify.verify()
    assert result.broken is not None
    assert result.broken.pk == events[3].pk
    assert "1 event(s) missing before" in result.broken.problem
    assert result.broken.expected == f"seq 3 chained to {events[1].hash}"


def test_a_deleted_tail_shows_against_the_head() -> None:
    events = trail(ThreadFactory())
    execute("DELETE FROM {table} WHERE id = %s", [events[-1].pk])
    result = chain_verify.verify()
    assert result.broken is not None
    assert result.broken.pk == events[-2].pk
    assert "not where its head says" in result.broken.problem


def test_reordered_events_are_named() -> None:
    events = trail(ThreadFactory())
    # Swap the places of the 2nd and 3rd events (a unique seq per thread: through a free one).
    execute("UPDATE {table} SET seq = 1000 WHERE id = %s", [events[1].pk])
    execute("UPDATE {table} SET seq = 2 WHERE id = %s", [events[2].pk])
    execute("UPDATE {table} SET seq = 3 WHERE id = %s", [events[1].pk])
    result = chain_verify.verify()
    assert result.broken is not None
    assert result.broken.pk == events[2].pk
    assert "out of place" in result.broken.problem


def test_an_inserted_event_is_named() -> None:
    thread = ThreadFactory()
    events = trail(thread)
    execute(
        "INSERT INTO {table} (thread_id, verb, data, at, prev_hash, hash, actor_ref) "
        "VALUES (%s, 'review_decided', %s, %s, '', '', '')",
        [thread.pk, "{}", events[2].at],
    )
    inserted = Event.objects.get(verb="review_decided")
    result = chain_verify.verify()
    assert result.broken is not None
    assert result.broken.pk == inserted.pk
    assert "not chained" in result.broken.problem


def test_an_inserted_event_with_a_forged_place_is_named() -> None:
    thread = ThreadFactory()
    events = trail(thread)
    # Make room at seq 3 (through free numbers: seq is unique per thread).
    execute("UPDATE {table} SET seq = seq + 1000 WHERE thread_id = %s AND seq >= 3", [thread.pk])
    execute("UPDATE {table} SET seq = seq - 999 WHERE thread_id = %s AND seq > 1000", [thread.pk])
    forged = Event(thread=thread, verb="review_decided", data={}, at=events[2].at)
    sql_events.link(forged, str(thread.thread_id), "f" * 64, 3)  # a plausible, wrong link
    forged.save()
    result = chain_verify.verify()
    assert result.broken is not None
    assert result.broken.pk == forged.pk


def test_pointing_an_event_at_another_actor_is_named(django_user_model: Any) -> None:
    alice = django_user_model.objects.create(username="alice")
    mallory = django_user_model.objects.create(username="mallory")
    thread = ThreadFactory()
    event = record_event(thread, "review_decided", actor=alice)
    execute("UPDATE {table} SET actor_id = %s WHERE id = %s", [mallory.pk, event.pk])
    result = chain_verify.verify()
    assert result.broken is not None and result.broken.pk == event.pk
    assert "another actor" in result.broken.problem


def test_deleting_a_user_keeps_the_trail_whole(django_user_model: Any) -> None:
    alice = django_user_model.objects.create(username="alice")
    record_event(ThreadFactory(), "review_decided", actor=alice)
    alice.delete()
    assert chain_verify.verify().ok


def test_verify_one_thread_or_a_time_range() -> None:
    first, second = ThreadFactory(), ThreadFactory()
    events = trail(first)
    trail(second)
    execute("UPDATE {table} SET data = %s WHERE id = %s", ['{"n": 99}', events[3].pk])
    assert chain_verify.verify(thread=second).ok
    assert chain_verify.verify(thread=first).broken.pk == events[3].pk  # type: ignore[union-attr]
    ranged = chain_verify.verify(since=events[1].at, until=events[3].at)
    assert ranged.ok and ranged.events == 2  # events[1] and [2]
    execute("DELETE FROM {table} WHERE id = %s", [events[0].pk])
    ranged = chain_verify.verify(since=events[1].at, until=events[3].at)
    assert ranged.broken is not None and ranged.broken.pk == events[1].pk


def test_a_deleted_thread_leaves_its_head_and_shows() -> None:
    thread = ThreadFactory()
    trail(thread)
    thread.delete()
    result = chain_verify.verify()
    assert result.broken is not None
    assert result.broken.chain == str(thread.thread_id)
    assert "0 " not in result.broken.found or "missing" in result.broken.problem


def test_the_periodic_check_signals_a_break() -> None:
    events = trail(ThreadFactory())
    received: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        received.append(kwargs)

    signals.audit_broken.connect(receiver)
    try:
        assert chain_verify.verify_and_signal().ok
        assert received == []
        execute("DELETE FROM {table} WHERE id = %s", [events[1].pk])
        assert not chain_verify.verify_and_signal().ok
    finally:
        signals.audit_broken.disconnect(receiver)
    assert len(received) == 1
    assert received[0]["broken"].pk == events[2].pk


def old_trail(thread: Any, at: datetime.datetime, verbs: int = 3) -> None:
    """Events written at ``at`` (in a batch, the hash is taken when it is written)."""
    with events_batched():
        for i in range(verbs):
            record_event(thread, f"old_{i}").at = at


def test_prune_keeps_the_chain_verifiable_and_spares_open_reviews(
    django_user_model: Any, audit_key: str
) -> None:
    old, busy, recent = ThreadFactory(), ThreadFactory(), ThreadFactory()
    long_ago = timezone.now() - datetime.timedelta(days=400)
    old_trail(old, long_ago)
    old_trail(busy, long_ago)
    ReviewFactory(thread=busy, status=Review.Status.PENDING)
    trail(recent, 2)
    record_event(old, "new_one")
    admin = django_user_model.objects.create(username="admin")
    result = chain_verify.prune(long_ago + datetime.timedelta(days=1), actor=admin)
    assert (result.events, result.chains, result.kept_open) == (3, 1, 1)
    assert Event.objects.filter(thread=busy).count() == 3
    left = list(Event.objects.filter(thread=old).order_by("seq").values_list("verb", "seq"))
    assert left == [("new_one", 4), ("audit_pruned", 5)]
    checkpoint = Event.objects.get(thread=old, verb="audit_pruned")
    assert checkpoint.data["through_seq"] == 3 and checkpoint.data["events"] == 3
    summary = Event.objects.get(thread=None, verb="audit_pruned")
    assert summary.data["events"] == 3 and summary.actor == admin
    verification = chain_verify.verify()
    assert verification.ok, verification.broken
    # A second prune past the first checkpoint: the new checkpoint covers both.
    # (old: the event left and the checkpoint; recent: 2; the installation's: the first prune)
    assert chain_verify.prune(timezone.now() + datetime.timedelta(seconds=1)).events == 5
    assert chain_verify.verify().ok
    checkpoint = Event.objects.get(thread=old, verb="audit_pruned")
    # The checkpoint is chained like any event: forging what it says shows.
    execute(
        "UPDATE {table} SET data = %s WHERE id = %s",
        ['{"through_seq": 2, "through_hash": "x", "events": 2, "before": "x"}', checkpoint.pk],
    )
    assert chain_verify.verify().broken.pk == checkpoint.pk  # type: ignore[union-attr]


def test_prune_refuses_without_an_audit_key() -> None:
    thread = ThreadFactory()
    old_trail(thread, timezone.now() - datetime.timedelta(days=400))
    with pytest.raises(
        chain_verify.PruneError, match=r"Pruning needs NITRO_ASSISTANTS\['AUDIT_KEY'\]"
    ):
        chain_verify.prune(timezone.now())
    assert Event.objects.count() == 3  # nothing deleted, no checkpoint
    assert chain_verify.verify().ok


def a_decided_trail() -> tuple[Thread, list[Event]]:
    thread = ThreadFactory()
    events = [
        record_event(thread, "review_requested", kind="tool_calls"),
        record_event(thread, "review_decided", actions=["reject"], note="not this one"),
        record_event(thread, "run_requested"),
        record_event(thread, "run_succeeded", reply="done"),
    ]
    return thread, events


@pytest.mark.parametrize("sign_with", [None, "a key of the attacker's own"])
def test_a_chain_cut_behind_a_forged_checkpoint_is_named(
    audit_key: str, sign_with: str | None
) -> None:
    """Deleting a chain's first events (the decision among them) and appending a checkpoint
    that says they were pruned, all by database writes, passed: the checkpoint was believed.
    Now a checkpoint counts only when signed with AUDIT_KEY, which the database does not hold."""
    thread, events = a_decided_trail()
    forged = cut_behind_a_forged_checkpoint(thread, 2, sign_with=sign_with)
    assert not Event.objects.filter(verb="review_decided").exists()
    for result in (chain_verify.verify(), chain_verify.verify(thread=thread)):
        assert not result.ok
        [broken] = result.breaks
        assert broken.chain == str(thread.thread_id) and broken.pk == forged.pk
        assert "is not to be trusted" in broken.problem
        why = "not signed" if sign_with is None else "signature does not match"
        assert why in broken.problem
    # A time range after the cut starts after the checkpoint too: it is checked as well.
    ranged = chain_verify.verify(since=events[2].at)
    assert not ranged.ok and ranged.broken.pk == forged.pk  # type: ignore[union-attr]


def test_a_cut_start_without_a_checkpoint_is_named(audit_key: str) -> None:
    thread, events = a_decided_trail()
    Event.objects.filter(thread=thread, seq__lte=2).delete()
    result = chain_verify.verify()
    assert result.broken is not None and result.broken.pk == events[2].pk
    assert "2 event(s) missing before" in result.broken.problem


def pruned_thread() -> tuple[Thread, Event]:
    """A thread whose three old events were pruned (signed with the key set), one kept."""
    thread = ThreadFactory()
    old_trail(thread, timezone.now() - datetime.timedelta(days=400))
    record_event(thread, "kept")
    assert chain_verify.prune(timezone.now() - datetime.timedelta(days=1)).events == 3
    return thread, Event.objects.get(thread=thread, verb="audit_pruned")


def test_a_checkpoint_with_a_tampered_field_is_named(audit_key: str) -> None:
    """A genuine checkpoint whose count is changed, its link re-hashed and the head moved (all
    consistent for the hash chain): its signature no longer matches what it says."""
    thread, checkpoint = pruned_thread()
    assert chain_verify.verify().ok
    key = str(thread.thread_id)
    data = {**checkpoint.data, "through_seq": 2}
    content = hashchain.canonical(chain=key, verb=checkpoint.verb, data=data, at=checkpoint.at)
    hash_ = hashchain.link_hash(checkpoint.prev_hash, content)
    Event.objects.filter(pk=checkpoint.pk).update(data=data, hash=hash_)
    AuditChain.objects.filter(chain=key).update(hash=hash_)
    result = chain_verify.verify()
    assert result.broken is not None and result.broken.pk == checkpoint.pk
    assert "signature does not match" in result.broken.problem


def test_a_genuine_prune_verifies_with_its_key_only(settings: Any, audit_key: str) -> None:
    thread, checkpoint = pruned_thread()
    data = checkpoint.data
    assert (data["first_seq"], data["from_hash"], data["through_seq"]) == (1, "", 3)
    assert data["signature"] == hashchain.sign_checkpoint(audit_key, str(thread.thread_id), data)
    assert chain_verify.verify().ok
    assert chain_verify.verify(thread=thread).ok
    use_key(settings, "another key")
    [broken] = chain_verify.verify().breaks
    assert broken.pk == checkpoint.pk and "signature does not match" in broken.problem
    use_key(settings, "")
    [broken] = chain_verify.verify().breaks
    assert broken.pk == checkpoint.pk
    assert "cannot be vouched for: no AUDIT_KEY is configured" in broken.problem


@pytest.mark.postgresql("row locks: concurrent writers on one chain")
@pytest.mark.django_db(transaction=True)
def test_sixteen_concurrent_writers_never_fork_a_chain() -> None:
    shared = ThreadFactory()

    def write(i: int) -> None:
        for j in range(5):
            with events_batched():
                record_event(shared, "concurrent", writer=i, n=j)
                record_event(None, "concurrent", writer=i, n=j)

    results = race(*(functools.partial(write, i) for i in range(16)))
    assert [r for r in results if isinstance(r, Exception)] == []
    seqs = sorted(Event.objects.filter(thread=shared).values_list("seq", flat=True))
    assert seqs == list(range(1, 81))
    result = chain_verify.verify()
    assert result.ok, result.broken
    assert result.events == 160


@pytest.mark.postgresql("row locks: concurrent writers on one chain, one statement each")
@pytest.mark.django_db(transaction=True)
def test_sixteen_concurrent_one_statement_appends_never_fork_a_chain() -> None:
    """Batches on one chain are linked by the database in one statement (PostgreSQL): sixteen
    writers at once on a chain that has no head yet (so they race to start it), then on it."""
    shared = ThreadFactory()

    def write(i: int) -> None:
        for j in range(5):
            with events_batched():
                record_event(shared, "concurrent", writer=i, n=j)
                record_event(shared, "concurrent", writer=i, n=j, second=True)
        record_event(shared, "alone", writer=i)  # outside a transaction: one statement

    results = race(*(functools.partial(write, i) for i in range(16)))
    assert [r for r in results if isinstance(r, Exception)] == []
    seqs = sorted(Event.objects.filter(thread=shared).values_list("seq", flat=True))
    assert seqs == list(range(1, 177))
    result = chain_verify.verify()
    assert result.ok, result.broken
    assert (result.events, result.chains) == (176, 1)


@pytest.mark.postgresql("row locks: concurrent decisions")
@pytest.mark.django_db(transaction=True)
def test_sixteen_threads_deciding_at_once_leave_a_whole_trail(
    enqueued: list[Any], django_user_model: Any
) -> None:
    """16 reviewers, each deciding a review (its thread's chain) and creating an API key (the
    installation's chain, which they all share) at the same moment; then verify."""
    users = [
        django_user_model.objects.create_superuser(f"reviewer{i}", password="!") for i in range(16)
    ]
    pending = [ReviewFactory(status=Review.Status.PENDING) for _ in range(16)]
    barrier = threading.Barrier(16)
    errors: list[BaseException] = []

    def work(user: Any, review: Review) -> None:
        try:
            barrier.wait()
            call = review.tool_calls[0]["id"]
            decide(review, user, {"tool_calls": [{"id": call, "action": "approve"}]})
            api_keys.create_api_key(user, "ci", actor=user)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    workers = [
        threading.Thread(target=work, args=pair) for pair in zip(users, pending, strict=True)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert Event.objects.filter(verb="review_decided").count() == 16
    installation = list(
        Event.objects.filter(thread=None).order_by("seq").values_list("seq", flat=True)
    )
    assert installation == list(range(1, 17))
    result = chain_verify.verify()
    assert result.ok, result.broken
    assert result.chains == 17


def test_a_genuine_checkpoint_copied_to_another_chain_is_named(audit_key: str) -> None:
    """A signed checkpoint vouches for its own chain only: copied (as written, signature and
    all) behind another chain's deleted start, it does not match the chain it is in."""
    _, genuine = pruned_thread()
    other = ThreadFactory()
    trail(other, 5)
    last = Event.objects.get(thread=other, seq=3)
    Event.objects.filter(thread=other, seq__lte=3).delete()
    key = str(other.thread_id)
    head = AuditChain.objects.get(chain=key)
    data = {**genuine.data, "through_hash": last.hash}  # what the walk would need
    content = hashchain.canonical(chain=key, verb=hashchain.PRUNED, data=data, at=genuine.at)
    hash_ = hashchain.link_hash(head.hash, content)
    copied = Event.objects.create(
        thread=other,
        verb=hashchain.PRUNED,
        data=data,
        at=genuine.at,
        seq=head.seq + 1,
        prev_hash=head.hash,
        hash=hash_,
    )
    AuditChain.objects.filter(chain=key).update(seq=head.seq + 1, hash=hash_)
    [broken] = chain_verify.verify().breaks
    assert broken.chain == key and broken.pk == copied.pk
    assert "signature does not match" in broken.problem


def test_a_prune_with_the_key_replaces_an_unsigned_checkpoint(audit_key: str) -> None:
    """A checkpoint written before checkpoints were signed (here: a signed one stripped of its
    signature, re-chained) fails verify; a later prune with the key past it deletes it with the
    events it followed and leaves a signed checkpoint: the chain verifies again."""
    thread, checkpoint = pruned_thread()
    key = str(thread.thread_id)
    data = {k: v for k, v in checkpoint.data.items() if k != "signature"}
    content = hashchain.canonical(chain=key, verb=checkpoint.verb, data=data, at=checkpoint.at)
    hash_ = hashchain.link_hash(checkpoint.prev_hash, content)
    Event.objects.filter(pk=checkpoint.pk).update(data=data, hash=hash_)
    AuditChain.objects.filter(chain=key).update(hash=hash_)
    [broken] = chain_verify.verify().breaks
    assert broken.pk == checkpoint.pk and "not signed" in broken.problem
    chain_verify.prune(timezone.now() + datetime.timedelta(seconds=1))
    assert not Event.objects.filter(pk=checkpoint.pk).exists()
    assert chain_verify.verify().ok
