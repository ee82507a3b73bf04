"""Reconciling the mirror with the server: pauses that appeared or vanished, delivery stamps."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from nitro_assistants.models import Thread
from nitro_assistants.services import clients
from nitro_assistants.services.deliveries import record_deliveries
from nitro_assistants.services.mirror import mirror_pending


def sync_thread(thread: Thread | int) -> Thread:
    """Read the thread's state from the server and make the local mirror match it."""
    pk = thread.pk if isinstance(thread, Thread) else thread
    thread = Thread.objects.get(pk=pk)
    assistant = clients.assistant_for(thread.assistant_key)
    thread_id = str(thread.thread_id)
    state: dict[str, Any] = assistant.thread_state(thread_id=thread_id)
    pending = assistant.under_review(thread_id=thread_id)
    values = state.get("values") or {}
    messages = list(values.get("messages") or [])
    with transaction.atomic():
        thread = Thread.objects.select_for_update().get(pk=pk)
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
