"""Decisions no person makes: a policy rule's (``auto_approve``/``auto_reject``, enqueued when the
review is mirrored) and a passed deadline's (the beat task ``nitro_assistants.sweep_deadlines``).
Both go through :func:`nitro_assistants.services.decide`, recorded like any other decision, with
the rule named in the decision (``reviewer_id`` ``policy:<rule>`` / ``deadline:<rule>``) and in a
``review_auto_decided`` audit event carrying the rule's name, id and version."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from nitro_assistants import policy_rules, rules, signals
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import ReviewsStoppedError, ThreadResumptionError
from nitro_assistants.models import Decision, Notification, Review, ReviewHandling
from nitro_assistants.services import notifications, stops
from nitro_assistants.services.audit import events_batched, record_event, send_on_commit
from nitro_assistants.services.decisions import decide
from nitro_assistants.services.policy_enforcement import ExpiryActor, PolicyActor

logger = logging.getLogger("nitro_assistants")


def _rule_data(handling: policy_rules.Handling) -> dict[str, Any]:
    return {
        "rule": handling.rule_name,
        "rule_id": handling.rule_id,
        "rule_version": handling.rule_version,
    }


def _decide_as(review: Review, by: str, handling: policy_rules.Handling, verdict: str) -> Decision:
    """Record ``verdict`` (approve / reject everything) on ``review`` as the rule (lock held)."""
    label = f"policy rule {handling.rule_name!r} v{handling.rule_version}"
    if by == "deadline":
        label = f"the deadline of {label}"
    if verdict == policy_rules.APPROVE:
        body = {
            **rules.approve_everything(review.kind, review.tool_calls),
            "note": f"Approved by {label}",
        }
    else:
        reason = handling.reason or f"Rejected by {label}"
        body = rules.reject_everything(review.kind, review.tool_calls, reason)
    record = decide(review, PolicyActor(by, handling), body)
    assert isinstance(record, Decision)
    rule = handling.as_dict()
    record_event(
        review.thread,
        "review_auto_decided",
        review=review,
        by=by,
        verdict=verdict,
        decision=record.pk,
        **_rule_data(handling),
    )
    send_on_commit(
        signals.review_auto_decided, Review, review=review, decision=record, by=by, rule=rule
    )
    return record


def apply_policy(review: Review | int) -> Decision | None:
    """Decide a review its rule approves or rejects at once; None when there is nothing to do
    (decided by someone meanwhile, superseded, or the rule reviews). Safe to run twice."""
    pk = review.pk if isinstance(review, Review) else review
    with transaction.atomic():
        locked = (
            Review.objects.select_for_update(of=("self",), no_key=True)
            .select_related("thread", "handling")
            .filter(pk=pk)
            .first()
        )
        if locked is None or locked.status != rules.PENDING:
            return None
        if stops.stop_for_review(locked) is not None:  # frozen: left to people after the resume
            return None
        try:
            row = locked.handling
        except ReviewHandling.DoesNotExist:
            return None
        handling = row.handling
        if handling.action == policy_rules.AUTO_APPROVE:
            return _decide_as(locked, "policy", handling, policy_rules.APPROVE)
        if handling.action == policy_rules.AUTO_REJECT:
            return _decide_as(locked, "policy", handling, policy_rules.REJECT)
        return None


# -- deadlines ------------------------------------------------------------------------------------


def _seconds(value: float | None, now: datetime.datetime) -> datetime.datetime | None:
    return now + datetime.timedelta(seconds=value) if value is not None else None


_DUE_STAGES = (ReviewHandling.Stage.WAITING, ReviewHandling.Stage.ESCALATED)


def _apply(review: Review, row: ReviewHandling, now: datetime.datetime) -> str:
    """Apply the passed deadline of ``review`` (its row lock held). ``row`` is saved by the
    caller unless a decision was recorded (then it is saved here, before the decision)."""
    handling = row.handling
    review.handling = row
    stage = row.stage
    action = (
        handling.on_deadline
        if row.stage == ReviewHandling.Stage.WAITING
        else handling.on_escalation_deadline
    )
    if review.expires_at is not None and row.due_at is not None and review.expires_at <= row.due_at:
        # The pause's own expiry came first (or it is this deadline's): the earlier wins.
        row.stage = ReviewHandling.Stage.DONE
        row.save(update_fields=["stage"])
        return _unless_stopped(row, stage, _expire(review, review.expires_at, handling.rule_name))
    if action == policy_rules.ESCALATE:
        row.stage = ReviewHandling.Stage.ESCALATED
        row.group_id = handling.escalate_to_id
        row.priority = row.priority + 1
        row.escalated_at = now
        row.due_at = _seconds(handling.escalation_deadline, now)
        if row.due_at is None:  # nothing more happens: flag it overdue from here on
            row.stage, row.due_at = ReviewHandling.Stage.DONE, now
        elif handling.on_escalation_deadline == policy_rules.EXPIRE and (
            review.expires_at is None or row.due_at < review.expires_at
        ):
            review.expires_at = row.due_at  # the escalation group's time is the review's
            review.expiry_warned_at = None  # a new lapse: warned again, once
            review.save(update_fields=["expires_at", "expiry_warned_at"])
        record_event(
            review.thread,
            "review_escalated",
            review=review,
            group=handling.escalate_to,
            priority=row.priority,
            **_rule_data(handling),
        )
        send_on_commit(
            signals.review_escalated,
            Review,
            review=review,
            group=row.group,
            rule=handling.as_dict(),
        )
        return "escalated"
    row.stage = ReviewHandling.Stage.DONE
    if action == policy_rules.EXPIRE:  # with its expires_at set when handled: not reached
        row.save(update_fields=["stage"])
        return _unless_stopped(row, stage, _expire(review, row.due_at or now, handling.rule_name))
    if action in (policy_rules.APPROVE, policy_rules.REJECT):
        row.save(update_fields=["stage"])
        try:
            with transaction.atomic():
                _decide_as(review, "deadline", handling, action)
        except ReviewsStoppedError:
            # A stop committed after the sweep asked: frozen, its deadline left due.
            return _unless_stopped(row, stage, "stopped")
        except ThreadResumptionError as exc:  # e.g. a call that does not allow approval
            record_event(
                review.thread,
                "deadline_failed",
                review=review,
                error=str(exc),
                **_rule_data(handling),
            )
            logger.error("The deadline of review %s could not be applied: %s", review.pk, exc)
            return "failed"
        return "approved" if action == policy_rules.APPROVE else "rejected"
    record_event(review.thread, "review_overdue", review=review, **_rule_data(handling))
    transaction.on_commit(
        lambda: notifications.notify(Notification.Kind.OVERDUE, review=review), robust=True
    )
    return "overdue"


def _unless_stopped(row: ReviewHandling, stage: str, done: str) -> str:
    """``done``; when it is ``"stopped"`` (a stop froze the review after the sweep asked), the
    deadline is left due at its ``stage``, applied by the first sweep after the resume."""
    if done == "stopped":
        row.stage = stage
        row.save(update_fields=["stage"])
    return done


def _expire(review: Review, at: datetime.datetime, rule_name: str = "") -> str:
    """Expire ``review`` (its row lock held) through ``services.decide`` as the expiry:
    ``"expired"``; ``"stopped"`` when a stop froze it (committed after the sweep asked: it
    stays pending, expired after the resume); or ``"failed"`` (a ``expiry_failed`` event and an
    error in the log) when the pause allows no answer that tells the assistant: it then stays
    for people, its expiry cleared."""
    try:
        with transaction.atomic():
            decide(review, ExpiryActor(expired_at=at, rule_name=rule_name), {})
    except ReviewsStoppedError:
        return "stopped"
    except ThreadResumptionError as exc:
        record_event(review.thread, "expiry_failed", review=review, error=str(exc), rule=rule_name)
        logger.error("Review %s could not be expired: %s", review.pk, exc)
        # Not tried again by every sweep: it stays for people, without an expiry.
        review.expires_at = None
        review.save(update_fields=["expires_at"])
        return "failed"
    return "expired"


def due_expiries(now: datetime.datetime, limit: int) -> list[int]:
    """Pending reviews whose expiry (``Review.expires_at``) has passed, soonest first."""
    return list(
        Review.objects.filter(status=rules.PENDING, expires_at__lte=now)
        .order_by("expires_at")
        .values_list("pk", flat=True)[:limit]
    )


def apply_expiries(pks: list[int], now: datetime.datetime) -> dict[str, int]:
    """Expire the reviews ``pks`` whose expiry passed, in one transaction: each locked (one
    another sweep or a decision holds is skipped, not waited for) and read again under the
    lock, so it is expired at most once and never after a decision. A review frozen by a stop
    is left (``stopped``): expired by the first sweep after the resume."""
    counts: dict[str, int] = {}
    with transaction.atomic(), events_batched():
        locked = (
            Review.objects.select_for_update(of=("self",), skip_locked=True, no_key=True)
            .select_related("thread")
            .filter(pk__in=pks, status=rules.PENDING, expires_at__lte=now)
            .order_by("expires_at")
        )
        for review in locked:
            if stops.stop_for_review(review) is not None:
                counts["stopped"] = counts.get("stopped", 0) + 1
                continue
            assert review.expires_at is not None
            handling = ReviewHandling.objects.filter(review=review).first()
            done = _expire(
                review, review.expires_at, handling.handling.rule_name if handling else ""
            )
            counts[done] = counts.get(done, 0) + 1
    return counts


def expiring_reviews(now: datetime.datetime, lead: datetime.timedelta, limit: int) -> list[int]:
    """Pending reviews that expire within ``lead`` and whose reviewers were not warned yet."""
    return list(
        Review.objects.filter(
            status=rules.PENDING,
            expires_at__gt=now,
            expires_at__lte=now + lead,
            expiry_warned_at__isnull=True,
        )
        .order_by("expires_at")
        .values_list("pk", flat=True)[:limit]
    )


def warn_expiring(pks: list[int], now: datetime.datetime) -> int:
    """Warn the reviewers (the rule's group, or everyone who may decide) that the reviews
    ``pks`` are about to expire: once each (``expiry_warned_at`` is recorded under the row
    lock, so a second sweep does not warn again), a ``review_expiring`` event and an
    ``expiring`` notification. A review frozen by a stop is not warned (it will not expire
    while frozen). Returns how many were warned."""
    warned: list[Review] = []
    with transaction.atomic(), events_batched():
        locked = (
            Review.objects.select_for_update(of=("self",), skip_locked=True, no_key=True)
            .select_related("thread")
            .filter(pk__in=pks, status=rules.PENDING, expiry_warned_at__isnull=True)
            .order_by("expires_at")
        )
        for review in locked:
            if stops.stop_for_review(review) is not None:
                continue
            review.expiry_warned_at = now
            assert review.expires_at is not None
            record_event(
                review.thread,
                "review_expiring",
                review=review,
                expires_at=review.expires_at.isoformat(),
            )
            warned.append(review)
        Review.objects.bulk_update(warned, ["expiry_warned_at"])
        for review in warned:
            transaction.on_commit(
                lambda review=review: notifications.notify(  # type: ignore[misc]
                    Notification.Kind.EXPIRING, review=review
                ),
                robust=True,
            )
    return len(warned)


def _due(now: datetime.datetime) -> Any:
    return ReviewHandling.objects.filter(
        due_at__lte=now, stage__in=_DUE_STAGES, review__status=rules.PENDING
    )


def apply_deadlines(pks: list[int], now: datetime.datetime) -> dict[str, int]:
    """Apply the passed deadlines of the reviews ``pks``, in one transaction: each review is
    locked (one another sweep holds is skipped, not waited for) and its deadline read again
    under the lock, so it is applied exactly once. Returns a count per outcome."""
    counts: dict[str, int] = {}
    with transaction.atomic(), events_batched():
        locked = {
            review.pk: review
            for review in Review.objects.select_for_update(
                of=("self",), skip_locked=True, no_key=True
            )
            .select_related("thread")
            .filter(pk__in=pks, status=rules.PENDING)
        }
        rows = list(
            ReviewHandling.objects.select_related("group")
            .filter(review_id__in=list(locked), due_at__lte=now, stage__in=_DUE_STAGES)
            .order_by("due_at")
        )
        changed = []
        for row in rows:
            if stops.stop_for_review(locked[row.review_id]) is not None:
                # Frozen: its deadline waits, applied by the first sweep after the resume.
                counts["stopped"] = counts.get("stopped", 0) + 1
                continue
            done = _apply(locked[row.review_id], row, now)
            counts[done] = counts.get(done, 0) + 1
            if done in ("escalated", "overdue"):
                changed.append(row)
        ReviewHandling.objects.bulk_update(
            changed, ["stage", "group", "priority", "escalated_at", "due_at"]
        )
    return counts


def apply_deadline(review: Review | int, *, now: datetime.datetime | None = None) -> str:
    """Apply one review's passed deadline (see :func:`apply_deadlines`): ``"escalated"``,
    ``"approved"``, ``"rejected"``, ``"overdue"``, ``"failed"``, ``"stopped"`` (frozen by a stop: left due), or ``""`` when nothing was due
    (another sweep took it, someone decided it)."""
    pk = review.pk if isinstance(review, Review) else review
    counts = apply_deadlines([pk], now or timezone.now())
    return next(iter(counts), "")


def due_reviews(now: datetime.datetime, limit: int) -> list[int]:
    """Pending reviews whose deadline has passed and is not applied yet, soonest first."""
    return list(_due(now).order_by("due_at").values_list("review_id", flat=True)[:limit])


def sweep_deadlines(*, now: datetime.datetime | None = None) -> dict[str, int]:
    """Apply every passed deadline, ``DEADLINE_BATCH_SIZE`` reviews per transaction, each
    exactly once even with two sweeps running at once. Returns a count per outcome."""
    now = now or timezone.now()
    counts: dict[str, int] = {}
    batch = app_settings.DEADLINE_BATCH_SIZE
    # The rules' deadlines first: one that came before the pause's expiry is applied as the
    # rule says (the earlier wins), then what expired, then the warnings of what will.
    steps: list[tuple[Any, Any]] = [(due_reviews, apply_deadlines), (due_expiries, apply_expiries)]
    for find, apply in steps:
        seen: set[int] = set()
        while True:
            pks = [pk for pk in find(now, batch) if pk not in seen]
            if not pks:
                break
            seen.update(pks)  # a review another sweep holds is not tried again in this one
            for done, n in apply(pks, now).items():
                counts[done] = counts.get(done, 0) + n
    lead = app_settings.EXPIRY_WARNING_LEAD
    if lead is not None:
        seen = set()
        while True:
            pks = [pk for pk in expiring_reviews(now, lead, batch) if pk not in seen]
            if not pks:
                break
            seen.update(pks)
            warned = warn_expiring(pks, now)
            if warned:
                counts["warned"] = counts.get("warned", 0) + warned
    return counts


__all__ = [
    "apply_deadline",
    "apply_deadlines",
    "apply_expiries",
    "apply_policy",
    "due_expiries",
    "due_reviews",
    "expiring_reviews",
    "sweep_deadlines",
    "warn_expiring",
]
