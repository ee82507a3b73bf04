"""Review policies enforced: which rule handles a review (when it is mirrored, and again on every
edit), and the quorum gate every decision by a person passes through.

The matching itself is pure (:mod:`nitro_assistants.policy_rules`); this module loads the enabled
rules (compiled once per change of the rules), records the handling a rule gave a review, and
counts approvals. It sits below :mod:`.mirror` and :mod:`.decisions`, which call it; decisions a
policy or a deadline makes are recorded by :mod:`.governance` through ``services.decide``.

Quorum, as documented in docs/governance.md:

- a review whose rule asks for N approvals is applied when N distinct eligible people approved
  the same content (its digest); the same person never counts twice (their second approval is
  the first one, returned again);
- a rejection (every held call rejected or answered, or the reply rejected) ends it at once;
  a decision that approves some calls and rejects others is refused on a quorum review;
- an edit is merged into the held call's full arguments and checked by type before anything
  here reads it (:func:`nitro_assistants.rules.merged_args`); it records a new version of the
  content (revision + 1, a new digest): approvals of the old content no longer count, the
  editor's counts as the first of the new one, and the rules are evaluated on the merged
  content (:func:`nitro_assistants.policy_rules.after_edit`): the handling never gets looser than
  the current one nor than the rules give the new content, who may decide never widens, and
  the editor must be someone who may decide under the handling the edit moves it under;
- a review a rule auto-rejects cannot be approved by a person (the policy's rejection stands);
- approvals by people deactivated or taken out of the group before the quorum completes lapse;
- with ``SEPARATE_DUTIES`` (``"quorum"`` by default) the person who opened the conversation or
  started the run may not approve on a quorum review (``"always"``: on every review).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.cache import caches
from django.db import DEFAULT_DB_ALIAS, router
from django.db.models import (
    Count,
    F,
    IntegerField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.utils import timezone

from nitro_assistants import policy_rules, rules
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import InteractionDecisionError, PolicyForbiddenError
from nitro_assistants.models import Approval, Policy, Review, ReviewHandling
from nitro_assistants.services import changes, commit_hooks
from nitro_assistants.services.audit import record_event
from nitro_assistants.services.enqueue import enqueue
from nitro_assistants.services.sql import writes

logger = logging.getLogger("nitro_assistants")

#: The key, in the shared cache (:func:`.changes.token_cache`), of the policy rules' stamp.
STAMP_KEY = "nitro_assistants:policies-stamp"

_compiled_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class PolicyActor:
    """Who decided when no person did: a policy rule at mirror time (``by="policy"``) or a
    deadline passing (``by="deadline"``). Not a user: nothing is recorded as ``decided_by``;
    the decision's ``reviewer_id`` names the rule (``policy:<name>``, ``deadline:<name>``)."""

    by: str
    handling: policy_rules.Handling
    pk: None = None
    is_authenticated: bool = False

    @property
    def reviewer_id(self) -> str:
        return f"{self.by}:{self.handling.rule_name or self.handling.rule_id}"

    def get_username(self) -> str:
        return self.reviewer_id


@dataclasses.dataclass(frozen=True)
class ExpiryActor:
    """Who ends a review nobody answered in time (``services.decide`` records it ``expired``):
    its rule's deadline (``rule_name``) or the pause's own ``expiresAt`` (no rule). Not a user;
    the decision's ``reviewer_id`` is ``expiry:<rule>`` (``expiry`` for the pause's own), its
    channel ``deadline``."""

    expired_at: datetime.datetime
    rule_name: str = ""
    by: str = "deadline"
    pk: None = None
    is_authenticated: bool = False

    @property
    def reviewer_id(self) -> str:
        return f"expiry:{self.rule_name}" if self.rule_name else "expiry"

    def get_username(self) -> str:
        return self.reviewer_id


# -- the rules ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Compiled:
    """The rules this process compiled, and what tells they are still current: the shared
    stamp read before they were (``token``; None: ask the database) and the aggregate of the
    rows they were compiled from (``stamp``)."""

    token: str | None
    stamp: tuple[Any, ...] | None
    rules: policy_rules.RuleSet


_compiled = _Compiled(None, None, policy_rules.RuleSet(()))


def ruleset(stamp: tuple[Any, ...] | None = None) -> policy_rules.RuleSet:
    """The enabled rules, compiled; compiled again only when a rule was added, changed or
    removed.

    With a cache every process shares (:func:`.changes.token_cache`, the live pages' change
    token's), the rules stamp there (:data:`STAMP_KEY`, a random value) tells, with no SQL: a
    process keeps the stamp it read before it read the rules, and a write of a rule (or of a
    group a rule names) deletes it after commit (:func:`rules_changed`), so every process
    compiles the rules again, in one statement, before its next review. What is written without
    a signal (a queryset ``.update()``, raw SQL, a data migration) shows when the stamp expires,
    ``LIVE_CACHE_SECONDS`` after it was set, or at once after :func:`rules_changed`. A cache that
    cannot be reached is logged and the database is asked.

    Without a shared cache (none, or a per-process one named in ``LIVE_CACHE``: a write in one
    process would not reach the others), or while the current transaction has written a rule it
    has not committed, one aggregate query tells whether the compiled rules are current:
    ``stamp``, when a read this transaction sent anyway took it (:func:`stamp_annotations`, on
    the thread's lock of a mirror), or a query of its own."""
    alias = _stamp_cache()
    if alias is None or _unsaved_writes():
        return _probed(stamp)
    try:
        token = changes.current_token(caches[alias], STAMP_KEY)
    except Exception:  # the cache's client raises its own errors (redis, pymemcache, ...)
        logger.warning("Could not read the policy rules' stamp; asking the database", exc_info=True)
        return _probed()
    kept = _compiled
    if kept.token == token:
        return kept.rules
    # Changed, or the stamp expired: compiled again (no aggregate first: one statement either
    # way, and this one also sees what the aggregate cannot, a group renamed or a field updated
    # without ``updated_at``). Read after the stamp: a write committed after that read deletes
    # it, and the next call reads again (each statement reads what was committed before it, as
    # in Django's READ COMMITTED).
    rows = list(_enabled().select_related("group", "escalate_to"))
    return _keep(
        _Compiled(token, _stamp_of(rows), policy_rules.RuleSet(r.compiled() for r in rows))
    )


def _stamp_cache() -> str | None:
    """The alias of the shared cache holding the stamp, or None."""
    alias = changes.cache_alias()
    if alias is None or changes.backend_of(alias) in changes.PER_PROCESS_BACKENDS:
        return None
    return alias


def _enabled() -> QuerySet[Policy]:
    return Policy.objects.filter(enabled=True)


def stamp_in_database() -> bool:
    """Whether :func:`ruleset` asks the database for the rules' stamp (no shared cache holds
    it): a read sent anyway can then take it (:func:`stamp_annotations`)."""
    return _stamp_cache() is None


#: The names of :func:`stamp_annotations`, in the order of the stamp's items.
STAMP_ANNOTATIONS = ("rules_count", "rules_updated_at", "rules_version")


def stamp_annotations() -> dict[str, Any]:
    """The aggregate :func:`ruleset` compares the compiled rules with, as annotations another
    read can carry (the thread's lock of a mirror, :func:`.mirror.lock_thread`): each a scalar
    subquery of the enabled rules (no row groups them, so one row, 0 and NULLs when there are
    none, as ``aggregate()`` gives). Its values, in :data:`STAMP_ANNOTATIONS`' order, are the
    ``stamp`` :func:`ruleset` takes."""
    enabled = _enabled().order_by()
    aggregates = (Count("pk"), Max("updated_at"), Max("version"))
    fields = (IntegerField(), Policy._meta.get_field("updated_at"), IntegerField())
    # Grouped by a constant, which Django leaves out of the GROUP BY: one aggregate row.
    grouped = enabled.annotate(stamp_group=Value(1)).values("stamp_group")
    return {
        name: Subquery(grouped.annotate(x=aggregate).values("x"), output_field=field)
        for name, aggregate, field in zip(STAMP_ANNOTATIONS, aggregates, fields, strict=True)
    }


def _probed(stamp: tuple[Any, ...] | None = None) -> policy_rules.RuleSet:
    """The rules, current by the database's word: one aggregate of the enabled rows (or
    ``stamp``, that aggregate read already), and the rows compiled again when it differs from
    the one they were compiled from."""
    enabled = _enabled()
    if stamp is None:
        stamp = tuple(
            enabled.aggregate(n=Count("pk"), at=Max("updated_at"), v=Max("version")).values()
        )
    kept = _compiled
    if kept.stamp == stamp:
        return kept.rules
    rows = list(enabled.select_related("group", "escalate_to"))
    return _keep(_Compiled(None, stamp, policy_rules.RuleSet(row.compiled() for row in rows)))


def _stamp_of(rows: Sequence[Policy]) -> tuple[Any, ...]:
    """What the aggregate of :func:`_probed` gives for ``rows``."""
    if not rows:
        return (0, None, None)
    return (len(rows), max(row.updated_at for row in rows), max(row.version for row in rows))


def _keep(compiled: _Compiled) -> policy_rules.RuleSet:
    global _compiled
    with _compiled_lock:
        _compiled = compiled
    return compiled.rules


def forget_rules() -> None:
    """This process compiles the rules again before it uses them next."""
    _keep(_Compiled(None, None, policy_rules.RuleSet(())))


def rules_changed(using: str = DEFAULT_DB_ALIAS) -> None:
    """A rule (or a group a rule names) was written in the current transaction: once it commits
    (at once outside one), every process compiles the rules again before its next review. The
    receivers call it on every save and delete; code that writes rules without signals (a
    queryset ``.update()``, raw SQL) calls it too. Nothing without a shared cache: there, the
    rules are checked on every use."""
    if _stamp_cache() is None:
        return
    commit_hooks.once(_forget_stamp, using=using)


def _forget_stamp() -> None:
    """Delete the shared stamp (and this process's rules). A cache that cannot be reached is
    logged, not raised: the change is committed, and the other processes see it when the stamp
    expires."""
    forget_rules()
    alias = _stamp_cache()
    if alias is None:
        return
    try:
        caches[alias].delete(STAMP_KEY)
    except Exception:  # the cache's client raises its own errors (redis, pymemcache, ...)
        logger.warning("Could not delete the policy rules' stamp", exc_info=True)


def _unsaved_writes() -> bool:
    """Whether the current transaction wrote a rule it has not committed: its rows are only its
    own to see, so the rules it reads must not be kept under the shared stamp (Django forgets
    the callbacks of a transaction or savepoint rolled back)."""
    return commit_hooks.waiting(_forget_stamp, using=router.db_for_read(Policy))


def evaluate(
    review: Review,
    *,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
    reply: Mapping[str, Any] | None = None,
    rule_set: policy_rules.RuleSet | None = None,
) -> policy_rules.Handling:
    """The handling the rules give ``review`` (or the content given instead of its own)."""
    if review.kind not in rules.REVIEW_KINDS:
        return policy_rules.DEFAULT
    found = rule_set if rule_set is not None else ruleset()
    if not len(found):
        return policy_rules.DEFAULT
    return found.handling(
        review.thread.assistant_key,
        review.kind,
        tool_calls=review.tool_calls if tool_calls is None else tool_calls,
        reply=review.reply if reply is None else reply,
    )


def shadow_verdicts(
    review: Review,
    *,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
    reply: Mapping[str, Any] | None = None,
    rule_set: policy_rules.RuleSet | None = None,
) -> dict[str, dict[str, Any]]:
    """What each shadow rule would have done to ``review`` (or to the content given instead of
    its own), keyed ``"#<rule id>"`` (:func:`shadow_key`): its handling, in brief. Empty when no
    shadow rule would have applied."""
    if review.kind not in rules.REVIEW_KINDS:
        return {}
    found = rule_set if rule_set is not None else ruleset()
    if not found.shadow_rules:
        return {}
    verdicts = found.shadow_verdicts(
        review.thread.assistant_key,
        review.kind,
        tool_calls=review.tool_calls if tool_calls is None else tool_calls,
        reply=review.reply if reply is None else reply,
    )
    return {shadow_key(verdict.rule_id): brief(verdict) for verdict in verdicts}


def shadow_key(rule_id: int | None) -> str:
    """The key of a shadow rule's verdict in ``ReviewHandling.rule["shadow"]``: ``"#12"`` (not
    ``"12"``, which the JSON lookups of SQLite read as a list index)."""
    return f"#{rule_id}"


#: The keys of a handling a shadow verdict keeps.
BRIEF_KEYS = ("rule_id", "rule_name", "rule_version", "action", "approvals", "group", "group_id")


def brief(handling: policy_rules.Handling) -> dict[str, Any]:
    """A shadow verdict as recorded: the rule, its version and what it would have done."""
    # Read field by field: ``as_dict`` deep-copies every field, a replay's main cost.
    kept = {key: getattr(handling, key) for key in BRIEF_KEYS}
    if handling.unsure:
        kept["unsure"] = handling.unsure
    return kept


def handling_of(review: Review) -> policy_rules.Handling:
    try:
        return review.handling.handling
    except ReviewHandling.DoesNotExist:
        return policy_rules.DEFAULT


def _due(start: datetime.datetime, seconds: float | None) -> datetime.datetime | None:
    return start + datetime.timedelta(seconds=seconds) if seconds is not None else None


def give_handling(
    review: Review,
    handling: policy_rules.Handling,
    *,
    actor: Any = None,
    why: str = "mirrored",
    new: bool = False,
    shadow: Mapping[str, Any] | None = None,
) -> ReviewHandling | None:
    """Record that ``handling`` applies to ``review`` (the review's lock held, or a review just
    created: ``new``, which has no handling row yet, so it is inserted in one statement rather
    than looked up and created in savepoints); an auto-decision is enqueued
    (``nitro_assistants.apply_policy``) after commit.

    ``shadow``: what the shadow rules would have done (:func:`shadow_verdicts`), kept in the
    row's ``rule`` JSON (``"shadow"``) and on the event; a review no enforced rule matched gets
    a row with the default handling to keep them (it asks what no row asks: one approval, by
    anyone who may decide). On an edit (``new`` False) the verdicts the review was mirrored
    with are kept: agreement is measured on what a rule would have done when it arrived."""
    if not new and shadow is None:
        row = handling_row(review)
        shadow = (row.rule or {}).get("shadow") if row is not None else None
    if handling.rule_id is None and not shadow:
        return None
    now = timezone.now()
    rule = handling.as_dict()
    if shadow:
        rule["shadow"] = dict(shadow)
    fields = {
        "policy_id": handling.rule_id,
        "rule": rule,
        "action": handling.action,
        "approvals_required": handling.approvals,
        "group_id": handling.group_id,
        "priority": handling.priority,
        "due_at": _due(now, handling.deadline),
        "stage": ReviewHandling.Stage.WAITING,
        "escalated_at": None,
    }
    expires = _due(now, handling.deadline)
    if (
        handling.on_deadline == policy_rules.EXPIRE
        and expires is not None
        and (review.expires_at is None or expires < review.expires_at)
    ):
        # The rule's deadline expires the review: the earlier of it and the pause's own.
        review.expires_at = expires
        writes.save(review, ["expires_at"])  # merged into the new review's queued insert
    if new:
        # Queued: it rides on the batch's audit statement (the review's row is new).
        row = writes.insert(ReviewHandling(review=review, **fields))
    else:
        row, _ = ReviewHandling.objects.update_or_create(review=review, defaults=fields)
    review.handling = row
    extra: dict[str, Any] = {"unsure": handling.unsure} if handling.unsure else {}
    if shadow and new:
        extra["shadow"] = list(shadow.values())
    if handling.rule_id is None:
        # Only shadow rules would have applied: what they would have done, and nothing acts.
        record_event(review.thread, "policy_shadowed", review=review, actor=actor, **extra)
        return row
    record_event(
        review.thread,
        "policy_matched",
        review=review,
        actor=actor,
        rule=handling.rule_name,
        rule_id=handling.rule_id,
        rule_version=handling.rule_version,
        action=handling.action,
        approvals=handling.approvals,
        group=handling.group,
        why=why,
        **extra,
    )
    if handling.action in (policy_rules.AUTO_APPROVE, policy_rules.AUTO_REJECT):
        enqueue("nitro_assistants.apply_policy", review.pk)
    return row


def review_mirrored(
    review: Review, rule_set: policy_rules.RuleSet | None = None
) -> ReviewHandling | None:
    """A review was just mirrored (created in the caller's transaction): the rules decide how
    it is handled (``rule_set``: the rules, read by the caller already), and what the shadow
    rules would have done is recorded with it (no statement of its own: it rides on the
    handling's row and event)."""
    found = rule_set
    if found is None and review.kind in rules.REVIEW_KINDS:
        found = ruleset()
    return give_handling(
        review,
        evaluate(review, rule_set=found),
        new=True,
        shadow=shadow_verdicts(review, rule_set=found),
    )


# -- who may approve, and the quorum -----------------------------------------------------------


def _person(user: Any) -> bool:
    return bool(getattr(user, "pk", None)) and bool(getattr(user, "is_authenticated", False))


def in_group(user: Any, group_id: int | None, *, known: bool | None = None) -> bool:
    """Whether ``user`` may act for the group (its member, or a superuser); ``known``: the
    membership already read (``services.decide`` reads it with the review it locks)."""
    if group_id is None or getattr(user, "is_superuser", False):
        return True
    if known is not None:
        return known
    return bool(user.groups.filter(pk=group_id).exists())


def handling_row(review: Review) -> ReviewHandling | None:
    try:
        return review.handling
    except ReviewHandling.DoesNotExist:
        return None


def group_allows(user: Any, review: Review) -> bool:
    """Whether the review's rule lets ``user`` decide it: a member of the rule's group (after
    an escalation, the group it escalated to), a superuser, or anyone when the rule names no
    group. Part of :func:`nitro_assistants.services.may_decide`, which every way of ending a
    review asks (decide, dismiss, bulk actions, the API)."""
    if review.kind not in rules.REVIEW_KINDS:
        return True
    row = handling_row(review)
    if row is None or row.group_id is None:
        return True
    return in_group(user, row.group_id, known=getattr(review, "reviewer_in_group", None))


def group_refusal(review: Review) -> PolicyForbiddenError:
    row = handling_row(review)
    name = row.group.name if row is not None and row.group is not None else ""
    return PolicyForbiddenError(f"Only members of {name} may decide this review")


def current_handling(row: ReviewHandling | None) -> policy_rules.Handling:
    """The handling a review is under now: its rule's, with what changed since on its row (an
    escalation's group)."""
    if row is None:
        return policy_rules.DEFAULT
    return dataclasses.replace(
        row.handling,
        action=row.action,
        approvals=row.approvals_required,
        group_id=row.group_id,
        group=row.group.name if row.group is not None else "",
    )


def separated(review: Review, required: int) -> bool:
    """Whether the run's starter and the conversation's opener are kept from approving."""
    setting = app_settings.SEPARATE_DUTIES
    return setting == "always" or (setting == "quorum" and required > 1)


def own_action(user: Any, review: Review) -> bool:
    """Whether ``user`` opened the conversation or started the run ``review`` paused."""
    starters = {review.thread.opened_by_id}
    if review.run_id is not None and review.run is not None:
        starters.add(review.run.requested_by_id)
    return user.pk in starters


def counted_approvals() -> QuerySet[Approval]:
    """Approvals that count: of their review's content as it is now, by active people of the
    review's group when it has one (after an escalation, the new group's) or superusers: an
    approver deactivated or taken out of the group before the quorum completes no longer
    counts (:func:`lapsed_approvals` says whose lapsed). Filter it by
    review; count distinct users (a superuser in several groups is joined once per group)."""
    return Approval.objects.filter(digest=F("review__digest"), user__is_active=True).filter(
        Q(review__handling__group__isnull=True)
        | Q(user__is_superuser=True)
        | Q(user__groups=F("review__handling__group"))
    )


def approval_count() -> Subquery:
    """The number of approvals that count, as a subquery on the review queue's rows."""
    return Subquery(
        counted_approvals()
        .filter(review=OuterRef("pk"))
        .values("review")
        .annotate(n=Count("user", distinct=True))
        .values("n")[:1],
        output_field=IntegerField(),
    )


def _counted(review: Review) -> QuerySet[Approval]:
    # One approval per person and content (a constraint): the subquery only drops duplicates.
    return Approval.objects.filter(pk__in=counted_approvals().filter(review=review).values("pk"))


#: The permission deciding a review needs (``services.may_decide``).
DECIDE_PERMISSION = "nitro_assistants.decide_review"


def approved_by(review: Review) -> list[Approval]:
    """The approvals that count, oldest first: :func:`counted_approvals` of people who still
    hold the permission to decide (a revoked permission lapses an approval, as a deactivation
    or leaving the group does)."""
    return [
        approval
        for approval in _counted(review).select_related("user").order_by("at", "pk")
        if approval.user.has_perm(DECIDE_PERMISSION)
    ]


def lapsed_approvals(review: Review) -> list[tuple[Approval, str]]:
    """Approvals of the review's content as it is now that no longer count, oldest first, each
    with why: its approver was deactivated, lost the permission to decide, or is no longer in
    the group deciding it."""
    counted = {approval.pk for approval in approved_by(review)}
    try:
        group = review.handling.group
    except ReviewHandling.DoesNotExist:
        group = None
    lapsed = []
    for approval in (
        Approval.objects.filter(review=review, digest=review.digest)
        .exclude(pk__in=counted)
        .select_related("user")
        .order_by("at", "pk")
    ):
        if not approval.user.is_active:
            why = "deactivated"
        elif not approval.user.has_perm(DECIDE_PERMISSION):
            why = "may no longer decide"
        elif group is not None:
            why = f"no longer in {group.name}"
        else:
            why = "no longer counts"
        lapsed.append((approval, why))
    return lapsed


def waiting_for(review: Review) -> str:
    """``"1 of 2 approvals · waiting for someone in Finance"``; blank when one approval is all a
    review needs."""
    try:
        row = review.handling
    except ReviewHandling.DoesNotExist:
        return ""
    if row.approvals_required <= 1 and row.group_id is None:
        return ""
    count = len(approved_by(review))
    return policy_rules.progress(count, row.approvals_required, row.group.name if row.group else "")


def _actions(cleaned: Mapping[str, Any]) -> list[str]:
    if cleaned.get("reply"):
        return [str(cleaned["reply"]["action"])]
    return [str(item["action"]) for item in cleaned.get("tool_calls") or []]


RUNS = frozenset({"approve", "edit"})


def _original(review: Review) -> dict[str, Any]:
    """What the assistant held before any quorum edit (what the server will be told about)."""
    kept = review.payload.get("original")
    if isinstance(kept, dict):
        return kept
    return {"tool_calls": review.tool_calls, "reply": review.reply}


def _edited_content(review: Review, cleaned: Mapping[str, Any]) -> dict[str, Any]:
    """The review's content with the edits of ``cleaned`` written in."""
    if cleaned.get("reply"):
        reply = dict(review.reply or {})
        if cleaned["reply"]["action"] == "edit":
            reply["content"] = cleaned["reply"]["content"]
        return {"tool_calls": review.tool_calls, "reply": reply}
    by_id = {str(item["id"]): item for item in cleaned.get("tool_calls") or []}
    calls = []
    for call in review.tool_calls:
        item = by_id.get(str(call.get("id")), {})
        calls.append(
            {**call, "args": dict(item["args"])} if item.get("action") == "edit" else dict(call)
        )
    return {"tool_calls": calls, "reply": review.reply}


def final_decision(review: Review, note: str) -> dict[str, Any]:
    """The decision sent once quorum is reached: each call approved as the assistant held it, or
    edited to the content the approvers approved."""
    original = _original(review)
    if review.kind == rules.REPLY:
        content = (review.reply or {}).get("content")
        if content != (original.get("reply") or {}).get("content"):
            return {
                "reply": {"action": "edit", "content": content},
                "tool_calls": None,
                "note": note,
            }
        return {"reply": {"action": "approve"}, "tool_calls": None, "note": note}
    held_calls = {str(c.get("id")): c for c in original.get("tool_calls") or []}
    items = []
    for call in review.tool_calls:
        before = held_calls.get(str(call.get("id")), call)
        if call.get("args") != before.get("args"):
            items.append({"id": call["id"], "action": "edit", "args": dict(call["args"])})
        else:
            items.append({"id": call["id"], "action": "approve"})
    return {"reply": None, "tool_calls": items, "note": note}


def as_shown(review: Review, cleaned: Mapping[str, Any]) -> dict[str, Any]:
    """``cleaned`` with each approval of content an earlier edit rewrote (a quorum's next
    revision) sent as that edit: an approval approves what the review shows, and the server
    still holds the assistant's original call. A deadline's or a policy's approval of an edited
    review runs the edited call, as the quorum's would."""
    if "original" not in review.payload or review.kind not in rules.REVIEW_KINDS:
        return dict(cleaned)
    original = _original(review)
    if cleaned.get("reply") is not None:
        content = (review.reply or {}).get("content")
        if cleaned["reply"].get("action") == "approve" and content != (
            original.get("reply") or {}
        ).get("content"):
            return {**cleaned, "reply": {"action": "edit", "content": content}}
        return dict(cleaned)
    held_calls = {str(c.get("id")): c for c in original.get("tool_calls") or []}
    now = {str(c.get("id")): c for c in review.tool_calls}
    items = []
    for item in cleaned.get("tool_calls") or []:
        call = now.get(str(item.get("id")), {})
        before = held_calls.get(str(item.get("id")), call)
        if item.get("action") == "approve" and call.get("args") != before.get("args"):
            item = {"id": item["id"], "action": "edit", "args": dict(call["args"])}
        items.append(item)
    return {**cleaned, "tool_calls": items}


@dataclasses.dataclass
class Verdict:
    """What the review's handling makes of a person's decision (:func:`gate`): a decision to
    record now (``decision``, by ``actor`` when not the person), or an ``approval`` that waits
    for others."""

    decision: dict[str, Any] | None = None
    actor: Any = None
    approval: Approval | None = None


def _rewrite(
    review: Review,
    content: Mapping[str, Any],
    user: Any,
    shadow: Mapping[str, Any] | None = None,
) -> None:
    """Store edited content as the review's new version (revision + 1, its digest); ``shadow``:
    what the shadow rules would make of it, kept on the ``review_edited`` event."""
    payload = {**review.payload, "original": _original(review), **content}
    review.payload = payload
    review.revision += 1
    review.digest = rules.review_digest(review.kind, payload)
    review.save(update_fields=["payload", "revision", "digest"])
    extra: dict[str, Any] = {"shadow": list(shadow.values())} if shadow else {}
    record_event(
        review.thread,
        "review_edited",
        review=review,
        actor=user,
        revision=review.revision,
        digest=review.digest,
        **extra,
    )


@dataclasses.dataclass
class _DryRun:
    """What :func:`gate` will do with a decision, found without writing anything."""

    #: The decision goes through as it is, and nothing else is written.
    plain: bool
    required: int = 1
    edited: bool = False
    content: dict[str, Any] | None = None
    #: The handling an edit moves the review under, when it differs from the review's.
    after: policy_rules.Handling | None = None
    #: What the shadow rules would make of the edited content.
    shadow: dict[str, Any] | None = None


def _dry_run(review: Review, user: Any, cleaned: Mapping[str, Any], via: Any) -> _DryRun:
    """The checks of :func:`gate` (raising its errors) and what it will do, without writing.

    ``cleaned`` holds edits already merged into the held calls' full arguments and checked by
    type (:func:`nitro_assistants.rules.merged_args`): the rules read the merged call."""
    if not _person(user) or review.kind not in rules.REVIEW_KINDS:
        return _DryRun(plain=True)
    row = handling_row(review)
    current = current_handling(row)
    required = current.approvals
    if via is not None and not group_allows(user, review):
        raise group_refusal(review)
    actions = _actions(cleaned)
    runs = [a for a in actions if a in RUNS]
    if not runs:  # a rejection ends it, whatever the quorum
        return _DryRun(plain=True)
    if current.action == policy_rules.AUTO_REJECT:
        raise PolicyForbiddenError(
            f"Policy rule {current.rule_name or current.rule_id} rejects this review: "
            f"{current.reason or 'it cannot be approved'}"
        )
    after: policy_rules.Handling | None = None
    content: dict[str, Any] | None = None
    if "edit" in runs:
        content = _edited_content(review, cleaned)
        found = ruleset()
        fresh = evaluate(
            review, tool_calls=content["tool_calls"], reply=content["reply"], rule_set=found
        )
        shadow = shadow_verdicts(
            review, tool_calls=content["tool_calls"], reply=content["reply"], rule_set=found
        )
        try:
            moved = policy_rules.after_edit(current, fresh)
        except policy_rules.EditConflictError as exc:
            raise PolicyForbiddenError(str(exc)) from None
        if not policy_rules.same_handling(moved, current):
            after = moved
            required = moved.approvals
            # Who may decide it under the rule the edit moves it under, asked again.
            if moved.action == policy_rules.REVIEW and not in_group(user, moved.group_id):
                raise PolicyForbiddenError(
                    f"This edit puts the review under rule {moved.rule_name or moved.rule_id!r}: "
                    f"only members of {moved.group} may decide it"
                )
    if separated(review, required) and own_action(user, review):
        raise PolicyForbiddenError(
            "You started this conversation: someone else must approve its assistant's actions"
        )
    if len(runs) != len(actions) and required > 1:
        raise InteractionDecisionError(
            f"This review needs {required} approvals: approve (or edit) every call, or reject "
            "them all",
            field="tool_calls",
        )
    if content is not None:
        return _DryRun(
            plain=after is None and required <= 1,
            required=required,
            edited=True,
            content=content,
            after=after,
            shadow=shadow,
        )
    return _DryRun(plain=required <= 1, required=required)


def gate(review: Review, user: Any, cleaned: Mapping[str, Any], via: Any) -> Verdict:
    """Apply the review's handling to a person's decision (the review's row lock held).

    Code that is not a person (a policy, a deadline, the host project's own code with no user)
    passes through: it brings its own authority. Raises ``PolicyForbiddenError`` (not in the
    rule's group; one's own assistant's action) and ``InteractionDecisionError`` (a mixed
    decision on a quorum review)."""
    dry_run = _dry_run(review, user, cleaned, via)
    if dry_run.plain:
        return Verdict(decision=as_shown(review, cleaned))
    required = dry_run.required
    if dry_run.edited:
        assert dry_run.content is not None
        after = dry_run.after
        if after is not None:
            if after.action == policy_rules.AUTO_REJECT:
                give_handling(review, after, actor=user, why="edited")
                actor = PolicyActor("policy", after)
                reason = after.reason or f"Rejected by policy rule {after.rule_name}"
                decision = rules.reject_everything(review.kind, review.tool_calls, reason)
                return Verdict(
                    decision={"reply": None, "tool_calls": None, **decision}, actor=actor
                )
            give_handling(review, after, actor=user, why="edited")
            required = after.approvals
            if required <= 1:
                return Verdict(decision=dict(cleaned))
        _rewrite(review, dry_run.content, user, dry_run.shadow)
    approval, created = Approval.objects.get_or_create(
        review=review,
        user=user,
        digest=review.digest,
        defaults={"revision": review.revision, "edited": dry_run.edited, "at": timezone.now()},
    )
    if not created:  # the same person never counts twice
        return Verdict(approval=approval)
    counted = approved_by(review)
    # What this approver said was shown (services.previews): the decision keeps only the last's.
    seen = {"shown": cleaned["shown"]} if cleaned.get("shown") is not None else {}
    record_event(
        review.thread,
        "review_approved",
        review=review,
        actor=user,
        revision=review.revision,
        approvals=len(counted),
        required=required,
        **seen,
    )
    if len(counted) < required:
        return Verdict(approval=approval)
    names = ", ".join(a.user.get_username() for a in counted)
    note = str(cleaned.get("note") or "").strip()
    note = f"{note}\n\nApproved by {names}".strip() if note else f"Approved by {names}"
    return Verdict(decision=final_decision(review, note[: rules.MAX_NOTE]))


__all__ = [
    "PolicyActor",
    "Verdict",
    "approved_by",
    "current_handling",
    "evaluate",
    "gate",
    "give_handling",
    "group_allows",
    "handling_of",
    "lapsed_approvals",
    "review_mirrored",
    "ruleset",
    "shadow_key",
    "shadow_verdicts",
    "waiting_for",
]
