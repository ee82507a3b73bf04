"""Runs: asking the assistant for a turn, waiting for it (or not), and mirroring what came back."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.core import signing
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from nitro_assistants import signals
from nitro_assistants.client import RunResult
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import NitroAssistantsError, RunError, RunsStoppedError
from nitro_assistants.models import Event, Run, Thread
from nitro_assistants.services import clients, sql, stops
from nitro_assistants.services.audit import (
    build_event,
    events_batched,
    record_event,
    send_on_commit,
)
from nitro_assistants.services.chain_append import new_chain, start_thread
from nitro_assistants.services.clients import RUN_KEY, find_remote_run, is_transient
from nitro_assistants.services.enqueue import enqueue
from nitro_assistants.services.errors import clean_error, error_text
from nitro_assistants.services.lifecycle import close_failed_decision, supersede_pending_review
from nitro_assistants.services.mirror import lock_thread, record_result
from nitro_assistants.services.sql import reads, writes

WEBHOOK_SALT = "nitro_assistants.webhook"
ACTIVE_REMOTE_STATUSES = frozenset({"pending", "running"})
ENDED_REMOTE_STATUSES = frozenset({"success", "interrupted"})

#: A run with its thread and whether a stop may refuse it, not locked (:func:`claim_run`).
_RUN = reads.Read(
    lambda: Run.objects.select_related("thread").annotate(
        **{stops.SUSPECTED: stops.suspected_for_run()}
    )
)

#: A run locked (only its row) with its thread: compiled once (:mod:`.sql.reads`, issue 21).
_LOCKED_RUN = reads.Read(
    lambda: (
        Run.objects.select_for_update(of=("self",), no_key=True)
        .select_related("thread")
        # Whether a stop may refuse it, in the same statement (execute_run asks no more when not).
        .annotate(**{stops.SUSPECTED: stops.suspected_for_run()})
    )
)


def _normalize_messages(messages: Iterable[Any] | str) -> list[dict[str, Any]]:
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    normalized = [
        dict(m) if isinstance(m, dict) else {"role": "user", "content": str(m)} for m in messages
    ]
    if not normalized:
        raise RunError("A run needs at least one message.")
    return normalized


def start_run(
    thread: Thread | str,
    messages: Iterable[Any] | str,
    context: dict[str, Any] | None = None,
    user: Any = None,
    metadata: dict[str, Any] | None = None,
) -> Run:
    """Record a run of ``thread`` (or of a new thread of the assistant key given) and enqueue it
    after commit. A review pending on the thread is superseded first: the new customer message
    discards the remote pause too (docs/protocol.md §4).

    ``metadata`` describes the thread (who the customer is, which order): a new thread is
    created with it, here and on the server (by the run that creates it there, no request of
    its own); given for an existing thread it is merged into the thread's, here in the same
    UPDATE as the context and on the server before the run (``PATCH /threads/{id}``)."""
    payload = _normalize_messages(messages)
    if metadata is not None and not isinstance(metadata, dict):
        raise RunError("A thread's metadata is a dict.")
    changed: list[str] = []
    if (
        isinstance(thread, str)
        and sql.postgresql(Thread)
        # A host's save receivers see the thread and the run saved as on every database.
        and not any(writes.watched(model) for model in (Thread, Run, Event))
    ):
        return _start_new_thread(thread, payload, context, user, metadata)
    # A stop in force refuses the run before anything is stored (RunsStoppedError).
    if isinstance(thread, str):
        stops.check_run(None, thread)
    else:
        stops.check_run(thread, thread.assistant_key)
    with transaction.atomic(), events_batched():
        if isinstance(thread, str):
            clients.assistant_for(
                thread
            )  # unknown key: UnknownAssistantError before anything is stored
            # Its audit chain starts here: the first append inserts the head, no read first.
            thread = new_chain(
                Thread.objects.create(
                    assistant_key=thread,
                    opened_by=user if getattr(user, "pk", None) else None,
                    status=Thread.Status.BUSY,  # a run is requested
                    context=context or {},
                    metadata=metadata or {},
                )
            )
            record_event(thread, "thread_opened", actor=user, assistant_key=thread.assistant_key)
        else:
            thread = Thread.objects.select_for_update(no_key=True).get(pk=thread.pk)
            if context is not None:
                thread.context = context
                changed.append("context")
            if metadata:
                thread.metadata = {**(thread.metadata or {}), **metadata}
                changed.append("metadata")
            # A new thread has nothing pending yet.
            supersede_pending_review(thread, reason="new_message", actor=user)
            # A run is requested: the thread is busy until the run's outcome is mirrored. A new
            # message changes the thread (updated_at) even when nothing else did. Queued last, it
            # rides on the events' statement.
            thread.status = Thread.Status.BUSY
            writes.save(thread, [*changed, "status", "updated_at"])
        run_input: dict[str, Any] = {"messages": payload}
        if "metadata" in changed:
            # For the worker to merge into the server's thread before the run (one the server
            # does not have yet is created by the run, with all of Thread.metadata).
            run_input["thread_metadata"] = metadata
        # Rides on the events' statement (:mod:`.sql.writes`): its pk is made here.
        run = writes.insert(
            Run(
                thread=thread,
                kind=Run.Kind.RUN,
                input=run_input,
                requested_by=user if getattr(user, "pk", None) else None,
            )
        )
        record_event(thread, "run_requested", run=run, actor=user, messages=payload)
        enqueue("nitro_assistants.run_thread", str(run.pk))
    return run


def _start_new_thread(
    key: str,
    payload: list[dict[str, Any]],
    context: dict[str, Any] | None,
    user: Any,
    metadata: dict[str, Any] | None,
) -> Run:
    """:func:`start_run` for a new thread on PostgreSQL: the thread, its run and their two
    events are one statement (:func:`nitro_assistants.services.chain_append.start_thread`),
    which writes nothing while a stop refuses the run: then the stop is read to say who stopped
    what and why (RunsStoppedError)."""
    clients.assistant_for(key)  # unknown key: UnknownAssistantError before anything is stored
    person = user if getattr(user, "pk", None) else None
    thread = Thread(
        assistant_key=key,
        opened_by=person,
        status=Thread.Status.BUSY,  # a run is requested
        context=context or {},
        metadata=metadata or {},
    )
    run = Run(thread=thread, kind=Run.Kind.RUN, input={"messages": payload}, requested_by=person)
    events = [
        build_event(thread, "thread_opened", actor=user, assistant_key=key),
        build_event(thread, "run_requested", run=run, actor=user, messages=payload),
    ]
    # Refused, the stop is read to be named; one resumed between the two is tried again, once.
    for _ in range(2):
        if start_thread(thread, [run], events, unless=stops.refusing_runs(None, key)):
            break
        stops.check_run(None, key)
    else:
        raise RunsStoppedError("New runs are refused: a stop is in force.")
    enqueue("nitro_assistants.run_thread", str(run.pk))
    return run


def webhook_url(run: Run) -> str | None:
    """The signed URL the server POSTs to when a background run ends, or None to poll."""
    base = app_settings.WEBHOOK_URL
    if not base:
        return None
    token = signing.Signer(key=app_settings.WEBHOOK_SECRET, salt=WEBHOOK_SALT).sign(str(run.pk))
    return f"{base}{'&' if '?' in base else '?'}token={token}"


def run_from_webhook_token(token: str) -> uuid.UUID:
    """The Run pk a webhook token names; ``signing.BadSignature`` when forged."""
    value = signing.Signer(key=app_settings.WEBHOOK_SECRET, salt=WEBHOOK_SALT).unsign(token)
    return uuid.UUID(value)


def execute_run(run: Run | uuid.UUID | str) -> Run:
    """Run it on the server, once: in "wait" mode one ``runs/wait`` (the server subscribes to the
    run before it starts, so its end is never missed) and mirror the outcome; in "background"
    mode create the run and return at once (the webhook or the poll collects it). A retry finds
    the run it already created by its metadata instead of creating another."""
    pk = run.pk if isinstance(run, Run) else run
    run = claim_run(pk)
    if run.finished:
        return run
    stopped = None
    if getattr(run, stops.SUSPECTED, True) is not False:
        stopped = stops.stop_for_run(run.thread, run.thread.assistant_key)
    if stopped is not None:  # queued before a stop: never sent
        return fail_run(run, f"New runs are refused: {stopped.explanation}")
    assistant = clients.assistant_for(run.thread.assistant_key)
    try:
        if app_settings.RUN_MODE == "background":
            return _start_in_background(run, assistant)
        return _run_and_wait(run, assistant)
    except NitroAssistantsError as exc:
        if is_transient(exc):
            raise
        return fail_run(run, _error_text(exc))


def _count_attempt(pk: Any) -> bool | None:
    """Count an attempt at an unfinished run and mark it running: True for its first attempt,
    False for a later one, None when it is finished (nothing counted). A compare-and-set
    (``QuerySet.update()``): the UPDATE waits for a delivery of this run still going on, which
    holds the run's row (:func:`_run_and_wait`), then finds the run finished and changes
    nothing; of two deliveries at once, one counts the first attempt."""
    now = timezone.now()
    unfinished = Run.objects.filter(pk=pk).exclude(status__in=Run.FINISHED)
    if unfinished.filter(attempts=0).update(attempts=1, status=Run.Status.RUNNING, started_at=now):
        return True
    if unfinished.update(
        attempts=F("attempts") + 1,
        status=Run.Status.RUNNING,
        started_at=Coalesce("started_at", Value(now)),
    ):
        return False
    return None


def claim_run(pk: Any) -> Run:
    """Count an attempt at a run and mark it running, committed before anything is sent: a later
    delivery that sees ``attempts > 1`` looks for the remote run first. The first attempt
    records ``run_started``, once the attempt is counted.

    Three statements, no transaction: the attempt counted (:func:`_count_attempt`), the run read
    with its thread, and ``run_started`` appended to the thread's chain (its own statement). A
    worker killed between the count and the append leaves the attempt without ``run_started``:
    the next delivery counts attempt 2 and records none, as it records none after a worker died
    on the server call. The thread was marked busy when the run was requested
    (:func:`start_run`)."""
    first = _count_attempt(pk)
    run = _RUN.get(pk)
    if first:
        record_event(run.thread, "run_started", run=run)
    return run


def _run_and_wait(run: Run, assistant: Any) -> Run:
    with transaction.atomic():
        # Held while the run goes on (the worker waits for it anyway), so a second delivery of
        # this task waits, then finds it finished; only this run's row: the thread is not held up.
        run = _LOCKED_RUN.get(run.pk)
        if run.finished:
            return run
        thread_id = str(run.thread.thread_id)
        if not run.remote_run_id and run.attempts > 1:
            remote = find_remote_run(assistant, thread_id, {RUN_KEY: str(run.pk)})
            if remote is not None:
                run.remote_run_id = str(remote["run_id"])
                run.save(update_fields=["remote_run_id"])
        if run.remote_run_id:  # created by an attempt that died: read its outcome
            return collect_turn(run, wait=True)
        _send_thread_metadata(run, assistant)
        messages = run.input.get("messages") or []
        result = assistant.run(
            thread_id=thread_id,
            messages=messages,
            context=run.thread.context or {},
            metadata={RUN_KEY: str(run.pk)},
            known_thread=len(messages) > 1 and _thread_known(run),
            thread_metadata=run.thread.metadata or None,
        )
        history = result.messages or assistant.thread_messages(thread_id=thread_id)
        # Only now the thread: a new message on it was not held up while the run went on.
        lock_thread(run.thread, paused=result.interrupted)
        record_result(run.thread, run, result, history)
    return run


def _send_thread_metadata(run: Run, assistant: Any) -> None:
    """Metadata the host gave for a thread that already existed: merged into the server's thread
    before the run (a thread the server does not have yet gets it from the run creating it)."""
    changed = run.input.get("thread_metadata")
    if changed:
        assistant.update_thread(str(run.thread.thread_id), changed)


def _thread_known(run: Run) -> bool:
    """True once an earlier run of the thread reached the server (its history is there)."""
    return run.thread.runs.exclude(pk=run.pk).exclude(remote_run_id="").exists()


def _start_in_background(run: Run, assistant: Any) -> Run:
    with transaction.atomic():
        # Held while the run is created, so two deliveries of this task never both create it.
        run = _LOCKED_RUN.get(run.pk)
        if run.finished:
            return run
        thread = run.thread
        if not run.remote_run_id:
            remote = None
            if run.attempts > 1:
                remote = find_remote_run(assistant, str(thread.thread_id), {RUN_KEY: str(run.pk)})
            if remote is None:
                _send_thread_metadata(run, assistant)
                messages = run.input.get("messages") or []
                remote = assistant.start_run(
                    thread_id=str(thread.thread_id),
                    messages=messages,
                    context=thread.context or {},
                    metadata={RUN_KEY: str(run.pk)},
                    webhook=webhook_url(run),
                    known_thread=len(messages) > 1 and _thread_known(run),
                    thread_metadata=thread.metadata or None,
                )
            run.remote_run_id = str(remote["run_id"])
            run.save(update_fields=["remote_run_id"])
    if not app_settings.WEBHOOK_URL:
        enqueue("nitro_assistants.collect_run", str(run.pk), countdown=1)
    return run


def collect_turn(run: Run | uuid.UUID | str, *, wait: bool = True) -> Run:
    """Read the outcome of a created remote run (a turn, not a resume: see
    :func:`nitro_assistants.services.resumes.collect_run`) and mirror it. With ``wait=False`` a
    run still going on the server is left alone (the caller polls again later)."""
    pk = run.pk if isinstance(run, Run) else run
    run = Run.objects.select_related("thread").get(pk=pk)
    if run.finished or not run.remote_run_id:
        return run
    thread_id = str(run.thread.thread_id)
    assistant = clients.assistant_for(run.thread.assistant_key)
    try:
        status = None
        if not wait or app_settings.RUN_MODE == "background":
            remote = assistant.get_run(thread_id=thread_id, run_id=run.remote_run_id)
            status = remote.get("status")
            if status in ACTIVE_REMOTE_STATUSES and not wait:
                return run
        if status in ENDED_REMOTE_STATUSES:
            # Ended well: read the thread's state. Joining an ended run costs the in-memory
            # runtime ~0.5 s of queue polling; an error still goes through join, which reports it.
            state = assistant.thread_state(thread_id=thread_id)
            values = state.get("values") or {}
            result = RunResult.build(
                values,
                interrupts=state.get("interrupts") or [],
                messages=values.get("messages") or [],
                run_id=run.remote_run_id,
            )
        else:
            result = assistant.join_run(thread_id=thread_id, run_id=run.remote_run_id)
        messages = result.messages or assistant.thread_messages(thread_id=thread_id)
    except NitroAssistantsError as exc:
        if is_transient(exc):
            raise
        return fail_run(run, _error_text(exc))
    with transaction.atomic():
        run = _LOCKED_RUN.get(pk)
        if run.finished:  # the webhook and the poll both arrived: mirror once
            return run
        thread = Thread.objects.select_for_update(no_key=True).get(pk=run.thread_id)
        record_result(thread, run, result, messages)
    return run


def fail_run(run: Run | uuid.UUID | str, error: str) -> Run:
    """Mark a run failed for good and send ``run_failed`` (once)."""
    pk = run.pk if isinstance(run, Run) else run
    error = clean_error(error)  # storable and secret-free, or recording the failure fails too
    with transaction.atomic():
        run = _LOCKED_RUN.get(pk)
        if run.finished:
            return run
        run.status = Run.Status.FAILED
        run.error = error
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "error", "finished_at"])
        thread = run.thread
        Thread.objects.filter(pk=thread.pk).update(status=Thread.Status.ERROR)
        record_event(thread, "run_failed", run=run, error=error)
        if run.kind == Run.Kind.RESUME:
            close_failed_decision(run, error)
        send_on_commit(signals.run_failed, Run, run=run, thread=thread, error=error)
    return run


def _error_text(exc: BaseException) -> str:
    return error_text(exc)
