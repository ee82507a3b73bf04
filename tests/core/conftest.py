"""Fixtures of the Django-core tests: a fake assistant for unit tests, and for the real thing a
proxy in front of the real server (so a test can take it down), a real Celery worker, signal logs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from nitro_assistants import signals, tasks
from nitro_assistants.client import PendingReview, ReplyDraft, RunResult
from tests.celery_app import app as celery_app
from tests.core.proxy import Proxy

SIGNALS = [
    "review_requested",
    "review_decided",
    "review_superseded",
    "run_failed",
    "delivery_delivered",
    "delivery_failed",
    "delivery_pending",
]


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        time.sleep(interval)


# -- unit tests: a fake assistant ---------------------------------------------------------------


def tool_review(interrupt_id: str | None = None) -> PendingReview:
    interrupt_id = interrupt_id or uuid.uuid4().hex
    return PendingReview(
        kind="tool_calls",
        interrupt_id=interrupt_id,
        interrupt_ids=[interrupt_id],
        tool_calls=[
            {
                "previous_message_id": "h1",
                "id": "call_1",
                "name": "reschedule_appointment",
                "args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"},
                "allowed_decisions": ["approve", "edit", "reject", "respond"],
            }
        ],
    )


def reply_review(content: str = "See you Tuesday.") -> PendingReview:
    interrupt_id = uuid.uuid4().hex
    draft = ReplyDraft(
        content=content,
        allowed_decisions=["approve", "edit", "reject"],
        description="Review this SMS",
        interrupt_id=interrupt_id,
        message_id="ai-2",
    )
    return PendingReview(
        kind="reply", interrupt_id=interrupt_id, interrupt_ids=[interrupt_id], reply=draft
    )


def result(
    review: PendingReview | None = None, messages: list[dict[str, Any]] | None = None
) -> RunResult:
    messages = messages or [{"type": "human", "id": "h1", "content": "hi"}]
    return RunResult(
        reply=None if review else "ok",
        interrupted=review is not None,
        review=review,
        delivery=None,
        messages=messages,
        raw={},
    )


@dataclass
class FakeAssistant:
    """Scripted stand-in for ``nitro_assistants.client.Assistant`` (unit tests only)."""

    results: list[RunResult] = field(default_factory=list)
    remote_runs: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    pending: PendingReview | None = None
    state: dict[str, Any] = field(default_factory=lambda: {"values": {"messages": []}})

    def _next(self) -> RunResult:
        return self.results.pop(0) if self.results else result()

    def start_run(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("start_run", kwargs))
        run = {"run_id": str(uuid.uuid4()), "status": "pending", "metadata": kwargs["metadata"]}
        self.remote_runs.append(run)
        return run

    def run(self, **kwargs: Any) -> RunResult:
        """``runs/wait``: creates the remote run (found by its metadata afterwards) and waits."""
        self.calls.append(("run", kwargs))
        run = {"run_id": str(uuid.uuid4()), "status": "success", "metadata": kwargs["metadata"]}
        self.remote_runs.append(run)
        return self._next()

    def list_runs(self, thread_id: str, limit: int = 20) -> list[dict[str, Any]]:
        self.calls.append(("list_runs", {"thread_id": thread_id}))
        return list(self.remote_runs)

    def join_run(self, thread_id: str, run_id: str) -> RunResult:
        self.calls.append(("join_run", {"thread_id": thread_id, "run_id": run_id}))
        return self._next()

    def review(self, **kwargs: Any) -> RunResult:
        self.calls.append(("review", kwargs))
        return self._next()

    def thread_messages(self, thread_id: str) -> list[dict[str, Any]]:
        return list(self.state["values"]["messages"])

    def thread_state(self, thread_id: str) -> dict[str, Any]:
        return self.state

    def under_review(self, thread_id: str) -> PendingReview | None:
        return self.pending

    def called(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for called, kwargs in self.calls if called == name]


@pytest.fixture
def fake_assistant(monkeypatch: pytest.MonkeyPatch) -> FakeAssistant:
    fake = FakeAssistant()
    monkeypatch.setattr("nitro_assistants.services.clients.assistant_for", lambda key: fake)
    return fake


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Tasks enqueued (instead of sent to a broker), as (task name, args)."""
    sent: list[tuple[str, tuple[Any, ...]]] = []
    for task in (tasks.run_thread, tasks.resume_thread, tasks.collect_run, tasks.sync_thread):

        def delay(*args: Any, _name: str = task.name, **kwargs: Any) -> None:
            sent.append((_name, args))

        def apply_async(
            args: tuple[Any, ...] = (), kwargs: Any = None, _name: str = task.name, **options: Any
        ) -> None:
            sent.append((_name, tuple(args)))

        monkeypatch.setattr(task, "delay", delay)
        monkeypatch.setattr(task, "apply_async", apply_async)
    return sent


@pytest.fixture
def signal_log() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every nitro_assistants signal sent in this process, as (name, kwargs)."""
    log: list[tuple[str, dict[str, Any]]] = []
    receivers = []
    for name in SIGNALS:

        def receiver(sender: Any, _name: str = name, **kwargs: Any) -> None:
            kwargs.pop("signal", None)
            log.append((_name, {"sender": sender, **kwargs}))

        getattr(signals, name).connect(receiver, weak=False)
        receivers.append((name, receiver))
    yield log
    for name, receiver in receivers:
        getattr(signals, name).disconnect(receiver)


def sent(log: list[tuple[str, dict[str, Any]]], name: str) -> list[dict[str, Any]]:
    return [kwargs for sent_name, kwargs in log if sent_name == name]


# -- the real server, a proxy in front of it, a real worker -------------------------------------


@pytest.fixture(scope="session")
def proxy(langgraph_server: Any) -> Iterator[Proxy]:
    """Everything (test process and worker) reaches the server through this, so a test can stop
    it: new connections are refused and open ones cut, as when the server is down."""
    proxied = Proxy(upstream_port=langgraph_server.port).start()
    yield proxied
    proxied.stop()


@pytest.fixture
def server_settings(settings: Any, proxy: Proxy) -> Proxy:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "BASE_URL": proxy.url}
    return proxy


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log_path: Path
    queue: str

    def finished(self, task: str) -> int:
        """How many runs of ``task`` the worker has finished (succeeded or failed)."""
        text = self.log_path.read_text(errors="replace")
        return len(re.findall(rf"Task {re.escape(task)}\[[^\]]+\] (?:succeeded|raised)", text))

    def retry_delays(self, task: str) -> list[float]:
        """The countdowns the worker logged for retries of ``task``, in order."""
        text = self.log_path.read_text(errors="replace")
        pattern = rf"Task {re.escape(task)}\[[^\]]+\] retry: Retry in ([0-9.]+)s"
        return [float(d) for d in re.findall(pattern, text)]

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="session")
def celery_worker(
    proxy: Proxy,
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Worker]:
    """A real ``celery worker`` process on the real Redis broker and the test database."""
    with django_db_blocker.unblock():
        db_name = connection.settings_dict["NAME"]
    queue = f"nitro-tests-{uuid.uuid4().hex[:8]}"
    celery_app.conf.task_default_queue = queue
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "NITRO_TEST_DB_NAME": db_name,
        "NITRO_TEST_ASSISTANTS_URL": proxy.url,
        "NITRO_TEST_QUEUE": queue,
        "PYTHONUNBUFFERED": "1",
    }
    hostname = f"nitro-{queue}@%h"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.celery_app",
            "worker",
            "--pool=threads",
            "--concurrency=4",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-Q",
            queue,
            "-n",
            hostname,
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        stdout=log_path.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = Worker(process, log_path, queue)
    try:
        wait_for(lambda: process.poll() is not None or "ready." in log_path.read_text(), 60)
        if process.poll() is not None:
            raise RuntimeError(f"celery worker exited:\n{worker.log_tail()}")
        yield worker
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
