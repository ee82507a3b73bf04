"""Who works on which review: claims (a reviewer's lease on a review while its screen is open),
assignments (the person or group a review is for) and "next review".

A claim is a row per review (:class:`~nitro_assistants.models.Claim`), taken and renewed under
the row's lock, so two reviewers opening the same review at once end with one claim. It lasts
``CLAIM_MINUTES`` unless the open screen renews it: a closed tab frees the review by itself.
Taking over someone's live claim is an explicit action, recorded as ``review_taken_over``.
Claims and assignments say who is on a review; they never decide who may decide it
(:func:`nitro_assistants.services.may_decide` does).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import IntegrityError, router, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.module_loading import import_string

from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import ConfigurationError, UsageError
from nitro_assistants.models import Assignment, Claim, Event, Review
from nitro_assistants.services import chain_append, changes, sql
from nitro_assistants.services.audit import build_event, record_event
from nitro_assistants.services.decisions import decidable_by
from nitro_assistants.services.interactions import username
from nitro_assistants.services.sql import claims as sql_claims
from nitro_assistants.services.sql import writes

logger = logging.getLogger("nitro_assistants")

#: How many free candidates :func:`next_review` tries to claim before it gives up (each one it
#: fails to claim was taken by someone else a moment earlier).
NEXT_REVIEW_TRIES = 20


def lease() -> datetime.timedelta:
    return datetime.timedelta(minutes=app_settings.CLAIM_MINUTES)


def claim_review(review: Review, user: Any, *, take_over: bool = False) -> Claim:
    """Claim ``review`` for ``user``, or renew their claim; returns the claim as it now stands,
    which is someone else's when they hold a live claim (unless ``take_over``).

    A claim nobody renewed past its ``expires_at`` is free. Only pending reviews are claimed:
    for any other the current row (or an unsaved, expired one) is returned unchanged."""
    now = timezone.now()
    until = now + lease()
    if review.status != Review.Status.PENDING:
        return Claim.objects.filter(review_id=review.pk).first() or Claim(
            review=review, user=user, claimed_at=now, expires_at=now
        )
    claim = Claim(review=review, user=user, claimed_at=now, expires_at=until)
    if sql.postgresql(Claim) and not (writes.watched(Claim) or writes.watched(Event)):
        # The first claim and its event: one statement, no transaction. A claim already there
        # (a renewal, a take-over) is left to the statements below.
        first = _claimed_with_event(claim)
        if first is not None:
            return first
        # Renewing one's own live claim: one statement too.
        renewed = sql_claims.renew(claim)
        if renewed is not None:
            changes.changed()  # a renewal writes no event (the live pages show the lease)
            return renewed
    with transaction.atomic():
        # A write first: renewing one's own live claim is this one statement, and the
        # transaction holds its write lock from the start (SQLite would otherwise refuse one
        # of two transactions that both read before writing: "database is locked").
        if Claim.objects.filter(review_id=review.pk, user_id=user.pk, expires_at__gt=now).update(
            expires_at=until, changed_at=now
        ):
            # A renewal writes no event (the live pages show the lease): it changes them itself.
            changes.changed()
            return Claim.objects.get(review_id=review.pk)
        # The first claim on the review is this insert; a row already there (or another
        # reviewer's insert that wins the race) leaves it to the locked read below.
        current = _insert_claim(Claim(review=review, user=user, claimed_at=now, expires_at=until))
        if current is not None:
            record_event(review.thread, "review_claimed", review=review, actor=user)
            return current
        current = Claim.objects.select_for_update().get(review_id=review.pk)
        live = current.active(now)
        if current.user_id == user.pk:  # a renewal: the screen is still open
            if not live:
                current.claimed_at = now  # their earlier claim had lapsed: this is a new one
            current.expires_at, current.changed_at = until, now
            current.save(update_fields=["claimed_at", "expires_at", "changed_at"])
            changes.changed()
            return current
        if live and not take_over:
            return current
        previous = current.user
        current.user, current.claimed_at, current.expires_at, current.changed_at = (
            user,
            now,
            until,
            now,
        )
        current.save(update_fields=["user", "claimed_at", "expires_at", "changed_at"])
        if live:
            record_event(
                review.thread,
                "review_taken_over",
                review=review,
                actor=user,
                previous=username(previous),
            )
        else:
            record_event(review.thread, "review_claimed", review=review, actor=user)
        return current


def _claimed_with_event(claim: Claim) -> Claim | None:
    """PostgreSQL: insert ``claim`` unless its review has one, and append its
    ``review_claimed`` event when it was inserted, in one statement (the insert is the
    statement's gate, :class:`.sql.events.GatingWrite`); the claim saved, or None with nothing
    written. Only when the thread's chain has a head (every thread's has, from its first event
    on)."""
    claim.changed_at = claim.claimed_at
    review = claim.review
    event = build_event(review.thread, "review_claimed", review=review, actor=claim.user)
    gate = sql_claims.first_claim_gate(claim, str(review.thread.thread_id))
    if not chain_append.append_gated([event], gate):
        return None
    claim.pk = gate.returned
    claim._state.adding = False
    claim._state.db = router.db_for_write(Claim)
    return claim


def _insert_claim(claim: Claim) -> Claim | None:
    """Insert ``claim`` unless its review has one (``ON CONFLICT DO NOTHING``: one statement,
    no savepoint to recover from a lost race); the claim saved, or None when there was one.
    While a host's receiver watches claims (:func:`.sql.writes.watched`), ``save()`` in a
    savepoint instead, which sends them the claim (asked first whether the review has one: their
    ``pre_save`` is not sent for a claim that is not written, but in a lost race)."""
    claim.changed_at = claim.claimed_at
    if writes.watched(Claim):
        if Claim.objects.filter(review_id=claim.review_id).exists():
            return None
        try:
            with transaction.atomic():
                claim.save(force_insert=True)
        except IntegrityError:  # the review has one
            return None
        return claim
    return sql_claims.insert_unless_claimed(claim)


def release_claim(review: Review, user: Any) -> bool:
    """End ``user``'s claim on ``review`` (the screen was closed, or they decided it). The row
    stays, expired, so the change shows in the live view; False when they held no claim."""
    now = timezone.now()
    # One statement: it cannot interleave with another transaction's reads and writes.
    ended = Claim.objects.filter(review_id=review.pk, user_id=user.pk, expires_at__gt=now).update(
        expires_at=now, changed_at=now
    )
    if ended:  # no event either
        changes.changed()
    return bool(ended)


def active_claims(now: datetime.datetime | None = None) -> Q:
    """Reviews with a live claim (as a filter on reviews)."""
    return Q(claim__expires_at__gt=now or timezone.now())


# -- assignment -------------------------------------------------------------------------------


def assign_review(review: Review, to: Any, *, by: Any = None) -> Assignment | None:
    """Assign ``review`` to a user or a group (``to``), replacing any earlier assignment;
    ``to=None`` removes it. Records ``review_assigned`` (or ``review_unassigned``)."""
    if to is not None and not isinstance(to, (AbstractBaseUser, Group)):
        raise UsageError(f"A review is assigned to a user or a group, not {to!r}")
    with transaction.atomic():
        Review.objects.select_for_update(of=("self",), no_key=True).filter(pk=review.pk).first()
        Assignment.objects.filter(review_id=review.pk).delete()
        if to is None:
            record_event(review.thread, "review_unassigned", review=review, actor=by)
            return None
        is_group = isinstance(to, Group)
        who: Any = to
        assignment = Assignment.objects.create(
            review=review,
            user=None if is_group else who,
            group=who if is_group else None,
            assigned_by=by if getattr(by, "pk", None) else None,
        )
        record_event(
            review.thread,
            "review_assigned",
            review=review,
            actor=by,
            group=who.name if is_group else None,
            user=None if is_group else username(who),
        )
    return assignment


def assignment_rule() -> Any:
    """The host project's rule (``ASSIGN_REVIEW``), or None."""
    path = app_settings.ASSIGN_REVIEW
    if not path:
        return None
    try:
        return import_string(path)
    except ImportError as exc:
        raise ConfigurationError(f"NITRO_ASSISTANTS['ASSIGN_REVIEW']: {exc}") from exc


def assign_by_rule(review: Review) -> Assignment | None:
    """Ask the host project's rule whom a new review is for, and assign it. A rule that fails
    is logged: the review stays in the queue, unassigned, rather than lost."""
    rule = assignment_rule()
    if rule is None:
        return None
    try:
        to = rule(review)
        if to is None:
            return None
        return assign_review(review, to)
    except Exception:
        logger.exception("The ASSIGN_REVIEW rule failed on review %s", review.pk)
        return None


def assigned_to(user: Any) -> Q:
    """Reviews assigned to ``user`` or to one of their groups (as a filter on reviews)."""
    return Q(assignment__user_id=user.pk) | Q(
        assignment__group__in=Group.objects.filter(user=user.pk)
    )


# -- what a user may decide, and the next of it ---------------------------------------------


def pending_decidable(user: Any, reviews: QuerySet[Review] | None = None) -> QuerySet[Review]:
    """The pending reviews ``user`` may decide in the admin (``decidable_by``, the rule of
    :func:`~nitro_assistants.services.may_decide` as a query)."""
    reviews = Review.objects.all() if reviews is None else reviews
    return reviews.filter(decidable_by(user, "admin"), status=Review.Status.PENDING)


def next_review(
    user: Any, candidates: QuerySet[Review] | None = None, *, after: Review | None = None
) -> Review | None:
    """The next review ``user`` may decide, claimed for them: the first of ``candidates`` (in
    their order; oldest first by default) that nobody else holds a live claim on. ``after``
    (the review just decided) is skipped. None when there is none left."""
    if candidates is None:
        candidates = Review.objects.order_by("requested_at", "pk")
    now = timezone.now()
    free = pending_decidable(user, candidates).exclude(
        active_claims(now) & ~Q(claim__user_id=user.pk)
    )
    if after is not None:
        free = free.exclude(pk=after.pk)
    for review in free.select_related("thread")[:NEXT_REVIEW_TRIES]:
        if claim_review(review, user).user_id == user.pk:
            return review
    return None
