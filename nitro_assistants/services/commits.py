"""What runs once a write has committed: Celery work, signals. Through :func:`on_commit`, which
is Django's, except inside :func:`held`.

A write sent as one statement outside a transaction (a compare-and-set that either writes
everything or nothing, :func:`nitro_assistants.services.reviews.decide`) commits with that
statement, after the code that queued it has run: Django's ``on_commit`` would run the
callbacks at once, before anything is written. :func:`held` keeps them until the caller knows
whether the statement wrote (:func:`run` them then) or not (drop them: nothing happened)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

#: The callbacks :func:`held` keeps, or None outside it.
_held: ContextVar[list[Callable[[], Any]] | None] = ContextVar(
    "nitro_assistants_held_callbacks", default=None
)


def on_commit(func: Callable[[], Any], using: str | None = None) -> None:
    """``transaction.on_commit(func)``; outside a transaction inside :func:`held`, kept for the
    holder to run once its statement wrote."""
    kept = _held.get()
    if kept is not None and not connections[using or DEFAULT_DB_ALIAS].in_atomic_block:
        kept.append(func)
        return
    transaction.on_commit(func, using=using)


@contextmanager
def held() -> Iterator[list[Callable[[], Any]]]:
    """Keep the callbacks :func:`on_commit` would run at once (outside a transaction) in the
    list yielded. The caller runs them with :func:`run` after the statement that writes what
    they announce, or drops them when it wrote nothing. Not nested."""
    kept: list[Callable[[], Any]] = []
    token = _held.set(kept)
    try:
        yield kept
    finally:
        _held.reset(token)


def run(callbacks: list[Callable[[], Any]]) -> None:
    """Run held callbacks in the order they were registered, as a commit runs its own."""
    for func in callbacks:
        func()
