"""Turning what the server answered into local rows. Callers hold the thread's row lock
(:func:`lock_thread`), taken before the mirror reads anything."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from nitro_assistants import rules, signals
from nitro_assistants.models import Claim, Decision, Review, Run, Thread
from nitro_assistants.operations import get_operation
from nitro_assistants.policy_rules import DEFAULT
from nitro_assistants.services import grants
from nitro_assistants.services.audit import events_batched, record_event, send_on_commit
from nitro_assistants.services.deliveries import record_deliveries
from nitro_assistants.services.lifecycle import supersede, transition
from nitro_assistants.services.policy_enforcement import (
    STAMP_ANNOTATIONS,
    review_mirrored,
    ruleset,
    stamp_annotations,
    stamp_in_database,
)
from nitro_assistants.services.sql import ids, reads, writes

#: The annotation of the thread's locked read on PostgreSQL (and the attribute of the caller's
#: thread it is kept in): an id taken from the reviews' sequence for the review the mirror may
#: insert, which then rides on the events' statement instead of being an INSERT of its own.
REVIEW_ID = "next_review_id"

logger = logging.getLogger("nitro_assistants")


#: The attribute of the caller's thread that keeps the policy rules' stamp the thread's locked
#: read took (:func:`.policy_enforcement.stamp_annotations`), or None.
RULES_STAMP = "rules_stamp"
#: The same for the live grants' stamp (:func:`.grants.stamp_annotations`).
GRANTS_STAMP = "grants_stamp"


def _locked_thread(*, rules_stamp: bool = False) -> QuerySet[Thread]:
    threads = Thread.objects.select_for_update(no_key=True)
    next_id = ids.next_id(Review)
    if next_id is not None:
        threads = threads.annotate(**{REVIEW_ID: next_id})
    if not rules_stamp:
        return threads
    return threads.annotate(**stamp_annotations(), **grants.stamp_annotations())


#: A thread's row locked (compiled once, :mod:`.sql.reads`), as a new message and a sync lock it;
#: and with the policy rules' stamp, for a mirror that may create a review.
_LOCKED_THREAD = reads.Read(_locked_thread)
_LOCKED_THREAD_AND_STAMP = reads.Read(lambda: _locked_thread(rules_stamp=True))


def lock_thread(thread: Thread, *, paused: bool = False) -> None:
    """Lock ``thread``'s row for the rest of the transaction (``FOR NO KEY UPDATE``), before a
    run's or a resume's mirror writes or reads anything: whoever changes a thread's open reviews
    (a new message, a sync, another mirror) holds that lock, and the mirror's read of them comes
    in a statement after it, which sees what they committed. Taken before the rows the caller
    writes next (a review, a decision): a thread's row is locked before its reviews' rows.

    ``paused``: the run to mirror paused, so the mirror may create a review, which the policy
    rules then handle: where the database tells whether the compiled rules are current (no
    shared cache holds their stamp), the same statement reads their stamp, which
    :func:`mirror_pending` gives :func:`.policy_enforcement.ruleset` (no query of its own). It
    is read as the statement starts: a rule changed while the statement waits for the lock
    applies from the next review on, as if this mirror had come a moment earlier."""
    with_stamp = paused and stamp_in_database()
    locked = (_LOCKED_THREAD_AND_STAMP if with_stamp else _LOCKED_THREAD).get(thread.pk)
    setattr(thread, REVIEW_ID, getattr(locked, REVIEW_ID, None))
    stamp = tuple(getattr(locked, name) for name in STAMP_ANNOTATIONS) if with_stamp else None
    setattr(thread, RULES_STAMP, stamp)
    granted = (
        tuple(getattr(locked, name) for name in grants.STAMP_ANNOTATIONS) if with_stamp else None
    )
    setattr(thread, GRANTS_STAMP, granted)


def _new_review(thread: Thread, run: Run | None, fields: dict[str, Any]) -> Review:
    """``Review.objects.create(...)``; with the id :func:`lock_thread` took, queued to ride on
    the events' statement (:func:`.sql.writes.insert`: saved at once where nothing is queued, or
    while a receiver watches reviews). One review per id taken."""
    review = Review(thread=thread, run=run, **fields)
    review.pk = getattr(thread, REVIEW_ID, None)
    setattr(thread, REVIEW_ID, None)
    if review.pk is None:
        review.save(force_insert=True)
        return review
    return writes.insert(review)


def record_result(
    thread: Thread,
    run: Run,
    result: Any,
    messages: list[dict[str, Any]],
    *,
    unapplied: list[Review] | None = None,
) -> Run:
    """Mirror a finished (or paused) run: the thread snapshot, its review, its deliveries.

    ``unapplied``: the thread's reviews :func:`unapplied_reviews` read after the caller's
    :func:`lock_thread`, without the ones the caller has since applied (None: read here). A
    resume reads them before it writes its own decision's and review's rows, so those writes
    ride on the events' statement instead of being sent before the read."""
    with events_batched():
        now = timezone.now()
        pending = result.review if result.interrupted else None
        thread.values = {"messages": messages}
        thread.status = Thread.Status.INTERRUPTED if result.interrupted else Thread.Status.IDLE
        thread.synced_at = now
        run.status = Run.Status.INTERRUPTED if result.interrupted else Run.Status.SUCCEEDED
        run.reply = result.reply or ""
        run.finished_at = now
        run.remote_run_id = run.remote_run_id or str(getattr(result, "run_id", None) or "")
        record_event(thread, f"run_{run.status}", run=run, reply=run.reply)
        mirror_pending(thread, run, pending, unapplied=unapplied)
        record_deliveries(thread, messages, run=run)
        # Queued last, after the reads and the review's insert, so they ride on the events'
        # statement (a write queued before another statement is sent first, on its own).
        writes.save(thread, ["values", "status", "synced_at", "updated_at"])
        writes.save(run, ["status", "reply", "finished_at", "remote_run_id"])
    return run


def _interaction(pending: Any) -> dict[str, Any] | None:
    if isinstance(getattr(pending, "interaction", None), dict):
        return dict(pending.interaction)
    for interrupt in getattr(pending, "raw_interrupts", None) or []:
        value = interrupt.get("value") if isinstance(interrupt, dict) else None
        if isinstance(value, dict) and value.get("type") == "interaction":
            return dict(value.get("interaction") or {})
    return None


def _review_fields(thread: Thread, pending: Any) -> dict[str, Any]:
    interrupt_ids = list(getattr(pending, "interrupt_ids", None) or [])
    if not interrupt_ids and pending.interrupt_id:
        interrupt_ids = [pending.interrupt_id]
    reply = pending.reply
    if reply is not None and dataclasses.is_dataclass(reply) and not isinstance(reply, type):
        reply = dataclasses.asdict(reply)
    elif reply is not None and not isinstance(reply, dict):
        reply = {
            k: getattr(reply, k, None)
            for k in ("content", "allowed_decisions", "description", "interrupt_id", "message_id")
        }
    fields: dict[str, Any] = {
        "kind": pending.kind,
        "interrupt_ids": interrupt_ids,
        "payload": {"tool_calls": list(pending.tool_calls or []), "reply": reply},
    }
    schemas = rules.edit_schemas(pending)
    if schemas:  # what an edit of each call is checked against (not part of its digest)
        fields["payload"]["args_schemas"] = schemas
    interaction = _interaction(pending)
    if fields["kind"] in rules.DIALECT_KINDS:
        # Pauses of a graph of its own (§9): each pause as the reviewer reads and answers it.
        fields["payload"] = {
            "pauses": [dataclasses.asdict(p) for p in getattr(pending, "pauses", None) or []],
            "problem": getattr(pending, "problem", None),
            "error": getattr(pending, "error", None),
        }
        fields["digest"] = rules.review_digest(fields["kind"], fields["payload"])
    elif interaction is not None:
        # The column holds 128 (the API limit); a longer id is flagged in the problems below.
        interaction_id = str(interaction.get("interactionId") or "")[:128]
        previous = Review.objects.filter(thread=thread, interaction_id=interaction_id).count()
        fields.update(
            kind=interaction.get("kind") or Review.Kind.QUESTION,
            payload={"interaction": interaction},
            interaction_id=interaction_id,
            revision=previous + 1,
            digest=rules.interaction_digest(interaction),
        )
        problems = rules.interaction_problems(interaction, _operation_exists)
        if problems:  # e.g. a plan step no operation runs
            fields["payload"]["problems"] = problems
    else:
        fields["digest"] = rules.review_digest(fields["kind"], fields["payload"])
    expires_at, problems = rules.pause_expiry(getattr(pending, "raw_interrupts", None) or [])
    for problem in problems:  # set aside: the review keeps its rule's deadline, if any
        logger.warning("Thread %s: %s; ignored", thread.thread_id, problem)
    fields["expires_at"] = expires_at
    return fields


def _operation_exists(name: str) -> bool:
    return get_operation(name) is not None


def mirror_pending(
    thread: Thread, run: Run | None, pending: Any, *, unapplied: list[Review] | None = None
) -> Review | None:
    """Make the local pending review match the server's pause ``pending`` (None: no pause).
    ``unapplied``: as :func:`record_result` takes it."""
    # One query: the reviews whose pause the server may still show, newest first
    # (rules.is_unapplied): a review already decided but not yet applied is the same one, and
    # so is an interaction decided (answered, accepted, ...) whose decision is not applied yet.
    # The rules' stamp the thread's lock took, for this mirror only.
    stamp = getattr(thread, RULES_STAMP, None)
    setattr(thread, RULES_STAMP, None)
    granted = getattr(thread, GRANTS_STAMP, None)
    setattr(thread, GRANTS_STAMP, None)
    if unapplied is None:
        unapplied = unapplied_reviews(thread)
    # At most one is pending (nitro_assistants_one_pending_review).
    current = next((r for r in unapplied if r.status == Review.Status.PENDING), None)
    if pending is None:
        if current is not None:
            supersede(current, reason="vanished")
        return None
    fields = _review_fields(thread, pending)
    interrupt_ids = set(fields["interrupt_ids"])
    for known in unapplied:
        if set(known.interrupt_ids) == interrupt_ids:
            return _stuck(known, run, fields)
    if fields["payload"].get("error") and fields["kind"] in rules.DIALECT_KINDS:
        # Still stuck on a pause already shown as failed: the same review, failed once.
        for failed in thread.reviews.filter(status=Review.Status.FAILED).order_by("-pk")[:5]:
            if set(failed.interrupt_ids) == interrupt_ids:
                return failed
    if current is not None:
        supersede(current, reason="replaced")
    # The rules are read before the review is queued: with no write queued, the read sends none
    # first.
    rule_set = ruleset(stamp)
    live = grants.live_grants(granted) if fields["kind"] == rules.TOOL_CALLS else None
    review = _new_review(thread, run, fields)
    if (
        current is not None
        and review.interaction_id
        and current.interaction_id == review.interaction_id
    ):
        _carry_claim(current, review)
    record_event(thread, "review_requested", review=review, run=run, kind=review.kind)
    send_on_commit(signals.review_requested, Review, review=review, thread=thread, run=run)
    review = _stuck(review, run, fields)
    if review.status == Review.Status.PENDING:  # a stuck pause is never decided by a policy
        row = review_mirrored(review, rule_set)  # the policy rules: a handling, or a decision
        if live is not None:  # a grant covering every call: a decision after commit
            grants.review_mirrored(review, row.handling if row is not None else DEFAULT, live)
    return review


def unapplied_reviews(thread: Thread) -> list[Review]:
    """The thread's reviews whose pause the server may still show (:func:`rules.is_unapplied
    <nitro_assistants.rules.is_unapplied>`): pending or decided, or whose decision is not
    applied yet; newest first (a decision is one per review: no duplicates).

    Read after the thread's row lock, which the caller holds (``select_for_update``, taken in
    a statement before this one): under READ COMMITTED each statement sees what was committed
    before it started, so this read sees what the lock's previous holder committed (a new
    message, a sync's or another run's mirror), whatever that holder wrote."""
    unapplied = _UNAPPLIED.all(thread.pk)
    for review in unapplied:  # as ``thread.reviews`` gives them: their thread is this one
        review.thread = thread
    return unapplied


def _unapplied(thread_id: int) -> QuerySet[Review]:
    return (
        Review.objects.filter(thread_id=thread_id)
        .filter(
            Q(status__in=sorted(rules.UNAPPLIED_STATUSES))
            | Q(decision__outcome=Decision.Outcome.PENDING)
        )
        .order_by("-pk")
    )


#: :func:`unapplied_reviews`' query, compiled once per connection (:mod:`.sql.reads`): it is
#: sent by every mirror of a run and of a resume, and compiling it cost more CPU than running it.
_UNAPPLIED = reads.Rows(_unapplied, [Review._meta.get_field("thread")])


def _carry_claim(old: Review, new: Review) -> None:
    """A new revision of the interaction someone is working on: their live claim moves to it,
    lease and all. One statement, in the transaction creating the revision (nobody can claim
    the new row before it commits); a take-over of the old revision racing it holds the claim's
    row, so this waits for it and moves the claim as it then stands. Only for a revision: a
    tool-call or reply review costs no statement."""
    now = timezone.now()
    Claim.objects.filter(review_id=old.pk, expires_at__gt=now).update(
        review_id=new.pk, changed_at=now
    )


def _stuck(review: Review, run: Run | None, fields: dict[str, Any]) -> Review:
    """A pause the graph refused an answer on and is stuck on (docs/protocol.md §9): the review
    fails with the graph's error (never decidable), the thread is in error, ``run_failed``."""
    error = (
        (fields.get("payload") or {}).get("error") if review.kind in rules.DIALECT_KINDS else None
    )
    if not error or review.status != Review.Status.PENDING:
        return review
    review.payload = {**review.payload, "error": error}
    review.save(update_fields=["payload"])
    transition(review, rules.FAILED, run=run, error=error)
    thread = review.thread
    Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.ERROR)
    thread.status = Thread.Status.ERROR
    failed = run or thread.runs.order_by("-created_at").first()
    if failed is not None:
        send_on_commit(signals.run_failed, Run, run=failed, thread=thread, error=error)
    return review


__all__ = ["mirror_pending", "record_result", "supersede", "unapplied_reviews"]
