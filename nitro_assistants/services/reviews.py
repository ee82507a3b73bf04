"""Reviews: deciding them (the one entry for admin, API and bulk actions) and applying decisions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from nitro_assistants import signals
from nitro_assistants.client.results import REPLY_DECISIONS, PendingReview, ReplyDraft
from nitro_assistants.client.review import build_resume
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import (
    NitroAssistantsError,
    ReviewNotPendingError,
    ReviewSupersededError,
    ThreadResumptionError,
)
from nitro_assistants.models import Decision, Review, Run, Thread
from nitro_assistants.services import clients
from nitro_assistants.services.audit import events_batched, record_event, send_on_commit
from nitro_assistants.services.clients import is_transient
from nitro_assistants.services.interactions import INTERACTION_KINDS, decide_interaction
from nitro_assistants.services.mirror import record_result, supersede
from nitro_assistants.services.runs import (
    ACTIVE_REMOTE_STATUSES,
    RUN_KEY,
    count_attempt,
    find_remote_run,
    webhook_url,
)


def supersede_pending_review(thread: Thread, *, reason: str, actor: Any = None) -> Review | None:
    """Supersede the thread's pending review, if any. The caller holds the thread's lock."""
    review = (
        Review.objects.select_for_update()
        .filter(thread=thread, status=Review.Status.PENDING)
        .first()
    )
    if review is None:
        return None
    return supersede(review, reason=reason, actor=actor)


def pending_review_of(review: Review) -> PendingReview:
    """The client's view of what ``review`` holds, so local validation is the client's own."""
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
    """Check ``decision`` against the review with the client's own rules, before anything is
    stored (PROTOCOL.md §4: a resume the graph refuses leaves a batched thread stuck).

    ``decision`` is ``{"reply": {"action", "content"?, "message"?}}`` for a reply review or
    ``{"tool_calls": [{"id", "action", "args"?, "message"?}, ...]}`` (one per held call), plus an
    optional ``"note"``. Returns the cleaned decision; raises ``ThreadResumptionError``.
    """
    reply, tool_calls = decision.get("reply"), decision.get("tool_calls")
    if review.kind not in (Review.Kind.REPLY, Review.Kind.TOOL_CALLS):
        raise ThreadResumptionError(
            f"Deciding a {review.get_kind_display()} review is not supported here."
        )
    if (reply is None) == (tool_calls is None):
        raise ThreadResumptionError("Pass exactly one of reply or tool_calls")
    if reply is not None and not isinstance(reply, Mapping):
        raise ThreadResumptionError("`reply` must be an object with an `action`")
    if tool_calls is not None and not isinstance(tool_calls, list | tuple):
        raise ThreadResumptionError("`tool_calls` must be a list, one review per held call")
    build_resume(
        pending_review_of(review),
        reply=reply,
        tool_calls=tool_calls,
        answer=None,
        reviewer_id="validation",
        reviewed_at="",
    )
    if reply is not None:
        keys = ("action", "content") if reply.get("action") == "edit" else ("action",)
        cleaned = {k: reply[k] for k in keys}
        if reply.get("action") == "reject" and reply.get("message"):
            cleaned["message"] = str(reply["message"])
        return {"reply": cleaned, "tool_calls": None}
    by_id = {str(item["id"]): item for item in tool_calls or []}
    items = []
    for call in review.tool_calls:
        item = by_id[str(call["id"])]
        kept: dict[str, Any] = {"id": call["id"], "action": item["action"]}
        if item["action"] == "edit":
            kept["args"] = dict(item["args"])
        if item["action"] in ("respond", "reject") and item.get("message"):
            kept["message"] = str(item["message"])
        items.append(kept)
    return {"reply": None, "tool_calls": items}


def _reviewer_id(user: Any) -> str:
    if user is None or not getattr(user, "pk", None):
        return "system"
    return str(user.get_username())


def decide(review: Review | int, user: Any, decision: Mapping[str, Any]) -> Decision:
    """Record a reviewer's decision on a pending review and enqueue its resume after commit.

    For a typed interaction (question, blueprint, plan) ``decision`` is the decide API's body
    (``{"decision", "revision", "digest", ...}``, PROTOCOL.md §8); see
    :func:`nitro_assistants.services.interactions.decide_interaction`.

    Raises ``ReviewNotPendingError`` when someone else decided first (or the review is closed) and
    ``ThreadResumptionError`` when the decision does not fit the review; nothing is stored then.
    """
    from nitro_assistants import tasks

    pk = review.pk if isinstance(review, Review) else review
    with transaction.atomic():
        locked = Review.objects.select_for_update(of=("self",)).select_related("thread").get(pk=pk)
        if locked.kind in INTERACTION_KINDS:
            # Typed interactions: the revision, digest and content checks are their own.
            return decide_interaction(locked, user, decision)
        if locked.status != Review.Status.PENDING:
            raise ReviewNotPendingError(
                f"Review #{locked.pk} was already {locked.get_status_display()}.", review=locked
            )
        cleaned = validate_decision(locked, decision)
        now = timezone.now()
        thread = locked.thread
        run = Run.objects.create(
            thread=thread,
            kind=Run.Kind.RESUME,
            input={"reply": cleaned["reply"], "tool_calls": cleaned["tool_calls"]},
            requested_by=user if getattr(user, "pk", None) else None,
        )
        record = Decision.objects.create(
            review=locked,
            decided_by=user if getattr(user, "pk", None) else None,
            reviewer_id=_reviewer_id(user),
            interrupt_id=locked.interrupt_id or "",
            reply=cleaned["reply"],
            tool_calls=cleaned["tool_calls"],
            note=str(decision.get("note") or ""),
            decided_at=now,
            run=run,
        )
        locked.status = Review.Status.DECIDED
        locked.save(update_fields=["status"])
        record_event(
            thread,
            "review_decided",
            review=locked,
            run=run,
            actor=user,
            actions=record.actions,
            note=record.note,
        )
        send_on_commit(signals.review_decided, Review, review=locked, decision=record, user=user)
        decision_pk = record.pk
        transaction.on_commit(lambda: tasks.resume_thread.delay(decision_pk))
    return record


def _resume_match(decision: Decision) -> dict[str, str]:
    return {"reviewer_id": decision.reviewer_id, "reviewed_at": decision.decided_at.isoformat()}


def execute_resume(decision: Decision | int) -> Decision:
    """Apply a recorded decision on the server, once.

    The decision row stays locked while the resume runs, so a redelivered task waits and then finds
    it applied. A task redelivered after a crash finds the remote resume by its metadata
    (``reviewer_id`` + ``reviewed_at``) instead of sending it again.
    """
    from nitro_assistants import tasks

    pk = decision.pk if isinstance(decision, Decision) else decision
    # A later delivery that sees attempts > 1 looks for the remote resume first.
    count_attempt(Run.objects.filter(decision__pk=pk, decision__outcome=Decision.Outcome.PENDING))

    with transaction.atomic():
        record = (
            Decision.objects.select_for_update(of=("self",))
            .select_related("run", "review", "review__thread")
            .get(pk=pk)
        )
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
                    run_pk = str(run.pk)
                    transaction.on_commit(
                        lambda: tasks.collect_run.apply_async((run_pk,), countdown=1)
                    )
                return record
            if result is None:
                result = assistant.review(thread_id=thread_id, **_review_arguments(record, thread))
            messages = result.messages or assistant.thread_messages(thread_id=thread_id)
        except ReviewSupersededError as exc:
            if _resume_still_running(assistant, thread_id, record):
                # The resume's stream ended before its run did (a server shutting down closes
                # open streams; it runs the resume again once back): retry, which joins the run.
                raise ThreadResumptionError(
                    "the resume's event stream ended before its run did", transient=True
                ) from exc
            _close(record, run, Decision.Outcome.SUPERSEDED, str(exc))
            supersede(review, reason="stale")
            return record
        except NitroAssistantsError as exc:
            if is_transient(exc):
                raise
            error = str(exc) or exc.__class__.__name__
            _close(record, run, Decision.Outcome.FAILED, error)
            _fail_review(review, run, error)
            return record
        if run.remote_run_id:
            run.save(update_fields=["remote_run_id"])
        _applied(record, review, run, result, messages)
    return record


def _review_arguments(record: Decision, thread: Thread) -> dict[str, Any]:
    """What the client's ``review``/``start_review`` get for a recorded decision."""
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

    The thread's row is locked by record_result's UPDATE of it (a new message on the thread
    waits for this to commit); nothing here reads the thread's columns that it rewrites."""
    thread = review.thread
    with events_batched():
        record.outcome = Decision.Outcome.APPLIED
        record.applied_at = timezone.now()
        record.save(update_fields=["outcome", "applied_at"])
        if review.kind not in INTERACTION_KINDS:  # an interaction keeps its own status
            review.status = Review.Status.APPLIED
            review.closed_at = record.applied_at
            review.save(update_fields=["status", "closed_at"])
        record_event(thread, "review_applied", review=review, run=run)
        record_result(thread, run, result, messages)


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
            _close(record, run, Decision.Outcome.SUPERSEDED, str(outcome))
            supersede(review, reason="stale")
        elif isinstance(outcome, NitroAssistantsError):
            error = str(outcome) or outcome.__class__.__name__
            _close(record, run, Decision.Outcome.FAILED, error)
            _fail_review(review, run, error)
        else:
            _applied(record, review, run, *outcome)
    run.refresh_from_db()
    return run


def _resume_still_running(assistant: Any, thread_id: str, decision: Decision) -> bool:
    """True when the server has this decision's resume run and has not finished it."""
    remote = find_remote_run(assistant, thread_id, _resume_match(decision))
    return remote is not None and remote.get("status") in ACTIVE_REMOTE_STATUSES


def _close(record: Decision, run: Run, outcome: str, error: str) -> None:
    record.outcome = outcome
    record.error = error
    record.save(update_fields=["outcome", "error"])
    run.status = Run.Status.FAILED
    run.error = error
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "error", "finished_at"])


def _fail_review(review: Review, run: Run, error: str) -> None:
    # An approved plan's state is its steps' (they run whether the assistant heard or not).
    if review.status not in (Review.Status.EXECUTING, Review.Status.COMPLETED):
        review.status = Review.Status.FAILED
        review.closed_at = timezone.now()
        review.save(update_fields=["status", "closed_at"])
    Thread.objects.filter(pk=review.thread_id).update(status=Thread.Status.ERROR)
    record_event(review.thread, "review_failed", review=review, run=run, error=error)
    send_on_commit(signals.run_failed, Run, run=run, thread=review.thread, error=error)


def close_failed_decision(run: Run, error: str) -> None:
    """A resume run failed for good (retries exhausted): its decision and review failed with it.
    Called by ``fail_run`` inside its transaction, which sends ``run_failed``."""
    record = (
        Decision.objects.select_for_update(of=("self",))
        .filter(run=run)
        .select_related("review")
        .first()
    )
    if record is None or record.outcome != Decision.Outcome.PENDING:
        return
    record.outcome = Decision.Outcome.FAILED
    record.error = error
    record.save(update_fields=["outcome", "error"])
    review = record.review
    if review.status == Review.Status.DECIDED:
        review.status = Review.Status.FAILED
        review.closed_at = timezone.now()
        review.save(update_fields=["status", "closed_at"])


def fail_resume(decision: Decision | int, error: str) -> Decision:
    """Retries exhausted on a resume: the run, decision and review fail; ``run_failed`` once."""
    from nitro_assistants.services.runs import fail_run

    pk = decision.pk if isinstance(decision, Decision) else decision
    record = Decision.objects.select_related("run").get(pk=pk)
    if record.run is not None:
        fail_run(record.run, error)
    record.refresh_from_db()
    return record
