"""``Assistants``: the Python port of the Nitro Intelligence Assistants client (Ruby 4.1)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import requests

from nitro_assistants.client.http import (
    TRANSIENT_STATUSES,
    Timeout,
    Transport,
    TransportError,
    body_excerpt,
    detail_of,
)
from nitro_assistants.client.results import (
    DIALECT_KINDS,
    PendingReview,
    ResultShapeError,
    ReviewShapeError,
    RunResult,
    checked_id,
    is_interrupt_id,
    pending_review,
)
from nitro_assistants.client.review import Resume, build_resume, review_messages
from nitro_assistants.client.sse import ServerSentEvent, parse_sse
from nitro_assistants.exceptions import (
    ConfigurationError,
    NitroAssistantsError,
    ReviewSupersededError,
    RunError,
    ThreadInitializationError,
    ThreadResumptionError,
    ThreadStateError,
)

DEFAULT_USER_ID = "default-user"


def _error(
    cls: type[NitroAssistantsError], message: str, response: requests.Response | None = None
) -> NitroAssistantsError:
    status = response.status_code if response is not None else None
    transient = status is None or status in TRANSIENT_STATUSES
    return cls(message, transient=transient, status_code=status)


def _check_uuid(thread_id: str, error: type[NitroAssistantsError]) -> str:
    try:
        return str(uuid.UUID(str(thread_id)))
    except ValueError:
        raise error(f"thread_id must be a UUID; got {thread_id!r}") from None


def _run_failure(body: Mapping[str, Any]) -> str | None:
    """``"<error>: <message>"`` for a run that failed inside the graph (answered with a 200)."""
    failure = body.get("__error__")
    if failure is None:
        return None
    if not isinstance(failure, Mapping):
        return str(failure)
    parts = [str(failure[key]) for key in ("error", "message") if failure.get(key)]
    return ": ".join(parts) or "the run failed"


def _run_id(response: requests.Response, error: type[NitroAssistantsError]) -> str | None:
    location = response.headers.get("Content-Location", "")
    if "/runs/" not in location:
        return None
    return _checked_run_id(location.rstrip("/").rsplit("/", 1)[-1], error)


def _checked_run_id(value: Any, error: type[NitroAssistantsError]) -> str:
    try:
        return checked_id(value, "the run id the server gave")
    except ValueError as exc:
        raise error(str(exc)) from None


def _json(response: requests.Response, error: type[NitroAssistantsError], what: str) -> Any:
    """The JSON body of a successful ``response``; ``error`` when it is none (an HTML page from
    a proxy, a body nested deeper than Python can read)."""
    try:
        return response.json()
    except RecursionError:
        raise _error(error, f"{what} is nested too deeply to read", response) from None
    except ValueError:
        excerpt = body_excerpt(response)
        raise _error(
            error, f"the server sent {what} as a non-JSON body: {excerpt!r}", response
        ) from None


def _json_object(response: requests.Response, error: type[NitroAssistantsError], what: str) -> Any:
    body = _json(response, error, what)
    if not isinstance(body, dict):
        raise _error(error, f"{what} is {type(body).__name__}, not an object", response)
    return body


def _superseded(
    thread_id: str, interrupt_id: str | None, *, paused: bool = True
) -> ReviewSupersededError:
    where = f" on {interrupt_id}" if interrupt_id else ""
    state = f"no longer paused{where}" if paused or interrupt_id else "not paused"
    return ReviewSupersededError(
        f"Thread {thread_id} is {state}: another review already resumed it, or a new message "
        "superseded it",
        thread_id=thread_id,
        interrupt_id=interrupt_id,
    )


def _interrupts_of(
    state: Mapping[str, Any], thread_id: str, error: type[NitroAssistantsError]
) -> Any:
    """The pending interrupts of a thread state: its ``interrupts``, else its tasks'. Tasks
    that are not objects are an unreadable state (``error``), not a pause."""
    interrupts = state.get("interrupts")
    if isinstance(interrupts, list) or interrupts:
        return interrupts  # any shape is a pause pending_review reads
    tasks = state.get("tasks") or []
    if not isinstance(tasks, list) or not all(isinstance(task, dict) for task in tasks):
        raise error(f"Thread {thread_id}'s state is unreadable: its tasks are not objects")
    found: list[Any] = []
    for task in tasks:
        found.extend(task.get("interrupts") or [])
    return found


def _stuck_on(state: Mapping[str, Any]) -> str | None:
    """The graph's error when it refused an answer and the thread is stuck on the pause: a task
    with an ``error`` that still lists the interrupt (docs/protocol.md §9). ``status: "error"``
    alone says nothing: a thread can be in error with a pause still answerable."""
    tasks = state.get("tasks")
    if not isinstance(tasks, list):
        return None
    for task in tasks:
        if isinstance(task, dict) and task.get("error") and task.get("interrupts"):
            return str(task["error"])[:2000]
    return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Assistants:
    """A client for one Assistants server (LangGraph Agent Server API).

    ``run`` a turn, read what a thread is paused on with ``under_review``, answer it with
    ``review``. Validation errors are raised before any request is sent.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        user_id: str = DEFAULT_USER_ID,
        auth: str = "bearer",
        timeout: Timeout = (5.0, 300.0),
        *,
        retries: int = 3,
        backoff: float = 0.25,
        seed_as_node: str | None = "model",
        session: requests.Session | None = None,
        max_concurrent_requests: int | None = None,
    ) -> None:
        if not isinstance(api_key, str) or not api_key.strip():
            raise ConfigurationError("api_key must not be blank")
        if not isinstance(user_id, str) or not user_id.strip():
            raise ConfigurationError("user_id must not be blank")
        self.user_id = user_id
        self.seed_as_node = seed_as_node
        self.transport = Transport(
            base_url,
            api_key,
            auth=auth,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            session=session,
            max_concurrent_requests=max_concurrent_requests,
        )
        self._graph_ids: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<Assistants {self.transport.base_url} user_id={self.user_id!r}>"

    @property
    def base_url(self) -> str:
        return self.transport.base_url

    # -- runs ---------------------------------------------------------------------------------

    def run(
        self,
        thread_id: str,
        assistant_id: str,
        messages: list[dict[str, Any]],
        context: dict[str, Any] | None = None,
        known_thread: bool = False,
        metadata: dict[str, Any] | None = None,
        *,
        thread_metadata: dict[str, Any] | None = None,
    ) -> RunResult:
        """Run the last of ``messages`` on the thread and wait for it to end or pause.

        On a thread this client has not seen (``known_thread=False``) the earlier messages seed
        it once, when it is created; a thread that exists already keeps the history it has.
        ``thread_metadata`` goes on the thread if this run creates it (see
        :meth:`_prepare_thread`); :meth:`update_thread` changes an existing thread's.
        """
        if not messages:
            raise RunError("run needs at least one message")
        thread_id = _check_uuid(thread_id, RunError)
        body = self._run_body(assistant_id, messages[-1], context, metadata)
        self._prepare_thread(body, thread_id, assistant_id, messages, known_thread, thread_metadata)
        try:
            response = self.transport.request(
                "POST", f"/threads/{thread_id}/runs/wait", json=body, idempotent=False
            )
        except TransportError as exc:
            raise RunError(str(exc), transient=True) from None
        return self._result_of(response, thread_id, RunError)

    def _run_body(
        self,
        assistant_id: str,
        message: dict[str, Any] | None,
        context: dict[str, Any] | None,
        metadata: dict[str, Any] | None,
    ) -> dict[str, Any]:
        run_metadata = {"user_id": self.user_id, **(metadata or {})}
        return {
            "assistant_id": assistant_id,
            "input": {"messages": [message]} if message is not None else None,
            "context": context or {},
            "metadata": run_metadata,
            "config": {"metadata": run_metadata},
        }

    def _result_of(
        self,
        response: requests.Response,
        thread_id: str,
        error: type[NitroAssistantsError],
    ) -> RunResult:
        if not response.ok:
            raise _error(error, detail_of(response), response)
        if not response.content.strip():
            # runs/wait and join send blank lines while the run goes on; a server stopping
            # closes the response before the result: the run may still end (the retry joins it).
            raise error(
                "the server closed the response before the run's result",
                status_code=response.status_code,
                transient=True,
            )
        body = _json_object(response, error, "the run's result")
        if (failure := _run_failure(body)) is not None:
            raise error(self.transport.redact(failure), status_code=response.status_code)
        return self._build(body, thread_id, error, run_id=_run_id(response, error))

    def _build(
        self,
        values: dict[str, Any],
        thread_id: str,
        error: type[NitroAssistantsError],
        *,
        interrupts: list[dict[str, Any]] | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        messages = values.get("messages")
        pending = interrupts if interrupts is not None else values.get("__interrupt__")
        if pending and messages is None:
            # A per-call pause answers with its interrupts only: the messages are in the state.
            messages = self.thread_messages(thread_id)
        try:
            return RunResult.build(
                values, interrupts=pending or [], messages=messages or [], run_id=run_id
            )
        except ReviewShapeError as exc:
            raise error(f"Thread {thread_id} is paused on something unreadable: {exc}") from None
        except ResultShapeError as exc:
            raise error(f"Thread {thread_id} answered with something unreadable: {exc}") from None

    def start_run(
        self,
        thread_id: str,
        assistant_id: str,
        messages: list[dict[str, Any]] | None = None,
        context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        webhook: str | None = None,
        command: dict[str, Any] | None = None,
        known_thread: bool = False,
        *,
        thread_metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Create a background run (``POST /threads/{id}/runs``) and return the run object.

        Collect the outcome with :meth:`join_run`, a ``webhook``, or by reading the thread.
        """
        if not messages and command is None:
            raise RunError("start_run needs messages or a command")
        thread_id = _check_uuid(thread_id, RunError)
        body = self._run_body(assistant_id, messages[-1] if messages else None, context, metadata)
        if command is not None:
            body["command"] = command
            body["multitask_strategy"] = "reject"
        if webhook:
            body["webhook"] = webhook
        if messages:
            self._prepare_thread(
                body, thread_id, assistant_id, messages, known_thread, thread_metadata
            )
        try:
            response = self.transport.request(
                "POST", f"/threads/{thread_id}/runs", json=body, idempotent=False
            )
        except TransportError as exc:
            raise RunError(str(exc), transient=True) from None
        if not response.ok:
            raise _error(RunError, detail_of(response), response)
        return self._run_object(response, RunError)

    @staticmethod
    def _run_object(
        response: requests.Response, error: type[NitroAssistantsError]
    ) -> dict[str, Any]:
        run: dict[str, Any] = _json_object(response, error, "the run")
        run["run_id"] = _checked_run_id(run.get("run_id"), error)
        return run

    def join_run(self, thread_id: str, run_id: str) -> RunResult:
        """Wait for a background run and read its result (safe to repeat)."""
        thread_id = _check_uuid(thread_id, RunError)
        try:
            response = self.transport.request("GET", f"/threads/{thread_id}/runs/{run_id}/join")
        except TransportError as exc:
            raise RunError(str(exc), transient=True) from None
        result = self._result_of(response, thread_id, RunError)
        if result.interrupted or "__interrupt__" in result.raw:
            return result
        # A joined run reports its values without the pause: read the thread to see one.
        state = self.thread_state(thread_id)
        interrupts = _interrupts_of(state, thread_id, RunError)
        if interrupts:
            return self._build(
                state.get("values") or {}, thread_id, RunError, interrupts=interrupts, run_id=run_id
            )
        return result

    def get_run(self, thread_id: str, run_id: str) -> dict[str, Any]:
        """The run object (``status``: pending, running, success, error, interrupted, …)."""
        response = self._get(f"/threads/{_check_uuid(thread_id, RunError)}/runs/{run_id}", RunError)
        run: dict[str, Any] = self._run_object(response, RunError)
        return run

    def cancel_run(self, thread_id: str, run_id: str, *, action: str = "interrupt") -> None:
        """Cancel a pending or running run (``POST /threads/{id}/runs/{run_id}/cancel``).
        ``action="interrupt"`` stops it where it is (its checkpoint kept); ``"rollback"`` also
        deletes the run and its checkpoints. A run that has already ended is not an error (the
        server answers 404 or 409 for it then)."""
        thread_id = _check_uuid(thread_id, RunError)
        if action not in ("interrupt", "rollback"):
            raise RunError(f"Invalid cancel action `{action}`; allowed: interrupt, rollback")
        try:
            response = self.transport.request(
                "POST",
                f"/threads/{thread_id}/runs/{_checked_run_id(run_id, RunError)}/cancel",
                params={"action": action},
            )
        except TransportError as exc:
            raise RunError(str(exc), transient=True) from None
        if not response.ok and response.status_code not in (404, 409):
            raise _error(RunError, detail_of(response), response)

    def list_runs(self, thread_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The thread's runs, newest first, each with the ``metadata`` it was created with."""
        thread_id = _check_uuid(thread_id, RunError)
        response = self._get(f"/threads/{thread_id}/runs", RunError, params={"limit": limit})
        runs = _json(response, RunError, "the run list")
        if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
            raise _error(RunError, "the run list is not a list of runs", response)
        for run in runs:
            run["run_id"] = _checked_run_id(run.get("run_id"), RunError)
        return runs

    def stream(
        self,
        thread_id: str,
        assistant_id: str,
        messages: list[dict[str, Any]] | None = None,
        context: dict[str, Any] | None = None,
        stream_mode: str | Iterable[str] = ("values",),
        command: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        known_thread: bool = False,
        *,
        thread_metadata: dict[str, Any] | None = None,
    ) -> Iterator[ServerSentEvent]:
        """Start a run and yield its server-sent events (``POST /threads/{id}/runs/stream``).

        The thread is initialized as for :meth:`run`: earlier messages seed a new thread once.
        """
        if not messages and command is None:
            raise RunError("stream needs messages or a command")
        thread_id = _check_uuid(thread_id, RunError)
        body = self._run_body(assistant_id, messages[-1] if messages else None, context, metadata)
        body["stream_mode"] = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
        if command is not None:
            body["command"] = command
        if messages:
            self._prepare_thread(
                body, thread_id, assistant_id, messages, known_thread, thread_metadata
            )
        return self._stream(thread_id, body, RunError)

    def _stream(
        self, thread_id: str, body: dict[str, Any], error: type[NitroAssistantsError]
    ) -> Iterator[ServerSentEvent]:
        try:
            response = self.transport.request(
                "POST",
                f"/threads/{thread_id}/runs/stream",
                json=body,
                idempotent=False,
                stream=True,
            )
        except TransportError as exc:
            raise error(str(exc), transient=True) from None
        if not response.ok:
            with response:  # gives its request slot back
                raise _error(error, detail_of(response), response)

        def events() -> Iterator[ServerSentEvent]:
            with response:
                try:
                    yield from parse_sse(self.transport.chunks(response))
                except TransportError as exc:
                    raise error(f"the event stream broke off: {exc}", transient=True) from None

        return events()

    # -- thread reads -------------------------------------------------------------------------

    def _get(
        self, path: str, error: type[NitroAssistantsError], params: dict[str, Any] | None = None
    ) -> requests.Response:
        try:
            response = self.transport.request("GET", path, params=params)
        except TransportError as exc:
            raise error(str(exc), transient=True) from None
        if not response.ok:
            raise _error(error, detail_of(response), response)
        return response

    def thread_state(self, thread_id: str) -> dict[str, Any]:
        """The thread's state exactly as the server reports it."""
        return self._state(thread_id, ThreadStateError)

    def _state(self, thread_id: str, error: type[NitroAssistantsError]) -> dict[str, Any]:
        thread_id = _check_uuid(thread_id, error)
        response = self._get(f"/threads/{thread_id}/state", error)
        state: dict[str, Any] = _json_object(response, error, "the thread state")
        return state

    def thread_messages(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's messages, oldest first, exactly as the server reports them."""
        values = self.thread_state(thread_id).get("values") or {}
        messages = values.get("messages") if isinstance(values, dict) else None
        if messages is not None and (
            not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages)
        ):
            raise ThreadStateError(f"Thread {thread_id}'s messages are not a list of objects")
        return list(messages or [])

    def under_review(self, thread_id: str) -> PendingReview | None:
        """What the thread is paused on, read from its state (never from ``status`` alone)."""
        return self._pending(self.thread_state(thread_id), thread_id, ThreadStateError)

    @staticmethod
    def _pending(
        state: dict[str, Any], thread_id: str, error: type[NitroAssistantsError]
    ) -> PendingReview | None:
        values = state.get("values") or {}
        messages = values.get("messages") if isinstance(values, dict) else None
        try:
            return pending_review(
                _interrupts_of(state, thread_id, error), messages or [], _stuck_on(state)
            )
        except ReviewShapeError as exc:
            raise error(f"Thread {thread_id} is paused on something unreadable: {exc}") from None

    def update_thread(self, thread_id: str, metadata: Mapping[str, Any]) -> bool:
        """Merge ``metadata`` into the thread's (``PATCH /threads/{id}``): True when done, False
        when the server has no such thread yet (the run that creates it carries the metadata)."""
        thread_id = _check_uuid(thread_id, ThreadStateError)
        try:
            # A merge of the same keys: repeating it changes nothing, so it is safe to retry.
            response = self.transport.request(
                "PATCH", f"/threads/{thread_id}", json={"metadata": dict(metadata)}, idempotent=True
            )
        except TransportError as exc:
            raise ThreadStateError(str(exc), transient=True) from None
        if response.status_code == 404:
            return False
        if not response.ok:
            raise _error(ThreadStateError, detail_of(response), response)
        return True

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread (a missing thread is not an error)."""
        thread_id = _check_uuid(thread_id, ThreadStateError)
        try:
            response = self.transport.request("DELETE", f"/threads/{thread_id}")
        except TransportError as exc:
            raise ThreadStateError(str(exc), transient=True) from None
        if not response.ok and response.status_code != 404:
            raise _error(ThreadStateError, detail_of(response), response)

    # -- thread initialization ----------------------------------------------------------------

    def graph_id(self, assistant_id: str) -> str:
        """The graph an assistant runs (``GET /assistants/{id}``), looked up once per client.

        A graph id given as the assistant (``"agent"``: the server runs it, but cannot look it
        up as an assistant) is its own graph.
        """
        if assistant_id in self._graph_ids:
            return self._graph_ids[assistant_id]
        try:
            uuid.UUID(assistant_id)
        except ValueError:
            self._graph_ids[assistant_id] = assistant_id
            return assistant_id
        try:
            response = self.transport.request("GET", f"/assistants/{assistant_id}")
        except TransportError as exc:
            raise ThreadInitializationError(str(exc), transient=True) from None
        if not response.ok:
            raise _error(ThreadInitializationError, detail_of(response), response)
        graph = _json_object(response, ThreadInitializationError, "the assistant").get("graph_id")
        if not graph:
            raise ThreadInitializationError(f"Assistant {assistant_id} has no graph")
        self._graph_ids[assistant_id] = str(graph)
        return str(graph)

    def _prepare_thread(
        self,
        body: dict[str, Any],
        thread_id: str,
        assistant_id: str,
        messages: list[dict[str, Any]],
        known_thread: bool,
        thread_metadata: dict[str, Any] | None = None,
    ) -> None:
        """Make sure the run in ``body`` lands on an initialized thread.

        Earlier messages seed a new thread (one request); a lone message lets the run create the
        thread itself (``if_not_exists``), which costs no request at all. Either way
        ``thread_metadata`` goes on the thread as it is created: in ``POST /threads``, or in the
        run's metadata, which the server copies onto a thread the run creates (and merges into
        every later run of the thread anyway). The client's own keys win over the host's.
        """
        if known_thread:
            return
        if len(messages) > 1:
            self._ensure_thread(thread_id, assistant_id, messages[:-1], thread_metadata)
        else:
            body["if_not_exists"] = "create"
            if thread_metadata:
                run_metadata = {**thread_metadata, **body["metadata"]}
                body["metadata"] = run_metadata
                body["config"] = {**body["config"], "metadata": run_metadata}

    def _ensure_thread(
        self,
        thread_id: str,
        assistant_id: str,
        history: list[dict[str, Any]],
        thread_metadata: dict[str, Any] | None = None,
    ) -> None:
        """Create the thread seeded with ``history`` and carrying ``thread_metadata``; a thread
        that exists (409) is left as it is."""
        graph = self.graph_id(assistant_id)
        body: dict[str, Any] = {
            "thread_id": thread_id,
            "if_exists": "raise",
            "metadata": {**(thread_metadata or {}), "graph_id": graph, "user_id": self.user_id},
        }
        if self.seed_as_node:
            # One request creates and seeds: the thread exists seeded, or not at all.
            body["supersteps"] = [
                {"updates": [{"values": {"messages": history}, "as_node": self.seed_as_node}]}
            ]
        try:
            # Create-and-seed is all or nothing, so a retry that meets 409 finds the thread
            # seeded. Create-then-seed is not: a lost answer retried would skip the seeding.
            response = self.transport.request(
                "POST", "/threads", json=body, idempotent=bool(self.seed_as_node)
            )
        except TransportError as exc:
            raise ThreadInitializationError(str(exc), transient=True) from None
        if response.status_code == 409:
            return
        if not response.ok:
            self._discard(thread_id)
            raise _error(ThreadInitializationError, detail_of(response), response)
        if self.seed_as_node:
            return
        try:
            seeded = self.transport.request(
                "POST",
                f"/threads/{thread_id}/state",
                json={"values": {"messages": history}},
                idempotent=False,
            )
        except TransportError as exc:
            self._discard(thread_id)
            raise ThreadInitializationError(str(exc), transient=True) from None
        if not seeded.ok:
            self._discard(thread_id)
            raise _error(ThreadInitializationError, detail_of(seeded), seeded)

    def _discard(self, thread_id: str) -> None:
        """Delete a thread whose seeding failed, so the next run seeds it again."""
        with contextlib.suppress(TransportError):
            self.transport.request("DELETE", f"/threads/{thread_id}")

    # -- review -------------------------------------------------------------------------------

    def review(
        self,
        thread_id: str,
        assistant_id: str,
        resume: Resume | str | None = None,
        **fields: Any,
    ) -> RunResult:
        """Resume a paused thread with a reviewer's decision (a :class:`Resume`) and return the
        resumed run. The keywords of earlier versions still work, ``resume`` then being the
        reviewer's id: ``review(thread_id, assistant_id, "jane", tool_calls=[...])`` is
        ``review(thread_id, assistant_id, Resume(reviewer_id="jane", tool_calls=[...]))``.

        The resume holds exactly one of ``reply`` or ``tool_calls`` (or ``answer``, the resume
        value of a typed interaction), matching the pause. An ``"inbox"`` or ``"interrupt"``
        pause is answered with ``answer`` (the pause ``interrupt_id`` names: an Agent Inbox
        ``HumanResponse`` ``{"type", "args"}``, or the JSON value to resume a plain interrupt
        with), or several at once with ``answers`` (``{interrupt_id: answer}``); pauses not
        named stay pending. Everything is validated against the pause
        before the resume is sent. A pause the thread has moved past raises
        :class:`ReviewSupersededError`, and nothing is applied.

        ``pending`` is the pause the reviewer was shown, if the caller holds it already (from
        :meth:`under_review`, or stored): the thread's state is then not read again before the
        resume, except for an ``"inbox"`` or ``"interrupt"`` pause: a graph pausing twice in one
        node applies a resume keyed by the first pause's id to the second one (docs/protocol.md
        §9), so the state is read to check the pause is still pending. The server still refuses a pause the thread has moved past (the resume is keyed
        by interrupt id), and that still raises :class:`ReviewSupersededError`. A pause whose
        interrupt ids are not keys the server checks is read again all the same.
        """
        resume = Resume.given(resume, fields)
        thread_id, body, pending = self._resume_request(thread_id, assistant_id, resume, None)
        # Checkpoints carry the state (like "values") and what runs next: the last one says
        # whether the run ended, which a stream cut short would not otherwise tell.
        body["stream_mode"] = ["checkpoints", "updates"]
        return self._resume(thread_id, body, pending, resume.interrupt_id)

    def start_review(
        self,
        thread_id: str,
        assistant_id: str,
        resume: Resume | str | None = None,
        *,
        webhook: str | None = None,
        metadata: dict[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """:meth:`review`, sent as a background run: validated and checked the same way, but it
        returns the run object at once. Read the outcome with :meth:`review_result`. ``metadata``
        goes on the run (beside the reviewer's id and time); ``webhook`` is called when it ends."""
        resume = Resume.given(resume, fields)
        thread_id, body, pending = self._resume_request(thread_id, assistant_id, resume, metadata)
        if webhook:
            body["webhook"] = webhook
        try:
            response = self.transport.request(
                "POST", f"/threads/{thread_id}/runs", json=body, idempotent=False
            )
        except TransportError as exc:
            raise ThreadResumptionError(str(exc), transient=True) from None
        if response.status_code == 409:  # busy: another resume is running it now
            raise _superseded(thread_id, resume.interrupt_id or pending.interrupt_id)
        if not response.ok:
            raise _error(ThreadResumptionError, detail_of(response), response)
        run: dict[str, Any] = self._run_object(response, ThreadResumptionError)
        return run

    def review_result(self, thread_id: str, run_id: str) -> RunResult:
        """The outcome of a resume sent by :meth:`start_review` (waits for it to end).

        Raises :class:`ReviewSupersededError` when the server applied nothing (a keyed resume
        whose interrupt was no longer pending writes no checkpoint of its own).
        """
        thread_id = _check_uuid(thread_id, ThreadResumptionError)
        try:
            joined = self.transport.request("GET", f"/threads/{thread_id}/runs/{run_id}/join")
            history = self.transport.request(
                "POST",
                f"/threads/{thread_id}/history",
                json={"limit": 1, "metadata": {"run_id": run_id}},
                idempotent=True,
            )
        except TransportError as exc:
            raise ThreadResumptionError(str(exc), transient=True) from None
        self._result_of(joined, thread_id, ThreadResumptionError)  # raises a failed run's error
        if not history.ok:
            raise _error(ThreadResumptionError, detail_of(history), history)
        if not _json(history, ThreadResumptionError, "the thread's history"):
            raise _superseded(thread_id, None)
        state = self._state(thread_id, ThreadResumptionError)
        return self._build(
            state.get("values") or {},
            thread_id,
            ThreadResumptionError,
            interrupts=_interrupts_of(state, thread_id, ThreadResumptionError),
            run_id=run_id,
        )

    def dismiss(self, thread_id: str, interrupt_ids: Iterable[str] | None = None) -> None:
        """End the thread's pause without answering it: Agent Inbox's "ignore thread", a state
        update to ``__end__`` (``POST /threads/{id}/state``), not a resume. The thread goes idle
        with nothing pending; the graph never reads an answer.

        ``interrupt_ids`` are the pauses the reviewer was shown: when none of them is pending any
        more, :class:`ReviewSupersededError` is raised and nothing is changed.
        """
        thread_id = _check_uuid(thread_id, ThreadResumptionError)
        shown = list(interrupt_ids or [])
        pending = self._pending(
            self._state(thread_id, ThreadResumptionError), thread_id, ThreadResumptionError
        )
        if pending is None:
            raise _superseded(thread_id, shown[0] if shown else None, paused=False)
        if shown and not set(shown) & set(pending.interrupt_ids):
            raise _superseded(thread_id, shown[0])
        try:
            response = self.transport.request(
                "POST",
                f"/threads/{thread_id}/state",
                json={"values": None, "as_node": "__end__"},
                idempotent=True,  # the same update again leaves the thread as it was
            )
        except TransportError as exc:
            raise ThreadResumptionError(str(exc), transient=True) from None
        if not response.ok:
            raise _error(ThreadResumptionError, detail_of(response), response)

    def resume_outcome(self, thread_id: str, metadata: Mapping[str, Any]) -> RunResult | None:
        """What became of a resume sent with ``metadata`` (e.g. its ``reviewer_id`` and
        ``reviewed_at``), read from the server's state, not from its stream: the resumed run's
        result when a checkpoint carries that metadata (the server applied it), ``None`` when none
        does (nothing was applied with it). Raises a transient :class:`ThreadResumptionError`
        while the thread is still running it.

        For a resume whose stream ended before it showed anything: a stream cut short proves
        nothing either way.
        """
        thread_id = _check_uuid(thread_id, ThreadResumptionError)
        try:
            history = self.transport.request(
                "POST",
                f"/threads/{thread_id}/history",
                json={"limit": 1, "metadata": dict(metadata)},
                idempotent=True,
            )
        except TransportError as exc:
            raise ThreadResumptionError(str(exc), transient=True) from None
        if not history.ok:
            raise _error(ThreadResumptionError, detail_of(history), history)
        if not _json(history, ThreadResumptionError, "the thread's history"):
            return None
        state = self._state(thread_id, ThreadResumptionError)
        interrupts = _interrupts_of(state, thread_id, ThreadResumptionError)
        tasks = state.get("tasks")
        if not isinstance(tasks, list):
            tasks = []
        failures = [t.get("error") for t in tasks if isinstance(t, dict) and t.get("error")]
        if failures:
            raise ThreadResumptionError(self.transport.redact(str(failures[0]))[:2000])
        if state.get("next") and not interrupts:
            raise ThreadResumptionError("the resume is still running", transient=True)
        return self._build(
            state.get("values") or {}, thread_id, ThreadResumptionError, interrupts=interrupts
        )

    def _run_ended(self, thread_id: str, run_id: str | None) -> bool:
        if not run_id:
            return True  # nothing to ask about: the result stands as streamed
        response = self._get(f"/threads/{thread_id}/runs/{run_id}", ThreadResumptionError)
        run = _json_object(response, ThreadResumptionError, "the run")
        return run.get("status") not in ("pending", "running")

    def _resume_request(
        self,
        thread_id: str,
        assistant_id: str,
        resume: Resume,
        metadata: dict[str, Any] | None,
    ) -> tuple[str, dict[str, Any], PendingReview]:
        """Validate a review against the thread's pause; the resume run's body to send."""
        thread_id = _check_uuid(thread_id, ThreadResumptionError)
        given = [
            name
            for name in ("reply", "tool_calls", "answer", "answers")
            if getattr(resume, name) is not None
        ]
        if len(given) != 1:
            raise ThreadResumptionError(
                "Pass exactly one of reply or tool_calls"
                + (f"; got {' and '.join(given)}" if given else "")
            )
        answers = resume.answers
        if answers is not None and (
            not isinstance(answers, Mapping) or not all(isinstance(k, str) for k in answers)
        ):
            raise ThreadResumptionError("answers must be an object keyed by interrupt id")
        reviewer_id, interrupt_id = resume.reviewer_id, resume.interrupt_id
        if not isinstance(reviewer_id, str) or not reviewer_id.strip():
            raise ThreadResumptionError("reviewer_id is required")
        if resume.reply is not None and not interrupt_id:
            raise ThreadResumptionError(
                "interrupt_id is required to review a reply: pass the one the reviewer was shown"
            )
        if isinstance(resume.reviewed_at, datetime):
            stamp = resume.reviewed_at.astimezone(UTC).isoformat().replace("+00:00", "Z")
        else:
            stamp = resume.reviewed_at or _now()

        # The decision, checked against the pause shown and then against the one pending.
        decided: dict[str, Any] = {
            "reply": resume.reply,
            "tool_calls": resume.tool_calls,
            "answer": resume.answer,
            "reviewer_id": reviewer_id,
            "reviewed_at": stamp,
            "interrupt_id": interrupt_id,
            "answers": answers,
        }
        named_ids = [*([interrupt_id] if interrupt_id else []), *(answers or {})]
        shown = resume.pending
        if (
            shown is not None
            and shown.kind in DIALECT_KINDS
            and shown.error is None
            and all(i in shown.interrupt_ids for i in named_ids)
        ):
            # An answer that does not fit the pause shown (not one of its options, say) is
            # refused before any request; the state is still read below, for what is pending.
            build_resume(shown, **decided)
        pending: PendingReview | None
        if (
            shown is not None
            and shown.kind not in DIALECT_KINDS
            and all(is_interrupt_id(i) for i in shown.interrupt_ids or [""])
        ):
            pending = shown  # keyed: the server itself refuses an interrupt no longer pending
        else:
            state = self._state(thread_id, ThreadResumptionError)
            pending = self._pending(state, thread_id, ThreadResumptionError)
        if pending is None:
            raise _superseded(thread_id, interrupt_id, paused=False)
        if interrupt_id and interrupt_id not in pending.interrupt_ids:
            raise _superseded(thread_id, interrupt_id)
        for named in answers or {}:
            if named not in pending.interrupt_ids:
                raise _superseded(thread_id, named)
        run_metadata: dict[str, Any] = {
            **(metadata or {}),
            "reviewer_id": reviewer_id,
            "reviewed_at": stamp,
        }
        if reasons := review_messages(resume.tool_calls):
            run_metadata["review_messages"] = reasons
        body = self._run_body(assistant_id, None, resume.context, run_metadata)
        del body["input"]
        body["command"] = {"resume": build_resume(pending, **decided)}
        body["multitask_strategy"] = "reject"
        return thread_id, body, pending

    def _resume(
        self,
        thread_id: str,
        body: dict[str, Any],
        pending: PendingReview,
        interrupt_id: str | None,
    ) -> RunResult:
        superseded = _superseded(thread_id, interrupt_id or pending.interrupt_id)
        try:
            events = self._stream(thread_id, body, ThreadResumptionError)
        except ThreadResumptionError as exc:
            if exc.status_code == 409:  # busy: another resume is running it now
                raise superseded from None
            raise
        values: dict[str, Any] | None = None
        interrupts: dict[str, dict[str, Any]] = {}
        applied = False
        run_id = None
        ended: bool | None = None  # from the last checkpoint: nothing left to run
        for event in events:
            data = event.data
            if event.event == "metadata" and isinstance(data, dict):
                run_id = _checked_run_id(data.get("run_id"), ThreadResumptionError)
            elif event.event == "checkpoints" and isinstance(data, dict):
                if isinstance(data.get("values"), dict):
                    values = data["values"]
                ended = not data.get("next")
            elif event.event == "values" and isinstance(data, dict):
                values = data
            elif event.event == "updates" and isinstance(data, dict):
                for node, update in data.items():
                    if node == "__interrupt__":
                        if not isinstance(update, list) or not all(
                            isinstance(item, dict) for item in update
                        ):
                            raise ThreadResumptionError(
                                f"Thread {thread_id} paused on something unreadable: "
                                "__interrupt__ is not a list of objects"
                            )
                        for item in update:
                            interrupts[str(item.get("id"))] = item
                    else:
                        applied = True
            elif event.event == "error":
                if isinstance(data, dict):
                    failure = _run_failure({"__error__": data}) or "the resumed run failed"
                else:
                    failure = str(data)
                raise ThreadResumptionError(self.transport.redact(failure)[:2000])
        resume = body["command"]["resume"]
        keyed = isinstance(resume, dict) and resume and all(is_interrupt_id(k) for k in resume)
        # The pauses this resume answers (a partial answer leaves the others pending).
        answered = set(resume) if keyed else set(pending.interrupt_ids)
        # A keyed resume naming an interrupt that is no longer pending is answered 200 and
        # changes nothing: no node runs, the thread re-raises the pause it has now.
        if pending.kind in DIALECT_KINDS and answered - set(interrupts):
            # A node pausing again answers with the next pause and no update of its own: the
            # answered pause left the pending set (read just before the resume was sent).
            applied = True
        if not applied or (answered and answered <= set(interrupts)):
            raise superseded
        # A stream carries no end-of-run event, and a stopping server closes it cleanly: one cut
        # short would pass for a run that stopped early. The last checkpoint says whether anything
        # was left to run; a server that sends no checkpoints is asked.
        if not interrupts and (
            ended is False or (ended is None and not self._run_ended(thread_id, run_id))
        ):
            raise ThreadResumptionError(
                "the resume's event stream ended before its run did", transient=True
            )
        if values is None:
            raise ThreadResumptionError("the resumed run reported no state")
        return self._build(
            values,
            thread_id,
            ThreadResumptionError,
            interrupts=list(interrupts.values()),
            run_id=run_id,
        )
