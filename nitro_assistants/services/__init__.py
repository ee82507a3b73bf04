"""The only code that changes state. Every function guards the current status, locks the rows it
changes (``select_for_update``), writes an
:class:`~nitro_assistants.models.Event`, sends its signal and enqueues Celery work after the
write commits (``transaction.on_commit``). A thread, review or run is locked with
``no_key=True`` (FOR NO KEY UPDATE: as exclusive against our other writers): other rows' foreign
keys point at it, and FOR UPDATE would hold up their inserts' key checks (KEY SHARE), a deadlock
once the locker waits for one of those inserters. Whoever changes a thread's reviews holds its
lock; a mirror takes it and reads them in a statement after it (:func:`.mirror.lock_thread`),
which sees what the lock's previous holder committed. A review's status changes only through
:func:`transition` (:mod:`.lifecycle`); Celery work is enqueued by task name (:mod:`.enqueue`):
the services never import :mod:`nitro_assistants.tasks`."""

from __future__ import annotations

from nitro_assistants.exceptions import ReviewNotPendingError
from nitro_assistants.services.decisions import (
    decidable_by,
    decide,
    dismiss,
    may_decide,
    refusal,
    validate_decision,
)
from nitro_assistants.services.deliveries import record_deliveries, sweep_deliveries
from nitro_assistants.services.lifecycle import supersede_pending_review, transition
from nitro_assistants.services.plans import execute_plan_step, requeue_stale_steps
from nitro_assistants.services.recovery import requeue_stale
from nitro_assistants.services.resumes import collect_run, execute_resume, fail_resume
from nitro_assistants.services.reveals import reveal
from nitro_assistants.services.runs import (
    execute_run,
    fail_run,
    start_run,
)
from nitro_assistants.services.sync import sync_thread

__all__ = [
    "ReviewNotPendingError",
    "collect_run",
    "decidable_by",
    "decide",
    "dismiss",
    "execute_plan_step",
    "execute_resume",
    "execute_run",
    "fail_resume",
    "fail_run",
    "may_decide",
    "record_deliveries",
    "refusal",
    "requeue_stale",
    "requeue_stale_steps",
    "reveal",
    "start_run",
    "supersede_pending_review",
    "sweep_deliveries",
    "sync_thread",
    "transition",
    "validate_decision",
]
