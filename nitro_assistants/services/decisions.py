"""Deciding reviews: who may (:func:`may_decide`, the question every way a review ends asks),
what a decision may hold (:func:`validate_decision`), and recording it (:func:`decide`, the one
entry for the admin, bulk actions, the JSON API and the shell) or ending a pause unanswered
(:func:`dismiss`). A recorded decision is applied on the server by :mod:`.resumes`, enqueued
after commit."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from nitro_assistants import redacting, rules
from nitro_assistants.client.results import (
    REPLY_DECISIONS,
    Pause,
    PendingReview,
    ReplyDraft,
)
from nitro_assistants.exceptions import (
    InteractionDecisionError,
    InteractionForbiddenError,
    NitroAssistantsError,
    ReviewNotPendingError,
    ReviewSupersededError,
    ThreadResumptionError,
)
from nitro_assistants.models import Approval, Decision, Review, Run, Thread
from nitro_assistants.services import clients, policy_enforcement, previews, stops
from nitro_assistants.services.audit import events_batched
from nitro_assistants.services.enqueue import enqueue
from nitro_assistants.services.interactions import decide_interaction, username
from nitro_assistants.services.lifecycle import supersede, transition
from nitro_assistants.services.policy_enforcement import ExpiryActor, gate
from nitro_assistants.services.sql import ids, reads, writes

#: Who is deciding: through the admin, through the JSON API, from a Slack card, by replying to a
#: notification e-mail, or code of the host project (the shell, a policy), which brings its own
#: authority. Slack and e-mail speak for a person as the admin does (the same permission and
#: group), after their own proof of who it is (services/slack.py, services/inbound_mail.py).
Channel = Literal["admin", "api", "slack", "email"] | None
#: The channels where a staff person decides with the ``decide_review`` permission, as in the admin.
STAFF_CHANNELS = ("admin", "slack", "email")


def channel_of(actor: Any, via: Channel) -> str:
    """What a decision records as its channel (``Decision.channel`` and its audit event): a
    policy rule's or a deadline's own (``actor.by``), else ``via``; empty for the host's code."""
    by = getattr(actor, "by", None)
    if isinstance(by, str) and by in Decision.Channel.values:
        return by
    return via or ""


DECIDE_PERMISSION = policy_enforcement.DECIDE_PERMISSION


def pending_review_of(review: Review) -> PendingReview:
    """The client's view of what ``review`` holds, so local validation is the client's own."""
    if review.kind in rules.DIALECT_KINDS:
        pauses = [
            Pause(**{k: v for k, v in p.items() if k in Pause.__dataclass_fields__})
            for p in review.payload.get("pauses") or []
            if isinstance(p, dict)
        ]
        return PendingReview(
            kind=review.kind,
            interrupt_id=review.interrupt_id,
            interrupt_ids=list(review.interrupt_ids),
            mode="interrupt",
            pauses=pauses,
            error=review.payload.get("error"),
            problem=review.payload.get("problem"),
        )
    reply = review.reply
    calls = review.tool_calls
    return PendingReview(
        kind=review.kind,
        interrupt_id=review.interrupt_id,
        interrupt_ids=list(review.interrupt_ids),
        tool_calls=calls,
        reply=ReplyDraft(
            content=str(reply.get("content") or ""),
            allowed_decisions=list(reply.get("allowed_decisions") or REPLY_DECISIONS),
            description=reply.get("description"),
            interrupt_id=reply.get("interrupt_id"),
            message_id=reply.get("message_id"),
        )
        if reply is not None
        else None,
        interaction=review.payload.get("interaction"),
        mode="per_call" if any(c.get("interrupt_id") for c in calls) else "batched",
    )


def validate_decision(review: Review, decision: Mapping[str, Any]) -> dict[str, Any]:
    """Check a tool-call or reply ``decision`` against ``review`` with the client's own rules,
    before anything is stored (docs/protocol.md §4: a resume the graph refuses leaves a batched
    thread stuck). Returns the cleaned decision; raises ``ThreadResumptionError``."""
    if review.kind not in (*rules.REVIEW_KINDS, *rules.DIALECT_KINDS):
        raise ThreadResumptionError(
            f"Deciding a {review.get_kind_display()} review is not supported here."
        )
    return rules.validate_review_decision(
        pending_review_of(review), decision, review.payload.get("args_schemas")
    )


def _state_of(review: Review) -> rules.ReviewState:
    """``review`` as :func:`nitro_assistants.rules.check_decision` checks a decision on it."""
    return rules.ReviewState(
        pk=review.pk,
        pending=pending_review_of(review),
        status=review.status,
        status_label=str(review.get_status_display()),
        revision=review.revision,
        digest=review.digest,
        schemas=review.payload.get("args_schemas"),
        review=review,
    )


def may_decide(user: Any, review: Review, via: Channel) -> bool:
    """Who may decide ``review``, asked by every way a review ends (decide, dismiss, bulk
    actions, the API): anyone with ``decide_review`` (in the admin, or over the API for tool
    calls and replies) who is in the group of the review's policy rule, if it names one (a
    superuser is in every group); a typed interaction also by the person who opened its
    session, and over the API only by them. Code of the host project (``via=None``) brings its
    own authority."""
    if via is None:
        return True
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return False
    opener = review.thread.opened_by_id is not None and review.thread.opened_by_id == user.pk
    if review.kind in rules.INTERACTION_KINDS:
        return opener or (via in STAFF_CHANNELS and user.has_perm(DECIDE_PERMISSION))
    return bool(user.has_perm(DECIDE_PERMISSION)) and policy_enforcement.group_allows(user, review)


def decidable_by(user: Any, via: Channel) -> Q:
    """:func:`may_decide` as a query filter on reviews: the ones ``user`` may decide through
    ``via`` (a queue to list them). The same rule, so a listed review is one they may decide."""
    if via is None:
        return ~Q(pk__in=[])
    if not getattr(user, "is_authenticated", False):
        return Q(pk__in=[])
    opened = Q(kind__in=rules.INTERACTION_KINDS, thread__opened_by_id=user.pk)
    if not user.has_perm(DECIDE_PERMISSION):
        return opened
    reviews = ~Q(kind__in=rules.INTERACTION_KINDS)
    if not user.is_superuser:  # the policy rule's group, as policy_enforcement.group_allows asks
        reviews &= Q(handling__group__isnull=True) | Q(handling__group__in=user.groups.values("pk"))
    if via in STAFF_CHANNELS:
        return Q(kind__in=rules.INTERACTION_KINDS) | reviews
    return opened | reviews


def refusal(review: Review, via: Channel, user: Any = None) -> NitroAssistantsError:
    """Why :func:`may_decide` said no: the policy rule's group (a person with the permission
    outside it), or the permission."""
    if (
        user is not None
        and review.kind in rules.REVIEW_KINDS
        and getattr(user, "is_authenticated", False)
        and getattr(user, "is_active", True)
        and user.has_perm(DECIDE_PERMISSION)
    ):
        return policy_enforcement.group_refusal(review)
    if review.kind in rules.INTERACTION_KINDS and via == "api":
        return InteractionForbiddenError(
            "Only the person who opened this session may decide its interactions"
        )
    return InteractionForbiddenError(
        "Deciding reviews needs the nitro_assistants.decide_review permission"
    )


def _interaction_state_of(review: Review) -> rules.InteractionState:
    """``review`` as :func:`nitro_assistants.rules.check_interaction_decision` checks a decision
    on it."""
    return rules.InteractionState(
        interaction_id=review.interaction_id,
        kind=review.kind,
        status=review.status,
        revision=review.revision,
        digest=review.digest,
        interrupt_id=review.interrupt_id,
        interaction=review.payload.get("interaction") or {},
        problems=review.payload.get("problems") or [],
    )


def _latest_interaction_decision(review: Review, user: Any) -> Decision | None:
    """The latest decision ``user`` recorded on ``review``'s interaction (any revision)."""
    if not getattr(user, "pk", None):
        return None
    return (
        Decision.objects.filter(
            review__thread_id=review.thread_id,
            review__interaction_id=review.interaction_id,
            decided_by_id=user.pk,
        )
        .select_related("review")
        .order_by("-pk")
        .first()
    )


def _as_replayable(recorded: Decision | None) -> dict[str, Any] | None:
    """A recorded interaction decision as a replay of it is compared: its value, and the
    revisions it was made on (an edit became a revision of its own: the one shown is before)."""
    if recorded is None:
        return None
    revisions = {recorded.review.revision}
    if recorded.review.origin == "user":
        revisions.add(recorded.review.revision - 1)
    return {"decision": (recorded.answer or {}).get("decision"), "revisions": revisions}


def _replaced(review: Review) -> bool:
    """Whether a later revision of ``review``'s interaction exists."""
    return Review.objects.filter(
        thread_id=review.thread_id,
        interaction_id=review.interaction_id,
        revision__gt=review.revision,
    ).exists()


def _recorded_by(review: Review, user: Any) -> dict[str, Any] | None:
    """The decision ``user`` recorded on ``review`` (read with it), as
    :func:`nitro_assistants.rules.check_decision` compares a replay; None when there is none,
    or it is someone else's."""
    if not getattr(user, "pk", None):
        return None
    try:
        recorded = review.decision
    except Decision.DoesNotExist:
        return None
    if recorded.decided_by_id != user.pk:
        return None
    answers = (recorded.answer or {}).get("answers") if review.kind in rules.DIALECT_KINDS else None
    return {"reply": recorded.reply, "tool_calls": recorded.tool_calls, "answers": answers}


def decide(
    review: Review | int,
    user: Any,
    decision: Mapping[str, Any],
    *,
    via: Channel = None,
) -> Decision | Approval:
    """Record a decision on a review and enqueue its resume after commit: the only way a
    decision is recorded, for every kind and from every path.

    ``decision`` names the ``revision`` and ``digest`` of the review as it was shown (code that
    passes the ``Review`` it read may leave them out: the instance's are used), plus, for held
    tool calls, ``tool_calls: [{"id", "action", "args"?, "message"?}]``; for a reply,
    ``reply: {"action", "content"?, "message"?}``; for a typed interaction, the decide API's
    body (``{"decision", ...}``, docs/protocol.md §8); and an optional ``note``.

    The same person sending the same decision on the same revision again gets the decision
    already recorded (nothing is recorded twice). A review a policy rule gave a quorum returns
    the person's :class:`~nitro_assistants.models.Approval` until enough people approved
    (:mod:`nitro_assistants.services.policy_enforcement`). Raises ``ReviewNotPendingError`` or
    ``InteractionConflictError`` (stale: decided by someone else, or content changed since it
    was shown), ``InteractionForbiddenError`` (``via`` says who may decide) and
    ``ThreadResumptionError`` (the decision does not fit); nothing is stored then.
    """
    pk = review.pk if isinstance(review, Review) else review
    shown = review if isinstance(review, Review) else None
    if not isinstance(decision, Mapping):
        raise InteractionDecisionError("The decision must be an object")
    if redacting.current() and redacting.holds_redaction(dict(decision)):
        # What a reviewer was shown redacted, sent back as an edit, would replace the real
        # value with the mark: the reviewer reveals it first (or writes the whole value).
        raise ThreadResumptionError(
            "The decision holds a redacted value ([redacted …]): reveal the review to edit it, "
            "or replace the whole value."
        )
    with transaction.atomic(), events_batched():
        locked = _locked_for_decision(pk, user)
        if not may_decide(user, locked, via):
            raise refusal(locked, via, user)
        stops.check_review(locked)  # frozen by a stop: refused, whoever decides
        if isinstance(user, ExpiryActor):  # nobody answered in time: the assistant is told
            return _expire(locked, user)
        if locked.kind in rules.INTERACTION_KINDS:
            recorded = functools.cache(lambda: _latest_interaction_decision(locked, user))
            answer = rules.check_interaction_decision(
                _interaction_state_of(locked),
                decision,
                shown=(shown.revision, shown.digest) if shown is not None else None,
                recorded=lambda: _as_replayable(recorded()),
                replaced=lambda: _replaced(locked),
            )
            if answer.replay:
                replayed = recorded()
                assert replayed is not None
                return replayed
            return decide_interaction(locked, user, answer.cleaned, channel=channel_of(user, via))
        checked = _checked(locked, user, decision, shown)
        if isinstance(checked, Decision):
            return checked
        # No approval of a part its rule names that was collapsed or redacted, not opened.
        seen = previews.check(locked, user, checked, via)
        verdict = gate(locked, user, checked, via)  # the policy rules: quorum, groups, edits
        if verdict.approval is not None:
            return verdict.approval
        assert verdict.decision is not None
        actor = verdict.actor or user
        return _record(
            locked,
            actor,
            verdict.decision,
            channel_of(actor, via),
            shown=seen if verdict.actor is None else None,
        )


def _checked(
    review: Review, user: Any, decision: Mapping[str, Any], shown: Review | None
) -> Decision | dict[str, Any]:
    """A review decision (not an interaction's) checked against ``review`` as read, in one call
    into the rules (:func:`nitro_assistants.rules.check_decision`): the same person's same
    decision already recorded (returned), or the decision cleaned."""
    checked = rules.check_decision(
        _state_of(review),
        decision,
        shown=(shown.revision, shown.digest) if shown is not None else None,
        recorded=_recorded_by(review, user),
    )
    if checked.replay:
        return review.decision
    return checked.cleaned


def _locked_for_decision(pk: Any, user: Any) -> Review:
    """The review, locked, with what deciding it reads in the same statement: its thread, its
    decision (a replay), its policy handling and whether ``user`` is in the handling's group."""
    through = _groups_through(user)
    if getattr(user, "pk", None) and through is not None:
        return _deciding_read(through).get(pk, user.pk)
    return _DECIDING.get(pk)


def _groups_through(user: Any) -> Any:
    """The user model's table of group memberships (``groups.through``), None without one."""
    return getattr(getattr(type(user), "groups", None), "through", None)


def _deciding_reviews() -> QuerySet[Review]:
    reviews = (
        Review.objects.select_related("thread", "decision", "handling__group")
        .select_for_update(of=("self",), no_key=True)
        # Whether a stop may freeze it, in the same statement (stops.check_review).
        .annotate(**{stops.SUSPECTED: stops.suspected_for_review()})
    )
    # The id the decision will have (:data:`DECISION_ID`) on PostgreSQL: inserted with the
    # decision's events then, not in a statement of its own. Unused (a replay, an approval, an
    # error), it is a gap in the ids.
    next_id = ids.next_id(Decision)
    if next_id is not None:
        reviews = reviews.annotate(**{DECISION_ID: next_id})
    return reviews


#: The annotation of the review :func:`_locked_for_decision` reads on PostgreSQL: an id taken
#: from the decisions' sequence for the decision :func:`_record` may insert.
DECISION_ID = "next_decision_id"


#: The read of :func:`_locked_for_decision`, compiled once (:mod:`.sql.reads`, issue 21).
_DECIDING = reads.Read(_deciding_reviews)


@functools.cache
def _deciding_read(through: type[Any]) -> reads.Read[Review]:
    """:data:`_DECIDING` with ``reviewer_in_group``: whether the user (the one parameter) is in
    the group of the review's handling, by the user model's groups table ``through``."""

    def build(user_pk: Any) -> QuerySet[Review]:
        member = through.objects.filter(user_id=user_pk, group_id=OuterRef("handling__group_id"))
        return _deciding_reviews().annotate(reviewer_in_group=Exists(member))

    return reads.Read(build, params=[through._meta.get_field("user")])


def dismiss(review: Review | int, user: Any, *, via: Channel = None) -> Review:
    """End a review's pause on the server without answering it (Agent Inbox's "ignore thread":
    a state update to ``__end__``, docs/protocol.md §9) and record it: ``dismissed``, audited
    (``review_dismissed``), ``review_superseded`` with the reason ``"dismissed"``. Any pending
    review, and an ``inbox``/``interrupt`` review failed because the graph is stuck on it.

    Needs the permission to decide (``decide_review``, whatever the kind). Raises
    ``InteractionForbiddenError``, ``ReviewNotPendingError``; a pause the thread moved past
    supersedes the review (``ReviewSupersededError`` is raised, nothing else changes).
    """
    pk = review.pk if isinstance(review, Review) else review
    with transaction.atomic(), events_batched():
        locked = (
            Review.objects.select_for_update(of=("self",), no_key=True)
            .select_related("thread", "handling__group")
            .get(pk=pk)
        )
        # The same question as every other way a review ends (may_decide), and the permission
        # to decide whatever the kind (a dismissal answers nothing, so the opener of an
        # interaction's session does not get it).
        if via is not None and not (
            getattr(user, "is_authenticated", False) and user.has_perm(DECIDE_PERMISSION)
        ):
            raise InteractionForbiddenError(
                "Dismissing a pause needs the nitro_assistants.decide_review permission"
            )
        if not may_decide(user, locked, via):
            raise refusal(locked, via, user)
        stops.check_review(locked)
        if not rules.may_move(locked.kind, locked.status, rules.DISMISSED):
            raise _not_pending(locked)
        thread = locked.thread
        assistant = clients.assistant_for(thread.assistant_key)
        try:
            assistant.dismiss(thread_id=str(thread.thread_id), interrupt_ids=locked.interrupt_ids)
        except ReviewSupersededError:
            supersede(locked, reason="stale", actor=user)
            raise
        transition(
            locked,
            rules.DISMISSED,
            actor=user,
            reason="dismissed",
            signal_kwargs={"reason": "dismissed"},
        )
        Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.IDLE)
    return locked


def _not_pending(review: Review) -> ReviewNotPendingError:
    return rules.not_pending(
        review.pk, str(review.get_status_display()), review, status=review.status
    )


def _expire(review: Review, actor: ExpiryActor) -> Decision:
    """Record that nobody answered ``review`` in time (its row lock held): a decision by the
    expiry telling the assistant so, per kind (:func:`nitro_assistants.rules.expired_answer`),
    the review ``expired`` (``review_expired``), its resume enqueued. Raises
    ``ReviewNotPendingError`` (a decision came first) and ``ThreadResumptionError`` (the pause
    allows no answer that says so); nothing is stored then."""
    if review.status != rules.PENDING:
        raise _not_pending(review)
    at = actor.expired_at.isoformat()
    cleaned = rules.expired_answer(pending_review_of(review), at)
    who = username(actor)
    answer: dict[str, Any] | None
    if review.kind in rules.INTERACTION_KINDS:
        answer = rules.expired_resume_value(who, at)
        run_input: dict[str, Any] = {"answer": answer}
    elif cleaned.get("answers") is not None:
        answer = {"answers": cleaned["answers"]}
        run_input = {"answers": cleaned["answers"]}
    else:
        answer = None
        run_input = {"reply": cleaned.get("reply"), "tool_calls": cleaned.get("tool_calls")}
    run = Run.objects.create(thread=review.thread, kind=Run.Kind.RESUME, input=run_input)
    record = Decision.objects.create(
        review=review,
        reviewer_id=who,
        interrupt_id=review.interrupt_id or "",
        reply=cleaned.get("reply"),
        tool_calls=cleaned.get("tool_calls"),
        answer=answer,
        note=str(cleaned.get("note") or ""),
        channel=channel_of(actor, None),
        decided_at=timezone.now(),
        run=run,
    )
    transition(
        review,
        rules.EXPIRED,
        actor=actor,
        run=run,
        at=record.decided_at,
        expired_at=at,
        rule=actor.rule_name,
        actions=record.actions,
        decision=record.pk,
        signal_kwargs={"decision": record, "expired_at": actor.expired_at},
    )
    enqueue("nitro_assistants.resume_thread", record.pk)
    return record


def _record(
    review: Review,
    user: Any,
    cleaned: Mapping[str, Any],
    channel: str,
    *,
    shown: list[str] | None = None,
) -> Decision:
    real_user = user if getattr(user, "pk", None) else None
    answers = cleaned.get("answers")
    # Its pk is made here. On PostgreSQL the decision (its id read with the review's lock), the
    # run and the review's status ride on the events' statement (:mod:`.sql.writes`; foreign keys
    # are checked at commit); otherwise the decision is inserted first.
    run = Run(
        thread=review.thread,
        kind=Run.Kind.RESUME,
        input={"answers": answers}
        if answers is not None
        else {"reply": cleaned["reply"], "tool_calls": cleaned["tool_calls"]},
        requested_by=real_user,
    )
    allocated = getattr(review, DECISION_ID, None)
    setattr(review, DECISION_ID, None)  # one decision per id
    record = Decision(
        pk=allocated,
        review=review,
        decided_by=real_user,
        reviewer_id=username(user),
        interrupt_id=review.interrupt_id or "",
        reply=cleaned.get("reply"),
        tool_calls=cleaned.get("tool_calls"),
        answer={"answers": answers} if answers is not None else None,
        note=str(cleaned.get("note") or ""),
        shown=shown,
        channel=channel,
        decided_at=timezone.now(),
        run=run,
        grant_id=getattr(user, "grant_id", None),  # a grant's decision names it
    )
    if allocated is not None:
        writes.insert(record)  # with the run and the review's status, on the events' statement
    else:
        record.save(force_insert=True)
    writes.insert(run)
    transition(
        review,
        rules.DECIDED,
        actor=user,
        run=run,
        actions=record.actions,
        note=record.note,
        channel=channel,
        signal_kwargs={"decision": record, "user": user},
    )
    enqueue("nitro_assistants.resume_thread", record.pk)
    return record
