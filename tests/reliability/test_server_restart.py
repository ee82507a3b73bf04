"""The LangGraph server really stopped during a run and during a resume, then started again on
the same port and working directory.

What ``langgraph dev`` (langgraph-api 0.16.7, in-memory runtime) was observed to do:

- ``LangGraphServer.stop()`` (SIGTERM) is a graceful shutdown: uvicorn first finishes every open
  request. A worker waiting on a run (``/join``) or reading a resume's stream gets its answer, then
  the server exits. Runs nobody is waiting on are cut off.
- On the way out it writes threads, checkpoints and runs to ``.langgraph_api/*.pckl`` and reads them
  back on start; a run cut off mid-way comes back ``pending`` and is executed again from its last
  checkpoint.
- Killed (SIGKILL), it loses whatever it did since its last periodic flush (every 10 s).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests

from nitro_assistants import services, tasks
from nitro_assistants.models import Decision, Event, Review, Run
from tests.reliability.conftest import crash, remote_runs, wait_for

pytestmark = [pytest.mark.server, pytest.mark.django_db(transaction=True)]


def pending_review(thread: Any, timeout: float = 30) -> Review:
    return wait_for(lambda: Review.objects.filter(thread=thread, status="pending").first(), timeout)


def state_of(server: Any, thread: Any) -> dict[str, Any]:
    response = requests.get(f"{server.url}/threads/{thread.thread_id}/state", timeout=10)
    response.raise_for_status()
    return dict(response.json())


def approve(review: Review) -> Decision:
    call_id = review.tool_calls[0]["id"]
    return services.decide(review, None, {"tool_calls": [{"id": call_id, "action": "approve"}]})


def backing_off(worker: Any, task: str) -> bool:
    """Some task retried at least twice, and the delays grew (equal jitter: at worst equal)."""
    sequences = [d for d in worker.retries(task).values() if len(d) >= 2]
    return bool(sequences) and all(d[0] < d[1] for d in sequences)


def tool_results(server: Any, thread: Any, call_id: str) -> list[dict[str, Any]]:
    messages = state_of(server, thread)["values"]["messages"]
    return [m for m in messages if m.get("tool_call_id") == call_id]


def test_server_stopped_during_a_run(nitro_settings: Any, start_worker: Any, server: Any) -> None:
    worker = start_worker()
    first = services.start_run("slow", "slowly: Can I move my appointment to Tuesday?")
    wait_for(lambda: remote_runs(server, first.thread, nitro_run_id=str(first.pk)), 20)
    time.sleep(0.5)  # the worker's /join follows its POST at once; the model thinks for 3 s
    stopping = time.monotonic()
    server.stop()  # drains the worker's open /join: the run in flight ends first
    drained_in = time.monotonic() - stopping

    # A run asked for while the server is down is retried with backoff until it is back.
    second = services.start_run("plain", "reply: hello again")
    wait_for(lambda: len(worker.retry_delays("nitro_assistants.run_thread")) >= 2, 30)
    second.refresh_from_db()
    assert second.status == Run.Status.RUNNING  # retrying, not failed
    server.start()

    wait_for(lambda: Run.objects.get(pk=second.pk).status == Run.Status.SUCCEEDED, 30)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == Run.Status.INTERRUPTED
    assert first.attempts == 1
    assert drained_in > 1  # stop() waited for the model (SLOW_SECONDS) to answer
    review = pending_review(first.thread)
    assert review.interrupt_ids == [i["id"] for i in state_of(server, first.thread)["interrupts"]]
    assert second.attempts >= 3
    assert second.thread.messages[-1]["content"] == "hello again"
    for run in (first, second):
        assert len(remote_runs(server, run.thread, nitro_run_id=str(run.pk))) == 1
    assert backing_off(worker, "nitro_assistants.run_thread")
    assert worker.signals("run_failed") == []


def test_server_stopped_during_a_background_run(
    nitro_settings: Any, start_worker: Any, server: Any
) -> None:
    """Background mode (polled): no request is open when the server stops, so the run is cut off
    mid-way; the restarted server runs it again and the poll, retried with backoff, collects it."""
    nitro_settings.NITRO_ASSISTANTS = {**nitro_settings.NITRO_ASSISTANTS, "RUN_MODE": "background"}
    worker = start_worker(NITRO_TEST_RUN_MODE="background")
    run = services.start_run("slow", "slowly: Can I move my appointment to Tuesday?")
    wait_for(lambda: Run.objects.get(pk=run.pk).remote_run_id, 20)
    server.stop()
    wait_for(lambda: len(worker.retry_delays("nitro_assistants.collect_run")) >= 2, 30)
    server.start()

    review = pending_review(run.thread, 60)
    run.refresh_from_db()
    assert run.status == Run.Status.INTERRUPTED
    remote = remote_runs(server, run.thread, nitro_run_id=str(run.pk))
    assert len(remote) == 1  # the same remote run, executed again by the restarted server
    assert remote[0]["run_id"] == run.remote_run_id
    assert remote[0]["status"] == "success"
    assert review.interrupt_ids == [i["id"] for i in state_of(server, run.thread)["interrupts"]]
    assert backing_off(worker, "nitro_assistants.collect_run")
    assert worker.signals("run_failed") == []
    assert len(worker.signals("review_requested")) == 1


def test_server_stopped_during_a_resume(
    nitro_settings: Any, start_worker: Any, server: Any
) -> None:
    worker = start_worker()
    drained = services.start_run("slow", "Can I move my appointment to Tuesday?")
    waiting = services.start_run("slow", "Can I move my appointment to Wednesday?")
    first, second = pending_review(drained.thread), pending_review(waiting.thread)

    in_flight = approve(first)
    wait_for(lambda: remote_runs(server, drained.thread, reviewer_id="system"), 20)
    server.stop()  # drains the resume's open stream: the approved tool finishes first
    # A decision made while the server is down: its resume is retried until the server is back.
    queued = approve(second)
    assert queued.run is not None
    wait_for(lambda: Run.objects.get(pk=queued.run.pk).attempts >= 3, 30)
    queued.refresh_from_db()
    assert queued.outcome == Decision.Outcome.PENDING
    server.start()

    # Both retry with jittered backoff until the server is back: either may be applied first.
    both = [queued.pk, in_flight.pk]
    wait_for(lambda: Decision.objects.filter(pk__in=both, outcome="applied").count() == 2, 60)
    in_flight.refresh_from_db()
    assert in_flight.outcome == Decision.Outcome.APPLIED
    for run, review in ((drained, first), (waiting, second)):
        assert len(remote_runs(server, run.thread, reviewer_id="system")) == 1
        results = tool_results(server, run.thread, review.tool_calls[0]["id"])
        assert [m["status"] for m in results] == ["success"]
        run.thread.refresh_from_db()
        assert run.thread.messages == state_of(server, run.thread)["values"]["messages"]
        assert Event.objects.filter(thread=run.thread, verb="review_applied").count() == 1
    assert backing_off(worker, "nitro_assistants.resume_thread")
    assert worker.signals("run_failed") == []


def test_server_killed_during_a_resume(nitro_settings: Any, start_worker: Any, server: Any) -> None:
    """SIGKILL mid-resume: the worker's stream is cut. Whether the restarted server still has the
    resume (flushed in time: it runs it again) or lost it (the thread is back on the pause), the
    retried task applies the decision exactly once."""
    worker = start_worker()
    run = services.start_run("slow", "Can I move my appointment to Tuesday?")
    review = pending_review(run.thread)
    server.stop()  # a graceful stop writes the paused thread to disk
    server.start()
    decision = approve(review)
    wait_for(lambda: remote_runs(server, run.thread, reviewer_id="system"), 20)
    crash(server)
    wait_for(lambda: len(worker.retry_delays("nitro_assistants.resume_thread")) >= 1, 30)
    server.start()

    wait_for(lambda: Decision.objects.filter(pk=decision.pk, outcome="applied").exists(), 60)
    assert len(remote_runs(server, run.thread, reviewer_id="system")) == 1
    results = tool_results(server, run.thread, review.tool_calls[0]["id"])
    assert [m["status"] for m in results] == ["success"]
    assert Event.objects.filter(thread=run.thread, verb="review_applied").count() == 1
    assert worker.signals("run_failed") == []


def test_server_staying_down_fails_once(
    nitro_settings: Any, start_worker: Any, server: Any
) -> None:
    worker = start_worker(NITRO_REL_MAX_RETRIES="2")
    paused = services.start_run("tools", "Can I move my appointment to Tuesday?")
    review = pending_review(paused.thread)
    server.stop()

    run = services.start_run("plain", "reply: hello")
    decision = approve(review)
    wait_for(lambda: len(worker.signals("run_failed")) == 2, 60)
    run.refresh_from_db()
    decision.refresh_from_db()
    review.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.attempts == 3  # the first try and TASK_MAX_RETRIES = 2 retries
    assert decision.outcome == Decision.Outcome.FAILED
    assert decision.run is not None
    assert decision.run.attempts == 3
    assert review.status == Review.Status.FAILED
    assert "connection failed" in run.error
    assert len(worker.retry_delays("nitro_assistants.run_thread")) == 2
    assert len(worker.retry_delays("nitro_assistants.resume_thread")) == 2
    failed = {s["run"] for s in worker.signals("run_failed")}
    assert failed == {str(run.pk), str(decision.run.pk)}

    # Delivered again (a duplicate, or requeue_stale): already settled, no second signal.
    tasks.run_thread.delay(str(run.pk))
    tasks.resume_thread.delay(decision.pk)
    wait_for(lambda: worker.finished("nitro_assistants.run_thread") >= 2, 20)
    wait_for(lambda: worker.finished("nitro_assistants.resume_thread") >= 2, 20)
    assert len(worker.signals("run_failed")) == 2
    assert Event.objects.filter(verb="run_failed").count() == 2


CANCEL = 'tools: [{"name": "cancel_appointment", "args": {"appointment_id": 42}}]'


def test_server_stopped_after_the_resume_reported_its_tool(
    nitro_settings: Any, start_worker: Any, server: Any
) -> None:
    """The stream has reported the approved tool's result, the model is still thinking, and the
    server stops: the stream closes early. The mirror must end with the model's answer (the
    restarted server finishes the run), not with the half-way state."""
    worker = start_worker()
    run = services.start_run("slow", CANCEL)
    review = pending_review(run.thread)
    call_id = review.tool_calls[0]["id"]
    decision = approve(review)
    wait_for(lambda: tool_results(server, run.thread, call_id), 20)  # the model is thinking
    server.stop()
    server.start()

    wait_for(lambda: Decision.objects.get(pk=decision.pk).outcome != "pending", 60)
    wait_for(
        lambda: remote_runs(server, run.thread, reviewer_id="system")[0]["status"] == "success", 30
    )
    decision.refresh_from_db()
    assert decision.outcome == Decision.Outcome.APPLIED
    remote = state_of(server, run.thread)["values"]["messages"]
    assert remote[-1]["content"] == "Done! Appointment 42 cancelled"
    run.thread.refresh_from_db()
    assert run.thread.messages == remote
    assert worker.signals("run_failed") == []
