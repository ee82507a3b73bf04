"""The only code that changes state. Every function guards the current status, locks the rows it
changes (``select_for_update``), writes an :class:`~nitro_assistants.models.Event`, sends its signal
and enqueues Celery work after the transaction commits."""

from __future__ import annotations

from nitro_assistants.exceptions import ReviewNotPendingError
from nitro_assistants.services.deliveries import record_deliveries, sweep_deliveries
from nitro_assistants.services.plans import execute_plan_step, requeue_stale_steps
from nitro_assistants.services.recovery import requeue_stale
from nitro_assistants.services.reviews import (
    decide,
    execute_resume,
    fail_resume,
    supersede_pending_review,
    validate_decision,
)
from nitro_assistants.services.runs import (
    collect_run,
    execute_run,
    fail_run,
    start_run,
)
from nitro_assistants.services.sync import sync_thread

__all__ = [
    "ReviewNotPendingError",
    "collect_run",
    "decide",
    "execute_plan_step",
    "execute_resume",
    "execute_run",
    "fail_resume",
    "fail_run",
    "record_deliveries",
    "requeue_stale",
    "requeue_stale_steps",
    "start_run",
    "supersede_pending_review",
    "sweep_deliveries",
    "sync_thread",
    "validate_decision",
]
