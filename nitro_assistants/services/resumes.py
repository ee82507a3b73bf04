"""Resuming threads: a recorded decision applied on the server, once (:func:`execute_resume`), its
outcome collected in background mode (:func:`collect_resume`, :func:`collect_run`) and recorded:
applied (the resumed run mirrored), superseded or failed. Decisions are recorded by
:mod:`.decisions`, which enqueues ``nitro_assistants.resume_thread`` after commit."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.db import transaction
from django.utils import timezone

from nitro_assistants import rules, signals
from nitro_assistants.client.review import Resume
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import (
    NitroAssistantsError,
    ReviewSupersededError,
    ThreadResumptionError,
)
from nitro_assistants.models import Decision, Review, Run, Thread
from nitro_assistants.services import clients
from nitro_assistants.services.audit import events_batched, record_event, send_on_commit
from nitro_assistants.services.clients import RUN_KEY, find_remote_run, is_transient
from nitro_assistants.services.decisions import pending_review_of
from nitro_assistants.services.enqueue import enqueue
from nitro_assistants.services.errors import clean_error
from nitro_assistants.services.evidence import record_decision
from nitro_assistants.services.lifecycle import close_decision, fail_review, supersede, transition
from nitro_assistants.services.mirror import lock_thread, record_result, unapplied_reviews
from nitro_assistants.services.runs import (
    ACTIVE_REMOTE_STATUSES,
    collect_turn,
    fail_run,
    webhook_url,
)
from nitro_assistants.services.sql import reads, writes
from nitro_assistants.services.sql.runs import count_decided_attempt

#: The read of :func:`execute_resume`, compiled once (:mod:`.sql.reads`, issue 21).
_RESUMING = reads.Read(
    lambda: Decision.objects.select_for_update(of=("self",)).select_related(
        "run", "review", "review__thread"
    )
)


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
                    resume=_resume_of(record, thread),
                )
                run.remote_run_id = str(remote["run_id"])
                run.save(update_fields=["remote_run_id"])
                if not app_settings.WEBHOOK_URL:
                    enqueue("nitro_assistants.collect_run", str(run.pk), countdown=1)
                return record
            if result is None:
                result = assistant.review(thread_id=thread_id, resume=_resume_of(record, thread))
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


def _resume_of(record: Decision, thread: Thread) -> Resume:
    """What the client's ``review``/``start_review`` send for a recorded decision."""
    if record.review.kind in rules.DIALECT_KINDS:
        # inbox/interrupt pauses: the answers by interrupt id (the others stay pending).
        return Resume(
            reviewer_id=record.reviewer_id,
            answers=dict((record.answer or {}).get("answers") or {}),
            reviewed_at=record.decided_at.isoformat(),
            context=thread.context or {},
            pending=pending_review_of(record.review),
        )
    return Resume(
        reviewer_id=record.reviewer_id,
        interrupt_id=record.interrupt_id or None,
        reply=record.reply,
        tool_calls=record.tool_calls,
        answer=record.answer,
        reviewed_at=record.decided_at.isoformat(),
        context=thread.context or {},
        # The pause as the reviewer saw it and the decision was validated against: not read again
        # (the server refuses it if the thread has moved on, and the stream shows that).
        pending=pending_review_of(record.review),
    )


def _applied(record: Decision, review: Review, run: Run, result: Any, messages: Any) -> None:
    """The decision took effect: record it and mirror the resumed run (it may pause again).

    The thread's row is locked first (a new message on the thread waits for this to commit),
    before the decision's and the review's rows are written; nothing here reads the thread's
    columns that it rewrites. The thread's open reviews are read right after the lock, before
    those writes, with this review left out (once applied it is not open): the writes then ride
    on the events' statement instead of being sent ahead of the read."""
    thread = review.thread
    lock_thread(thread, paused=result.interrupted)
    unapplied = [known for known in unapplied_reviews(thread) if known.pk != review.pk]
    with events_batched():
        record.outcome = Decision.Outcome.APPLIED
        record.applied_at = timezone.now()
        writes.save(record, ["outcome", "applied_at"])
        if review.kind not in rules.INTERACTION_KINDS and review.status != rules.EXPIRED:
            # An interaction keeps its decided status, an expired review stays expired.
            transition(review, rules.APPLIED, run=run, at=record.applied_at)
        else:
            record_event(thread, "review_applied", review=review, run=run)
        record_result(thread, run, result, messages, unapplied=unapplied)
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
