"""Odd payloads from a real (scripted) HTTP server, through the real tasks and database: every one
ends in a recorded failure with a clear error text and one ``run_failed``, the thread not left
busy or "interrupted" with nothing to decide, and nothing left for ``requeue_stale`` to resend."""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from nitro_assistants import services, tasks
from nitro_assistants.exceptions import RunError
from nitro_assistants.models import Decision, Event, Review, Run, Thread
from nitro_assistants.services.errors import error_text
from tests.core.conftest import sent
from tests.factories import ReviewFactory
from tests.rawserver import RawServer, answer

pytestmark = pytest.mark.django_db

IID = "0123456789abcdef0123456789abcdef"
HUMAN = {"type": "human", "id": "h-1", "content": "hi"}
CALL = {"id": "call_1", "name": "reschedule_appointment", "args": {"appointment_id": 42}}
AI = {"type": "ai", "id": "a-1", "content": "", "tool_calls": [CALL]}
HELD = {"action_requests": [{"name": "reschedule_appointment", "args": CALL["args"]}]}


class FakeServer:
    """Answers each ``(method, path pattern)`` with what the test says: raw bytes on a socket."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Any] = {}
        self.raw = RawServer(self._handle)

    def route(self, method: str, pattern: str, body: bytes | str | Any, **headers: str) -> None:
        if not isinstance(body, bytes | str):
            body = json.dumps(body)
        data = body.encode() if isinstance(body, str) else body
        extra = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in headers.items())
        response = answer("200 OK", data)
        self.routes[(method, pattern)] = response.replace(
            b"\r\n\r\n", f"\r\n{extra}\r\n".encode(), 1
        )

    def _handle(self, conn: Any, request: bytes) -> None:
        method, path = request.split(b" ", 2)[:2]
        for (want, pattern), response in self.routes.items():
            if want == method.decode() and re.fullmatch(pattern, path.decode().split("?")[0]):
                if callable(response):
                    response(conn)
                else:
                    conn.sendall(response)
                return
        conn.sendall(answer("404 Not Found", b'{"detail": "not found"}'))


@pytest.fixture
def server(settings: Any) -> Iterator[FakeServer]:
    fake = FakeServer()
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "BASE_URL": fake.raw.url}
    yield fake
    fake.raw.stop()


def assert_failed_once(run: Run, says: str, signal_log: list[Any], enqueued: list[Any]) -> None:
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED, run.error
    assert says in run.error, run.error
    assert "\x00" not in run.error and len(run.error) <= 2000
    thread = Thread.objects.get(pk=run.thread_id)
    assert thread.status == Thread.Status.ERROR  # not busy, not "interrupted" with nothing
    assert not thread.reviews.filter(status=Review.Status.PENDING).exists()
    failed = sent(signal_log, "run_failed")
    assert [s["run"].pk for s in failed] == [run.pk]
    assert failed[0]["error"] == run.error
    event = Event.objects.get(verb="run_failed", run=run)
    assert event.data["error"] == run.error
    enqueued.clear()
    later = timezone.now() + datetime.timedelta(days=1)
    assert services.requeue_stale(now=later) == {"runs": 0, "decisions": 0, "policies": 0}
    assert enqueued == []


WAIT = r"/threads/[^/]+/runs/wait"
CASES: dict[str, tuple[Callable[[FakeServer], None], str]] = {
    "message-not-object": (
        lambda s: s.route("POST", WAIT, {"messages": [HUMAN, "an AI said this"]}),
        "the messages[1] is a string",
    ),
    "interrupt-id-too-long": (
        lambda s: s.route(
            "POST",
            WAIT,
            {"messages": [HUMAN, AI], "__interrupt__": [{"id": "f" * 80, "value": HELD}]},
        ),
        "80 characters long; at most 64",
    ),
    "nested-5000-deep": (
        lambda s: s.route("POST", WAIT, "[" * 5000 + "]" * 5000),
        "nested too deeply",
    ),
    "nul-characters": (
        lambda s: s.route(
            "POST", WAIT, {"messages": [HUMAN, {"type": "ai", "id": "a-1", "content": "ok\u0000"}]}
        ),
        "DataError",
    ),
    "run-id-too-long": (
        lambda s: s.route(
            "POST",
            WAIT,
            {"messages": [HUMAN, {"type": "ai", "id": "a-1", "content": "ok"}]},
            Content_Location=f"/threads/t/runs/{'r' * 70}",
        ),
        "70 characters long",
    ),
}


#: Pauses a known dialect does not read (issue 19): a plain "interrupt" review of the raw
#: value, saying why, never a failed run nobody can answer. The expected text: the problem.
PAUSES: dict[str, tuple[Callable[[FakeServer], None], str | None]] = {
    "action-request-not-object": (
        lambda s: s.route(
            "POST",
            WAIT,
            {
                "messages": [HUMAN, AI],
                "__interrupt__": [{"id": IID, "value": {"action_requests": ["x"]}}],
            },
        ),
        "action_requests[0] is a string, not an object",
    ),
    "tool-call-not-object": (
        lambda s: s.route(
            "POST",
            WAIT,
            {
                "messages": [HUMAN, {**AI, "tool_calls": ["reschedule_appointment"]}],
                "__interrupt__": [{"id": IID, "value": HELD}],
            },
        ),
        "tool calls of message 'a-1'[0] is a string",
    ),
    "interrupt-strings": (
        lambda s: s.route("POST", WAIT, {"messages": [HUMAN], "__interrupt__": ["Approve $50?"]}),
        None,
    ),
    "interrupt-single-object": (
        lambda s: s.route(
            "POST", WAIT, {"messages": [HUMAN], "__interrupt__": {"id": IID, "value": HELD}}
        ),
        # One object is read as a list of one; its held call matches no message here.
        "no AI message makes any",
    ),
}


@pytest.mark.parametrize("case", list(PAUSES))
def test_an_odd_pause_is_a_plain_interrupt_review_a_person_can_answer(
    case: str,
    server: FakeServer,
    signal_log: list[Any],
    enqueued: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    script, problem = PAUSES[case]
    script(server)
    run = services.start_run("walkthrough", "hi")
    with django_capture_on_commit_callbacks(execute=True):
        outcome = tasks.run_thread.apply(args=(str(run.pk),))
    assert outcome.result == "interrupted", outcome.traceback
    review = Review.objects.get(thread=run.thread, status="pending")
    assert review.kind == "interrupt"
    assert review.payload["pauses"] and review.payload["pauses"][0]["value"] is not None
    if problem is None:
        assert review.payload["problem"] is None
    else:
        assert problem in review.payload["problem"]
    assert not [s for s in signal_log if s[0] == "run_failed"]


@pytest.mark.parametrize("case", list(CASES))
def test_an_odd_run_payload_fails_the_run_once(
    case: str,
    server: FakeServer,
    signal_log: list[Any],
    enqueued: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    script, says = CASES[case]
    script(server)
    run = services.start_run("walkthrough", "hi")
    with django_capture_on_commit_callbacks(execute=True):
        outcome = tasks.run_thread.apply(args=(str(run.pk),))
    assert outcome.successful(), outcome.traceback  # the task records the failure, never raises
    if case == "nul-characters" and connection.vendor == "sqlite":
        # SQLite stores a NUL (PostgreSQL's jsonb refuses it): the run succeeds, nothing lost.
        assert outcome.result == "succeeded"
        thread = Thread.objects.get(pk=run.thread_id)
        assert thread.values["messages"][-1]["content"] == "ok\u0000"
        return
    assert outcome.result == "failed"
    assert_failed_once(run, says, signal_log, enqueued)


def test_a_run_list_that_is_html_fails_the_retried_run_once(
    server: FakeServer,
    signal_log: list[Any],
    enqueued: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    server.route("GET", r"/threads/[^/]+/runs", b"<html><body>Please sign in</body></html>")
    run = services.start_run("walkthrough", "hi")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, attempts=1)  # a worker died
    with django_capture_on_commit_callbacks(execute=True):
        outcome = tasks.run_thread.apply(args=(str(run.pk),))
    assert outcome.result == "failed", outcome.traceback
    assert_failed_once(run, "non-JSON body: '<html><body>Please sign in", signal_log, enqueued)


def test_an_odd_resume_payload_fails_the_decision_once(
    server: FakeServer,
    signal_log: list[Any],
    enqueued: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The server applied the resume, but its state holds a NUL the database refuses."""
    review = ReviewFactory(interrupt_ids=[IID])
    stream = (
        'event: metadata\ndata: {"run_id": "3a4b0c5d-0000-4000-8000-000000000001"}\n\n'
        'event: updates\ndata: {"tools": {"messages": []}}\n\n'
        "event: checkpoints\ndata: "
        + json.dumps(
            {
                "values": {"messages": [HUMAN, {"type": "ai", "id": "a-2", "content": "\u0000"}]},
                "next": [],
            }
        )
        + "\n\n"
    )
    server.route("POST", r"/threads/[^/]+/runs/stream", stream.encode())
    with django_capture_on_commit_callbacks(execute=False):
        decision = services.decide(
            review, None, {"tool_calls": [{"id": "call_1", "action": "approve"}]}
        )
    with django_capture_on_commit_callbacks(execute=True):
        outcome = tasks.resume_thread.apply(args=(decision.pk,))
    assert outcome.successful(), outcome.traceback
    decision.refresh_from_db()
    review.refresh_from_db()
    if connection.vendor == "sqlite":  # it stores the NUL: the resume is applied, nothing lost
        assert (decision.outcome, review.status) == (Decision.Outcome.APPLIED, "applied")
        assert review.thread.values["messages"][-1]["content"] == "\u0000"
        return
    assert decision.outcome == Decision.Outcome.FAILED
    assert "DataError" in decision.error
    assert review.status == Review.Status.FAILED
    assert decision.run is not None
    assert_failed_once(decision.run, "DataError", signal_log, enqueued)


def test_a_failure_text_with_nul_and_a_secret_is_stored_clean(
    signal_log: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    run = services.start_run("walkthrough", "hi")
    with django_capture_on_commit_callbacks(execute=True):
        services.fail_run(run, "bad \x00 byte, key test-key, " + "x" * 5000)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.error.startswith("bad \\x00 byte, key [redacted], ")
    assert len(run.error) == 2000 and run.error.endswith("…")
    assert sent(signal_log, "run_failed")[0]["error"] == run.error


def test_an_error_that_is_not_the_packages_is_named_by_its_type() -> None:
    assert error_text(RecursionError("maximum recursion depth exceeded")) == (
        "RecursionError: maximum recursion depth exceeded"
    )
    assert error_text(AttributeError()) == "AttributeError"
    assert error_text(services.ReviewNotPendingError("Review #1 was already Applied.")) == (
        "Review #1 was already Applied."
    )


def test_a_trickling_server_frees_the_worker_at_the_timeout(
    server: FakeServer, settings: Any, enqueued: list[Any]
) -> None:
    """TIMEOUT bounds the whole request: a server sending a byte a second (every read well
    within the timeout) no longer holds the worker and the run's row lock for as long as it likes."""

    def trickle(conn: Any) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9999\r\n\r\n"
        )
        for _ in range(60):
            conn.sendall(b" ")
            time.sleep(1)

    server.routes[("POST", WAIT)] = trickle
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "TIMEOUT": 3}
    run = services.start_run("walkthrough", "hi")
    started = time.monotonic()
    with pytest.raises(RunError, match="longer than 3 s in all") as caught:
        services.execute_run(run.pk)
    assert time.monotonic() - started < 4.5
    assert caught.value.transient  # the task retries; the retry finds the run by its metadata
