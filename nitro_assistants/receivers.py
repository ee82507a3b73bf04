"""The app's own receivers: they keep the audit trail readable in logs and hand new reviews to
the host project's assignment rule. Host apps connect theirs
to :mod:`nitro_assistants.signals` the same way."""

from __future__ import annotations

import logging
from typing import Any

from nitro_assistants import signals
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
