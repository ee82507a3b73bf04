"""Approved plans run in the background: one Celery task per enabled step, in ``dependsOn``
order, under the user who approved it. A failed step stops the steps that depend on it (they are
``skipped``), not the others; the interaction goes ``executing`` → ``completed`` or ``failed``.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from nitro_assistants import rules
from nitro_assistants.conf import app_settings
from nitro_assistants.models import Review, StepResult
from nitro_assistants.operations import get_operation
from nitro_assistants.services import stops
from nitro_assistants.services.audit import record_event
from nitro_assistants.services.enqueue import enqueue, send
from nitro_assistants.services.lifecycle import transition

PLAN_STEP_EVENT = "plan_step"


def start_plan(review: Review, disabled: list[str], user: Any) -> list[StepResult]:
    """One pending :class:`StepResult` per enabled step; the steps that depend on nothing are
    enqueued once the transaction commits. The caller holds the review's lock."""
    plan = (review.payload.get("interaction") or {}).get("plan")
    steps = rules.enabled_steps(plan, disabled)
    enabled = {str(step.get("stepId")) for step in steps}
    results = StepResult.objects.bulk_create(
        StepResult(
            review=review,
            step_id=str(step.get("stepId")),
            position=position,
            action=str(step.get("action") or ""),
            # A dependency the reader (or the assistant) turned off is not waited for.
            depends_on=[str(d) for d in step.get("dependsOn") or [] if str(d) in enabled],
        )
        for position, step in enumerate(steps)
    )
    record_event(review.thread, "plan_started", review=review, actor=user, steps=sorted(enabled))
    if not results:
        _finish(review)
        return results
    _enqueue_ready(review)
    return results


def _enqueue_ready(review: Review, completed: str | None = None) -> None:
    """Enqueue (after commit) the steps that became ready: with ``completed=None`` those that
    depend on nothing, else those whose last dependency was ``completed``. A step becomes
    ready once, when its last dependency completes (under the review's lock), so it is
    enqueued once."""
    results = list(review.step_results.all())
    status = {r.step_id: r.status for r in results}
    for result in results:
        if result.status != StepResult.Status.PENDING:
            continue
        if completed is None and result.depends_on:
            continue
        if completed is not None and completed not in result.depends_on:
            continue
        if all(status.get(d) == StepResult.Status.COMPLETED for d in result.depends_on):
            enqueue("nitro_assistants.execute_plan_step", result.pk)


def _skip_dependents(review: Review) -> None:
    """Skip, transitively, pending steps that depend on a failed or skipped step."""
    results = list(review.step_results.select_for_update())
    status = {r.step_id: r.status for r in results}
    stopped = {StepResult.Status.FAILED, StepResult.Status.SKIPPED}
    changed = True
    while changed:
        changed = False
        for result in results:
            if result.status != StepResult.Status.PENDING:
                continue
            blocking = [d for d in result.depends_on if status.get(d) in stopped]
            if blocking:
                result.status = StepResult.Status.SKIPPED
                result.message = f"Not run: step {', '.join(blocking)} did not complete"
                result.finished_at = timezone.now()
                result.save(update_fields=["status", "message", "finished_at"])
                status[result.step_id] = result.status
                _step_event(review, result)
                changed = True


def _finish(review: Review) -> None:
    """Close the plan once no step is pending or running."""
    statuses = set(review.step_results.values_list("status", flat=True))
    if statuses & {StepResult.Status.PENDING, StepResult.Status.RUNNING}:
        return
    failed = bool(statuses & {StepResult.Status.FAILED, StepResult.Status.SKIPPED})
    transition(review, rules.FAILED if failed else rules.COMPLETED)


def _step_event(review: Review, result: StepResult, actor: Any = None) -> None:
    record_event(review.thread, PLAN_STEP_EVENT, review=review, actor=actor, step=result.as_dict())


def _decider(review: Review) -> Any:
    decision = review.decision
    if decision.decided_by_id is None:
        return None
    return get_user_model()._default_manager.get(pk=decision.decided_by_id)


def execute_plan_step(step: StepResult | int) -> StepResult:
    """Run one approved step's operation under the user who approved the plan, record what it
    did, then enqueue the steps it unblocked (or skip those it stops). Safe to run twice: a step
    that is not pending is left alone."""
    pk = step.pk if isinstance(step, StepResult) else step
    with transaction.atomic():
        result = (
            StepResult.objects.select_for_update(no_key=True)
            .select_related("review__thread")
            .get(pk=pk)
        )
        if result.status != StepResult.Status.PENDING:
            return result
        review = result.review
        result.status = StepResult.Status.RUNNING
        result.started_at = timezone.now()
        result.save(update_fields=["status", "started_at"])
        _step_event(review, result)

    user = _decider(review)
    plan = (review.payload.get("interaction") or {}).get("plan") or {}
    step_data: dict[str, Any] = next(
        (s for s in plan.get("steps") or [] if str(s.get("stepId")) == result.step_id), {}
    )
    outcome: dict[str, Any] = {}
    error = ""
    operation = get_operation(result.action)
    stopped = stops.stop_for_run(review.thread, review.thread.assistant_key)
    if stopped is not None:  # a stop in force runs nothing in its scope, a plan's step neither
        error = f"Not run: {stopped.explanation}"
    elif operation is None:
        error = f"Unknown action {result.action!r}: no operation is registered under that name"
    elif user is None or not user.is_active:
        error = "The user who approved the plan is no longer active"
    elif missing := [p for p in operation.permissions if not user.has_perm(p)]:
        error = "The user who approved the plan lost permission: " + ", ".join(sorted(missing))
    else:
        try:
            outcome = operation(dict(step_data.get("input") or {}), user) or {}
        except Exception as exc:  # an operation's failure is the step's outcome, never a crash
            error = str(exc) or exc.__class__.__name__
    with transaction.atomic():
        review = (
            Review.objects.select_for_update(no_key=True).select_related("thread").get(pk=review.pk)
        )
        result = StepResult.objects.select_for_update().get(pk=pk)
        if result.status != StepResult.Status.RUNNING:
            return result
        result.finished_at = timezone.now()
        if error:
            result.status = StepResult.Status.FAILED
            result.message = error
        else:
            result.status = StepResult.Status.COMPLETED
            if not isinstance(outcome, dict):
                outcome = {}
            result.message = str(outcome.get("message") or "")
            result.link = str(outcome.get("link") or "")[:2000]
            result.resource_id = str(outcome.get("resourceId") or "")[:200]
            result.resource_kind = str(outcome.get("resourceKind") or "")[:100]
        result.save()
        _step_event(review, result, actor=user)
        if error:
            _skip_dependents(review)
        else:
            _enqueue_ready(review, completed=result.step_id)
        _finish(review)
    return result


def requeue_stale_steps(now: datetime.datetime | None = None) -> int:
    """Enqueue again the steps of executing plans that are ready (every dependency completed) but
    have not started ``REQUEUE_AFTER`` seconds after the approval: their task was lost (a process
    died before the on-commit enqueue, or the broker lost its queue). A step that started is
    never run again by this (operations need not be idempotent). Returns how many."""
    now = now or timezone.now()
    cutoff = now - datetime.timedelta(seconds=app_settings.REQUEUE_AFTER)
    candidates = StepResult.objects.filter(
        status=StepResult.Status.PENDING,
        review__status=Review.Status.EXECUTING,
        review__decision__decided_at__lte=cutoff,
    ).select_related("review")
    count = 0
    for result in candidates:
        statuses = dict(result.review.step_results.values_list("step_id", "status"))
        if all(statuses.get(d) == StepResult.Status.COMPLETED for d in result.depends_on):
            send("nitro_assistants.execute_plan_step", result.pk)
            count += 1
    return count
