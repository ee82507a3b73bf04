"""Scoped approval grants (docs/governance.md "Grants"): given with a person's approval of a held
call, matched against each new review when it is mirrored, used through ``services.decide``.

- **Giving** (:func:`decide_with_grant`): the approval and the grant are one transaction; a grant
  the rules forbid or cap, wider than the call, on an edit or on a quorum review is refused with
  a field error (:class:`~nitro_assistants.grant_rules.GrantError`) and nothing is stored, the
  approval included.
- **Matching** costs no statement when nothing matches: the live grants are compiled once per
  change into this process (as the policy rules are), and their stamp is read in the shared
  cache (:data:`STAMP_KEY`) or with the thread's lock (:func:`stamp_annotations`).
- **Using** (:func:`apply_grant`, the task ``nitro_assistants.apply_grant`` enqueued after the
  mirror commits): under the review's lock, the grants are read again, the use is counted by a
  compare-and-set on the grant's row (two reviews racing for a last use: one wins), and the
  decision is recorded through ``services.decide`` as the grant (``Decision.grant``, channel
  ``grant``). A stop in force, a review not pending, edited or under a rule that allows no grant,
  and a granter who may no longer decide it: nothing is decided, people decide it.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
from collections.abc import Mapping
from typing import Any

from django.core.cache import caches
from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import (
    Count,
    DateTimeField,
    F,
    IntegerField,
    Max,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.utils import timezone

from nitro_assistants import grant_rules, policy_rules, rules, signals, subjects
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.grant_rules import GrantError, GrantForbiddenError
from nitro_assistants.models import Decision, Grant, Notification, Review, ReviewHandling, Thread
from nitro_assistants.services import (
    changes,
    commit_hooks,
    notifications,
    policy_enforcement,
    stops,
)
from nitro_assistants.services.audit import record_event, send_on_commit
from nitro_assistants.services.decisions import Channel, decide, may_decide
from nitro_assistants.services.enqueue import enqueue

logger = logging.getLogger("nitro_assistants")

#: The permission giving a grant needs (with ``decide_review``).
GRANT_PERMISSION = "nitro_assistants.grant_approval"
#: The key, in the shared cache, of the live grants' stamp.
STAMP_KEY = "nitro_assistants:grants-stamp"
#: The names of :func:`stamp_annotations`, in the order of the stamp's items.
STAMP_ANNOTATIONS = ("grants_count", "grants_updated_at")

_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class GrantActor:
    """Who decides when a grant does: not a user (``decided_by`` stays empty); the decision names
    the grant (``Decision.grant``, ``reviewer_id`` ``grant:<id>``), and the grant its granter."""

    grant: Grant
    by: str = "grant"
    pk: None = None
    is_authenticated: bool = False

    @property
    def grant_id(self) -> int:
        return int(self.grant.pk)

    @property
    def reviewer_id(self) -> str:
        return f"grant:{self.grant.pk}"

    def get_username(self) -> str:
        return self.reviewer_id


# -- the live grants, compiled ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Compiled:
    token: str | None
    stamp: tuple[Any, ...] | None
    grants: grant_rules.GrantSet


_compiled = _Compiled(None, None, grant_rules.EMPTY)


def _open() -> QuerySet[Grant]:
    """Grants not revoked nor used up (expired ones are left out when compiled and matched)."""
    return Grant.objects.filter(revoked_at__isnull=True).filter(
        Q(uses_left__isnull=True) | Q(uses_left__gt=0)
    )


def _live(now: datetime.datetime) -> QuerySet[Grant]:
    return _open().filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))


def stamp_annotations() -> dict[str, Any]:
    """The open grants' aggregate (count, latest change) as scalar subqueries another read can
    carry (the thread's lock of a mirror), so checking the compiled grants costs no statement."""
    grouped = _open().order_by().annotate(stamp_group=Value(1)).values("stamp_group")
    return {
        "grants_count": Subquery(
            grouped.annotate(x=Count("pk")).values("x"), output_field=IntegerField()
        ),
        "grants_updated_at": Subquery(
            grouped.annotate(x=Max("updated_at")).values("x"), output_field=DateTimeField()
        ),
    }


def _stamp_cache() -> str | None:
    alias = changes.cache_alias()
    if alias is None or changes.backend_of(alias) in changes.PER_PROCESS_BACKENDS:
        return None
    return alias


def _compile(token: str | None, stamp: tuple[Any, ...] | None = None) -> grant_rules.GrantSet:
    """Compile the live grants and keep them under ``token`` (the shared stamp) or ``stamp``
    (the database's aggregate of the open grants, expired ones included)."""
    global _compiled
    rows = list(_live(timezone.now()))
    compiled = _Compiled(token, stamp, grant_rules.GrantSet(row.compiled() for row in rows))
    with _lock:
        _compiled = compiled
    return compiled.grants


def live_grants(stamp: tuple[Any, ...] | None = None) -> grant_rules.GrantSet:
    """The live grants, compiled; compiled again only after a grant was given, used or revoked
    (:func:`grants_changed`). With a shared cache the stamp is read there (no SQL); without one,
    ``stamp`` (read with the thread's lock, :func:`stamp_annotations`) or a query of its own.
    A grant that expired since it was compiled is left out when matched."""
    alias = _stamp_cache()
    if alias is not None and not commit_hooks.waiting(_forget_stamp):
        try:
            token = changes.current_token(caches[alias], STAMP_KEY)
        except Exception:  # the cache's client raises its own errors
            logger.warning("Could not read the grants' stamp; asking the database", exc_info=True)
        else:
            kept = _compiled
            return kept.grants if kept.token == token else _compile(token)
    if stamp is None:
        row = _open().aggregate(n=Count("pk"), at=Max("updated_at"))
        stamp = (row["n"], row["at"])
    kept = _compiled
    if kept.token is None and kept.stamp == stamp:
        return kept.grants
    return _compile(None, stamp)


def forget_grants() -> None:
    """This process compiles the grants again before it uses them next."""
    global _compiled
    with _lock:
        _compiled = _Compiled(None, None, grant_rules.EMPTY)


def _forget_stamp() -> None:
    forget_grants()
    alias = _stamp_cache()
    if alias is None:
        return
    try:
        caches[alias].delete(STAMP_KEY)
    except Exception:  # the cache's client raises its own errors
        logger.warning("Could not delete the grants' stamp", exc_info=True)


def grants_changed(using: str = DEFAULT_DB_ALIAS) -> None:
    """A grant was given, used up or revoked in the current transaction: once it commits, every
    process compiles the grants again before its next review. (A use that leaves uses changes
    nothing compiled: the use itself is counted on the grant's row.)"""
    commit_hooks.once(_forget_stamp, using=using)


# -- matching a new review ----------------------------------------------------------------------


def caps_of(handling: policy_rules.Handling) -> grant_rules.Caps:
    """What grants the review's handling admits: none for a rule that says so, decides at once,
    or asks for more than one approval."""
    allowed = handling.grants and handling.action == policy_rules.REVIEW and handling.approvals <= 1
    return grant_rules.Caps(
        allowed=allowed, uses=handling.grant_max_uses, seconds=handling.grant_max_seconds
    )


def subject_key(thread: Thread) -> str:
    """The thread's subject as a grant's key, or blank: only a subject ``THREAD_SUBJECT``
    computes (without it a subject is the first message, which any customer may write alike),
    and not one cut short (two long names would share it)."""
    subject = thread.subject or ""
    if not subject or subject.endswith("…") or subjects.describer() is None:
        return ""
    return subject


def keys_of(thread: Thread) -> dict[str, str]:
    return {
        grant_rules.THREAD: str(thread.pk),
        grant_rules.SUBJECT: subject_key(thread),
        grant_rules.ASSISTANT: thread.assistant_key,
    }


def review_mirrored(
    review: Review, handling: policy_rules.Handling, grants: grant_rules.GrantSet
) -> bool:
    """A review was just mirrored under ``handling``: when live grants cover every call it holds,
    ``nitro_assistants.apply_grant`` is enqueued after commit (it checks again under the lock).
    No statement."""
    if review.kind != rules.TOOL_CALLS or not len(grants):
        return False
    found = grants.match(
        keys_of(review.thread), review.tool_calls, timezone.now().timestamp(), caps_of(handling)
    )
    if not found:
        return False
    setattr(review, notifications.GRANT_EXPECTED, True)  # reviewers are told only if it fails
    enqueue("nitro_assistants.apply_grant", review.pk)
    return True


# -- giving a grant -----------------------------------------------------------------------------


def _refuse_edits(review: Review, record: Decision) -> list[str]:
    """The calls the decision approved as held; raises when any call was edited (a grant never
    follows an edit)."""
    if "original" in review.payload:
        raise GrantError("An edited review cannot give a grant", field="grant")
    approved = []
    for item in record.tool_calls or []:
        if item.get("action") == "edit":
            raise GrantError(
                "A grant never follows an edit: approve the call as held to give one",
                field="grant",
            )
        if item.get("action") == "approve":
            approved.append(str(item.get("id")))
    return approved


def give(record: Decision, user: Any, raw: Any) -> Grant:
    """Record the grant ``raw`` (the decide body's ``grant``) given with ``record``, the person's
    approval just recorded (the review's lock held). Raises :class:`GrantError`."""
    review = record.review
    if review.kind != rules.TOOL_CALLS:
        raise GrantError("Grants cover held tool calls only", field="grant")
    given = Grant.objects.filter(review=review, granted_by=user.pk).first()
    if given is not None:  # the same decision sent again: its grant, not a second one
        return given
    approved = _refuse_edits(review, record)
    row = policy_enforcement.handling_row(review)
    handling = policy_enforcement.current_handling(row)
    spec = grant_rules.clean_spec(
        raw, tool_calls=review.tool_calls, approved=approved, caps=caps_of(handling)
    )
    thread = review.thread
    key = keys_of(thread)[spec.scope]
    if not key:
        raise GrantError("This thread has no subject to scope a grant to", field="grant.scope")
    now = timezone.now()
    duration = datetime.timedelta(seconds=spec.seconds) if spec.seconds is not None else None
    grant = Grant.objects.create(
        scope=spec.scope,
        key=key,
        thread=thread if spec.scope == grant_rules.THREAD else None,
        assistant_key=thread.assistant_key,
        tool=spec.tool,
        constraints=spec.constraints,
        max_uses=spec.uses,
        uses_left=spec.uses,
        duration=duration,
        expires_at=now + duration if duration is not None else None,
        review=review,
        policy_id=handling.rule_id,
        group_id=handling.group_id,
        granted_by=user,
        granted_at=now,
    )
    record_event(
        thread,
        "grant_given",
        review=review,
        actor=user,
        grant=grant.pk,
        scope=grant.scope,
        tool=grant.tool,
        constraints=grant.constraints,
        uses=grant.max_uses,
        duration=spec.seconds,
    )
    grants_changed()
    return grant


def decide_with_grant(
    review: Review | int,
    user: Any,
    decision: Mapping[str, Any],
    grant: Any,
    *,
    via: Channel,
) -> Decision:
    """``services.decide`` and, in the same transaction, the grant given with the approval:
    both are stored, or neither. Needs ``grant_approval`` beside what deciding needs."""
    if not (
        getattr(user, "is_authenticated", False)
        and getattr(user, "is_active", False)
        and user.has_perm(GRANT_PERMISSION)
    ):
        raise GrantForbiddenError(
            "Giving a grant needs the nitro_assistants.grant_approval permission", field="grant"
        )
    with transaction.atomic():
        record = decide(review, user, decision, via=via)
        if not isinstance(record, Decision):
            raise GrantError(
                "This review needs several approvals: it cannot give a grant", field="grant"
            )
        give(record, user, grant)
    return record


# -- using a grant ------------------------------------------------------------------------------


class _UsedUp(NitroAssistantsError):
    """A grant's last use went to another review meanwhile: nothing is decided."""


def _granter_may(grant: Grant, review: Review) -> bool:
    """Whether the grant's granter could still give this approval: the question every way a
    review ends asks (``may_decide``, as in the admin: active, ``decide_review``, in the group
    deciding the review), ``grant_approval``, and, where duties are always separated, not the one
    who started its conversation or run."""
    user = grant.granted_by
    if user is None or not may_decide(user, review, "admin"):
        return False
    if not user.has_perm(GRANT_PERMISSION):
        return False
    # SEPARATE_DUTIES "always": not the action of a run the granter started.
    return not (
        policy_enforcement.separated(review, 1) and policy_enforcement.own_action(user, review)
    )


def apply_grant(review: Review | int) -> Decision | None:
    """Approve a review live grants cover, through ``services.decide``, counting each grant's use
    atomically; None when nothing is to be done (decided meanwhile, frozen by a stop, not covered
    any more, a last use taken by another review): the review is then left to people, who are
    notified of it now (they were not when it was mirrored). Safe to run twice."""
    pk = review.pk if isinstance(review, Review) else review
    with transaction.atomic():
        locked, decision = _apply_grant(pk)
        if decision is None and locked is not None and notifications.review_needs_people(locked):
            transaction.on_commit(
                lambda: notifications.notify(Notification.Kind.REQUESTED, review=locked),
                robust=True,
            )
    return decision


def _apply_grant(pk: Any) -> tuple[Review | None, Decision | None]:
    """:func:`apply_grant` in its transaction: the review locked (None: gone) and the decision."""
    locked = (
        Review.objects.select_for_update(of=("self",), no_key=True)
        .select_related("thread", "handling__group")
        .filter(pk=pk)
        .first()
    )
    if locked is None or locked.status != rules.PENDING:
        return None, None
    if locked.kind != rules.TOOL_CALLS or "original" in locked.payload:
        return locked, None  # edited: never approved by a grant
    if stops.stop_for_review(locked) is not None:  # frozen: left to people
        return locked, None
    try:
        row: ReviewHandling | None = locked.handling
    except ReviewHandling.DoesNotExist:
        row = None
    handling = policy_enforcement.current_handling(row)
    caps = caps_of(handling)
    if not caps.allowed:
        return locked, None
    now = timezone.now()
    keys = keys_of(locked.thread)
    tools = {str(call.get("name") or "") for call in locked.tool_calls}
    rows = {
        grant.pk: grant
        for grant in _live(now)
        .filter(tool__in=tools)
        .filter(
            Q(scope=grant_rules.THREAD, key=keys[grant_rules.THREAD])
            | Q(scope=grant_rules.SUBJECT, key=keys[grant_rules.SUBJECT])
            | Q(scope=grant_rules.ASSISTANT, key=keys[grant_rules.ASSISTANT])
        )
        .exclude(key="")
        .select_related("granted_by")
    }
    grant_set = grant_rules.GrantSet(
        grant.compiled() for grant in rows.values() if _granter_may(grant, locked)
    )
    found = grant_set.match(keys, locked.tool_calls, now.timestamp(), caps)
    if not found:
        return locked, None
    uses: dict[int, int] = {}
    for compiled in found.values():
        uses[compiled.id] = uses.get(compiled.id, 0) + 1
    first = rows[min(uses)]
    try:
        with transaction.atomic():
            for grant_pk, n in sorted(uses.items()):
                counted = (
                    _live(now)
                    .filter(pk=grant_pk)
                    .filter(Q(uses_left__isnull=True) | Q(uses_left__gte=n))
                    # Not ``updated_at``: a use that leaves uses changes nothing the processes'
                    # compiled grants hold (the count is the row's, checked here).
                    .update(uses_left=F("uses_left") - n, uses=F("uses") + n)
                )
                if counted != 1:
                    raise _UsedUp
            if Grant.objects.filter(pk__in=list(uses), uses_left=0).exists():
                grants_changed()  # the last use: every process leaves it out from now on
            return locked, _decide_as_grant(locked, first, [rows[p] for p in sorted(uses)])
    except _UsedUp:
        return locked, None


def _decide_as_grant(review: Review, grant: Grant, used: list[Grant]) -> Decision:
    granter = grant.granted_by.get_username() if grant.granted_by is not None else ""
    names = ", ".join(f"#{g.pk}" for g in used)
    body = {
        **rules.approve_everything(review.kind, review.tool_calls),
        "note": f"Approved by grant {names} of {granter}",
    }
    record = decide(review, GrantActor(grant), body)
    assert isinstance(record, Decision)
    record_event(
        review.thread,
        "review_auto_decided",
        review=review,
        by="grant",
        verdict=policy_rules.APPROVE,
        decision=record.pk,
        grant=grant.pk,
        grants=[g.pk for g in used],
        granted_by=granter,
    )
    send_on_commit(
        signals.review_auto_decided,
        Review,
        review=review,
        decision=record,
        by="grant",
        rule={"grant": grant.pk, "granted_by": granter},
    )
    return record


def by_state(state: str, now: datetime.datetime) -> Q:
    """The grants in ``state`` (:attr:`Grant.State`), as a filter."""
    revoked = Q(revoked_at__isnull=False)
    used_up = Q(uses_left__isnull=False, uses_left__lte=0)
    expired = Q(expires_at__isnull=False, expires_at__lte=now)
    if state == Grant.State.REVOKED:
        return revoked
    if state == Grant.State.USED_UP:
        return ~revoked & used_up
    if state == Grant.State.EXPIRED:
        return ~revoked & ~used_up & expired
    return ~revoked & ~used_up & ~expired


# -- revoking -----------------------------------------------------------------------------------


def revoke(grant: Grant | int, user: Any, reason: str = "") -> bool:
    """Revoke a grant (it stays as a record); False when it was revoked already."""
    pk = grant.pk if isinstance(grant, Grant) else grant
    with transaction.atomic():
        locked = (
            Grant.objects.select_for_update(of=("self",))
            .select_related("thread")
            .filter(pk=pk)
            .first()
        )
        if locked is None or locked.revoked_at is not None:
            return False
        locked.revoked_at = timezone.now()
        locked.revoked_by = user if getattr(user, "pk", None) else None
        locked.revoke_reason = str(reason or "")[:500]
        locked.save(update_fields=["revoked_at", "revoked_by", "revoke_reason", "updated_at"])
        record_event(
            locked.thread,
            "grant_revoked",
            actor=user if getattr(user, "pk", None) else None,
            grant=locked.pk,
            reason=locked.revoke_reason,
        )
        grants_changed()
    return True


__all__ = [
    "GRANT_PERMISSION",
    "GrantActor",
    "GrantError",
    "apply_grant",
    "by_state",
    "caps_of",
    "decide_with_grant",
    "forget_grants",
    "give",
    "grants_changed",
    "live_grants",
    "review_mirrored",
    "revoke",
    "stamp_annotations",
]
