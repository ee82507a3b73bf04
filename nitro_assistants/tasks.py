"""Celery tasks: thin. Primary keys in, a small JSON value out; the services do the work and check
state first, so every task is safe to run twice. Transient errors (connection errors, timeouts,
502/503/504) are retried with exponential backoff and jitter; anything else is recorded by the
service as a failure and not retried.

Beat schedule for the delivery sweep (in the host project's Celery config)::

    app.conf.beat_schedule = {
        "nitro-assistants-sweep-deliveries": {
            "task": "nitro_assistants.sweep_deliveries",
            "schedule": 60.0,
        },
        "nitro-assistants-requeue-stale": {
            "task": "nitro_assistants.requeue_stale",
            "schedule": 300.0,
        },
        "nitro-assistants-requeue-plan-steps": {
            "task": "nitro_assistants.requeue_plan_steps",
            "schedule": 300.0,
        },
        "nitro-assistants-verify-audit": {
            "task": "nitro_assistants.verify_audit",
            "schedule": 86400.0,
        },
        "nitro-assistants-sweep-deadlines": {
            "task": "nitro_assistants.sweep_deadlines",
            "schedule": 60.0,
        },
        "nitro-assistants-flush-notifications": {
            "task": "nitro_assistants.flush_notifications",
            "schedule": 300.0,
        },
    }
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any, cast

from celery import Task, shared_task

from nitro_assistants import services
from nitro_assistants.conf import app_settings
from nitro_assistants.services import chain_verify, governance, grants, notifications
from nitro_assistants.services.clients import is_transient
from nitro_assistants.services.errors import error_text, traceback_text

try:  # the optional extra [slack]
    from nitro_assistants.services import slack as slack_cards
except ImportError:  # pragma: no cover - the extra is installed wherever the tests run
    slack_cards = None  # type: ignore[assignment]

logger = logging.getLogger("nitro_assistants.tasks")


def task(name: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``shared_task`` with the options every task here shares (Celery ships no type hints)."""
    return cast(
        Callable[[Callable[..., Any]], Any],
        shared_task(name=name, acks_late=True, **options),
    )


def backoff(retries: int) -> float:
    """Seconds before retry number ``retries + 1``: exponential, capped, with "equal" jitter."""
    ceiling = min(app_settings.TASK_RETRY_BACKOFF_MAX, app_settings.TASK_RETRY_BACKOFF * 2**retries)
    return float(ceiling / 2 + random.uniform(0, ceiling / 2))


def _retry_if_transient(task: Task, exc: Exception) -> None:
    """Retry ``task`` (with backoff) when ``exc`` is transient and ``TASK_MAX_RETRIES`` is not
    used up; return otherwise, for the caller to give up its own way. The one place the tasks
    decide what is retried; ``services.clients.is_transient`` says which errors may go away."""
    if is_transient(exc) and task.request.retries < app_settings.TASK_MAX_RETRIES:
        raise task.retry(exc=exc, countdown=backoff(task.request.retries)) from exc


def _retry_or_give_up(task: Task, exc: Exception, give_up: Any) -> Any:
    """Retry a transient error (:func:`_retry_if_transient`); record anything else (or the last
    retry) as the failure it is, with ``run_failed``. An error the services did not expect (an
    odd payload, a database refusing a value) must not leave the run ``running`` for
    ``requeue_stale`` to send again forever."""
    _retry_if_transient(task, exc)
    error = error_text(exc)
    if not is_transient(exc):
        logger.error(
            "%s gave up on %s: %s\n%s",
            task.name,
            task.request.args,
            error,
            traceback_text(exc),
        )
    return give_up(error)


@task("nitro_assistants.run_thread", bind=True, max_retries=None)
def run_thread(self: Task, run_pk: str) -> str:
    try:
        run = services.execute_run(run_pk)
    except Exception as exc:
        run = _retry_or_give_up(self, exc, lambda error: services.fail_run(run_pk, error))
    return str(run.status)


@task("nitro_assistants.collect_run", bind=True, max_retries=None)
def collect_run(self: Task, run_pk: str, wait: bool = False) -> str:
    """Background mode: read a finished remote run (from the webhook), or poll until it is."""
    try:
        run = services.collect_run(run_pk, wait=wait)
    except Exception as exc:
        run = _retry_or_give_up(self, exc, lambda error: services.fail_run(run_pk, error))
    if not run.finished and not wait:
        raise self.retry(countdown=min(2 + self.request.retries, 30), max_retries=None)
    return str(run.status)


@task("nitro_assistants.resume_thread", bind=True, max_retries=None)
def resume_thread(self: Task, decision_pk: int) -> str:
    try:
        decision = services.execute_resume(decision_pk)
    except Exception as exc:
        decision = _retry_or_give_up(
            self, exc, lambda error: services.fail_resume(decision_pk, error)
        )
    return str(decision.outcome)


@task("nitro_assistants.sync_thread", bind=True, max_retries=None)
def sync_thread(self: Task, thread_pk: int) -> str:
    try:
        thread = services.sync_thread(thread_pk)
    except Exception as exc:
        _retry_if_transient(self, exc)
        raise
    return str(thread.status)


@task("nitro_assistants.sweep_deliveries")
def sweep_deliveries() -> dict[str, int]:
    return services.sweep_deliveries()


@task("nitro_assistants.requeue_stale")
def requeue_stale() -> dict[str, int]:
    """Periodic: enqueue again recorded runs and decisions that no task is working on."""
    return services.requeue_stale()


@task("nitro_assistants.execute_plan_step", bind=True, max_retries=None)
def execute_plan_step(self: Task, step_pk: int) -> str:
    """Run one step of an approved plan (its operation's own failure is the step's outcome)."""
    try:
        step = services.execute_plan_step(step_pk)
    except Exception as exc:
        _retry_if_transient(self, exc)
        raise
    return str(step.status)


@task("nitro_assistants.requeue_plan_steps")
def requeue_plan_steps() -> int:
    """Periodic: enqueue again ready plan steps whose task was lost."""
    return services.requeue_stale_steps()


@task("nitro_assistants.verify_audit")
def verify_audit() -> dict[str, Any]:
    """Periodic: walk the audit trail's hash chain; ``audit_broken`` when a link is broken."""
    return chain_verify.verify_and_signal().as_dict()


@task("nitro_assistants.apply_policy", bind=True, max_retries=None)
def apply_policy(self: Task, review_pk: int) -> int | None:
    """Decide a review its policy rule approves or rejects at once; the decision's pk. A lost
    database connection (PostgreSQL restarting) is retried: it checks state again."""
    try:
        decision = governance.apply_policy(review_pk)
    except Exception as exc:
        _retry_if_transient(self, exc)
        raise
    return decision.pk if decision is not None else None


@task("nitro_assistants.apply_grant", bind=True, max_retries=None)
def apply_grant(self: Task, review_pk: int) -> int | None:
    """Approve a review live grants cover (each use counted once); the decision's pk. A lost
    database connection is retried, as for :func:`apply_policy`."""
    try:
        decision = grants.apply_grant(review_pk)
    except Exception as exc:
        _retry_if_transient(self, exc)
        raise
    return decision.pk if decision is not None else None


@task("nitro_assistants.sweep_deadlines")
def sweep_deadlines() -> dict[str, int]:
    """Periodic: apply each passed review deadline once (escalate, approve, reject, overdue)."""
    return governance.sweep_deadlines()


@task("nitro_assistants.send_notifications", bind=True, max_retries=None)
def send_notifications(self: Task, channel: str, user_pk: int | None = None) -> int:
    """Send what is queued for one reviewer (None: a shared channel) on ``channel`` as one
    message; a failing channel is retried with backoff until ``NOTIFY_MAX_ATTEMPTS``."""
    try:
        return notifications.send_batch(channel, user_pk)
    except notifications.NotificationError as exc:
        # A channel that said when to come back (Slack's Retry-After) is not asked sooner.
        countdown = max(backoff(self.request.retries), exc.retry_after or 0)
        raise self.retry(exc=exc, countdown=countdown) from exc


@task("nitro_assistants.close_slack_cards", bind=True, max_retries=None)
def close_slack_cards(self: Task, review_pk: int) -> int:
    """Update the Slack cards of a review that ended (how, by whom). Slack's 429 and 5xx are
    retried after its ``Retry-After`` (else with backoff) up to ``TASK_MAX_RETRIES``."""
    if slack_cards is None:  # pragma: no cover - enqueued only where the extra is installed
        return 0
    try:
        return slack_cards.close_cards(review_pk)
    except slack_cards.SlackError as exc:
        if not exc.transient or self.request.retries >= app_settings.TASK_MAX_RETRIES:
            raise
        countdown = max(backoff(self.request.retries), exc.retry_after or 0)
        raise self.retry(exc=exc, countdown=countdown) from exc


@task("nitro_assistants.flush_notifications")
def flush_notifications() -> int:
    """Periodic: enqueue again the sends of notifications still queued (a lost task)."""
    return notifications.flush()
