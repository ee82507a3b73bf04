"""The audit trail's hash chain in the database: appending events to it, walking it, pruning it.

One chain per thread, plus one for the events about no thread (:data:`chain.INSTALLATION`).
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

import datetime
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Q
from django.utils import timezone

from nitro_assistants import chain, rules, signals
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import AuditChain, Event, Review, Thread
from nitro_assistants.services import changes, writes
from nitro_assistants.services.rows import cast

#: Rows read per round trip by the walk and the export (a server-side cursor on PostgreSQL).
CHUNK = 5000


def chain_of(event: Event) -> str:
    """The chain an event belongs to: its thread's remote id, or the installation's."""
    if event.thread_id is None:
        return chain.INSTALLATION
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


def _content(event: Event, key: str) -> bytes:
    """What the event's hash covers (its data normalized and its actor reference set first)."""
    event.data = chain.normalized(event.data if event.data is not None else {})
    event.actor_ref = "" if event.actor_id is None else str(event.actor_id)
    return chain.canonical(
        chain=key,
        verb=event.verb,
        data=event.data,
        at=event.at,
        review=event.review_id,
        run=event.run_id,
        actor=event.actor_ref,
        whole=True,  # just normalized
    )


def _prepare(event: Event, key: str, prev_hash: str, seq: int, content: bytes | None = None) -> str:
    event.seq = seq
    event.prev_hash = prev_hash
    event.hash = chain.link_hash(prev_hash, _content(event, key) if content is None else content)
    return event.hash


def append(events: list[Event], held: list[writes.Write] | None = None) -> list[Event]:
    """Chain ``events`` (in order) and insert them in one statement, in the caller's
    transaction (one is opened when there is none: the head stays locked until the events are
    in). Heads are locked in key order, so two batches over the same chains cannot deadlock.

    ``held``: row writes queued by the caller's batch (:mod:`.writes`), sent in the same
    statement on PostgreSQL (before the head is locked), else first."""
    if not events:
        return events
    held = list(held or [])
    db = router.db_for_write(Event)
    # A host's receivers see each event as save() would send it (before it is hashed).
    writes.saving(events, db)
    groups: dict[str, list[Event]] = {}
    for event in events:
        groups.setdefault(chain_of(event), []).append(event)
    postgresql = connections[db].vendor == "postgresql"
    if len(groups) == 1 and postgresql:
        ((key, group),) = groups.items()
        if not _is_new(group):
            linked = _append_linked(db, key, group, held)
            held = []  # sent by that statement either way
            if linked:
                _changed(events, db)
                writes.saved(events, db)
                return events
    if not (postgresql and len(groups) == 1):
        writes.send(db, held)  # before the heads' locks, as each write was
        held = []
    with transaction.atomic(using=db, savepoint=False):
        heads: dict[str, tuple[int, str]] = {}
        created: set[str] = set()
        for key in sorted(groups):
            if _is_new(groups[key]):
                seq, prev = 0, ""
                created.add(key)
            else:
                seq, prev = _lock_head(db, key)
            for event in groups[key]:
                seq += 1
                prev = _prepare(event, key, prev, seq)
            heads[key] = (seq, prev)
        _insert(db, events, heads, created, held)
        _changed(events, db)
        writes.saved(events, db)
    for key in created:  # from now on the head exists: later appends read it
        thread = groups[key][0].thread
        if thread is not None:
            setattr(thread, NEW_CHAIN, False)
    return events


@dataclass
class Gate:
    """A write the events of :func:`append_gated` depend on, in their statement: ``ctes`` (SQL
    and ``params``, first in the statement), the ``condition`` that says it wrote (the events
    are appended only then) and an expression ``returning`` what the caller needs of it, set
    in ``returned`` once the statement ran."""

    ctes: list[str]
    params: list[Any]
    condition: str
    returning: str
    returned: Any = None


def append_gated(events: list[Event], gate: Gate) -> bool:
    """PostgreSQL, one existing chain: ``gate``'s write and, when it wrote (``gate.condition``),
    ``events`` appended, in one statement
    (atomic without a transaction). False when nothing was written: the gate did not write (or
    wrote, for a chain without a head: the caller's gate should write only when the head
    exists). It sends no model signal: callers take it only while no receiver watches the
    events or the gate's rows (:func:`.writes.watched`), and :func:`append` otherwise."""
    db = router.db_for_write(Event)
    key = chain_of(events[0])
    assert all(chain_of(e) == key for e in events) and not _is_new(events)
    if not _append_linked(db, key, events, [], gate):
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


def _append_linked(
    db: str, key: str, events: list[Event], held: list[writes.Write], gate: Gate | None = None
) -> bool:
    """PostgreSQL, one chain: lock its head (or start it), chain the events to it, insert them
    and move the head, all in one statement (each link's hash is ``link_hash``, computed by the
    database from the head it locked: ``sha256(prev || "\\n" || content)``). Being one statement,
    it needs no transaction of its own. False, with nothing written, when the head appeared
    meanwhile (another writer started the chain first): the caller's upsert waits for it.

    The ``held`` row writes are CTEs of the same statement, sent either way; the head's read
    waits for them (its condition counts their rows), so they take their rows' locks before
    the head's, as when each was a statement of its own."""
    connection = connections[db]
    qn = connection.ops.quote_name
    # Behind a gate, the held writes are made only when it wrote.
    ctes, params = writes.ctes(db, held, only_if=gate.condition if gate is not None else "")
    after = f" AND {writes.written(len(held))} >= 0" if held else ""
    if gate is not None:
        ctes, params = gate.ctes + ctes, gate.params + params
        after += f" AND {gate.condition}"
    linked = linked_sql(db, key, events, ctes, params, condition=after)
    sql = (
        f"WITH {', '.join(linked.ctes)} {linked.insert}"
        f" RETURNING {qn(str(Event._meta.pk.column))}, seq, prev_hash, hash"
        + (f", {gate.returning}" if gate is not None else "")
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, linked.params)
        fetched = cursor.fetchall()
    if not fetched:
        return False
    if gate is not None:
        gate.returned = fetched[0][4]
    linked.check(db, key, [row[:4] for row in fetched])
    return True


@dataclass
class Linked:
    """The SQL of :func:`linked_sql`: ``ctes`` (the caller's first), an ``insert`` of the events
    (``INSERT ... SELECT``, no ``RETURNING``) and their ``params``, in order."""

    events: list[Event]
    ctes: list[str]
    insert: str
    params: list[Any]
    #: What each event's hash covers, as sent (None: the key was SQL, see ``check``).
    contents: list[bytes] | None

    def check(self, db: str, key: str, fetched: list[Any]) -> None:
        """Check the rows the insert returned (``id, seq, prev_hash, hash``) against the events
        hashed here, with the chain's ``key`` as it is, and set each event's pk."""
        rows = {int(row[1]): (row[0], row[2], row[3]) for row in fetched}
        seq = min(rows)
        prev = rows[seq][1]
        contents: list[bytes | None] = (
            [*self.contents] if self.contents else [None] * len(self.events)
        )
        for event, content in zip(self.events, contents, strict=True):
            pk, stored_prev, stored_hash = rows[seq]
            if _prepare(event, key, prev, seq, content) != stored_hash or stored_prev != prev:
                raise ChainWriteError(f"chain {key}: the database linked seq {seq} differently")
            event.pk = pk
            event._state.adding = False
            event._state.db = db
            prev, seq = stored_hash, seq + 1


def linked_sql(
    db: str,
    key: str | None,
    events: list[Event],
    ctes: list[str],
    params: list[Any],
    *,
    condition: str = "",
    key_sql: str = "",
    columns: dict[str, str] | None = None,
) -> Linked:
    """The CTEs and the insert that chain ``events`` to the head of chain ``key`` (locked, or
    started when there is none) and move it, after the caller's ``ctes`` (with their
    ``params``). ``condition`` (SQL, `` AND ...``) gates it all: false, nothing is written.

    ``key_sql`` instead of ``key``: an SQL expression for the key, known only to the statement
    (a row its CTEs return); each hash's content is then sent in two parts around it.
    ``columns``: SQL for some of the events' columns (by attname) instead of their values."""
    connection = connections[db]
    qn = connection.ops.quote_name
    head = qn(AuditChain._meta.db_table)
    now = timezone.now()
    ctes, params = list(ctes), list(params)
    where = key_sql or "%s"
    keys = [] if key_sql else [key]
    # Names are the models' own, quoted; every value is a parameter.
    ctes += [
        f"head_row AS MATERIALIZED (SELECT seq, hash FROM {head} "  # noqa: S608
        f"WHERE chain = {where}{condition} FOR UPDATE)",
        "link_0 AS MATERIALIZED (SELECT seq, hash FROM head_row UNION ALL "  # noqa: S608
        f"SELECT 0, '' WHERE NOT EXISTS (SELECT 1 FROM head_row){condition})",
    ]
    params += keys
    contents: list[bytes] = []
    for i, event in enumerate(events, 1):
        if key_sql:
            marker = uuid.uuid4().hex
            before, end = _content(event, marker).split(marker.encode())
            content_sql = f"%s::bytea || convert_to({key_sql}, 'UTF8') || %s::bytea"
            params += [b"\n" + before, end]
        else:
            contents.append(_content(event, str(key)))  # once: sent, then checked
            content_sql = "%s::bytea"
            params.append(b"\n" + contents[-1])
        ctes.append(
            f"link_{i} AS MATERIALIZED (SELECT seq + 1 AS seq, hash AS prev_hash, "  # noqa: S608
            f"encode(sha256(convert_to(hash, 'UTF8') || {content_sql}), 'hex') AS hash "
            f"FROM link_{i - 1})"
        )
    last = f"link_{len(events)}"
    ctes += [
        f"moved AS (UPDATE {head} SET seq = {last}.seq, hash = {last}.hash, updated_at = %s "  # noqa: S608
        f"FROM {last} WHERE {head}.chain = {where} AND EXISTS (SELECT 1 FROM head_row) "
        "RETURNING 1)",
        f"started AS (INSERT INTO {head} (chain, seq, hash, updated_at) "  # noqa: S608
        f"SELECT {where}, seq, hash, %s FROM {last} WHERE NOT EXISTS (SELECT 1 FROM head_row) "
        "ON CONFLICT (chain) DO NOTHING RETURNING 1)",
        "written AS (SELECT 1 FROM moved UNION ALL SELECT 1 FROM started)",
    ]
    params += [now, *keys, *keys, now]
    fields = [f for f in Event._meta.concrete_fields if not f.primary_key]
    selects = []
    for i, event in enumerate(events, 1):
        values = []
        for f in fields:
            if f.attname in ("seq", "prev_hash", "hash"):
                values.append(f"link_{i}.{f.attname}")
            elif columns and f.attname in columns:
                values.append(columns[f.attname])
            else:
                values.append(cast(f, connection))
                params.append(f.get_db_prep_save(f.pre_save(event, True), connection))
        selects.append(
            f"SELECT {', '.join(values)} FROM link_{i} WHERE EXISTS (SELECT 1 FROM written)"  # noqa: S608
        )
    insert = (
        f"INSERT INTO {qn(Event._meta.db_table)} ({', '.join(qn(str(f.column)) for f in fields)}) "
        + " UNION ALL ".join(selects)
    )
    return Linked(events, ctes, insert, params, None if key_sql else contents)


def insert_thread(thread: Thread, rows: list[Any], events: list[Event]) -> None:
    """PostgreSQL: insert a new ``thread``, ``rows`` of it (instances whose only unknown is the
    thread's id: its first run) and its first ``events``, which start its chain, in one
    statement (atomic without a transaction). Each row's and event's ``thread_id`` is the id
    the thread's INSERT returns. It sends no model signal: the caller takes it only while no
    receiver watches these models (:func:`.writes.watched`)."""
    db = router.db_for_write(Thread)
    connection = connections[db]
    qn = connection.ops.quote_name
    key = str(thread.thread_id)

    def prepared(instance: Any, fields: list[Any]) -> tuple[list[str], list[Any]]:
        columns, params = [], []
        for f in fields:
            if f.attname == "thread_id":
                columns.append("thread_row.id")
            else:
                columns.append(cast(f, connection))
                params.append(f.get_db_prep_save(f.pre_save(instance, True), connection))
        return columns, params

    def names(fields: list[Any]) -> str:
        return ", ".join(qn(str(f.column)) for f in fields)

    thread.prepare_save(None)  # what its save() does first: its subject
    thread_fields = [f for f in Thread._meta.concrete_fields if not f.primary_key]
    params: list[Any] = [
        f.get_db_prep_save(f.pre_save(thread, True), connection) for f in thread_fields
    ]
    ctes = [
        f"thread_row AS (INSERT INTO {qn(Thread._meta.db_table)} ({names(thread_fields)}) "  # noqa: S608
        f"VALUES ({', '.join(['%s'] * len(thread_fields))}) RETURNING id)"
    ]
    for i, row in enumerate(rows):
        fields = list(type(row)._meta.concrete_fields)
        columns, row_params = prepared(row, fields)
        ctes.append(
            f"row_{i} AS (INSERT INTO {qn(type(row)._meta.db_table)} ({names(fields)}) "  # noqa: S608
            f"SELECT {', '.join(columns)} FROM thread_row RETURNING 1)"
        )
        params += row_params
    seq, prev = 0, ""
    for event in events:
        seq += 1
        prev = _prepare(event, key, prev, seq)
    ctes.append(
        f"head AS (INSERT INTO {qn(AuditChain._meta.db_table)} (chain, seq, hash, updated_at) "  # noqa: S608
        "VALUES (%s, %s, %s, %s))"
    )
    params += [key, seq, prev, timezone.now()]
    fields = [f for f in Event._meta.concrete_fields if not f.primary_key]
    selects = []
    for event in events:
        columns, event_params = prepared(event, fields)
        selects.append(f"SELECT {', '.join(columns)} FROM thread_row")  # noqa: S608
        params += event_params
    sql = (
        f"WITH {', '.join(ctes)} INSERT INTO {qn(Event._meta.db_table)} ({names(fields)}) "
        + " UNION ALL ".join(selects)
        + f" RETURNING {qn(str(Event._meta.pk.column))}, thread_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchall()
    thread.pk = returned[0][1]
    thread._state.adding = False
    thread._state.db = db
    for row in rows:
        row.thread = thread
        row._state.adding = False
        row._state.db = db
    for event, (pk, _) in zip(events, returned, strict=True):
        event.pk = pk
        event.thread = thread
        event._state.adding = False
        event._state.db = db
    _changed(events, db)


class ChainWriteError(NitroAssistantsError):
    """The database computed a link's hash otherwise than :func:`chain.link_hash` (a bug)."""


def _lock_head(db: str, key: str) -> tuple[int, str]:
    """Create the chain's head if it is new, lock it, and read it: one statement. After waiting
    for another writer's lock, PostgreSQL returns the head that writer committed."""
    table = connections[db].ops.quote_name(AuditChain._meta.db_table)
    with connections[db].cursor() as cursor:
        cursor.execute(
            # Names are the models' own, quoted; every value is a parameter.
            f"INSERT INTO {table} (chain, seq, hash, updated_at) VALUES (%s, 0, '', %s) "  # noqa: S608
            "ON CONFLICT (chain) DO UPDATE SET chain = EXCLUDED.chain RETURNING seq, hash",
            [key, timezone.now()],
        )
        seq, hash_ = cursor.fetchone()
    return int(seq), str(hash_)


def _insert(
    db: str,
    events: list[Event],
    heads: dict[str, tuple[int, str]],
    created: set[str],
    held: list[writes.Write] | None = None,
) -> None:
    connection = connections[db]
    qn = connection.ops.quote_name
    now = timezone.now()
    head_table = qn(AuditChain._meta.db_table)
    update_sql = f"UPDATE {head_table} SET seq = %s, hash = %s, updated_at = %s WHERE chain = %s"  # noqa: S608
    create_sql = f"INSERT INTO {head_table} (seq, hash, updated_at, chain) VALUES (%s, %s, %s, %s)"  # noqa: S608
    head_sqls = [create_sql if key in created else update_sql for key in heads]
    head_params: list[list[Any]] = [[seq, hash_, now, key] for key, (seq, hash_) in heads.items()]
    fields = [f for f in Event._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(qn(str(f.column)) for f in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    values: list[Any] = []
    for event in events:
        for f in fields:
            values.append(f.get_db_prep_save(f.pre_save(event, True), connection))
    insert = (
        f"INSERT INTO {qn(Event._meta.db_table)} ({columns}) VALUES "  # noqa: S608
        + ", ".join([row] * len(events))
        + f" RETURNING {qn(str(Event._meta.pk.column))}"
    )
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # The heads move in the statement that inserts the events: no query of their own;
            # so do the rows the caller's batch wrote (a new thread's chain locks nothing yet).
            written, written_params = writes.ctes(db, held or [])
            ctes = ", ".join(written + [f"head_{i} AS ({sql})" for i, sql in enumerate(head_sqls)])
            cursor.execute(
                f"WITH {ctes} {insert}",
                written_params + [p for params in head_params for p in params] + values,
            )
            pks = [r[0] for r in cursor.fetchall()]
        else:  # SQLite has no UPDATE in a WITH; it serializes writers anyway
            cursor.execute(insert, values)
            pks = [r[0] for r in cursor.fetchall()]
            for sql, params in zip(head_sqls, head_params, strict=True):
                cursor.execute(sql, params)
    for event, pk in zip(events, pks, strict=True):
        event.pk = pk
        event._state.adding = False
        event._state.db = db


# -- the walk ------------------------------------------------------------------------------------

LINK_FIELDS = (
    "pk",
    "thread__thread_id",
    "seq",
    "verb",
    "data",
    "at",
    "review_id",
    "run_id",
    "actor_ref",
    "actor_id",
    "prev_hash",
    "hash",
)


def _link(row: tuple[Any, ...]) -> chain.Link:
    pk, thread, seq, verb, data, at, review, run, actor, actor_id, prev, hash_ = row
    return chain.Link(
        pk=pk,
        chain=chain.INSTALLATION if thread is None else str(thread),
        seq=seq,
        verb=verb,
        data=data,
        at=at,
        review=review,
        run=run,
        actor=actor,
        actor_id=actor_id,
        prev_hash=prev,
        hash=hash_,
    )


@dataclass
class Verification:
    """What a walk found: how many events and chains it checked, and the first break."""

    events: int = 0
    chains: int = 0
    broken: chain.Break | None = None
    breaks: list[chain.Break] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.broken is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events": self.events,
            "chains": self.chains,
            "broken": self.broken.as_dict() if self.broken else None,
        }


def _scope(
    thread: Thread | None, since: datetime.datetime | None, until: datetime.datetime | None
) -> Q:
    scope = Q()
    if thread is not None:
        scope &= Q(thread=thread)
    if since is not None:
        scope &= Q(at__gte=since)
    if until is not None:
        scope &= Q(at__lt=until)
    return scope


def count(
    *,
    thread: Thread | None = None,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
) -> int:
    """How many events :func:`verify` would walk (for a progress bar)."""
    return Event.objects.filter(_scope(thread, since, until)).count()


def verify(
    *,
    thread: Thread | None = None,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
    progress: Callable[[int], None] | None = None,
) -> Verification:
    """Walk the chains (every chain, or one thread's; all their events, or those written in
    ``[since, until)``) and report the first broken link of each. A whole chain must start at
    seq 1 (or right after its latest checkpoint signed with ``AUDIT_KEY``) and end at its head;
    a time range starts at the event before it, which must be there. A checkpoint not signed
    with ``AUDIT_KEY`` (unsigned, forged, changed; or any, when no key is configured) is its
    chain's break."""
    result = Verification()
    ranged = since is not None or until is not None
    scope = _scope(thread, since, until)
    rows = (
        Event.objects.filter(scope)
        .order_by("thread_id", "seq", "pk")
        .values_list(*LINK_FIELDS)
        .iterator(chunk_size=CHUNK)
    )
    heads = _heads(thread)
    checkpoints = _checkpoints(thread)
    audit_key = app_settings.AUDIT_KEY
    checked: set[str] = set()
    state: chain.Walk | None = None

    def finish(walk: chain.Walk | None) -> None:
        if walk is None:
            return
        broken = walk.end(None if ranged else heads.get(walk.chain, (0, "")))
        if broken is not None:
            result.breaks.append(broken)
            result.broken = result.broken or broken

    for row in rows:
        link = _link(row)
        if state is None or state.chain != link.chain:
            finish(state)
            checked.add(link.chain)
            result.chains += 1
            start, broken = _start(link, ranged, checkpoints, audit_key)
            state = chain.Walk(link.chain, start, broken=broken)
        state.feed(link)
        result.events += 1
        if progress is not None and result.events % 1000 == 0:
            progress(result.events)
    finish(state)
    if not ranged:  # a head whose chain has no event left: they were all deleted
        for key, head in heads.items():
            if key not in checked and head[0] > 0:
                result.chains += 1
                start, broken = chain.start_after(key, checkpoints.get(key, []), audit_key)
                finish(chain.Walk(key, start, broken=broken))
    if progress is not None:
        progress(result.events)
    return result


def _heads(thread: Thread | None) -> dict[str, tuple[int, str]]:
    heads = AuditChain.objects.all()
    if thread is not None:
        heads = heads.filter(chain=str(thread.thread_id))
    return {
        key: (int(seq), str(hash_)) for key, seq, hash_ in heads.values_list("chain", "seq", "hash")
    }


def _chain_filter(key: str) -> Q:
    if key == chain.INSTALLATION:
        return Q(thread__isnull=True)
    return Q(thread__thread_id=key)


def _checkpoints(thread: Thread | None) -> dict[str, list[chain.Checkpoint]]:
    """Each chain's checkpoints (one query): where what is left of it starts, if signed."""
    rows = Event.objects.filter(verb=chain.PRUNED).exclude(data__through_seq=None)
    if thread is not None:
        rows = rows.filter(thread=thread)
    found: dict[str, list[chain.Checkpoint]] = {}
    for pk, key, at, data in rows.values_list("pk", "thread__thread_id", "at", "data"):
        found.setdefault(chain.INSTALLATION if key is None else str(key), []).append(
            chain.Checkpoint(pk, at, data)
        )
    return found


def _start(
    first: chain.Link,
    ranged: bool,
    checkpoints: dict[str, list[chain.Checkpoint]],
    key: str,
) -> tuple[chain.Start, chain.Break | None]:
    """Where a chain's walk starts: its beginning (or its latest signed checkpoint), or, for a
    time range, the event right before the first one in it; and a checkpoint that is not
    signed with ``key``, as the chain's break."""
    start, broken = chain.start_after(first.chain, checkpoints.get(first.chain, []), key)
    if not ranged or first.seq is None or first.seq <= start.seq:
        return start, broken
    before = (
        Event.objects.filter(_chain_filter(first.chain), seq=first.seq - 1)
        .values_list("hash", flat=True)
        .first()
    )
    if before is None:
        return chain.Start(
            seq=first.seq - 1, prev_hash="", why="the event before the range"
        ), broken
    return chain.Start(seq=first.seq, prev_hash=before, why="the event before the range"), broken


def verify_and_signal() -> Verification:
    """The periodic check: walk every chain; ``audit_broken`` when a link is broken."""
    result = verify()
    if not result.ok:
        signals.audit_broken.send(sender=Event, verification=result, broken=result.broken)
    return result


def heads(keys: Iterable[str] | None = None) -> Iterator[tuple[str, int, str]]:
    """The chains' heads (chain, seq, hash), in chain order, read as a stream."""
    rows = AuditChain.objects.order_by("chain")
    if keys is not None:
        rows = rows.filter(chain__in=list(keys))
    yield from rows.values_list("chain", "seq", "hash").iterator(chunk_size=CHUNK)


# -- retention -----------------------------------------------------------------------------------


class PruneError(NitroAssistantsError):
    """A prune refused (no ``AUDIT_KEY`` to sign its checkpoints)."""


NO_AUDIT_KEY = (
    "Pruning needs NITRO_ASSISTANTS['AUDIT_KEY']: each checkpoint that replaces the pruned events "
    "is signed with it, so that whoever can write to the database cannot cut a chain's start "
    "behind a checkpoint of their own. Set it to a long random secret kept outside the database "
    "(not SECRET_KEY), and keep it: verify needs it to vouch for the checkpoints."
)


@dataclass
class Pruned:
    events: int = 0
    chains: int = 0
    kept_open: int = 0


def prune(before: datetime.datetime, *, actor: Any = None) -> Pruned:
    """Delete the events written before ``before``, chain by chain, leaving each chain
    verifiable: a checkpoint event (``audit_pruned``) appended to the chain names how many
    events went, up to which seq, and the hash of the last (which covers all before it). A
    thread with an open review keeps its events. The prune itself is recorded on the
    installation's chain. Each checkpoint is signed with ``AUDIT_KEY`` (HMAC-SHA256 over what
    it says, :func:`chain.sign_checkpoint`); without it, :class:`PruneError` and nothing goes."""
    key = app_settings.AUDIT_KEY
    if not key:
        raise PruneError(NO_AUDIT_KEY)
    open_threads = Review.objects.filter(status__in=sorted(rules.OPEN_STATUSES)).values("thread_id")
    result = Pruned()
    result.kept_open = (
        Event.objects.filter(at__lt=before, thread__in=open_threads)
        .values("thread")
        .distinct()
        .count()
    )
    candidates = (
        Event.objects.filter(at__lt=before)
        .exclude(thread__in=open_threads)
        .order_by()
        .values_list("thread_id", flat=True)
        .distinct()
    )
    for thread_pk in list(candidates.iterator(chunk_size=CHUNK)):
        result.events += _prune_chain(thread_pk, before, actor, key)
        result.chains += 1
    with transaction.atomic():
        append(
            [
                Event(
                    thread=None,
                    verb=chain.PRUNED,
                    actor=actor if getattr(actor, "pk", None) else None,
                    data={
                        "before": chain.timestamp(before),
                        "events": result.events,
                        "chains": result.chains,
                        "kept_open": result.kept_open,
                    },
                )
            ]
        )
    return result


def _prune_chain(
    thread_pk: int | None, before: datetime.datetime, actor: Any, audit_key: str
) -> int:
    scope = Q(thread__isnull=True) if thread_pk is None else Q(thread_id=thread_pk)
    with transaction.atomic():
        thread = None if thread_pk is None else Thread.objects.get(pk=thread_pk)
        key = chain.INSTALLATION if thread is None else str(thread.thread_id)
        db = router.db_for_write(Event)
        _lock_head(db, key)  # no writer appends to this chain while its start moves
        old = Event.objects.filter(scope, at__lt=before).exclude(seq=None)
        last = old.order_by("-seq").values_list("seq", "hash").first()
        if last is None:
            return 0
        through_seq, through_hash = last
        # Everything up to the last old event goes, so the chain left starts right after it.
        doomed = Event.objects.filter(scope, seq__lte=through_seq)
        first_seq, from_hash = doomed.order_by("seq").values_list("seq", "prev_hash")[0]
        count, _ = doomed.delete()
        data: dict[str, Any] = {
            "before": chain.timestamp(before),
            "events": count,
            "first_seq": first_seq,
            "from_hash": from_hash,
            "through_seq": through_seq,
            "through_hash": through_hash,
            "pruned_at": chain.timestamp(timezone.now()),
        }
        data[chain.SIGNATURE] = chain.sign_checkpoint(audit_key, key, data)
        append(
            [
                Event(
                    thread=thread,
                    verb=chain.PRUNED,
                    actor=actor if getattr(actor, "pk", None) else None,
                    data=data,
                )
            ]
        )
    return count
