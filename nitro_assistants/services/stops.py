"""The stop button (issue 36): staff stop all assistants, one assistant, one tool or one thread,
with a reason. While a stop is in force new runs in its scope are refused (:func:`check_run`,
asked by ``start_run`` and again by the worker before a queued run is sent), runs going on are
cancelled on the Assistants server (its cancel endpoint), and pending reviews in its scope are
frozen: every way a review ends (a person's decision from any channel, a dismissal, a policy
rule, a deadline) asks :func:`check_review` and is refused with who stopped what and why.

Resuming is explicit and may be staged: :func:`resume` with ``stage="reviews"`` lets the
frozen reviews be decided again while new runs stay refused; ``stage="all"`` ends the stop.
The rows stay as the record; every step is in the audit chain and sends a signal."""

from __future__ import annotations

import logging
from typing import Any, Literal

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from nitro_assistants import signals
from nitro_assistants.exceptions import (
    InvalidArgumentError,
    ReviewsStoppedError,
    RunsStoppedError,
)
from nitro_assistants.models import Review, Run, Stop, Thread
from nitro_assistants.services import clients
from nitro_assistants.services.audit import record_event, send_on_commit
from nitro_assistants.services.errors import error_text

logger = logging.getLogger("nitro_assistants")

#: The permission to stop and resume (``Stop.Meta.permissions``).
STOP_PERMISSION = "nitro_assistants.stop_assistants"

Stage = Literal["reviews", "all"]


def _scope_of(thread: Thread) -> Q:
    """Stops whose scope covers ``thread`` as a whole (every scope but a tool's)."""
    return (
        Q(scope=Stop.Scope.ALL)
        | Q(scope=Stop.Scope.ASSISTANT, assistant=thread.assistant_key)
        | Q(scope=Stop.Scope.THREAD, thread_id=thread.pk)
    )


def _tools_of(review: Review) -> list[str]:
    """The names of the tools ``review`` holds calls to (an Agent Inbox pause's action too)."""
    names = [str(call.get("name") or "") for call in review.tool_calls]
    for pause in review.payload.get("pauses") or []:
        action = pause.get("action_request") if isinstance(pause, dict) else None
        if isinstance(action, dict) and action.get("action"):
            names.append(str(action["action"]))
    return [name for name in names if name]


def stop_for_review(review: Review) -> Stop | None:
    """The stop (the oldest) that freezes ``review``, None when there is none."""
    scope = _scope_of(review.thread)
    tools = _tools_of(review)
    if tools:
        scope |= Q(scope=Stop.Scope.TOOL, tool__in=tools)
    return (
        Stop.objects.filter(scope, reviews_resumed_at__isnull=True)
        .select_related("thread")
        .order_by("stopped_at", "pk")
        .first()
    )


def refusing_runs(thread: Thread | None, assistant_key: str) -> QuerySet[Stop]:
    """The stops that refuse a new run of ``thread`` (None: a new thread of ``assistant_key``).
    A tool's stop refuses no run (a run names no tool); it freezes the reviews of calls to the
    tool instead."""
    scope = Q(scope=Stop.Scope.ALL) | Q(scope=Stop.Scope.ASSISTANT, assistant=assistant_key)
    if thread is not None:
        scope = _scope_of(thread)
    return Stop.objects.filter(scope, resumed_at__isnull=True)


def stop_for_run(thread: Thread | None, assistant_key: str) -> Stop | None:
    """The stop (the oldest) that refuses a new run of ``thread`` (None: a new thread of
    ``assistant_key``), None when there is none."""
    return (
        refusing_runs(thread, assistant_key)
        .select_related("thread")
        .order_by("stopped_at", "pk")
        .first()
    )


#: The annotation :func:`suspected_for_review` and :func:`suspected_for_run` give a row read
#: for a decision or a run: False when no stop can be in force for it, so the check costs no
#: statement of its own on the common path (issue 35's budget).
SUSPECTED = "stop_suspected"


def suspected_for_review(thread: str = "thread") -> Exists:
    """Whether a stop may freeze the review of each row (its thread reached by ``thread``): one
    of everything, its assistant or its thread, or any tool's (then :func:`stop_for_review`
    reads which)."""
    return Exists(
        Stop.objects.filter(reviews_resumed_at__isnull=True).filter(
            Q(scope=Stop.Scope.ALL)
            | Q(scope=Stop.Scope.TOOL)
            | Q(scope=Stop.Scope.ASSISTANT, assistant=OuterRef(f"{thread}__assistant_key"))
            | Q(scope=Stop.Scope.THREAD, thread_id=OuterRef(f"{thread}_id"))
        )
    )


def suspected_for_run(thread: str = "thread") -> Exists:
    """Whether a stop may refuse a run of each row's thread (see :func:`suspected_for_review`)."""
    return Exists(
        Stop.objects.filter(resumed_at__isnull=True).filter(
            Q(scope=Stop.Scope.ALL)
            | Q(scope=Stop.Scope.ASSISTANT, assistant=OuterRef(f"{thread}__assistant_key"))
            | Q(scope=Stop.Scope.THREAD, thread_id=OuterRef(f"{thread}_id"))
        )
    )


def check_review(review: Review) -> None:
    """Raise ``ReviewsStoppedError`` (who stopped what and why) if a stop freezes ``review``.
    A review read with :data:`SUSPECTED` False is not frozen: nothing more is read."""
    if getattr(review, SUSPECTED, True) is False:
        return
    found = stop_for_review(review)
    if found is not None:
        raise ReviewsStoppedError(f"This review is frozen: {found.explanation}", stop=found)


def check_run(thread: Thread | None, assistant_key: str) -> None:
    """Raise ``RunsStoppedError`` (who stopped what and why) if a stop refuses a new run."""
    found = stop_for_run(thread, assistant_key)
    if found is not None:
        raise RunsStoppedError(f"New runs are refused: {found.explanation}", stop=found)


def in_force() -> QuerySet[Stop]:
    """Stops not fully resumed (the admin's banner lists them)."""
    return Stop.objects.filter(resumed_at__isnull=True).select_related("thread")


def validate(scope: str, assistant: str, tool: str, thread: Thread | None, reason: str) -> None:
    """Raise ``InvalidArgumentError`` for a bad scope, or a missing target or reason (the admin
    form asks it too)."""
    if scope not in Stop.Scope.values:
        allowed = ", ".join(Stop.Scope.values)
        raise InvalidArgumentError(f"Invalid stop scope `{scope}`; allowed: {allowed}")
    if not reason.strip():
        raise InvalidArgumentError("A stop needs a reason")
    needed = {
        Stop.Scope.ASSISTANT: ("assistant", assistant),
        Stop.Scope.TOOL: ("tool", tool),
        Stop.Scope.THREAD: ("thread", thread),
    }.get(Stop.Scope(scope))
    if needed is not None and not needed[1]:
        raise InvalidArgumentError(f"A stop of one {needed[0]} needs the {needed[0]}")


def _username(user: Any) -> str:
    if user is None or not getattr(user, "pk", None):
        return ""
    return str(user.get_username())


def stop(
    user: Any,
    *,
    scope: str,
    reason: str,
    assistant: str = "",
    tool: str = "",
    thread: Thread | None = None,
) -> Stop:
    """Stop ``scope`` (``all``, ``assistant``, ``tool``, ``thread``; the target named by
    ``assistant``, ``tool`` or ``thread``) for ``reason``, then cancel the runs going on in its
    scope on the server once the stop is committed (at once outside a transaction; the returned
    row then has ``cancelled_runs`` and ``cancel_failures``). A cancel the server refuses or
    does not answer leaves the stop in force here, recorded in ``Stop.cancel_failures``, the
    audit chain (``stop_cancel_failed``) and the admin's banner. Raises
    ``InvalidArgumentError`` for a bad scope, a missing target or reason. Who may stop is the
    caller's question (the ``stop_assistants`` permission in the admin and the command)."""
    reason = str(reason or "")
    validate(scope, assistant, tool, thread, reason)
    with transaction.atomic():
        row = Stop.objects.create(
            scope=scope,
            assistant=assistant if scope == Stop.Scope.ASSISTANT else "",
            tool=tool if scope == Stop.Scope.TOOL else "",
            thread=thread if scope == Stop.Scope.THREAD else None,
            reason=reason,
            stopped_by=user if getattr(user, "pk", None) else None,
            stopped_by_name=_username(user),
        )
        record_event(
            row.thread,
            "assistants_stopped",
            actor=user,
            stop=row.pk,
            scope=row.scope,
            target=row.target,
            reason=reason,
        )
        # Once the stop is committed (the worker refuses queued runs from then on), in the
        # caller's transaction too (the admin's): no cancel goes out for a stop rolled back.
        transaction.on_commit(lambda: _stopped(row, user), robust=True)
    return row


def _stopped(row: Stop, user: Any) -> None:
    _cancel_runs(row, user)
    signals.stopped.send(
        sender=Stop, stop=row, cancelled=row.cancelled_runs, failures=row.cancel_failures
    )


def _running(row: Stop) -> QuerySet[Run]:
    """The runs going on in ``row``'s scope: those the server has (their remote id known), and
    runs a worker is waiting on (``runs/wait``: the server's id comes with its answer)."""
    runs = Run.objects.filter(
        status__in=[Run.Status.QUEUED, Run.Status.RUNNING], finished_at__isnull=True
    ).filter(~Q(remote_run_id="") | Q(status=Run.Status.RUNNING, kind=Run.Kind.RUN))
    if row.scope == Stop.Scope.ASSISTANT:
        runs = runs.filter(thread__assistant_key=row.assistant)
    elif row.scope == Stop.Scope.THREAD:
        runs = runs.filter(thread=row.thread)
    elif row.scope == Stop.Scope.TOOL:
        return runs.none()  # which run will call the tool is not known before it does
    return runs.select_related("thread").order_by("created_at", "pk")


def _cancel_runs(row: Stop, user: Any) -> None:
    """Cancel on the server the runs going on in ``row``'s scope (queued ones not sent yet are
    refused by the worker: :func:`check_run`). Each outcome is recorded on the stop and in the
    thread's audit chain."""
    cancelled: list[str] = []
    failures: list[dict[str, str]] = []
    for run in _running(row):
        thread = run.thread
        remote_id = run.remote_run_id
        try:
            assistant = clients.assistant_for(thread.assistant_key)
            if not remote_id:
                # A worker waits on it: the server's run is found by the id our run sent.
                found = clients.find_remote_run(
                    assistant, str(thread.thread_id), {clients.RUN_KEY: str(run.pk)}
                )
                if found is None:  # not sent yet: the worker's own check refuses it
                    continue
                remote_id = str(found.get("run_id") or "")
            assistant.cancel_run(str(thread.thread_id), remote_id)
        except Exception as exc:  # any failure is shown; the stop holds here
            error = error_text(exc)
            failures.append({"run": remote_id or str(run.pk), "error": error})
            record_event(
                thread, "stop_cancel_failed", run=run, actor=user, stop=row.pk, error=error
            )
            logger.error("Stop %s could not cancel run %s: %s", row.pk, remote_id, error)
            continue
        cancelled.append(remote_id)
        record_event(thread, "run_cancelled", run=run, actor=user, stop=row.pk)
    if cancelled or failures:
        row.cancelled_runs, row.cancel_failures = cancelled, failures
        Stop.objects.filter(pk=row.pk).update(cancelled_runs=cancelled, cancel_failures=failures)


def resume(row: Stop | int, user: Any, *, stage: Stage = "all") -> Stop:
    """Resume a stop: ``stage="reviews"`` lets its frozen reviews be decided again (new runs
    stay refused), ``stage="all"`` ends it. The stop's row is locked, so a resume racing another
    is applied once; resuming what is already resumed changes nothing (returned as it is).
    Raises ``InvalidArgumentError`` for another stage."""
    if stage not in ("reviews", "all"):
        raise InvalidArgumentError(f"Invalid resume stage `{stage}`; allowed: reviews, all")
    pk = row.pk if isinstance(row, Stop) else row
    with transaction.atomic():
        locked = Stop.objects.select_for_update(of=("self",)).select_related("thread").get(pk=pk)
        now = timezone.now()
        changed = []
        if locked.reviews_resumed_at is None:
            locked.reviews_resumed_at = now
            changed.append("reviews_resumed_at")
        if stage == "all" and locked.resumed_at is None:
            locked.resumed_at = now
            changed.append("resumed_at")
        if not changed:
            return locked
        locked.resumed_by = user if getattr(user, "pk", None) else None
        locked.save(update_fields=[*changed, "resumed_by"])
        record_event(
            locked.thread,
            "assistants_resumed",
            actor=user,
            stop=locked.pk,
            stage=stage,
            target=locked.target,
        )
        send_on_commit(signals.resumed, Stop, stop=locked, stage=stage)
    return locked


__all__ = [
    "STOP_PERMISSION",
    "SUSPECTED",
    "check_review",
    "check_run",
    "in_force",
    "resume",
    "stop",
    "stop_for_review",
    "stop_for_run",
    "suspected_for_review",
    "suspected_for_run",
    "validate",
]
