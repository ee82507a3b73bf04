"""Turning what the server answered into local rows. Callers hold the thread's row lock."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from django.db import connections, router
from django.utils import timezone

from nitro_assistants import rules, signals
from nitro_assistants.models import Claim, Decision, Review, Run, Thread
from nitro_assistants.operations import get_operation
from nitro_assistants.services import rows, writes
from nitro_assistants.services.audit import events_batched, record_event, send_on_commit
from nitro_assistants.services.deliveries import record_deliveries
from nitro_assistants.services.lifecycle import supersede, transition
from nitro_assistants.services.policies import review_mirrored, ruleset

#: Set on a Run by ``runs.claim_run`` (PostgreSQL): an id taken from the reviews' sequence for
#: the review its outcome may pause on. With it, that review's INSERT rides on the mirror's
#: events statement (:mod:`.writes`) instead of being a statement of its own; unused, it is a
#: gap in the ids.
REVIEW_ID = "_nitro_review_id"


def record_result(thread: Thread, run: Run, result: Any, messages: list[dict[str, Any]]) -> Run:
    """Mirror a finished (or paused) run: the thread snapshot, its review, its deliveries."""
    with events_batched():
        now = timezone.now()
        pending = result.review if result.interrupted else None
        thread.values = {"messages": messages}
        thread.status = Thread.Status.INTERRUPTED if result.interrupted else Thread.Status.IDLE
        thread.synced_at = now
        # Both UPDATEs go as one statement with the open reviews' read (_open_reviews): the
        # thread's row is locked by it before anything is written, and the reviews are read as
        # the lock's previous holder left them.
        writes.save(thread, ["values", "status", "synced_at", "updated_at"])
        run.status = Run.Status.INTERRUPTED if result.interrupted else Run.Status.SUCCEEDED
        run.reply = result.reply or ""
        run.finished_at = now
        run.remote_run_id = run.remote_run_id or str(getattr(result, "run_id", None) or "")
        writes.save(run, ["status", "reply", "finished_at", "remote_run_id"])
        record_event(thread, f"run_{run.status}", run=run, reply=run.reply)
        mirror_pending(thread, run, pending)
        record_deliveries(thread, messages, run=run)
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
    return fields


def _operation_exists(name: str) -> bool:
    return get_operation(name) is not None


def mirror_pending(thread: Thread, run: Run | None, pending: Any) -> Review | None:
    """Make the local pending review match the server's pause ``pending`` (None: no pause)."""
    # One query: the open reviews, newest first. A review already decided but not yet applied
    # still shows on the server: it is the same one. So is an interaction decided (answered,
    # accepted, ...) whose decision is not applied yet.
    open_reviews = _open_reviews(thread)
    # At most one is pending (nitro_assistants_one_pending_review).
    current = next((r for r in open_reviews if r.status == Review.Status.PENDING), None)
    if pending is None:
        if current is not None:
            supersede(current, reason="vanished")
        return None
    fields = _review_fields(thread, pending)
    ids = set(fields["interrupt_ids"])
    for known in open_reviews:
        if set(known.interrupt_ids) == ids:
            return _stuck(known, run, fields)
    if fields["payload"].get("error") and fields["kind"] in rules.DIALECT_KINDS:
        # Still stuck on a pause already shown as failed: the same review, failed once.
        for failed in thread.reviews.filter(status=Review.Status.FAILED).order_by("-pk")[:5]:
            if set(failed.interrupt_ids) == ids:
                return failed
    if current is not None:
        supersede(current, reason="replaced")
    allocated = getattr(run, REVIEW_ID, None) if current is None else None
    # The rules are read before the review is queued (their read would send the queue first).
    rule_set = ruleset()
    if allocated is not None:
        # Queued with the events (nothing to supersede first: the one-pending constraint holds
        # whatever order the statement's writes take).
        setattr(run, REVIEW_ID, None)
        review = writes.insert(Review(pk=allocated, thread=thread, run=run, **fields))
    else:
        review = Review.objects.create(thread=thread, run=run, **fields)
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
        review_mirrored(review, rule_set)  # the policy rules: a handling, or a decision at once
    return review


def _open_reviews(thread: Thread) -> list[Review]:
    """The thread's reviews pending or decided, or whose decision is not applied yet, newest
    first: the query the ORM would send (a decision is one per review: no duplicates), written
    out so that it is not compiled on every mirror.

    A run's or a resume's mirror has the thread's UPDATE queued (:func:`record_result`), which
    takes the thread's lock the read must follow: on PostgreSQL the two go as one statement
    (:func:`.writes.send_with_read`), read again on its own only when someone wrote the thread
    after the statement's snapshot was taken (the lock's previous holder). That holds because
    whoever changes a thread's open reviews under its lock also writes its row (a run's and a
    sync's mirror, a resume, a new message, a failed run); a decide, a deadline or a claim
    takes only the review's row, which every write of this mirror checks again."""
    connection = connections[router.db_for_read(Review)]
    fetched = _read_with_writes(connection, thread)
    if fetched is None:
        sql, params = _open_sql(connection, thread)
        with connection.cursor() as cursor:
            table = connection.ops.quote_name(Review._meta.db_table)
            cursor.execute(f"{sql} ORDER BY {table}.{connection.ops.quote_name('id')} DESC", params)
            fetched = cursor.fetchall()
    found = rows.instances(Review, fetched, connection)
    for review in found:
        review.thread = thread  # as a related manager's rows have it
    return found


#: What makes a review open: its status, or its decision's outcome.
_OPEN_STATUSES = (str(Review.Status.PENDING), str(Review.Status.DECIDED))
_OPEN_OUTCOME = str(Decision.Outcome.PENDING)


def _open_sql(
    connection: Any, thread: Thread, *, also: str = "", with_decision: bool = False
) -> tuple[str, list[Any]]:
    """The SELECT of :func:`_open_reviews` (no ORDER BY) and its parameters: the review's
    columns in the model's order (what rows.instances reads), not the table's; ``also``, more
    SQL of ``OR <condition>`` that reads a review too (its parameters go after the ones
    returned); ``with_decision``, its decision's id and outcome after the review's columns."""
    qn = connection.ops.quote_name
    reviews, decisions = qn(Review._meta.db_table), qn(Decision._meta.db_table)
    columns = ", ".join(f"{reviews}.{qn(str(f.column))}" for f in Review._meta.concrete_fields)
    if with_decision:
        columns += f", {decisions}.{qn('id')} AS decision_pk, {decisions}.{qn('outcome')}"
    sql = (
        f"SELECT {columns} FROM {reviews} LEFT OUTER JOIN {decisions} "  # noqa: S608
        f"ON {decisions}.{qn('review_id')} = {reviews}.{qn('id')} "
        f"WHERE {reviews}.{qn('thread_id')} = %s AND ({reviews}.{qn('status')} IN (%s, %s) "
        f"OR {decisions}.{qn('outcome')} = %s{also})"
    )
    return sql, [thread.pk, *_OPEN_STATUSES, _OPEN_OUTCOME]


def _read_with_writes(connection: Any, thread: Thread) -> list[tuple[Any, ...]] | None:
    """:func:`_open_reviews`' rows read in the statement of the queued writes (None: read them
    on their own). The read sees none of those writes: a review or decision the queue updates
    is read whatever its state, with its decision's id and outcome, and is open or not as the
    queued status and outcome make it; one the queue inserts, or a review it writes that stays
    open (its other columns would be as before), is read again on its own."""
    queue = writes.pending(connection.alias)
    if queue is None or (Thread, thread.pk) not in queue.writes:
        return None
    written: dict[type[Any], dict[Any, dict[str, Any]]] = {Review: {}, Decision: {}}
    for (model, pk), write in queue.writes.items():
        if model in written:
            if write.insert:
                return None
            written[model][pk] = write.values
    qn = connection.ops.quote_name
    also = "".join(
        f" OR {qn(model._meta.db_table)}.{qn('id')} IN ({', '.join(['%s'] * len(pks))})"
        for model, pks in written.items()
        if pks
    )
    sql, params = _open_sql(connection, thread, also=also, with_decision=True)
    fetched = writes.send_with_read(
        connection.alias,
        (Thread, thread.pk),
        sql,
        [*params, *written[Review], *written[Decision]],
        order_by=f"found_rows.{qn('id')} DESC",
    )
    if fetched is None:
        return None
    kept: list[tuple[Any, ...]] = []
    for *review, decision_pk, outcome in fetched:
        status = written[Review].get(review[0], {}).get("status", review[_status_at()])
        outcome = written[Decision].get(decision_pk, {}).get("outcome", outcome)
        if status not in _OPEN_STATUSES and outcome != _OPEN_OUTCOME:
            continue
        if review[0] in written[Review]:
            return None  # still open once written: its other columns as the write left them
        kept.append(tuple(review))
    return kept


@functools.cache
def _status_at() -> int:
    """Where a review's status is in the rows of :func:`_open_sql`."""
    return [f.attname for f in Review._meta.concrete_fields].index("status")


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


__all__ = ["mirror_pending", "record_result", "supersede"]
