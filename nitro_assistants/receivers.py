"""The app's own receivers: they keep the audit trail readable in logs, hand new reviews to the
host project's assignment rule and tell reviewers what waits for them
(:mod:`nitro_assistants.services.notifications`, which never raises). Host apps connect theirs
to :mod:`nitro_assistants.signals` the same way."""

from __future__ import annotations

import logging
from typing import Any

from nitro_assistants import signals
from nitro_assistants.conf import app_settings
from nitro_assistants.services import notifications
from nitro_assistants.services.claims import assign_by_rule

logger = logging.getLogger("nitro_assistants")


def log_run_failed(sender: Any, run: Any, thread: Any, error: str, **kwargs: Any) -> None:
    logger.warning("Run %s on thread %s failed: %s", run.pk, thread.thread_id, error)


def log_delivery_failed(sender: Any, delivery: Any, thread: Any, error: str, **kwargs: Any) -> None:
    logger.warning(
        "Delivery of message %s on thread %s failed: %s",
        delivery.message_id,
        thread.thread_id,
        error,
    )


def log_delivery_pending(
    sender: Any, delivery: Any, thread: Any, pending_for: float, **kwargs: Any
) -> None:
    logger.warning(
        "Delivery of message %s on thread %s still pending after %ds",
        delivery.message_id,
        thread.thread_id,
        pending_for,
    )


def assign_requested_review(sender: Any, review: Any, **kwargs: Any) -> None:
    """A new review goes to whom the host project's ``ASSIGN_REVIEW`` rule says."""
    assign_by_rule(review)


def notify_review_requested(sender: Any, review: Any, **kwargs: Any) -> None:
    if app_settings.NOTIFIERS and notifications.review_needs_people(review):
        notifications.notify("requested", review=review)


def notify_review_escalated(sender: Any, review: Any, **kwargs: Any) -> None:
    notifications.notify("escalated", review=review)


def notify_delivery_failed(sender: Any, delivery: Any, thread: Any, **kwargs: Any) -> None:
    notifications.delivery_failed(thread)


def connect() -> None:
    signals.review_requested.connect(
        assign_requested_review, dispatch_uid="nitro_assistants.assign_requested_review"
    )
    signals.run_failed.connect(log_run_failed, dispatch_uid="nitro_assistants.log_run_failed")
    signals.delivery_failed.connect(
        log_delivery_failed, dispatch_uid="nitro_assistants.log_delivery_failed"
    )
    signals.delivery_pending.connect(
        log_delivery_pending, dispatch_uid="nitro_assistants.log_delivery_pending"
    )
    signals.review_requested.connect(
        notify_review_requested, dispatch_uid="nitro_assistants.notify_review_requested"
    )
    signals.review_escalated.connect(
        notify_review_escalated, dispatch_uid="nitro_assistants.notify_review_escalated"
    )
    signals.delivery_failed.connect(
        notify_delivery_failed, dispatch_uid="nitro_assistants.notify_delivery_failed"
    )
