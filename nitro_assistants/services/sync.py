"""Reconciling the mirror with the server: pauses that appeared or vanished, delivery stamps."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from nitro_assistants.exceptions import ThreadNotCreatedError, ThreadStateError
from nitro_assistants.models import Run, Thread
from nitro_assistants.services import clients
from nitro_assistants.services.audit import events_batched
from nitro_assistants.services.deliveries import record_deliveries
from nitro_assistants.services.mirror import mirror_pending


def sync_thread(thread: Thread | int) -> Thread:
    """Read the thread's state from the server and make the local mirror match it.

    Raises :class:`ThreadNotCreatedError` for a thread the server never created (its first run
    failed before reaching it): the mirror already says all there is.
    """
    pk = thread.pk if isinstance(thread, Thread) else thread
    thread = Thread.objects.get(pk=pk)
    assistant = clients.assistant_for(thread.assistant_key)
    thread_id = str(thread.thread_id)
    try:
        state: dict[str, Any] = assistant.thread_state(thread_id=thread_id)
    except ThreadStateError as exc:
        if exc.status_code == 404 and not _reached_server(thread):
            raise _not_created(thread) from exc
        raise
    pending = assistant.under_review(thread_id=thread_id)
    values = state.get("values") or {}
    messages = list(values.get("messages") or [])
    # The events go last, in one statement, as a run's mirror writes them: the chain's head is
    # locked after the claim a revision moves (a take-over holding that claim appends to the
    # chain next: the other order deadlocks). FOR NO KEY UPDATE: the rows that reference the
    # thread (a take-over's event) are not held up by its lock.
    with transaction.atomic(), events_batched():
        thread = Thread.objects.select_for_update(no_key=True).get(pk=pk)
        thread.values = {"messages": messages}
        if pending is not None:
            thread.status = Thread.Status.INTERRUPTED
        elif state.get("next"):
            thread.status = Thread.Status.BUSY
        elif thread.status != Thread.Status.ERROR:
            thread.status = Thread.Status.IDLE
        thread.synced_at = timezone.now()
        thread.save(update_fields=["values", "status", "synced_at", "updated_at"])
        mirror_pending(thread, None, pending)
        record_deliveries(thread, messages)
    return thread


def _reached_server(thread: Thread) -> bool:
    """True once anything of the thread came back from the server: a 404 then means it is lost."""
    return (
        thread.synced_at is not None
        or thread.reviews.exists()
        or thread.runs.exclude(remote_run_id="").exists()
        or thread.runs.filter(status__in=[Run.Status.SUCCEEDED, Run.Status.INTERRUPTED]).exists()
    )


def _not_created(thread: Thread) -> ThreadNotCreatedError:
    last = thread.runs.order_by("-created_at").first()
    why = f" (its last run failed: {last.error})" if last is not None and last.error else ""
    return ThreadNotCreatedError(
        f"The server never created thread {thread.thread_id}: no run of it got through{why}. "
        "Nothing to sync.",
        status_code=404,
    )
