"""Delivery stamps (docs/protocol.md §7): recorded as seen, swept for the ones that need a person."""

from __future__ import annotations

import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from nitro_assistants import signals
from nitro_assistants.conf import app_settings
from nitro_assistants.models import Delivery, Event, Run, Thread
from nitro_assistants.services.audit import record_event, send_on_commit
from nitro_assistants.services.chain_append import append


def _when(value: Any) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, str) and value:
        parsed = parse_datetime(value)
        if parsed is not None and timezone.is_naive(parsed):
            parsed = timezone.make_aware(parsed, datetime.UTC)
        return parsed
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _stamps(messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    found = []
    for message in messages:
        if message.get("type") not in ("ai", "assistant") or not message.get("id"):
            continue
        stamp = (message.get("response_metadata") or {}).get("delivery")
        if isinstance(stamp, dict) and stamp.get("status") in Delivery.Status.values:
            found.append((message, stamp))
    return found


def record_deliveries(
    thread: Thread, messages: list[dict[str, Any]], *, run: Run | None = None
) -> list[Delivery]:
    """Upsert one Delivery per stamped reply in ``messages``; a new outcome sends its signal once.

    The caller holds the thread's row lock, so two mirrors of one thread never race here.
    """
    stamps = _stamps(messages)
    if not stamps:
        return []
    now = timezone.now()
    known = {d.message_id: d for d in thread.deliveries.all()}
    changed = []
    for message, stamp in stamps:
        status = stamp["status"]
        delivery = known.get(message["id"])
        if delivery is None:
            delivery = Delivery(thread=thread, run=run, message_id=message["id"], first_seen_at=now)
        elif delivery.status == status and delivery.attempts == (stamp.get("attempts") or 0):
            continue
        previous = delivery.status if delivery.pk else None
        delivery.status = status
        delivery.content = _text(message.get("content"))
        delivery.tool = str(stamp.get("tool") or "")
        delivery.attempts = int(stamp.get("attempts") or 0)
        delivery.error = str(stamp.get("error") or "")
        delivery.result = stamp.get("result")
        delivery.delivered_at = _when(stamp.get("delivered_at"))
        delivery.failed_at = _when(stamp.get("failed_at"))
        if status != previous:
            delivery.alerted_at = None
            delivery.alerted_status = ""
            if status in (Delivery.Status.DELIVERED, Delivery.Status.FAILED):
                delivery.alerted_at = now
                delivery.alerted_status = status
        delivery.save()
        changed.append(delivery)
        if status == previous:
            continue
        record_event(thread, f"delivery_{status}", run=run, message_id=delivery.message_id)
        if status == Delivery.Status.DELIVERED:
            send_on_commit(signals.delivery_delivered, Delivery, delivery=delivery, thread=thread)
        elif status == Delivery.Status.FAILED:
            send_on_commit(
                signals.delivery_failed,
                Delivery,
                delivery=delivery,
                thread=thread,
                error=delivery.error,
            )
    return changed


def sweep_deliveries(now: datetime.datetime | None = None) -> dict[str, int]:
    """Send ``delivery_pending`` for deliveries pending longer than ``DELIVERY_PENDING_AFTER``
    seconds and ``delivery_failed`` for failures not yet reported, once each.

    Reads only rows not yet alerted (a partial index); each batch is claimed with
    ``SKIP LOCKED``, so two sweeps at once never alert a delivery twice.
    """
    now = now or timezone.now()
    cutoff = now - datetime.timedelta(seconds=app_settings.DELIVERY_PENDING_AFTER)
    batch_size = app_settings.SWEEP_BATCH_SIZE
    due = Q(status=Delivery.Status.FAILED) | Q(
        status=Delivery.Status.PENDING, first_seen_at__lte=cutoff
    )
    counts = {"pending": 0, "failed": 0}
    while True:
        with transaction.atomic():
            batch = list(
                Delivery.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(due, alerted_at__isnull=True)
                .select_related("thread")
                .order_by("first_seen_at")[:batch_size]
            )
            if not batch:
                break
            Delivery.objects.filter(pk__in=[d.pk for d in batch]).update(
                alerted_at=now, alerted_status=F("status")
            )
            append(  # chained like every event (services.chain_append), in one INSERT
                [
                    Event(
                        thread=d.thread,
                        verb=f"delivery_{d.status}_alerted",
                        data={"message_id": d.message_id},
                        at=now,
                    )
                    for d in batch
                ]
            )
            for delivery in batch:
                delivery.alerted_at, delivery.alerted_status = now, delivery.status
                counts[delivery.status] += 1
                if delivery.status == Delivery.Status.FAILED:
                    send_on_commit(
                        signals.delivery_failed,
                        Delivery,
                        delivery=delivery,
                        thread=delivery.thread,
                        error=delivery.error,
                    )
                else:
                    send_on_commit(
                        signals.delivery_pending,
                        Delivery,
                        delivery=delivery,
                        thread=delivery.thread,
                        pending_for=(now - delivery.first_seen_at).total_seconds(),
                    )
        if len(batch) < batch_size:
            break
    return counts
