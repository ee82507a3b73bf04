"""The audit trail and signals sent after commit: the two steps every service ends with."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.dispatch import Signal

from nitro_assistants.models import Event, Review, Run, Thread


def record_event(
    thread: Thread,
    verb: str,
    *,
    review: Review | None = None,
    run: Run | None = None,
    actor: Any = None,
    **data: Any,
) -> Event:
    actor = actor if getattr(actor, "pk", None) else None
    if review is not None and review.interaction_id:
        # Every event of an interaction carries its state: the latest one per interaction is it.
        data = {
            "interactionId": review.interaction_id,
            "revision": review.revision,
            "status": review.status,
            **data,
        }
    return Event.objects.create(
        thread=thread, review=review, run=run, actor=actor, verb=verb, data=data
    )


def send_on_commit(signal: Signal, sender: type, **kwargs: Any) -> None:
    """Send ``signal`` once the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: signal.send(sender=sender, **kwargs))
