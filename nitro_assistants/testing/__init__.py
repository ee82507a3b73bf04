"""Test doubles for projects that use nitro_assistants, in the spirit of django-anymail's test
backend: a fake assistant that sends nothing, and (in :mod:`nitro_assistants.testing.launchers`)
the real processes a test may want instead: a ``langgraph dev`` server, a Celery worker, Redis.

::

    from nitro_assistants.testing import fake_assistants, run_result, tool_calls_review

    with fake_assistants() as fake:
        fake.results.append(run_result(tool_calls_review({"name": "refund", "args": {"id": 7}})))
        run = services.start_run("support", "Refund order 7")
        services.execute_run(run.pk)  # what the run_thread task does
    assert Review.objects.get(run=run).status == Review.Status.PENDING
    assert fake.called("run")[0]["messages"][-1]["content"] == "Refund order 7"

Inside the block every assistant the app asks for (``services.clients.assistant_for``, so the
services, tasks, admin and API alike) is ``fake``, whatever its key (it must still be one of
``NITRO_ASSISTANTS["DEFINITIONS"]``, but no ``BASE_URL`` or API key is needed); outside it, the
clients of ``settings.NITRO_ASSISTANTS`` again. It is process-wide (threads of the test see it
too) and is not seen by other processes, such as a Celery worker: those need the real server.

This module imports neither pytest nor Django's models; a pytest fixture is three lines::

    @pytest.fixture
    def fake_assistant():
        with fake_assistants() as fake:
            yield fake
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from dataclasses import fields as fields_of
from typing import Any

from nitro_assistants.client.results import (
    REPLY_DECISIONS,
    TOOL_DECISIONS,
    PendingReview,
    ReplyDraft,
    RunResult,
)
from nitro_assistants.client.review import Resume
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import UnknownAssistantError, UsageError

__all__ = [
    "FakeAssistant",
    "fake_assistants",
    "reply_review",
    "run_result",
    "tool_calls_review",
]


def run_result(
    review: PendingReview | None = None,
    messages: list[dict[str, Any]] | None = None,
    reply: str = "ok",
) -> RunResult:
    """What a run (or a resume) returns: paused on ``review``, or finished with ``reply``.

    ``messages`` is the thread's history after the run (default: one human message)."""
    return RunResult(
        reply=None if review else reply,
        interrupted=review is not None,
        review=review,
        delivery=None,
        messages=messages or [{"type": "human", "id": "h1", "content": "hi"}],
        raw={},
    )


def tool_calls_review(
    *tool_calls: Mapping[str, Any], interrupt_id: str | None = None
) -> PendingReview:
    """A pause holding ``tool_calls`` for review, each ``{"name": ..., "args": {...}}`` at least;
    ``id``, ``previous_message_id`` and ``allowed_decisions`` (all four) are filled in if absent."""
    interrupt_id = interrupt_id or uuid.uuid4().hex
    calls = [
        {
            "previous_message_id": "h1",
            "id": f"call_{i}",
            "args": {},
            "allowed_decisions": list(TOOL_DECISIONS),
            **call,
        }
        for i, call in enumerate(tool_calls, start=1)
    ]
    return PendingReview(
        kind="tool_calls", interrupt_id=interrupt_id, interrupt_ids=[interrupt_id], tool_calls=calls
    )


def reply_review(
    content: str = "See you Tuesday.", description: str = "Review this SMS"
) -> PendingReview:
    """A pause holding a drafted reply (``content``) for review."""
    interrupt_id = uuid.uuid4().hex
    draft = ReplyDraft(
        content=content,
        allowed_decisions=list(REPLY_DECISIONS),
        description=description,
        interrupt_id=interrupt_id,
        message_id="ai-2",
    )
    return PendingReview(
        kind="reply", interrupt_id=interrupt_id, interrupt_ids=[interrupt_id], reply=draft
    )


@dataclass
class FakeAssistant:
    """A stand-in for a configured :class:`~nitro_assistants.client.Assistant` that sends nothing.

    Its methods are the ones the app calls, with the same parameters. Every call is recorded in
    :attr:`calls` (read them with :meth:`called`), then answered from what the test scripted:

    - ``run``, ``join_run``, ``review``, ``review_result``: the next of :attr:`results` (taken
      off the front), or, when none is left, a run that finished with the reply ``"ok"``;
    - ``run``, ``start_run``, ``start_review`` also add a run to :attr:`remote_runs` (with the
      ``metadata`` they were given, as the server keeps it), which ``list_runs`` and ``get_run``
      answer from; ``start_run`` and ``start_review`` return that run (status ``"pending"``);
    - ``update_thread``: True (the thread is there);
    - ``thread_state``: :attr:`state`; ``thread_messages``: its messages; ``under_review``:
      :attr:`pending`; ``resume_outcome``: :attr:`applied` (``None``: no checkpoint carries the
      resume's metadata, the server applied nothing with it);
    - any method named in :attr:`raises` raises that exception instead (after the call is
      recorded), every time: ``FakeAssistant(raises={"thread_state": ThreadStateError("down")})``;
    - :meth:`fail_next` scripts errors for the next calls only, in order, before :attr:`raises`
      and the answers above: ``fake.fail_next("review", ReviewSupersededError("moved on"))``.
    """

    results: list[RunResult] = field(default_factory=list)
    remote_runs: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    pending: PendingReview | None = None
    state: dict[str, Any] = field(default_factory=lambda: {"values": {"messages": []}})
    raises: dict[str, BaseException] = field(default_factory=dict)
    applied: RunResult | None = None
    #: Errors :meth:`fail_next` scripted, by method: each raised once, first in first out.
    failures: dict[str, list[BaseException]] = field(default_factory=dict)

    def called(self, name: str) -> list[dict[str, Any]]:
        """The arguments of every call of method ``name``, in order."""
        return [arguments for called, arguments in self.calls if called == name]

    def fail_next(self, name: str, *errors: BaseException) -> FakeAssistant:
        """The next call of method ``name`` raises ``errors[0]`` (after it is recorded), the one
        after ``errors[1]``, and so on; once they are used up the method answers as scripted
        again. Returns the fake::

            fake.fail_next("run", RunError("502 Bad Gateway", transient=True))
            fake.fail_next("review", ReviewSupersededError("moved on"), ThreadResumptionError("x"))

        A name that is not one of the assistant's methods raises ``UsageError`` (a typo would
        otherwise script nothing and the test would pass for the wrong reason)."""
        if name not in _FAKED_METHODS:
            known = ", ".join(sorted(_FAKED_METHODS))
            raise UsageError(f"FakeAssistant has no method `{name}` to fail; it has: {known}")
        if not errors or not all(isinstance(e, BaseException) for e in errors):
            raise UsageError("fail_next takes the method's name and one exception or more")
        self.failures.setdefault(name, []).extend(errors)
        return self

    def _record(self, name: str, arguments: dict[str, Any]) -> None:
        self.calls.append((name, arguments))
        scripted = self.failures.get(name)
        if scripted:
            raise scripted.pop(0)
        if name in self.raises:
            raise self.raises[name]

    def _next(self) -> RunResult:
        return self.results.pop(0) if self.results else run_result()

    def _remote_run(self, status: str, metadata: dict[str, Any] | None) -> dict[str, Any]:
        run = {"run_id": str(uuid.uuid4()), "status": status, "metadata": metadata or {}}
        self.remote_runs.append(run)
        return run

    def run(
        self,
        thread_id: str,
        messages: list[dict[str, Any]],
        context: dict[str, Any] | None = None,
        known_thread: bool = False,
        metadata: dict[str, Any] | None = None,
        thread_metadata: dict[str, Any] | None = None,
    ) -> RunResult:
        """``runs/wait``: creates the remote run (found by its metadata afterwards) and waits."""
        self._record(
            "run",
            {
                "thread_id": thread_id,
                "messages": messages,
                "context": context,
                "known_thread": known_thread,
                "metadata": metadata,
                "thread_metadata": thread_metadata,
            },
        )
        self._remote_run("success", metadata)
        return self._next()

    def start_run(
        self,
        thread_id: str,
        messages: list[dict[str, Any]] | None = None,
        context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        webhook: str | None = None,
        command: dict[str, Any] | None = None,
        known_thread: bool = False,
        thread_metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        self._record(
            "start_run",
            {
                "thread_id": thread_id,
                "messages": messages,
                "context": context,
                "metadata": metadata,
                "webhook": webhook,
                "command": command,
                "known_thread": known_thread,
                "thread_metadata": thread_metadata,
            },
        )
        return self._remote_run("pending", metadata)

    def join_run(self, thread_id: str, run_id: str) -> RunResult:
        self._record("join_run", {"thread_id": thread_id, "run_id": run_id})
        return self._next()

    def get_run(self, thread_id: str, run_id: str) -> dict[str, Any]:
        """The run of :attr:`remote_runs` with ``run_id``; one that succeeded if there is none."""
        self._record("get_run", {"thread_id": thread_id, "run_id": run_id})
        found = [run for run in self.remote_runs if run.get("run_id") == run_id]
        return found[-1] if found else {"run_id": run_id, "status": "success", "metadata": {}}

    def cancel_run(self, thread_id: str, run_id: str, *, action: str = "interrupt") -> None:
        """Marks the run of :attr:`remote_runs` with ``run_id`` (if any) ``interrupted``."""
        self._record("cancel_run", {"thread_id": thread_id, "run_id": run_id, "action": action})
        for run in self.remote_runs:
            if run.get("run_id") == run_id and run.get("status") in ("pending", "running"):
                run["status"] = "interrupted"

    def list_runs(self, thread_id: str, limit: int = 20) -> list[dict[str, Any]]:
        self._record("list_runs", {"thread_id": thread_id, "limit": limit})
        return list(self.remote_runs)

    def review(
        self, thread_id: str, resume: Resume | str | None = None, **fields: Any
    ) -> RunResult:
        """Records the thread and the :class:`~nitro_assistants.client.Resume` (as ``"resume"``,
        and each of its fields by name), then answers the next of :attr:`results`."""
        self._record("review", _resume_call(thread_id, Resume.given(resume, fields)))
        return self._next()

    def start_review(
        self,
        thread_id: str,
        resume: Resume | str | None = None,
        *,
        webhook: str | None = None,
        metadata: dict[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Records what :meth:`review` does, with the ``webhook`` and ``metadata``; a remote run
        with status ``"pending"``."""
        call = _resume_call(thread_id, Resume.given(resume, fields))
        self._record("start_review", {**call, "webhook": webhook, "metadata": metadata})
        return self._remote_run("pending", metadata)

    def dismiss(self, thread_id: str, interrupt_ids: Iterable[str] | None = None) -> None:
        """Records the call and ends the pause: :attr:`pending` becomes None."""
        self._record(
            "dismiss",
            {"thread_id": thread_id, "interrupt_ids": list(interrupt_ids or [])},
        )
        self.pending = None

    def review_result(self, thread_id: str, run_id: str) -> RunResult:
        self._record("review_result", {"thread_id": thread_id, "run_id": run_id})
        return self._next()

    def update_thread(self, thread_id: str, metadata: Mapping[str, Any]) -> bool:
        """``PATCH /threads/{id}``: recorded; True (the thread is there)."""
        self._record("update_thread", {"thread_id": thread_id, "metadata": dict(metadata)})
        return True

    def thread_state(self, thread_id: str) -> dict[str, Any]:
        self._record("thread_state", {"thread_id": thread_id})
        return self.state

    def thread_messages(self, thread_id: str) -> list[dict[str, Any]]:
        self._record("thread_messages", {"thread_id": thread_id})
        return list((self.state.get("values") or {}).get("messages") or [])

    def under_review(self, thread_id: str) -> PendingReview | None:
        self._record("under_review", {"thread_id": thread_id})
        return self.pending

    def resume_outcome(self, thread_id: str, metadata: Mapping[str, Any]) -> RunResult | None:
        self._record("resume_outcome", {"thread_id": thread_id, "metadata": dict(metadata)})
        return self.applied


def _resume_call(thread_id: str, resume: Resume) -> dict[str, Any]:
    """A resume's call as recorded: the thread, the resume, and each of its fields by name."""
    given = {each.name: getattr(resume, each.name) for each in fields_of(resume)}
    return {"thread_id": thread_id, "resume": resume, **given}


#: The fake's stand-ins for the assistant's methods (the ones :meth:`FakeAssistant.fail_next`
#: may script), not its own helpers.
_FAKED_METHODS = frozenset(
    name
    for name, value in vars(FakeAssistant).items()
    if callable(value) and not name.startswith("_") and name not in ("called", "fail_next")
)


@contextmanager
def fake_assistants(fake: FakeAssistant | None = None) -> Iterator[FakeAssistant]:
    """Within the block, every assistant the app asks for is ``fake`` (a new
    :class:`FakeAssistant` if not given), whatever its key, as long as the key is one of
    ``NITRO_ASSISTANTS["DEFINITIONS"]`` (an unknown key raises ``UnknownAssistantError``, as it
    does outside). Blocks nest; leaving one puts back what was there before."""
    # Imported here, not at the top: the services need Django's app registry loaded, and this
    # module (like the launchers beside it) must import without it.
    from nitro_assistants.services import clients

    fake = fake if fake is not None else FakeAssistant()

    def assistant(key: str) -> FakeAssistant:
        configured = app_settings.DEFINITIONS
        if key not in configured:  # as the real registry: a typo fails here too
            known = ", ".join(f"`{k}`" for k in configured) or "(none)"
            raise UnknownAssistantError(f"Unknown assistant `{key}`; configured: {known}")
        return fake

    before = clients.stand_in
    clients.stand_in = assistant
    try:
        yield fake
    finally:
        clients.stand_in = before
