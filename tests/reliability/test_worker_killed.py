"""A Celery worker killed with SIGKILL in the middle of a resume: the broker delivers the task
again (acks_late, Redis visibility timeout 4 s) and the decision is applied exactly once."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
import requests

from nitro_assistants import services
from nitro_assistants.models import Decision, Event, Review, Run
from tests.reliability.conftest import remote_runs, wait_for

pytestmark = [pytest.mark.server, pytest.mark.django_db(transaction=True)]

VISIBILITY_TIMEOUT = "4"


def pending_review(thread: Any) -> Review:
    return wait_for(lambda: Review.objects.filter(thread=thread, status="pending").first(), 30)


def tool_messages(server: Any, thread: Any, call_id: str) -> list[dict[str, Any]]:
    state = requests.get(f"{server.url}/threads/{thread.thread_id}/state", timeout=10).json()
    return [
        m
        for m in state["values"]["messages"]
        if m["type"] == "tool" and m.get("tool_call_id") == call_id
    ]


def test_worker_killed_mid_resume_applies_the_decision_once(
    nitro_settings: Any, start_worker: Any, server: Any
) -> None:
    first = start_worker(NITRO_REL_VISIBILITY_TIMEOUT=VISIBILITY_TIMEOUT)
    run = services.start_run("slow", "Can I move my appointment to Tuesday?")
    thread = run.thread
    review = pending_review(thread)
    call_id = review.tool_calls[0]["id"]
    decision = services.decide(review, None, {"tool_calls": [{"id": call_id, "action": "approve"}]})

    # The resume is on the server: the approved tool is running (it takes SLOW_SECONDS).
    resumes = wait_for(lambda: remote_runs(server, thread, reviewer_id="system"), 20)
    assert resumes[0]["status"] in ("pending", "running")
    killed_at = time.monotonic()
    first.kill()
    decision.refresh_from_db()
    assert decision.outcome == Decision.Outcome.PENDING

    second = start_worker(NITRO_REL_VISIBILITY_TIMEOUT=VISIBILITY_TIMEOUT)
    wait_for(lambda: Decision.objects.filter(pk=decision.pk, outcome="applied").exists(), 40)
    recovered_in = time.monotonic() - killed_at
    # Not before the visibility timeout: the second worker got the task the first one held.
    assert recovered_in >= float(VISIBILITY_TIMEOUT)
    assert second.received("nitro_assistants.resume_thread") == 1
    wait_for(lambda: second.finished("nitro_assistants.resume_thread") == 1, 10)

    # Exactly once: one remote resume, the tool ran once, one local resume run, one applied event.
    assert len(remote_runs(server, thread, reviewer_id="system")) == 1
    assert len(tool_messages(server, thread, call_id)) == 1
    resume = Run.objects.get(thread=thread, kind="resume")
    assert resume.attempts == 2
    assert resume.status == Run.Status.SUCCEEDED
    assert Event.objects.filter(thread=thread, verb="review_applied").count() == 1
    review.refresh_from_db()
    assert review.status == Review.Status.APPLIED
    thread.refresh_from_db()
    assert thread.messages[-1]["content"].startswith("Done! Appointment 42 moved to Tuesday")
    print(f"killed after the resume reached the server; applied {recovered_in:.1f}s later")


def test_worker_killed_mid_run_creates_one_remote_run(
    nitro_settings: Any, start_worker: Any, server: Any
) -> None:
    first = start_worker(NITRO_REL_VISIBILITY_TIMEOUT=VISIBILITY_TIMEOUT)
    run = services.start_run("slow", "slowly: Can I move my appointment to Tuesday?")
    # The remote run exists and the model is thinking (SLOW_SECONDS): the worker waits on it.
    wait_for(lambda: remote_runs(server, run.thread, nitro_run_id=str(run.pk)), 20)
    first.kill()

    second = start_worker(NITRO_REL_VISIBILITY_TIMEOUT=VISIBILITY_TIMEOUT)
    review = pending_review(run.thread)
    assert second.received("nitro_assistants.run_thread") == 1
    assert len(remote_runs(server, run.thread, nitro_run_id=str(run.pk))) == 1
    run.refresh_from_db()
    assert run.status == Run.Status.INTERRUPTED
    assert run.attempts == 2
    state = requests.get(f"{server.url}/threads/{run.thread.thread_id}/state", timeout=10).json()
    assert review.interrupt_ids == [i["id"] for i in state["interrupts"]]
    assert Event.objects.filter(thread=run.thread, verb="review_requested").count() == 1


def kill_pool_process_mid_resume(worker: Any, server: Any) -> tuple[Review, Decision]:
    run = services.start_run("slow", "Can I move my appointment to Tuesday?")
    review = pending_review(run.thread)
    call_id = review.tool_calls[0]["id"]
    decision = services.decide(review, None, {"tool_calls": [{"id": call_id, "action": "approve"}]})
    wait_for(lambda: remote_runs(server, run.thread, reviewer_id="system"), 20)
    (child,) = worker.children()
    os.kill(child, signal.SIGKILL)  # the pool process running the resume; its parent lives on
    return review, decision


def test_pool_process_killed_with_reject_on_worker_lost_is_requeued_at_once(
    nitro_settings: Any, start_worker: Any, server: Any
) -> None:
    worker = start_worker(pool="prefork", concurrency=1)
    review, decision = kill_pool_process_mid_resume(worker, server)
    # Well within the visibility timeout (3600 s here): requeued by the worker itself.
    wait_for(lambda: Decision.objects.filter(pk=decision.pk, outcome="applied").exists(), 30)
    assert "WorkerLostError" in worker.log()
    assert worker.received("nitro_assistants.resume_thread") == 2  # rejected, requeued, again
    assert len(remote_runs(server, review.thread, reviewer_id="system")) == 1
    assert len(tool_messages(server, review.thread, review.tool_calls[0]["id"])) == 1


def test_pool_process_killed_without_reject_on_worker_lost_loses_the_task(
    nitro_settings: Any, start_worker: Any, server: Any
) -> None:
    """Celery's default: the task of a lost pool process is acknowledged as failed. The decision
    stays recorded (pending); ``requeue_stale`` enqueues it again."""
    worker = start_worker(pool="prefork", concurrency=1, NITRO_REL_REJECT_ON_WORKER_LOST="0")
    review, decision = kill_pool_process_mid_resume(worker, server)
    wait_for(lambda: "WorkerLostError" in worker.log(), 20)
    time.sleep(2)
    assert worker.received("nitro_assistants.resume_thread") == 1  # not delivered again
    decision.refresh_from_db()
    assert decision.outcome == Decision.Outcome.PENDING

    nitro_settings.NITRO_ASSISTANTS = {**nitro_settings.NITRO_ASSISTANTS, "REQUEUE_AFTER": 0}
    assert services.requeue_stale() == {"runs": 0, "decisions": 1, "policies": 0}
    wait_for(lambda: Decision.objects.filter(pk=decision.pk, outcome="applied").exists(), 30)
    assert len(remote_runs(server, review.thread, reviewer_id="system")) == 1
    assert len(tool_messages(server, review.thread, review.tool_calls[0]["id"])) == 1
