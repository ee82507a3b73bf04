"""The audit trail and signals sent after commit: the two steps every service ends with."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import router, transaction
from django.dispatch import Signal

from nitro_assistants.models import Event, Review, Run, Thread
from nitro_assistants.services.chain_append import append
from nitro_assistants.services.sql import writes

#: Events recorded inside :func:`events_batched`, written together when it ends.
_batch: ContextVar[list[Event] | None] = ContextVar("nitro_assistants_event_batch", default=None)


@contextmanager
def events_batched() -> Iterator[None]:
    """Write the events recorded inside in one INSERT when the block ends (in the caller's
    transaction: the events commit or roll back with the rows they describe). A block that raises
    writes none of them, as a rolled-back transaction would not. Each is chained to the one
    before it in its thread's chain (:mod:`.chain_append`): one more query per thread in the batch.

    Row writes made inside through :mod:`.sql.writes` ride on that statement (PostgreSQL, in a
    transaction): what the block wrote and the events describing it are one statement."""
    if _batch.get() is not None:  # already batching: the outer block writes them
        yield
        return
    pending: list[Event] = []
    token = _batch.set(pending)
    db = router.db_for_write(Event)
    try:
        with writes.queued(db) as queue:
            yield
            queued = queue.take() if queue is not None else []
    finally:
        _batch.reset(token)
    if pending:
        append(pending, queued)
    else:
        writes.send(db, queued)


def batching() -> bool:
    """True inside :func:`events_batched`."""
    return _batch.get() is not None


def record_event(
    thread: Thread | None,
    verb: str,
    *,
    review: Review | None = None,
    run: Run | None = None,
    actor: Any = None,
    **data: Any,
) -> Event:
    event = build_event(thread, verb, review=review, run=run, actor=actor, **data)
    pending = _batch.get()
    if pending is not None:
        pending.append(event)
    else:
        append([event])
    return event


def build_event(
    thread: Thread | None,
    verb: str,
    *,
    review: Review | None = None,
    run: Run | None = None,
    actor: Any = None,
    **data: Any,
) -> Event:
    """The event :func:`record_event` records, not written (for a caller that writes it in a
    statement of its own: :func:`nitro_assistants.services.chain_append.append_gated`)."""
    actor = actor if getattr(actor, "pk", None) else None
    if review is not None and review.interaction_id:
        # Every event of an interaction carries its state: the latest one per interaction is it.
        data = {
            "interactionId": review.interaction_id,
            "revision": review.revision,
            "status": review.status,
            **data,
        }
    return Event(thread=thread, review=review, run=run, actor=actor, verb=verb, data=data)


def send_on_commit(signal: Signal, sender: type, **kwargs: Any) -> None:
    """Send ``signal`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: signal.send(sender=sender, **kwargs))
