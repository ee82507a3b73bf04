"""The audit trail's hash chain in the database: appending events to it (walking and pruning it:
:mod:`.chain_verify`; the statements: :mod:`.sql.events`).

One chain per thread, plus one for the events about no thread (:data:`hashchain.INSTALLATION`).
Per thread because a chain is a lock: to append, a writer locks its chain's head row
(:class:`~nitro_assistants.models.AuditChain`) until its transaction commits. A thread's own
writers already take turns (they lock the thread's review or row), so a per-thread chain adds no
waiting; one chain for the installation would make every decision on every thread queue behind
every other one, including a worker's that still has work to do before it commits. The price is a
head per thread to check and export, which the walk and the export do.

On PostgreSQL a batch on one chain (what a service call writes) is one statement: it locks the
head (or starts the chain), links the events to it, the database computing each link's hash
from the head it locked, inserts them and moves the head. Otherwise (SQLite, or a batch over
several chains) appending costs one query per chain in the batch (the head's upsert, which locks
it and returns it) before the insert, which on PostgreSQL moves the heads in the same statement.
A chain created in the caller's transaction (a thread just inserted, :func:`new_chain`) has no
head to read: its head is inserted with the events.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import router, transaction
from django.db.models import QuerySet

from nitro_assistants import hashchain
from nitro_assistants.models import Event, Thread
from nitro_assistants.services import changes
from nitro_assistants.services.sql import events as sql_events
from nitro_assistants.services.sql import postgresql, writes
from nitro_assistants.services.sql.events import ChainWriteError, GatingWrite


def chain_of(event: Event) -> str:
    """The chain an event belongs to: its thread's remote id, or the installation's."""
    if event.thread_id is None:
        return hashchain.INSTALLATION
    thread = event.thread
    assert thread is not None
    return str(thread.thread_id)


#: Set on a Thread just inserted whose chain has no head yet (cleared by its first append).
NEW_CHAIN = "_nitro_new_chain"


def new_chain(thread: Thread) -> Thread:
    """Mark ``thread``, inserted in the current transaction, as starting its chain: its first
    append inserts the head instead of reading it (a thread id is new, so no head exists; if
    one did, the insert would fail and roll the transaction back, never fork the chain)."""
    setattr(thread, NEW_CHAIN, True)
    return thread


def _is_new(events: list[Event]) -> bool:
    thread = events[0].thread if events[0].thread_id is not None else None
    return bool(thread is not None and getattr(thread, NEW_CHAIN, False))


def append(events: list[Event], queued: list[writes.Write] | None = None) -> list[Event]:
    """Chain ``events`` (in order) and insert them in one statement, in the caller's
    transaction (one is opened when there is none: the head stays locked until the events are
    in). Heads are locked in key order, so two batches over the same chains cannot deadlock.

    ``queued``: row writes queued by the caller's batch (:mod:`.sql.writes`), sent in the same
    statement on PostgreSQL (before the head is locked), else first."""
    if not events:
        return events
    queued = list(queued or [])
    db = router.db_for_write(Event)
    # A host's receivers see each event as save() would send it (before it is hashed).
    writes.saving(events, db)
    groups: dict[str, list[Event]] = {}
    for event in events:
        groups.setdefault(chain_of(event), []).append(event)
    on_postgresql = postgresql(Event)
    if len(groups) == 1 and on_postgresql:
        ((key, group),) = groups.items()
        if not _is_new(group):
            linked = sql_events.append_to_one_chain(db, key, group, queued)
            queued = []  # sent by that statement either way
            if linked:
                _changed(events, db)
                writes.saved(events, db)
                return events
    if not (on_postgresql and len(groups) == 1):
        writes.send(db, queued)  # before the heads' locks, as each write was
        queued = []
    with transaction.atomic(using=db, savepoint=False):
        heads: dict[str, tuple[int, str]] = {}
        created: set[str] = set()
        for key in sorted(groups):
            if _is_new(groups[key]):
                seq, prev = 0, ""
                created.add(key)
            else:
                seq, prev = sql_events.lock_head(db, key)
            for event in groups[key]:
                seq += 1
                prev = sql_events.link(event, key, prev, seq)
            heads[key] = (seq, prev)
        sql_events.insert_linked(db, events, heads, created, queued)
        _changed(events, db)
        writes.saved(events, db)
    for key in created:  # from now on the head exists: later appends read it
        thread = groups[key][0].thread
        if thread is not None:
            setattr(thread, NEW_CHAIN, False)
    return events


def append_gated(events: list[Event], gate: GatingWrite) -> bool:
    """PostgreSQL, one existing chain: ``gate``'s write and, when it wrote (``gate.condition``),
    ``events`` appended, in one statement
    (atomic without a transaction). False when nothing was written: the gate did not write (or
    wrote, for a chain without a head: the caller's gate should write only when the head
    exists). It sends no model signal: callers take it only while no receiver watches the
    events or the gate's rows (:func:`.sql.writes.watched`), and :func:`append` otherwise."""
    db = router.db_for_write(Event)
    key = chain_of(events[0])
    assert all(chain_of(e) == key for e in events) and not _is_new(events)
    if not sql_events.append_to_one_chain(db, key, events, [], gate):
        return False
    _changed(events, db)
    return True


def _changed(events: Iterable[Event], db: str) -> None:
    """The live pages' change token is replaced after the commit (:func:`.changes.changed`) when
    one of ``events`` is about a review: what the queue and the review screen show (a review's
    status, its decision's outcome, its claim, its assignment, a new review on the thread) only
    changes with such an event. A thread's and a run's own events (opened, a run requested,
    started or finished, a delivery) change nothing there, and cost no Redis write."""
    if any(_about_a_review(event) for event in events):
        changes.changed(using=db)


def _about_a_review(event: Event) -> bool:
    """``event`` names a review: by its id, or by the instance it was built with (read from the
    field's cache, without a query)."""
    field: Any = Event._meta.get_field("review")
    return event.review_id is not None or field.get_cached_value(event, None) is not None


def start_thread(
    thread: Thread, rows: list[Any], events: list[Event], *, unless: QuerySet[Any] | None = None
) -> bool:
    """PostgreSQL: insert a new ``thread``, ``rows`` of it (its first run) and its first
    ``events``, which start its chain, in one statement
    (:func:`.sql.events.insert_new_thread`); nothing, and False, when ``unless`` finds a row.
    It sends no model signal: the caller takes it only while no receiver watches these models
    (:func:`.sql.writes.watched`)."""
    if not sql_events.insert_new_thread(thread, rows, events, unless=unless):
        return False
    _changed(events, router.db_for_write(Event))
    return True


__all__ = [
    "NEW_CHAIN",
    "ChainWriteError",
    "GatingWrite",
    "append",
    "append_gated",
    "chain_of",
    "new_chain",
    "start_thread",
]
