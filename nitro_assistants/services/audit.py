"""The audit trail and signals sent after commit: the two steps every service ends with."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.db import router
from django.dispatch import Signal

from nitro_assistants.exceptions import UsageError
from nitro_assistants.models import Event, Review, Run, Thread
from nitro_assistants.services import commits, writes
from nitro_assistants.services.chain import append
from nitro_assistants.services.writes import Write

#: Events recorded inside :func:`events_batched`, written together when it ends.
_batch: ContextVar[list[Event] | None] = ContextVar("nitro_assistants_event_batch", default=None)


@contextmanager
def events_batched() -> Iterator[None]:
    """Write the events recorded inside in one INSERT when the block ends (in the caller's
    transaction: the events commit or roll back with the rows they describe). A block that raises
    writes none of them, as a rolled-back transaction would not. Each is chained to the one
    before it in its thread's chain (:mod:`.chain`): one more query per thread in the batch.

    Row writes made inside through :mod:`.writes` ride on that statement (PostgreSQL, in a
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
            held = queue.take() if queue is not None else []
    finally:
        _batch.reset(token)
    if pending:
        append(pending, held)
    else:
        writes.send(db, held)


def batching() -> bool:
    """True inside :func:`events_batched` (or :func:`events_held`)."""
    return _batch.get() is not None


@dataclass
class Held:
    """What :func:`events_held` kept: the ``events`` recorded and the row ``writes`` queued."""

    events: list[Event]
    writes: list[Write] = field(default_factory=list)

    def take(self, model: type[Any], pk: Any) -> Write:
        """Take the queued write of one row out (the caller sends it its own way)."""
        for i, write in enumerate(self.writes):
            if write.model is model and write.pk == pk:
                return self.writes.pop(i)
        raise UsageError(f"no write of {model.__name__} {pk} is held")


@contextmanager
def events_held(db: str) -> Iterator[Held]:
    """Like :func:`events_batched`, on PostgreSQL, in a transaction or not, but nothing is
    sent: the events recorded and the writes queued inside are the caller's to send, in one
    statement of its own (:func:`nitro_assistants.services.chain.append_gated`). Any other
    statement sent inside while writes are queued raises ``UsageError``; a block that raises
    leaves nothing behind."""
    if _batch.get() is not None:
        raise UsageError("events_held cannot be nested in a batch")
    held = Held(events=[])
    token = _batch.set(held.events)
    try:
        with writes.queued(db, held=True) as queue:
            yield held
            assert queue is not None
            held.writes = queue.take()
    finally:
        _batch.reset(token)


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
    statement of its own: :func:`nitro_assistants.services.chain.append_gated`)."""
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
    commits.on_commit(lambda: signal.send(sender=sender, **kwargs))
