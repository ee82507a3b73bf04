"""The app's own receivers: they keep the audit trail readable in logs. Host apps connect theirs
to :mod:`nitro_assistants.signals` the same way."""

from __future__ import annotations

import logging
from typing import Any

from nitro_assistants import signals

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


def connect() -> None:
    signals.run_failed.connect(log_run_failed, dispatch_uid="nitro_assistants.log_run_failed")
    signals.delivery_failed.connect(
        log_delivery_failed, dispatch_uid="nitro_assistants.log_delivery_failed"
    )
    signals.delivery_pending.connect(
        log_delivery_pending, dispatch_uid="nitro_assistants.log_delivery_pending"
    )
