"""The one state machine of a review: every status change goes through :func:`transition`.

The allowed moves are :data:`nitro_assistants.rules.TRANSITIONS` (one lifecycle for tool-call
and reply reviews, one for typed interactions). A transition checks the current status, writes
the status (and ``closed_at`` once the review is no longer open), records the audit
:class:`~nitro_assistants.models.Event` and sends the matching signal after commit. The caller
holds the review's row lock.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.dispatch import Signal
from django.utils import timezone

from nitro_assistants import rules, signals
from nitro_assistants.exceptions import ReviewStateError
from nitro_assistants.models import Decision, Review, Run
from nitro_assistants.services.audit import record_event, send_on_commit
from nitro_assistants.services.evidence import record_decision
from nitro_assistants.services.sql import writes

#: The audit verb and signal of a move to each status (a decision's own statuses all record
#: ``review_decided``; a plan that ends records ``plan_completed``/``plan_failed``).
_DECIDED = ("review_decided", signals.review_decided)
EFFECTS: dict[str, tuple[str, Signal | None]] = {
    rules.DECIDED: _DECIDED,
    rules.ANSWERED: _DECIDED,
    rules.ACCEPTED: _DECIDED,
    rules.REVISION_REQUESTED: _DECIDED,
    rules.CANCELLED: _DECIDED,
    rules.EXECUTING: _DECIDED,
    rules.APPLIED: ("review_applied", None),
    rules.SUPERSEDED: ("review_superseded", signals.review_superseded),
    rules.FAILED: ("review_failed", signals.review_failed),
    rules.COMPLETED: ("plan_completed", signals.plan_finished),
    # Ended without an answer (Agent Inbox's "ignore thread"): no longer pending, like a
    # superseded review, with the reason "dismissed".
    rules.DISMISSED: ("review_dismissed", signals.review_superseded),
    # Nobody answered in time; the expiry's decision tells the assistant so.
    rules.EXPIRED: ("review_expired", signals.review_expired),
}


def can_transition(review: Review, to: str) -> bool:
    """Whether ``review`` may move to ``to`` from the status it is in."""
    return rules.may_move(review.kind, review.status, to)


def transition(
    review: Review,
    to: str,
    *,
    actor: Any = None,
    run: Run | None = None,
    at: datetime.datetime | None = None,
    signal_kwargs: dict[str, Any] | None = None,
    **data: Any,
) -> Review:
    """Move ``review`` to the status ``to``: guard, save, audit, signal (after commit).

    ``data`` goes into the audit event; ``signal_kwargs`` (beside ``review``) to the signal.
    Raises :class:`ReviewStateError` when the review's lifecycle has no such move.
    """
    current = review.status
    if not rules.may_move(review.kind, current, to):
        raise ReviewStateError(
            f"Review #{review.pk} ({review.kind}) cannot go from {current} to {to}",
            review=review,
        )
    review.status = to
    fields = ["status"]
    if to not in rules.OPEN_STATUSES:
        review.closed_at = at or timezone.now()
        fields.append("closed_at")
    writes.save(review, fields)  # with the event's statement, or before the next one
    verb, signal = EFFECTS[to]
    if to == rules.FAILED and current == rules.EXECUTING:
        verb, signal = "plan_failed", signals.plan_finished
    record_event(review.thread, verb, review=review, run=run, actor=actor, **data)
    if signal is signals.plan_finished:
        signal_kwargs = {"status": to, **(signal_kwargs or {})}
    elif signal is signals.review_failed:
        signal_kwargs = {"error": str(data.get("error") or ""), **(signal_kwargs or {})}
    if signal is not None:
        send_on_commit(signal, Review, review=review, **(signal_kwargs or {}))
    return review


def supersede(review: Review, *, reason: str, actor: Any = None) -> Review:
    """Close a review the thread has moved past (``review_superseded`` once); a review already
    closed is left as it is."""
    if can_transition(review, rules.SUPERSEDED):
        transition(
            review, rules.SUPERSEDED, actor=actor, reason=reason, signal_kwargs={"reason": reason}
        )
    return review


def supersede_pending_review(thread: Any, *, reason: str, actor: Any = None) -> Review | None:
    """Supersede the thread's pending review, if any. The caller holds the thread's lock."""
    review = (
        Review.objects.select_for_update(no_key=True)
        .filter(thread=thread, status=Review.Status.PENDING)
        .select_related("thread")
        .first()
    )
    if review is None:
        return None
    return supersede(review, reason=reason, actor=actor)


def close_decision(record: Decision, outcome: str, error: str) -> None:
    """A decision that will not be applied: superseded or failed, with why; its run failed."""
    record.outcome = outcome
    record.error = error
    record.save(update_fields=["outcome", "error"])
    record_decision(record, record.review, record.run, [])  # the evidence: it never ran
    run = record.run
    if run is not None and run.status not in Run.FINISHED:
        run.status = Run.Status.FAILED
        run.error = error
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "error", "finished_at"])


def fail_review(review: Review, run: Run | None, error: str) -> None:
    """The assistant could not be told of a decision: the review fails (an approved plan keeps
    its steps' state: they run whether the assistant heard or not)."""
    if review.status != rules.EXECUTING and can_transition(review, rules.FAILED):
        transition(review, rules.FAILED, run=run, error=error)
    else:
        record_event(review.thread, "review_failed", review=review, run=run, error=error)


def close_failed_decision(run: Run, error: str) -> None:
    """A resume run failed for good (retries exhausted): its decision and review fail with it.
    Called by ``fail_run`` inside its transaction, which sends ``run_failed``."""
    record = (
        Decision.objects.select_for_update(of=("self",))
        .filter(run=run)
        .select_related("review", "review__thread")
        .first()
    )
    if record is None or record.outcome != Decision.Outcome.PENDING:
        return
    record.outcome = Decision.Outcome.FAILED
    record.error = error
    record.save(update_fields=["outcome", "error"])
    record_decision(record, record.review, run, [])  # the evidence: it never ran
    review = record.review
    if review.status == rules.DECIDED:
        transition(review, rules.FAILED, run=run, error=error)
