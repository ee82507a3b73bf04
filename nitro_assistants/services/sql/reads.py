"""Hot-path reads of one row by primary key, with the ORM's SQL compiled once per connection.

Why (issue 21): a review flow's locked reads (``select_for_update(...).select_related(...)
.get(pk=...)``) cost more CPU in Django's query compiler (``SQLCompiler.as_sql``,
``get_select``, ``setup_query``) than in PostgreSQL. A :class:`Read` compiles its queryset once
per database connection, with stand-in values for the parameters, and afterwards only executes
that SQL and builds the instances the way ``QuerySet.get()`` does: the same single statement,
the same locks (``FOR UPDATE OF`` the tables the queryset names, ``FOR NO KEY UPDATE OF`` when
it asks for ``no_key``; none on SQLite, which Django drops it for), the related objects
``select_related`` attaches (a missing reverse one-to-one raises ``DoesNotExist`` on access, as
before), the annotations, and ``DoesNotExist`` for a missing row.

It relies on what ``ModelIterable`` itself uses (``compiler.select``/``klass_info``/
``get_converters``, ``get_related_populators``, ``MAX_GET_RESULTS``): Django internals, which it
uses only on the Django versions it was verified on (:data:`VERIFIED_DJANGO`, the parity tests of
tests/core/test_rows.py). On any other version :meth:`Read.get` is the plain
``build(*values).get(pk=pk)`` it replaces: the same rows, locks and errors, compiled each time. A
queryset with ``prefetch_related``, deferred fields, ``values()`` or known related objects is not
supported (none is needed).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import django
from django.db import connections, router
from django.db.models import Field, Model, QuerySet
from django.db.models import query as django_query
from django.db.transaction import TransactionManagementError

from nitro_assistants.exceptions import UsageError

M = TypeVar("M", bound=Model)

#: The Django feature releases (major, minor) whose query internals :class:`Read` was verified
#: against. Read at each call, so a test can force the ORM fallback; add a release here only
#: with tests/core/test_rows.py passing on it.
VERIFIED_DJANGO: tuple[tuple[int, int], ...] = ((5, 2),)


def compiled_reads() -> bool:
    """Whether :class:`Read` compiles its queryset once (on a verified Django) rather than
    running the queryset's own ``get()``."""
    return tuple(django.VERSION[:2]) in VERIFIED_DJANGO


#: Stand-in parameter values the SQL is compiled with, found again among the compiled params.
_INT_STANDIN = -(2**31) + 7
_UUID_STANDIN = 2**128 - 7919


#: (field, database vendor) -> ``CAST(%s AS <the column's type>)``, found once.
_CASTS: dict[tuple[Any, str], str] = {}


def cast(field: Any, connection: Any) -> str:
    """A parameter cast to ``field``'s column type, for ``INSERT ... SELECT`` statements (the
    type lookup builds a field for every foreign key: too dear to repeat per row)."""
    key = (field, connection.vendor)
    found = _CASTS.get(key)
    if found is None:
        found = _CASTS[key] = f"CAST(%s AS {field.db_type(connection)})"
    return found


def _standin(field: Field[Any, Any], n: int) -> Any:
    target = getattr(field, "target_field", None) or field
    internal = target.get_internal_type()
    if internal == "UUIDField":
        return uuid.UUID(int=_UUID_STANDIN - n)
    if internal.endswith("AutoField") or internal.endswith("IntegerField"):
        return _INT_STANDIN + n
    raise UsageError(f"reads.Read has no stand-in value for a {internal} parameter")


def _prepared(field: Field[Any, Any], value: Any, connection: Any) -> Any:
    """``value`` as an exact lookup on ``field`` sends it (``get_prep_value``, then
    ``get_db_prep_value(prepared=True)``): the same conversions and the same errors."""
    return field.get_db_prep_value(field.get_prep_value(value), connection, prepared=True)


class CompiledRead:
    """One queryset compiled for one connection: its SQL, where the parameters go, and how a
    row becomes the instances (what ``ModelIterable`` reads off the compiler)."""

    def __init__(self, queryset: QuerySet[Any], fields: Sequence[Field[Any, Any]], db: str):
        connection = connections[db]
        compiler = queryset.query.get_compiler(using=db)
        sql, params = compiler.as_sql()
        self.sql = sql
        self.params = list(params)
        self.slots: list[tuple[int, Field[Any, Any]]] = []
        for n, field in enumerate(fields):
            standin = _prepared(field, _standin(field, n), connection)
            found = [i for i, p in enumerate(self.params) if p == standin]
            if len(found) != 1:  # pragma: no cover - a queryset this module does not support
                raise UsageError(f"reads.Read: parameter {n} found {len(found)} times")
            self.slots.append((found[0], field))
        select, klass_info = compiler.select, compiler.klass_info
        assert klass_info is not None
        self.model: type[Model] = klass_info["model"]
        fields_at = klass_info["select_fields"]
        self.start, self.end = fields_at[0], fields_at[-1] + 1
        self.init_list = [s[0].target.attname for s in select[self.start : self.end]]
        # Django 5.2 (VERIFIED_DJANGO): the stubs describe a later signature with a fetch mode.
        self.related = django_query.get_related_populators(klass_info, select, db)  # type: ignore[call-arg]
        self.annotations = list(compiler.annotation_col_map.items())
        self.converters = [
            (pos, convs, expression)
            for pos, (convs, expression) in compiler.get_converters([s[0] for s in select]).items()
        ]
        self.for_update = bool(queryset.query.select_for_update) and bool(
            connection.features.has_select_for_update
        )


class Read(Generic[M]):
    """``build(*standins).get(pk=pk)``, compiled once per connection.

    ``build`` returns the queryset (the same on every call, apart from the parameters it is
    given); ``params`` are the fields its parameters are compared with (stand-in values are
    generated for them: integer and UUID fields), given in that order to :meth:`get` after the
    pk. Use one ``Read`` per query shape, made once (at import, or cached).

    On a Django release not in :data:`VERIFIED_DJANGO`, :meth:`get` is that ``get()`` itself."""

    def __init__(self, build: Callable[..., QuerySet[M]], params: Sequence[Field[Any, Any]] = ()):
        self._build = build
        self._fields = tuple(params)
        self._plans: weakref.WeakKeyDictionary[Any, CompiledRead] = weakref.WeakKeyDictionary()
        self._shape: tuple[type[M], bool] | None = None

    def _db(self) -> str:
        if self._shape is None:
            queryset = self._build(*(_standin(f, n) for n, f in enumerate(self._fields)))
            self._shape = (queryset.model, bool(queryset.query.select_for_update))
        model, for_write = self._shape
        return router.db_for_write(model) if for_write else router.db_for_read(model)

    def _plan(self, db: str) -> CompiledRead:
        connection = connections[db]
        plan = self._plans.get(connection)
        if plan is None:
            standins = [_standin(f, n) for n, f in enumerate(self._fields)]
            queryset = self._build(*standins).using(db)
            model = queryset.model
            pk_field = model._meta.pk
            assert pk_field is not None
            clone = queryset.filter(pk=_standin(pk_field, len(standins))).order_by()
            if (
                not clone.query.select_for_update
                or connection.features.supports_select_for_update_with_limit
            ):
                clone.query.set_limits(high=django_query.MAX_GET_RESULTS)  # as get() does
            plan = CompiledRead(clone, [*self._fields, pk_field], db)
            self._plans[connection] = plan
        return plan

    def get(self, pk: Any, *values: Any) -> M:
        """The row ``pk`` as ``build(*values).get(pk=pk)`` returns it; ``DoesNotExist`` (or
        ``MultipleObjectsReturned``) as that raises it."""
        if not compiled_reads():
            return self._build(*values).get(pk=pk)
        db = self._db()
        connection = connections[db]
        plan = self._plan(db)
        if plan.for_update and connection.get_autocommit():
            raise TransactionManagementError(
                "select_for_update cannot be used outside of a transaction."
            )
        rows = _fetch(plan, (*values, pk), connection)
        model: Any = plan.model
        if len(rows) != 1:
            if not rows:
                raise model.DoesNotExist(
                    f"{model._meta.object_name} matching query does not exist."
                )
            raise model.MultipleObjectsReturned(
                f"get() returned more than one {model._meta.object_name} -- it returned "
                f"{len(rows)}!"
            )
        obj: M = _instance(plan, rows[0], db, connection)
        return obj


def _fetch(plan: CompiledRead, values: Sequence[Any], connection: Any) -> list[Any]:
    """The rows of ``plan``'s statement with ``values`` in its parameter slots, in order."""
    params = list(plan.params)
    for (i, field), value in zip(plan.slots, values, strict=True):
        params[i] = _prepared(field, value, connection)
    with connection.cursor() as cursor:
        cursor.execute(plan.sql, params)
        return list(cursor.fetchall())


def _instance(plan: CompiledRead, values: Sequence[Any], db: str, connection: Any) -> Any:
    """One row as ``ModelIterable`` makes it an instance: converted, with its related objects
    and annotations."""
    row = list(values)
    for pos, convs, expression in plan.converters:
        value = row[pos]
        for converter in convs:
            value = converter(value, expression, connection)
        row[pos] = value
    obj = plan.model.from_db(db, plan.init_list, row[plan.start : plan.end])
    for populator in plan.related:
        populator.populate(row, obj)
    for name, pos in plan.annotations:
        setattr(obj, name, row[pos])
    return obj


class Rows(Generic[M]):
    """``list(build(*values))``, compiled once per connection: every row the queryset gives, in
    its order, built as its iteration builds them. For a read of several rows a flow sends each
    time (the open reviews of a thread its mirror reads), with the same limits as :class:`Read`
    (no locks here: a plain read); ``params`` as :class:`Read` takes them.

    On a Django release not in :data:`VERIFIED_DJANGO`, :meth:`all` is ``list(build(*values))``."""

    def __init__(self, build: Callable[..., QuerySet[M]], params: Sequence[Field[Any, Any]] = ()):
        self._build = build
        self._fields = tuple(params)
        self._plans: weakref.WeakKeyDictionary[Any, CompiledRead] = weakref.WeakKeyDictionary()
        self._model: type[M] | None = None

    def _plan(self, db: str) -> CompiledRead:
        connection = connections[db]
        plan = self._plans.get(connection)
        if plan is None:
            standins = [_standin(f, n) for n, f in enumerate(self._fields)]
            queryset = self._build(*standins).using(db)
            if queryset.query.select_for_update:  # pragma: no cover - not what it is for
                raise UsageError("reads.Rows is for plain reads: use reads.Read to lock a row")
            plan = CompiledRead(queryset, self._fields, db)
            self._plans[connection] = plan
        return plan

    def all(self, *values: Any) -> list[M]:
        """The rows of ``build(*values)``, as ``list()`` of it returns them."""
        if not compiled_reads():
            return list(self._build(*values))
        if self._model is None:
            self._model = self._build(*(_standin(f, n) for n, f in enumerate(self._fields))).model
        db = router.db_for_read(self._model)
        connection = connections[db]
        plan = self._plan(db)
        return [_instance(plan, row, db, connection) for row in _fetch(plan, values, connection)]
