"""Reviews: deciding them (the one entry for the admin, bulk actions, the JSON API and the shell)
and applying decisions on the server."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Literal

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from nitro_assistants import rules, signals
from nitro_assistants.client.results import (
    MAX_ID_LENGTH,
    REPLY_DECISIONS,
    Pause,
    PendingReview,
    ReplyDraft,
)
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import (
    InteractionConflictError,
    InteractionDecisionError,
    InteractionForbiddenError,
    NitroAssistantsError,
    ReviewNotPendingError,
    ReviewSupersededError,
    ThreadResumptionError,
)
from nitro_assistants.models import Approval, Decision, Review, Run, Thread
from nitro_assistants.services import clients, policies
from nitro_assistants.services.audit import (
    events_batched,
    record_event,
    send_on_commit,
)
from nitro_assistants.services.clients import is_transient
from nitro_assistants.services.enqueue import enqueue
from nitro_assistants.services.errors import clean_error
from nitro_assistants.services.evidence import record_decision
from nitro_assistants.services.interactions import decide_interaction, username
from nitro_assistants.services.lifecycle import (
    close_decision,
    fail_review,
    supersede,
    transition,
)
from nitro_assistants.services.mirror import lock_thread, record_result
from nitro_assistants.services.policies import gate
from nitro_assistants.services.runs import (
    ACTIVE_REMOTE_STATUSES,
    RUN_KEY,
    collect_turn,
    fail_run,
    find_remote_run,
    webhook_url,
)
from nitro_assistants.services.sql import ids, reads, writes
from nitro_assistants.services.sql.runs import count_decided_attempt

#: Who is deciding: through the admin, through the JSON API, or code of the host project (the
#: shell, a policy), which brings its own authority.
Channel = Literal["admin", "api"] | None
DECIDE_PERMISSION = policies.DECIDE_PERMISSION


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
    if any(len(str(i)) > MAX_ID_LENGTH for i in review.interrupt_ids):
        # Mirrored before the client refused such ids: its decision could not be stored.
        raise ThreadResumptionError(
            f"This pause cannot be answered: its interrupt id is longer than {MAX_ID_LENGTH} "
            "characters."
        )
    if review.kind in rules.DIALECT_KINDS:
        if review.payload.get("error"):
            raise ThreadResumptionError(
                "The graph refused an answer to this pause and is stuck on it: "
                f"{review.payload['error']}. It cannot be answered; dismiss it."
            )
        body = {k: v for k, v in decision.items() if k not in ("revision", "digest")}
        return rules.clean_dialect_decision(pending_review_of(review), body)
    body = {k: v for k, v in decision.items() if k not in ("revision", "digest", "interrupt_id")}
    return rules.clean_review_decision(
        pending_review_of(review), body, review.payload.get("args_schemas")
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
        return opener or (via == "admin" and user.has_perm(DECIDE_PERMISSION))
    return bool(user.has_perm(DECIDE_PERMISSION)) and policies.group_allows(user, review)


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
    if not user.is_superuser:  # the policy rule's group, as policies.group_allows asks
        reviews &= Q(handling__group__isnull=True) | Q(handling__group__in=user.groups.values("pk"))
    if via == "admin":
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
        return policies.group_refusal(review)
    if review.kind in rules.INTERACTION_KINDS and via == "api":
        return InteractionForbiddenError(
            "Only the person who opened this session may decide its interactions"
        )
    return InteractionForbiddenError(
        "Deciding reviews needs the nitro_assistants.decide_review permission"
    )


def _shown_stamp(decision: Mapping[str, Any], shown: Review | None) -> tuple[int, str]:
    """The revision and digest the decision was made on: named in it, or (code holding a
    ``Review`` it read) the instance's, as it was read."""
    if "revision" in decision or "digest" in decision or shown is None:
        if shown is None and not ("revision" in decision and "digest" in decision):
            raise InteractionDecisionError(
                "Name the `revision` and `digest` of the review as it was shown",
                field="revision" if "revision" not in decision else "digest",
            )
        return rules.clean_stamp(decision)
    return shown.revision, shown.digest


def _interaction_replay(review: Review, user: Any, cleaned: Mapping[str, Any]) -> Decision | None:
    """The same person sending the same decision on the same revision again (a double submit, a
    retry after a timeout): their recorded decision; None when it is anything else."""
    if not getattr(user, "pk", None):
        return None
    recorded = (
        Decision.objects.filter(
            review__thread_id=review.thread_id,
            review__interaction_id=review.interaction_id,
            decided_by_id=user.pk,
        )
        .select_related("review")
        .order_by("-pk")
        .first()
    )
    if recorded is None or (recorded.answer or {}).get("decision") != cleaned["decision"]:
        return None
    shown = {recorded.review.revision}
    if recorded.review.origin == "user":  # an edit became a revision of its own
        shown.add(recorded.review.revision - 1)
    return recorded if cleaned["revision"] in shown else None


def _review_replay(
    review: Review, user: Any, cleaned: Mapping[str, Any], stamp: tuple[int, str]
) -> Decision | None:
    if not getattr(user, "pk", None) or stamp != (review.revision, review.digest):
        return None
    try:
        recorded = review.decision
    except Decision.DoesNotExist:
        return None
    answers = (recorded.answer or {}).get("answers") if review.kind in rules.DIALECT_KINDS else None
    if recorded.decided_by_id == user.pk and rules.same_review_decision(
        {"reply": recorded.reply, "tool_calls": recorded.tool_calls, "answers": answers}, cleaned
    ):
        return recorded
    return None


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
    (:mod:`nitro_assistants.services.policies`). Raises ``ReviewNotPendingError`` or
    ``InteractionConflictError`` (stale: decided by someone else, or content changed since it
    was shown), ``InteractionForbiddenError`` (``via`` says who may decide) and
    ``ThreadResumptionError`` (the decision does not fit); nothing is stored then.
    """
    pk = review.pk if isinstance(review, Review) else review
    shown = review if isinstance(review, Review) else None
    if not isinstance(decision, Mapping):
        raise InteractionDecisionError("The decision must be an object")
    with transaction.atomic(), events_batched():
        locked = _locked_for_decision(pk, user)
        if not may_decide(user, locked, via):
            raise refusal(locked, via, user)
        if locked.kind in rules.INTERACTION_KINDS:
            if shown is not None and "revision" not in decision and "digest" not in decision:
                decision = {**decision, "revision": shown.revision, "digest": shown.digest}
            shown_interrupt = decision.get("interrupt_id")
            body = rules.clean_body({k: v for k, v in decision.items() if k != "interrupt_id"})
            replay = _interaction_replay(locked, user, body)
            if replay is not None:
                return replay
            if shown_interrupt and str(shown_interrupt) != (locked.interrupt_id or ""):
                raise InteractionConflictError(
                    f"Interaction {locked.interaction_id} is paused on another interrupt than the "
                    "one shown",
                    field="interrupt_id",
                )
            return decide_interaction(locked, user, body)
        checked = _checked(locked, user, decision, shown)
        if isinstance(checked, Decision):
            return checked
        passed = gate(locked, user, checked, via)  # policies: quorum, groups, edits
        if passed.approval is not None:
            return passed.approval
        assert passed.decision is not None
        return _record(locked, passed.actor or user, passed.decision)


def _checked(
    review: Review, user: Any, decision: Mapping[str, Any], shown: Review | None
) -> Decision | dict[str, Any]:
    """A review decision (not an interaction's) checked against ``review`` as read: the same
    person's same decision already recorded (returned), or the decision cleaned. Raises
    ``ReviewNotPendingError``, ``InteractionConflictError`` (the review moved on since it was
    shown) and ``ThreadResumptionError`` (the decision does not fit)."""
    stamp = _shown_stamp(decision, shown)
    try:
        cleaned = validate_decision(review, decision)
    except ThreadResumptionError:
        if review.status != Review.Status.PENDING:
            raise _not_pending(review) from None
        raise
    replay = _review_replay(review, user, cleaned, stamp)
    if replay is not None:
        return replay
    if review.status != Review.Status.PENDING:
        raise _not_pending(review)
    rules.check_stamp(
        label=f"review #{review.pk}",
        revision=review.revision,
        digest=review.digest,
        status=review.status,
        shown_revision=stamp[0],
        shown_digest=stamp[1],
        interrupt_id=review.interrupt_id,
        shown_interrupt_id=(
            str(decision["interrupt_id"])
            if decision.get("interrupt_id") and review.kind not in rules.DIALECT_KINDS
            else None  # inbox/interrupt: the id names one of the pauses, checked above
        ),
    )
    return dict(cleaned)


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
    reviews = Review.objects.select_related(
        "thread", "decision", "handling__group"
    ).select_for_update(of=("self",), no_key=True)
    # The id the decision will have (:data:`DECISION_ID`) on PostgreSQL: inserted with the
    # decision's events then, not in a statement of its own.
    next_id = ids.next_id(Decision)
    if next_id is not None:
        reviews = reviews.annotate(**{DECISION_ID: next_id})
    return reviews


#: The annotation of the review :func:`_locked_for_decision` reads on PostgreSQL: an id taken
#: from the decisions' sequence for the decision :func:`_record` may insert.
DECISION_ID = "next_decision_id"


#: The reads of :func:`_locked_for_decision` and :func:`execute_resume`, compiled once
#: (:mod:`.sql.reads`, issue 21).
_DECIDING = reads.Read(_deciding_reviews)
_RESUMING = reads.Read(
    lambda: Decision.objects.select_for_update(of=("self",)).select_related(
        "run", "review", "review__thread"
    )
)


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
    return ReviewNotPendingError(
        f"Review #{review.pk} was already {review.get_status_display()}.", review=review
    )


def _record(review: Review, user: Any, cleaned: Mapping[str, Any]) -> Decision:
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
        decided_at=timezone.now(),
        run=run,
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
        signal_kwargs={"decision": record, "user": user},
    )
    enqueue("nitro_assistants.resume_thread", record.pk)
    return record


def _resume_match(decision: Decision) -> dict[str, str]:
    return {"reviewer_id": decision.reviewer_id, "reviewed_at": decision.decided_at.isoformat()}


def execute_resume(decision: Decision | int) -> Decision:
    """Apply a recorded decision on the server, once.

    The decision row stays locked while the resume runs, so a redelivered task waits and then finds
    it applied. A task redelivered after a crash finds the remote resume by its metadata
    (``reviewer_id`` + ``reviewed_at``) instead of sending it again.
    """
    pk = decision.pk if isinstance(decision, Decision) else decision
    # A later delivery that sees attempts > 1 looks for the remote resume first.
    count_decided_attempt(pk)

    with transaction.atomic():
        record = _RESUMING.get(pk)
        if record.outcome != Decision.Outcome.PENDING or record.run is None:
            return record
        review, run = record.review, record.run
        # Only the decision is locked while the resume runs (it may take as long as the model):
        # a new customer message on the thread is not held up; the thread is locked to record.
        thread = review.thread
        thread_id = str(thread.thread_id)
        assistant = clients.assistant_for(thread.assistant_key)
        try:
            result = None
            if run.attempts > 1:
                remote = find_remote_run(assistant, thread_id, _resume_match(record))
                if remote is not None:
                    run.remote_run_id = str(remote.get("run_id") or "")
                    result = assistant.join_run(thread_id=thread_id, run_id=run.remote_run_id)
            if result is None and app_settings.RUN_MODE == "background":
                # Send the resume as a background run and return: the webhook (or the poll)
                # collects it, so no worker waits while the model thinks.
                remote = assistant.start_review(
                    thread_id=thread_id,
                    webhook=webhook_url(run),
                    metadata={RUN_KEY: str(run.pk)},
                    **_review_arguments(record, thread),
                )
                run.remote_run_id = str(remote["run_id"])
                run.save(update_fields=["remote_run_id"])
                if not app_settings.WEBHOOK_URL:
                    enqueue("nitro_assistants.collect_run", str(run.pk), countdown=1)
                return record
            if result is None:
                result = assistant.review(thread_id=thread_id, **_review_arguments(record, thread))
            messages = result.messages or assistant.thread_messages(thread_id=thread_id)
        except ReviewSupersededError as exc:
            # The stream showed no update: decide from the server's state, not from that.
            outcome = _resume_outcome(assistant, thread_id, record)
            if outcome is None:
                close_decision(record, Decision.Outcome.SUPERSEDED, clean_error(exc))
                supersede(review, reason="stale")
                return record
            result, messages = outcome
        except NitroAssistantsError as exc:
            if is_transient(exc):
                raise
            error = clean_error(str(exc) or exc.__class__.__name__)
            close_decision(record, Decision.Outcome.FAILED, error)
            _fail(review, run, error)
            return record
        if run.remote_run_id:
            run.save(update_fields=["remote_run_id"])
        _applied(record, review, run, result, messages)
    return record


def _review_arguments(record: Decision, thread: Thread) -> dict[str, Any]:
    """What the client's ``review``/``start_review`` get for a recorded decision."""
    if record.review.kind in rules.DIALECT_KINDS:
        # inbox/interrupt pauses: the answers by interrupt id (the others stay pending).
        return {
            "reviewer_id": record.reviewer_id,
            "answers": dict((record.answer or {}).get("answers") or {}),
            "reviewed_at": record.decided_at.isoformat(),
            "context": thread.context or {},
            "pending": pending_review_of(record.review),
        }
    return {
        "reviewer_id": record.reviewer_id,
        "interrupt_id": record.interrupt_id or None,
        "reply": record.reply,
        "tool_calls": record.tool_calls,
        "answer": record.answer,
        "reviewed_at": record.decided_at.isoformat(),
        "context": thread.context or {},
        # The pause as the reviewer saw it and the decision was validated against: not read again
        # (the server refuses it if the thread has moved on, and the stream shows that).
        "pending": pending_review_of(record.review),
    }


def _applied(record: Decision, review: Review, run: Run, result: Any, messages: Any) -> None:
    """The decision took effect: record it and mirror the resumed run (it may pause again).

    The thread's row is locked first (a new message on the thread waits for this to commit),
    before the decision's and the review's rows are written; nothing here reads the thread's
    columns that it rewrites."""
    thread = review.thread
    lock_thread(thread)
    with events_batched():
        record.outcome = Decision.Outcome.APPLIED
        record.applied_at = timezone.now()
        writes.save(record, ["outcome", "applied_at"])
        if review.kind not in rules.INTERACTION_KINDS:  # an interaction keeps its decided status
            transition(review, rules.APPLIED, run=run, at=record.applied_at)
        else:
            record_event(thread, "review_applied", review=review, run=run)
        record_result(thread, run, result, messages)
        # What ran, beside what was decided (the state holds the calls as an edit replaced them).
        record_decision(record, review, run, messages, state=getattr(result, "raw", None))


def collect_resume(run: Run, *, wait: bool) -> Run:
    """Background mode: read the outcome of a resume sent by ``execute_resume`` and record it
    (applied, superseded because the server ignored it as stale, or failed). With ``wait=False``
    a resume still running is left alone (the caller polls again later)."""
    record = Decision.objects.select_related("review", "run").filter(run=run).first()
    if record is None or record.outcome != Decision.Outcome.PENDING:
        return run
    thread = Thread.objects.get(pk=record.review.thread_id)
    thread_id = str(thread.thread_id)
    assistant = clients.assistant_for(thread.assistant_key)
    if not wait:
        remote = assistant.get_run(thread_id=thread_id, run_id=run.remote_run_id)
        if remote.get("status") in ACTIVE_REMOTE_STATUSES:
            return run
    outcome: Any
    try:
        result = assistant.review_result(thread_id=thread_id, run_id=run.remote_run_id)
        outcome = (result, result.messages or assistant.thread_messages(thread_id=thread_id))
    except ReviewSupersededError as exc:
        outcome = exc
    except NitroAssistantsError as exc:
        if is_transient(exc):
            raise
        outcome = exc
    with transaction.atomic():
        record = (
            Decision.objects.select_for_update(of=("self",))
            .select_related("run", "review")
            .get(pk=record.pk)
        )
        if record.outcome != Decision.Outcome.PENDING or record.run is None:
            return record.run or run
        review, run = record.review, record.run
        if isinstance(outcome, ReviewSupersededError):
            close_decision(record, Decision.Outcome.SUPERSEDED, clean_error(outcome))
            supersede(review, reason="stale")
        elif isinstance(outcome, NitroAssistantsError):
            error = clean_error(str(outcome) or outcome.__class__.__name__)
            close_decision(record, Decision.Outcome.FAILED, error)
            _fail(review, run, error)
        else:
            _applied(record, review, run, *outcome)
    run.refresh_from_db()
    return run


def _resume_outcome(assistant: Any, thread_id: str, decision: Decision) -> tuple[Any, Any] | None:
    """A resume reported superseded (its stream showed no update, which a stream cut short
    shows too): what the server's state says became of it. ``(result, messages)`` when the
    server applied it, ``None`` when the thread moved past it without it; a transient error
    while that cannot be told yet (it is still running, or never reached the server)."""
    match = _resume_match(decision)
    try:
        remote = find_remote_run(assistant, thread_id, match)
    except NitroAssistantsError as exc:
        if is_transient(exc):
            raise
        remote = None  # a run list a proxy garbled: the checkpoints below still tell
    if remote is not None and remote.get("status") in ACTIVE_REMOTE_STATUSES:
        # A server shutting down closes open streams and runs the resume again once back:
        # retry, which joins the run.
        raise ThreadResumptionError(
            "the resume's event stream ended before its run did", transient=True
        )
    # A checkpoint carrying this decision's metadata: the server applied it.
    result = assistant.resume_outcome(thread_id=thread_id, metadata=match)
    if result is not None:
        if remote is not None and not result.run_id:
            result = dataclasses.replace(result, run_id=str(remote.get("run_id") or "") or None)
        return result, result.messages or assistant.thread_messages(thread_id=thread_id)
    # Nothing applied with it. Its pause still pending: the resume never reached the server
    # (a proxy answered): send it again (keyed by interrupt id, it is applied once).
    pending = assistant.under_review(thread_id=thread_id)
    if pending is not None and set(pending.interrupt_ids) & set(decision.review.interrupt_ids):
        raise ThreadResumptionError(
            "the resume was not applied and its pause is still pending", transient=True
        )
    return None


def _fail(review: Review, run: Run, error: str) -> None:
    """The server refused a decision: the review fails, the thread is in error, ``run_failed``."""
    error = clean_error(error)
    fail_review(review, run, error)
    Thread.objects.filter(pk=review.thread_id).update(status=Thread.Status.ERROR)
    send_on_commit(signals.run_failed, Run, run=run, thread=review.thread, error=error)


def fail_resume(decision: Decision | int, error: str) -> Decision:
    """Retries exhausted on a resume: the run, decision and review fail; ``run_failed`` once."""
    pk = decision.pk if isinstance(decision, Decision) else decision
    record = Decision.objects.select_related("run").get(pk=pk)
    if record.run is not None:
        fail_run(record.run, error)
    record.refresh_from_db()
    return record


def collect_run(run: Run | Any, *, wait: bool = True) -> Run:
    """Background mode: read the outcome of a remote run this app created, a turn or a resume,
    and record it. With ``wait=False`` a run still going on the server is left alone."""
    pk = run.pk if isinstance(run, Run) else run
    found = Run.objects.select_related("thread").get(pk=pk)
    if found.finished or not found.remote_run_id:
        return found
    if found.kind == Run.Kind.RESUME:
        return collect_resume(found, wait=wait)
    return collect_turn(found, wait=wait)
