"""Row writes queued to ride on the next statement: fewer round trips, same effects.

Inside :func:`nitro_assistants.services.audit.events_batched`, on PostgreSQL and in a
transaction, :func:`save` (an UPDATE of some fields of a row) and :func:`insert` (a new row whose
primary key is already known: a UUID, a one-to-one's, or an id taken ahead from its sequence,
:mod:`.ids`) are queued instead of sent. The queue is sent as data-modifying CTEs of the batch's
audit-chain append (:mod:`.events`: the events and the rows they describe in one statement), or,
when the batch has no event, as one statement of its own (:func:`send`).

Nothing is ever reordered against the rest of the transaction: while writes are queued, any
other statement sent on the connection sends the queue first (an execute wrapper), so every
read and every write sees exactly what it saw when each write was its own statement. Writes to
the same row are merged into one (PostgreSQL applies only one of two changes of a row made by
one statement). In the chain's statement the queued writes run before the chain's head is
locked (the head's read depends on them), the order the writes had before: a thread's row is
always locked before its chain's head.

Elsewhere (SQLite, outside a transaction, outside a batch) each write is sent at once, as
``Model.save(update_fields=...)`` and ``Model.save(force_insert=True)``. A model a
``pre_save``/``post_save`` receiver is connected to (a host's history, audit log or search
index: :func:`watched`) is never queued either: its rows are saved at once, by ``save()``, on
every database, so the receivers see each row with the ``created`` and ``update_fields`` the
same call has on SQLite. The queue is the fast path of models nobody listens to.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import DatabaseError, connections, router
from django.db.models import Model
from django.db.models.signals import post_save, pre_save

from nitro_assistants.services.sql.reads import cast

M = TypeVar("M", bound=Model)

#: The writes queued by the current batch, or None outside one (or where nothing is queued).
_queue: ContextVar[Queue | None] = ContextVar("nitro_assistants_write_queue", default=None)


@dataclass
class Write:
    """One row's queued write: an INSERT (``insert``) or an UPDATE of ``values`` by primary key.
    ``values`` are column name → value prepared for the database."""

    model: type[Model]
    pk: Any
    insert: bool
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class Queue:
    db: str
    writes: dict[tuple[type[Model], Any], Write] = field(default_factory=dict)
    #: True while the queue's own statement is sent (the wrapper lets it through).
    sending: bool = False

    def take(self) -> list[Write]:
        writes = list(self.writes.values())
        self.writes.clear()
        return writes


def watched(model: type[Model]) -> bool:
    """True when a ``pre_save`` or ``post_save`` receiver is connected for ``model`` (a host's):
    its rows are then written by ``save()``, which sends them, never by a statement of ours."""
    return pre_save.has_listeners(model) or post_save.has_listeners(model)


def saving(instances: list[M], db: str) -> None:
    """``pre_save`` of new rows that a statement of ours inserts (the audit chain's events), as
    ``save(force_insert=True)`` sends it: before their values are read for the insert."""
    if instances and watched(type(instances[0])):
        for instance in instances:
            pre_save.send(
                sender=type(instance), instance=instance, raw=False, using=db, update_fields=None
            )


def saved(instances: list[M], db: str) -> None:
    """``post_save`` (``created=True``) of the rows :func:`saving` announced, once inserted."""
    if instances and watched(type(instances[0])):
        for instance in instances:
            post_save.send(
                sender=type(instance),
                instance=instance,
                created=True,
                update_fields=None,
                raw=False,
                using=db,
            )


def _queue_for(db: str) -> Queue | None:
    queue = _queue.get()
    if queue is None or queue.db != db:
        return None
    return queue


@contextmanager
def queued(db: str) -> Iterator[Queue | None]:
    """Queue the writes made inside (on ``db``, PostgreSQL, in a transaction) until the block
    ends; the caller sends what is left (``Queue.take``) with its own statement or with
    :func:`send` before the block ends. Nested blocks share the outermost queue. Only inside a
    transaction, which outlives the block: what is queued commits with what was sent. A block
    that raises with writes queued sends them anyway (each had been sent when it was made),
    unless the database raised (the transaction is lost then)."""
    connection = connections[db]
    if (
        _queue.get() is not None
        or connection.vendor != "postgresql"
        or not connection.in_atomic_block
    ):
        yield None
        return
    queue = Queue(db=db)
    token = _queue.set(queue)
    reset = False
    try:
        with connection.execute_wrapper(_send_first(queue)):
            yield queue
    except DatabaseError:
        queue.take()
        raise
    except BaseException:
        _queue.reset(token)
        reset = True
        send(queue.db, queue.take())
        raise
    finally:
        if not reset:
            _queue.reset(token)


def _send_first(queue: Queue) -> Any:
    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        if queue.writes and not queue.sending:
            send(queue.db, queue.take())
        return execute(sql, params, many, context)

    return wrapper


def _column_values(instance: Model, names: list[str], *, adding: bool) -> dict[str, Any]:
    connection = connections[router.db_for_write(type(instance), instance=instance)]
    values: dict[str, Any] = {}
    for name in names:
        f = instance._meta.get_field(name)
        values[str(f.column)] = f.get_db_prep_save(f.pre_save(instance, adding), connection)  # type: ignore[union-attr]
    return values


def save(instance: Model, fields: list[str]) -> None:
    """``instance.save(update_fields=fields)``: queued in a batch on PostgreSQL, else at once.
    A field with ``auto_now`` is set as ``save`` sets it, when it is named."""
    model = type(instance)
    db = router.db_for_write(model, instance=instance)
    queue = _queue_for(db)
    if queue is None or watched(model):
        instance.save(update_fields=fields)
        return
    prepare = getattr(instance, "prepare_save", None)
    if prepare is not None:  # what the model's save() does first (a thread's subject)
        fields = sorted(prepare(fields))
    values = _column_values(instance, fields, adding=False)
    key = (model, instance.pk)
    known = queue.writes.get(key)
    if known is None:
        queue.writes[key] = Write(model=model, pk=instance.pk, insert=False, values=values)
    else:
        known.values.update(values)


def insert(instance: M) -> M:
    """``instance.save(force_insert=True)`` for a row whose primary key is set: queued in a batch
    on PostgreSQL (later writes of the row merge into the insert), else at once."""
    model = type(instance)
    db = router.db_for_write(model, instance=instance)
    queue = _queue_for(db)
    if queue is None or instance.pk is None or watched(model):
        instance.save(force_insert=True)
        return instance
    prepare = getattr(instance, "prepare_save", None)
    if prepare is not None:
        prepare(None)
    names = [f.name for f in model._meta.concrete_fields]
    queue.writes[(model, instance.pk)] = Write(
        model=model,
        pk=instance.pk,
        insert=True,
        values=_column_values(instance, names, adding=True),
    )
    instance._state.adding = False
    instance._state.db = db
    return instance


def ctes(
    db: str, writes: list[Write], prefix: str = "w", *, only_if: str = ""
) -> tuple[list[str], list[Any]]:
    """The queued ``writes`` as CTEs named ``{prefix}0``, ``{prefix}1``, ... (each ``RETURNING
    1``) and their parameters, in order. ``only_if``: an SQL condition (no parameters) each
    write is made under, none when it is false (an INSERT's values are then a SELECT, each
    cast to its column's type)."""
    connection = connections[db]
    qn = connection.ops.quote_name
    sqls: list[str] = []
    params: list[Any] = []
    for i, write in enumerate(writes):
        table = qn(write.model._meta.db_table)
        columns = list(write.values)
        if write.insert and only_if:
            by_column = {str(f.column): f for f in write.model._meta.concrete_fields}
            values = ", ".join(cast(by_column[c], connection) for c in columns)
            sql = (
                f"INSERT INTO {table} ({', '.join(qn(c) for c in columns)}) "
                f"SELECT {values} WHERE {only_if} RETURNING 1"
            )
            params.extend(write.values.values())
        elif write.insert:
            sql = (
                f"INSERT INTO {table} ({', '.join(qn(c) for c in columns)}) "  # noqa: S608
                f"VALUES ({', '.join(['%s'] * len(columns))}) RETURNING 1"
            )
            params.extend(write.values.values())
        else:
            sql, update_params = update(db, write, only_if=only_if)
            params.extend(update_params)
        sqls.append(f"{prefix}{i} AS ({sql})")
    return sqls, params


def update(db: str, write: Write, *, only_if: str = "") -> tuple[str, list[Any]]:
    """The UPDATE of a queued write by primary key (``RETURNING 1``) and its parameters; with
    ``only_if`` (SQL, no parameters) only while that condition holds (PostgreSQL checks it
    again on the row as a writer it waited for left it)."""
    assert not write.insert
    connection = connections[db]
    qn = connection.ops.quote_name
    sets = ", ".join(f"{qn(c)} = %s" for c in write.values)
    by_key, key = _by_key(write.model, write.pk, connection)
    where = by_key + (f" AND {only_if}" if only_if else "")
    table = qn(write.model._meta.db_table)
    return f"UPDATE {table} SET {sets} WHERE {where} RETURNING 1", [*write.values.values(), key]  # noqa: S608


def _by_key(model: type[Model], pk: Any, connection: Any) -> tuple[str, Any]:
    """``"<pk column> = %s"`` and the primary key ``pk`` as its parameter."""
    pk_field = model._meta.pk
    assert pk_field is not None
    key = pk_field.get_db_prep_value(pk_field.to_python(pk), connection)
    return f"{connection.ops.quote_name(str(pk_field.column))} = %s", key


def written(count: int) -> str:
    """A subquery counting the rows the CTEs of :func:`ctes` wrote (reading it makes them run)."""
    union = " UNION ALL ".join(f"SELECT 1 FROM w{i}" for i in range(count))  # noqa: S608
    return f"(SELECT count(*) FROM ({union}) AS written_rows)"  # noqa: S608


def send(db: str, writes: list[Write]) -> None:
    """Send ``writes`` now, as one statement."""
    if not writes:
        return
    queue = _queue.get()
    sqls, params = ctes(db, writes)
    if queue is not None:
        queue.sending = True
    try:
        with connections[db].cursor() as cursor:
            cursor.execute(f"WITH {', '.join(sqls)} SELECT {written(len(writes))}", params)
    finally:
        if queue is not None:
            queue.sending = False


def pending(db: str) -> Queue | None:
    """The current batch's queue on ``db``, if it holds writes."""
    queue = _queue.get()
    return queue if queue is not None and queue.db == db and queue.writes else None
