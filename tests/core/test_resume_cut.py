"""A resume whose event stream ends before its first update while the server goes on and applies
it (a proxy timing out, a load balancer draining): the decision is recorded from what the
server's state shows, applied, never "superseded" for want of an update. Real server, real
proxy in front of it (tests/core/proxy.py), services in this process."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

import nitro_assistants
from nitro_assistants import services
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import Decision, Review, Run
from tests.core.conftest import sent
from tests.core.proxy import Fault, Proxy

pytestmark = [pytest.mark.server, pytest.mark.django_db]

MOVE = 'tools: [{"name": "reschedule_appointment", "args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"}}]'
STREAM = re.compile(rb"^POST /threads/[^/ ]+/runs/stream ")
RUN_LIST = re.compile(rb"^GET /threads/[^/ ]+/runs\?")
EMPTY_LIST = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
    b"Connection: close\r\n\r\n[]"
)


def paused_review(capture: Any) -> Review:
    with capture(execute=True):
        run = services.start_run("walkthrough", MOVE)
    with capture(execute=True):
        run = services.execute_run(run.pk)
    assert run.status == Run.Status.INTERRUPTED
    return Review.objects.get(thread=run.thread, status="pending")


def resume_like_the_task(decision: Decision, capture: Any) -> None:
    """execute_resume, retried on transient errors as the task does (without its backoff)."""
    for _ in range(10):
        try:
            with capture(execute=True):
                services.execute_resume(decision.pk)
            return
        except NitroAssistantsError as exc:
            if not exc.transient:
                raise
            time.sleep(1)
    raise AssertionError("still transient after 10 attempts")


def assert_applied_and_mirrored(review: Review, decision: Decision, signal_log: list[Any]) -> None:
    decision.refresh_from_db()
    review.refresh_from_db()
    assert (decision.outcome, decision.error) == (Decision.Outcome.APPLIED, "")
    assert review.status == Review.Status.APPLIED
    assert sent(signal_log, "review_superseded") == []
    assert sent(signal_log, "run_failed") == []
    # The server ran the tool and paused on the reply draft: the mirror shows that pause.
    assistant = nitro_assistants.assistants()["walkthrough"]
    remote = assistant.under_review(thread_id=str(review.thread.thread_id))
    assert remote is not None and remote.kind == "reply"
    draft = Review.objects.get(thread=review.thread, status="pending")
    assert (draft.kind, draft.interrupt_ids) == ("reply", remote.interrupt_ids)
    assert decision.run is not None
    assert Run.objects.get(pk=decision.run.pk).status == Run.Status.INTERRUPTED


@pytest.mark.parametrize("attempt", range(3))
def test_a_resume_stream_cut_before_its_first_update_is_recorded_applied(
    attempt: int,
    server_settings: Proxy,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    review = paused_review(django_capture_on_commit_callbacks)
    decision = services.decide(
        review, None, {"tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}]}
    )
    # The stream's headers pass, then 3 s later it ends cleanly with no event at all; the server
    # was never told and finished the resume meanwhile.
    with server_settings.fault(Fault(STREAM, cut_after=3.0, times=1)) as cut:
        resume_like_the_task(decision, django_capture_on_commit_callbacks)
    assert len(cut.hits) == 1
    assert_applied_and_mirrored(review, decision, signal_log)


def test_a_cut_resume_whose_run_a_proxy_hides_is_recorded_applied(
    server_settings: Proxy,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The run list comes back empty (a proxy answered it): the thread's checkpoints still show
    the resume carrying this decision's metadata was applied."""
    review = paused_review(django_capture_on_commit_callbacks)
    decision = services.decide(
        review, None, {"tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}]}
    )
    with (
        server_settings.fault(Fault(STREAM, cut_after=3.0, times=1)),
        server_settings.fault(Fault(RUN_LIST, answer=EMPTY_LIST)) as hidden,
    ):
        resume_like_the_task(decision, django_capture_on_commit_callbacks)
    assert hidden.hits
    assert_applied_and_mirrored(review, decision, signal_log)


def test_a_resume_the_thread_moved_past_is_still_superseded(
    server_settings: Proxy,
    enqueued: list[Any],
    signal_log: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The other side of the check: a decision on a pause the server dropped (a new message came
    first) applies nothing, and is closed as superseded."""
    review = paused_review(django_capture_on_commit_callbacks)
    decision = services.decide(
        review, None, {"tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}]}
    )
    assistant = nitro_assistants.assistants()["walkthrough"]
    assistant.run(
        thread_id=str(review.thread.thread_id),
        messages=[{"role": "user", "content": "reply: never mind"}],
        known_thread=True,
    )
    resume_like_the_task(decision, django_capture_on_commit_callbacks)
    decision.refresh_from_db()
    review.refresh_from_db()
    assert decision.outcome == Decision.Outcome.SUPERSEDED
    assert review.status == Review.Status.SUPERSEDED
    assert len(sent(signal_log, "review_superseded")) == 1
