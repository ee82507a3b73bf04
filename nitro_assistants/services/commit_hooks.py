"""Work that runs once per commit, however often a transaction asks for it.

:func:`once` is ``transaction.on_commit(func)`` unless ``func`` already waits for the current
transaction's commit; :func:`waiting` tells whether it does. The state is our own: Django keeps
its callbacks in a private list (``connection.run_on_commit``). Each registration is a fresh
callable that only Django's list holds (we keep a weak reference to it): when a rollback (of the
transaction, or of the savepoint it was registered in) makes Django forget it, it is gone for us
too, and when the commit runs it, it says so. Scoped like Django's connections (per thread, per
async context: ``asgiref.local.Local``), so two requests never see each other's.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from asgiref.local import Local
from django.db import DEFAULT_DB_ALIAS, transaction

#: alias -> {func: weak reference to its registration}, per thread / async context.
_registered = Local()


class _Registration:
    __slots__ = ("__weakref__", "func", "ran")

    def __init__(self, func: Callable[[], None]) -> None:
        self.func = func
        self.ran = False

    def __call__(self) -> None:
        self.ran = True
        self.func()


def _table(using: str) -> dict[Callable[[], None], weakref.ref[_Registration]]:
    table = getattr(_registered, using, None)
    if table is None:
        table = {}
        setattr(_registered, using, table)
    return table


def waiting(func: Callable[[], None], using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether ``func`` waits for the commit of the transaction open on ``using`` (registered by
    :func:`once`, and neither run nor forgotten by a rollback since)."""
    ref = _table(using).get(func)
    registration = ref() if ref is not None else None
    return registration is not None and not registration.ran


def once(func: Callable[[], None], using: str = DEFAULT_DB_ALIAS) -> None:
    """``transaction.on_commit(func, using)``, unless ``func`` already waits for this commit (at
    once outside a transaction, as ``on_commit`` runs it)."""
    if waiting(func, using):
        return
    registration = _Registration(func)
    _table(using)[func] = weakref.ref(registration)
    transaction.on_commit(registration, using=using)
