"""The audit chain's statements: events linked to their chain's head and inserted, the head
moved (:mod:`nitro_assistants.services.chain_append` decides which one a batch takes).

Each event's hash is :func:`nitro_assistants.hashchain.link_hash` of its chain's previous hash
and of what it covers (:func:`content`); a statement that has PostgreSQL compute the links
(:func:`append_to_one_chain`) is checked against the same hashes computed here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.db import connections, router
from django.db.models import QuerySet
from django.utils import timezone

from nitro_assistants import hashchain
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import AuditChain, Event, Thread
from nitro_assistants.services.sql import column, table, writes
from nitro_assistants.services.sql.reads import cast


class ChainWriteError(NitroAssistantsError):
    """The database computed a link's hash otherwise than :func:`hashchain.link_hash` (a bug)."""


def content(event: Event, key: str) -> bytes:
    """What the event's hash covers (its data normalized and its actor reference set first)."""
    event.data = hashchain.normalized(event.data if event.data is not None else {})
    event.actor_ref = "" if event.actor_id is None else str(event.actor_id)
    return hashchain.canonical(
        chain=key,
        verb=event.verb,
        data=event.data,
        at=event.at,
        review=event.review_id,
        run=event.run_id,
        actor=event.actor_ref,
        whole=True,  # just normalized
    )


def link(event: Event, key: str, prev_hash: str, seq: int, covered: bytes | None = None) -> str:
    """Set ``event``'s place in chain ``key`` (after ``prev_hash``, at ``seq``) and its hash."""
    event.seq = seq
    event.prev_hash = prev_hash
    event.hash = hashchain.link_hash(prev_hash, content(event, key) if covered is None else covered)
    return event.hash


@dataclass
class GatingWrite:
    """A write the events of :func:`append_to_one_chain` depend on, in their statement: ``ctes``
    (SQL and ``params``, first in the statement), the ``condition`` that says it wrote (the
    events are appended only then) and an expression ``returning`` what the caller needs of it,
    set in ``returned`` once the statement ran."""

    ctes: list[str]
    params: list[Any]
    condition: str
    returning: str
    returned: Any = None


@dataclass
class Linked:
    """The SQL of :func:`linked_sql`: ``ctes`` (the caller's first), an ``insert`` of the events
    (``INSERT ... SELECT``, no ``RETURNING``) and their ``params``, in order."""

    events: list[Event]
    ctes: list[str]
    insert: str
    params: list[Any]
    #: What each event's hash covers, as sent.
    contents: list[bytes]

    def check(self, db: str, key: str, fetched: list[Any]) -> None:
        """Check the rows the insert returned (``id, seq, prev_hash, hash``) against the events
        hashed here, and set each event's pk."""
        rows = {int(row[1]): (row[0], row[2], row[3]) for row in fetched}
        seq = min(rows)
        prev = rows[seq][1]
        for event, covered in zip(self.events, self.contents, strict=True):
            pk, stored_prev, stored_hash = rows[seq]
            if link(event, key, prev, seq, covered) != stored_hash or stored_prev != prev:
                raise ChainWriteError(f"chain {key}: the database linked seq {seq} differently")
            event.pk = pk
            event._state.adding = False
            event._state.db = db
            prev, seq = stored_hash, seq + 1


def _head_columns(connection: Any) -> tuple[str, str, str, str, str]:
    """The head's table and its chain, seq, hash and updated_at columns, quoted."""
    return (
        table(AuditChain, connection),
        column(AuditChain, "chain", connection),
        column(AuditChain, "seq", connection),
        column(AuditChain, "hash", connection),
        column(AuditChain, "updated_at", connection),
    )


@dataclass(frozen=True)
class _Shape:
    """The fixed text of :func:`linked_sql`'s statement for a number of events: its CTEs (after
    the caller's), its insert, and the fields of each event sent as parameters, in order."""

    ctes: tuple[str, ...]
    insert: str
    fields: tuple[Any, ...]


@functools.lru_cache(maxsize=64)
def _shape(db: str, count: int, condition: str) -> _Shape:
    """:class:`_Shape` of ``count`` events on ``db``, built once (its text is the same on every
    call: only the parameters change)."""
    connection = connections[db]
    qn = connection.ops.quote_name
    head, chain_col, seq_col, hash_col, updated_col = _head_columns(connection)
    # Names are the models' own, quoted; every value is a parameter. ``seq`` and ``hash`` in the
    # CTEs are aliases of this statement's own.
    ctes = [
        f"head_row AS MATERIALIZED (SELECT {seq_col} AS seq, {hash_col} AS hash FROM {head} "  # noqa: S608
        f"WHERE {chain_col} = %s{condition} FOR UPDATE)",
        "link_0 AS MATERIALIZED (SELECT seq, hash FROM head_row UNION ALL "  # noqa: S608
        f"SELECT 0, '' WHERE NOT EXISTS (SELECT 1 FROM head_row){condition})",
    ]
    for i in range(1, count + 1):
        ctes.append(
            f"link_{i} AS MATERIALIZED (SELECT seq + 1 AS seq, hash AS prev_hash, "  # noqa: S608
            "encode(sha256(convert_to(hash, 'UTF8') || %s::bytea), 'hex') AS hash "
            f"FROM link_{i - 1})"
        )
    last = f"link_{count}"
    ctes += [
        f"moved AS (UPDATE {head} SET {seq_col} = {last}.seq, {hash_col} = {last}.hash, "  # noqa: S608
        f"{updated_col} = %s FROM {last} WHERE {head}.{chain_col} = %s "
        "AND EXISTS (SELECT 1 FROM head_row) RETURNING 1)",
        f"started AS (INSERT INTO {head} ({chain_col}, {seq_col}, {hash_col}, {updated_col}) "  # noqa: S608
        f"SELECT %s, seq, hash, %s FROM {last} WHERE NOT EXISTS (SELECT 1 FROM head_row) "
        f"ON CONFLICT ({chain_col}) DO NOTHING RETURNING 1)",
        "written AS (SELECT 1 FROM moved UNION ALL SELECT 1 FROM started)",
    ]
    fields = [f for f in Event._meta.concrete_fields if not f.primary_key]
    linked = {"seq": "seq", "prev_hash": "prev_hash", "hash": "hash"}  # the link_i aliases
    values = [linked[f.attname] if f.attname in linked else cast(f, connection) for f in fields]
    selects = []
    for i in range(1, count + 1):
        row = ", ".join(f"link_{i}.{v}" if v in linked else v for v in values)
        selects.append(f"SELECT {row} FROM link_{i} WHERE EXISTS (SELECT 1 FROM written)")  # noqa: S608
    insert = (
        f"INSERT INTO {table(Event, connection)} ({', '.join(qn(str(f.column)) for f in fields)}) "
        + " UNION ALL ".join(selects)
    )
    sent = tuple(f for f in fields if f.attname not in linked)
    return _Shape(tuple(ctes), insert, sent)


def linked_sql(
    db: str,
    key: str,
    events: list[Event],
    ctes: list[str],
    params: list[Any],
    *,
    condition: str = "",
) -> Linked:
    """The CTEs and the insert that chain ``events`` to the head of chain ``key`` (locked, or
    started when there is none) and move it, after the caller's ``ctes`` (with their
    ``params``). ``condition`` (SQL, `` AND ...``) gates it all: false, nothing is written."""
    connection = connections[db]
    shape = _shape(db, len(events), condition)
    now = timezone.now()
    params = [*params, key]
    contents: list[bytes] = []
    for event in events:
        contents.append(content(event, key))  # once: sent, then checked
        params.append(b"\n" + contents[-1])
    params += [now, key, key, now]
    for event in events:
        params += (f.get_db_prep_save(f.pre_save(event, True), connection) for f in shape.fields)
    return Linked(events, [*ctes, *shape.ctes], shape.insert, params, contents)


def append_to_one_chain(
    db: str,
    key: str,
    events: list[Event],
    queued: list[writes.Write],
    gate: GatingWrite | None = None,
) -> bool:
    """PostgreSQL, one chain: lock its head (or start it), chain the events to it, insert them
    and move the head, all in one statement (each link's hash is ``link_hash``, computed by the
    database from the head it locked: ``sha256(prev || "\\n" || content)``). Being one statement,
    it needs no transaction of its own. False, with nothing written, when the head appeared
    meanwhile (another writer started the chain first), or when ``gate`` did not write.

    The ``queued`` row writes are CTEs of the same statement, sent either way; the head's read
    waits for them (its condition counts their rows), so they take their rows' locks before
    the head's, as when each was a statement of its own."""
    connection = connections[db]
    # Behind a gate, the queued writes are made only when it wrote.
    ctes, params = writes.ctes(db, queued, only_if=gate.condition if gate is not None else "")
    after = f" AND {writes.written(len(queued))} >= 0" if queued else ""
    if gate is not None:
        ctes, params = gate.ctes + ctes, gate.params + params
        after += f" AND {gate.condition}"
    linked = linked_sql(db, key, events, ctes, params, condition=after)
    returned = ", ".join(
        column(Event, name, connection) for name in ("pk", "seq", "prev_hash", "hash")
    )
    sql = f"WITH {', '.join(linked.ctes)} {linked.insert} RETURNING {returned}" + (
        f", {gate.returning}" if gate is not None else ""
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


def lock_head(db: str, key: str) -> tuple[int, str]:
    """Create the chain's head if it is new, lock it, and read it: one statement. After waiting
    for another writer's lock, PostgreSQL returns the head that writer committed."""
    connection = connections[db]
    head, chain_col, seq_col, hash_col, updated_col = _head_columns(connection)
    with connection.cursor() as cursor:
        cursor.execute(
            # Names are the models' own, quoted; every value is a parameter.
            f"INSERT INTO {head} ({chain_col}, {seq_col}, {hash_col}, {updated_col}) "  # noqa: S608
            f"VALUES (%s, 0, '', %s) ON CONFLICT ({chain_col}) DO UPDATE "
            f"SET {chain_col} = EXCLUDED.{chain_col} RETURNING {seq_col}, {hash_col}",
            [key, timezone.now()],
        )
        seq, hash_ = cursor.fetchone()
    return int(seq), str(hash_)


def insert_linked(
    db: str,
    events: list[Event],
    heads: dict[str, tuple[int, str]],
    created: set[str],
    queued: list[writes.Write] | None = None,
) -> None:
    """Insert ``events``, already linked, and move each chain's head to ``heads[key]`` (insert
    it for the keys in ``created``); the ``queued`` row writes first, on PostgreSQL in the same
    statement (SQLite has them sent before). Sets each event's pk."""
    connection = connections[db]
    qn = connection.ops.quote_name
    now = timezone.now()
    head, chain_col, seq_col, hash_col, updated_col = _head_columns(connection)
    update_sql = (
        f"UPDATE {head} SET {seq_col} = %s, {hash_col} = %s, {updated_col} = %s "  # noqa: S608
        f"WHERE {chain_col} = %s"
    )
    create_sql = (
        f"INSERT INTO {head} ({seq_col}, {hash_col}, {updated_col}, {chain_col}) "  # noqa: S608
        "VALUES (%s, %s, %s, %s)"
    )
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
        f"INSERT INTO {table(Event, connection)} ({columns}) VALUES "  # noqa: S608
        + ", ".join([row] * len(events))
        + f" RETURNING {column(Event, 'pk', connection)}"
    )
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # The heads move in the statement that inserts the events: no query of their own;
            # so do the rows the caller's batch wrote (a new thread's chain locks nothing yet).
            written, written_params = writes.ctes(db, queued or [])
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


def insert_new_thread(
    thread: Thread, rows: list[Any], events: list[Event], *, unless: QuerySet[Any] | None = None
) -> bool:
    """PostgreSQL: insert a new ``thread``, ``rows`` of it (instances whose only unknown is the
    thread's id: its first run) and its first ``events``, which start its chain, in one
    statement (atomic without a transaction). Each row's and event's ``thread_id`` is the id
    the thread's INSERT returns. It sends no model signal: the caller takes it only while no
    receiver watches these models (:func:`.writes.watched`).

    ``unless``: a queryset (its SQL compiled by the ORM) that refuses the whole insert when it
    finds a row (the stops that refuse a new thread's run): then nothing is written and False
    is returned. Every other part of the statement selects from the thread's INSERT, so none is
    written without it."""
    db = router.db_for_write(Thread)
    connection = connections[db]
    qn = connection.ops.quote_name
    key = str(thread.thread_id)
    thread_pk = column(Thread, "pk", connection)

    def prepared(instance: Any, fields: list[Any]) -> tuple[list[str], list[Any]]:
        columns, params = [], []
        for f in fields:
            if getattr(f, "related_model", None) is Thread:
                columns.append(f"thread_row.{thread_pk}")
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
    if unless is None:
        source = f"VALUES ({', '.join(['%s'] * len(thread_fields))})"
    else:
        refusing, refusing_params = unless.order_by().values("pk").query.sql_with_params()
        source = (
            f"SELECT {', '.join(cast(f, connection) for f in thread_fields)} "
            f"WHERE NOT EXISTS ({refusing})"
        )
        params += refusing_params
    ctes = [
        f"thread_row AS (INSERT INTO {table(Thread, connection)} ({names(thread_fields)}) "
        f"{source} RETURNING {thread_pk})"
    ]
    for i, row in enumerate(rows):
        fields = list(type(row)._meta.concrete_fields)
        columns, row_params = prepared(row, fields)
        ctes.append(
            f"row_{i} AS (INSERT INTO {table(type(row), connection)} ({names(fields)}) "  # noqa: S608
            f"SELECT {', '.join(columns)} FROM thread_row RETURNING 1)"
        )
        params += row_params
    seq, prev = 0, ""
    for event in events:
        seq += 1
        prev = link(event, key, prev, seq)
    head, chain_col, seq_col, hash_col, updated_col = _head_columns(connection)
    head_fields = [AuditChain._meta.get_field(n) for n in ("chain", "seq", "hash", "updated_at")]
    ctes.append(
        f"head AS (INSERT INTO {head} ({chain_col}, {seq_col}, {hash_col}, {updated_col}) "  # noqa: S608
        f"SELECT {', '.join(cast(f, connection) for f in head_fields)} FROM thread_row)"
    )
    params += [key, seq, prev, timezone.now()]
    fields = [f for f in Event._meta.concrete_fields if not f.primary_key]
    selects = []
    for event in events:
        columns, event_params = prepared(event, fields)
        selects.append(f"SELECT {', '.join(columns)} FROM thread_row")  # noqa: S608
        params += event_params
    sql = (
        f"WITH {', '.join(ctes)} INSERT INTO {table(Event, connection)} ({names(fields)}) "
        + " UNION ALL ".join(selects)
        + f" RETURNING {column(Event, 'pk', connection)}, {column(Event, 'thread', connection)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchall()
    if not returned:
        return False
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
    return True
