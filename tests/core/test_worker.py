"""Through a real Celery worker, on real Redis and Postgres, against the real server."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

import nitro_assistants
from nitro_assistants import services, tasks
from nitro_assistants.models import Decision, Delivery, Review, Run, Thread
from nitro_assistants.testing.launchers import CeleryWorker
from tests.core.conftest import wait_for

pytestmark = [pytest.mark.server, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def assistant(server_settings: Any, celery_worker: CeleryWorker) -> Any:
    return nitro_assistants.assistants()["walkthrough"]


def pending_review(thread: Thread, kind: str) -> Review:
    return wait_for(
        lambda: Review.objects.filter(thread=thread, status="pending", kind=kind).first(), 30
    )


def remote_runs(assistant: Any, thread: Thread, key: str, value: str) -> list[dict[str, Any]]:
    return [
        r
        for r in assistant.list_runs(thread_id=str(thread.thread_id))
        if (r.get("metadata") or {}).get(key) == value
    ]


def assert_mirrors(thread: Thread, assistant: Any) -> None:
    thread.refresh_from_db()
    assert thread.messages == assistant.thread_messages(thread_id=str(thread.thread_id))
    remote = assistant.under_review(thread_id=str(thread.thread_id))
    local = thread.reviews.filter(status="pending").first()
    assert (local.interrupt_ids if local else None) == (remote.interrupt_ids if remote else None)


def test_full_loop_through_celery(assistant: Any, admin_user: Any) -> None:
    run = services.start_run(
        "walkthrough", "Can I move my appointment to Tuesday?", user=admin_user
    )
    thread = run.thread
    review = pending_review(thread, "tool_calls")
    assert review.tool_calls[0]["name"] == "reschedule_appointment"
    assert_mirrors(thread, assistant)

    services.decide(
        review,
        admin_user,
        {"tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}]},
    )
    draft = pending_review(thread, "reply")
    review.refresh_from_db()
    assert review.status == "applied"
    assert draft.reply is not None
    assert draft.reply["content"].startswith("Done!")
    assert_mirrors(thread, assistant)

    services.decide(
        draft, admin_user, {"reply": {"action": "edit", "content": "See you Tuesday at 10."}}
    )
    delivery = wait_for(lambda: Delivery.objects.filter(thread=thread, status="delivered").first())
    assert delivery.content == "See you Tuesday at 10."
    assert delivery.tool == "send_sms"
    wait_for(lambda: Decision.objects.filter(review=draft, outcome="applied").exists())
    assert_mirrors(thread, assistant)
    thread.refresh_from_db()
    assert thread.status == Thread.Status.IDLE
    verbs = list(thread.events.values_list("verb", flat=True))
    for verb, count in [
        ("review_requested", 2),
        ("review_decided", 2),
        ("review_applied", 2),
        ("delivery_delivered", 1),
    ]:
        assert verbs.count(verb) == count, verbs


def test_the_live_endpoint_sees_what_the_worker_applies(
    assistant: Any, admin_user: Any, settings: Any, client: Any
) -> None:
    """The change token crosses processes: a decision's outcome written by the worker turns the
    web process's 304 into a 200, though the web process writes nothing meanwhile."""
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": "live"}
    client.force_login(admin_user)
    run = services.start_run("walkthrough", "Can I move my appointment to Tuesday?")
    review = pending_review(run.thread, "tool_calls")
    services.decide(
        review,
        admin_user,
        {"tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}]},
    )
    live = reverse("admin:nitro_assistants_review_live")
    first = client.get(live, {"review": review.pk})
    assert first.json()["review"]["outcome"] == "pending"  # the worker has not applied it yet
    tag = first["ETag"]
    changed = wait_for(
        lambda: (
            (r := client.get(live, {"review": review.pk}, HTTP_IF_NONE_MATCH=tag)).status_code
            == 200
            and r
        ),
        30,
    )
    assert changed["ETag"] != tag
    # What the worker wrote, as the page reads it (the assistant's next pause mirrored too).
    state = wait_for(
        lambda: (s := client.get(live, {"review": review.pk}).json()["review"])["next"] and s, 30
    )
    assert state["outcome"] == "applied" and state["next"]["kind"] == "reply"


def test_tasks_delivered_twice_act_once(assistant: Any, celery_worker: CeleryWorker) -> None:
    runs_done = celery_worker.finished("nitro_assistants.run_thread")
    resumes_done = celery_worker.finished("nitro_assistants.resume_thread")
    run = services.start_run("walkthrough", "Can I move my appointment to Tuesday?")
    tasks.run_thread.delay(str(run.pk))  # the same run task, delivered again
    tasks.run_thread.delay(str(run.pk))
    review = pending_review(run.thread, "tool_calls")
    wait_for(lambda: celery_worker.finished("nitro_assistants.run_thread") >= runs_done + 3)
    assert len(remote_runs(assistant, run.thread, "nitro_run_id", str(run.pk))) == 1

    decision = services.decide(
        review, None, {"tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}]}
    )
    tasks.resume_thread.delay(decision.pk)  # the same resume task, delivered again
    tasks.resume_thread.delay(decision.pk)
    wait_for(lambda: Decision.objects.filter(pk=decision.pk, outcome="applied").exists())
    wait_for(lambda: celery_worker.finished("nitro_assistants.resume_thread") >= resumes_done + 3)
    assert len(remote_runs(assistant, run.thread, "reviewer_id", "system")) == 1
    assert Run.objects.filter(thread=run.thread, kind="resume").count() == 1

    # A worker that died after creating a remote run, before recording it: the redelivered task
    # finds it by its metadata instead of starting another.
    follow_up = services.start_run(run.thread, "reply: ok")
    wait_for(lambda: Run.objects.get(pk=follow_up.pk).finished)
    orphan = Run.objects.create(
        thread=run.thread,
        input={"messages": [{"role": "user", "content": "reply: again"}]},
        status="running",
        attempts=1,
    )
    assistant.start_run(
        thread_id=str(run.thread.thread_id),
        messages=orphan.input["messages"],
        metadata={"nitro_run_id": str(orphan.pk)},
        known_thread=True,
    )
    tasks.run_thread.delay(str(orphan.pk))
    wait_for(lambda: Run.objects.get(pk=orphan.pk).finished)
    assert len(remote_runs(assistant, run.thread, "nitro_run_id", str(orphan.pk))) == 1


def test_server_down_during_a_resume_is_retried_until_applied(
    assistant: Any, server_settings: Any, celery_worker: CeleryWorker
) -> None:
    earlier = len(celery_worker.retry_delays("nitro_assistants.resume_thread"))
    run = services.start_run("walkthrough", "Can I move my appointment to Tuesday?")
    review = pending_review(run.thread, "tool_calls")
    proxy = server_settings
    proxy.stop()
    try:
        decision = services.decide(
            review, None, {"tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}]}
        )
        resume = decision.run
        assert resume is not None
        wait_for(lambda: Run.objects.get(pk=resume.pk).attempts >= 3, 30)
        decision.refresh_from_db()
        assert decision.outcome == Decision.Outcome.PENDING  # never lost, never failed
    finally:
        proxy.start()
    wait_for(lambda: Decision.objects.filter(pk=decision.pk, outcome="applied").exists(), 30)
    assert len(remote_runs(assistant, run.thread, "reviewer_id", "system")) == 1
    assert pending_review(run.thread, "reply").reply is not None
    delays = celery_worker.retry_delays("nitro_assistants.resume_thread")[earlier : earlier + 2]
    assert len(delays) == 2
    assert delays[0] < delays[1]  # backing off: 0.5-1 s, then 1-2 s


def test_pauses_of_graphs_of_their_own_through_celery(assistant: Any, admin_user: Any) -> None:
    """Agent Inbox and plain interrupt() pauses (docs/protocol.md §9) decided through the real
    worker: an inbox edit, then a plain interrupt answered twice in a row (one node pausing
    again gives a new review)."""
    run = services.start_run("inbox", "refund please", user=admin_user)
    review = pending_review(run.thread, "inbox")
    edit = {"type": "edit", "args": {"action": "send_refund", "args": {"order_id": 1, "amount": 2}}}
    services.decide(review, admin_user, {"answer": edit})
    decision = wait_for(
        lambda: Decision.objects.filter(review=review).exclude(outcome="pending").first()
    )
    assert decision.outcome == "applied", decision.error
    assert decision.run is not None and decision.run.reply == "refund sent: order 1 amount 2"

    run = services.start_run("plain_interrupt", "hi", user=admin_user)
    first = pending_review(run.thread, "interrupt")
    services.decide(first, admin_user, {"answer": True})
    second = wait_for(
        lambda: (
            Review.objects.filter(thread=run.thread, status="pending").exclude(pk=first.pk).first()
        )
    )
    assert second.payload["pauses"][0]["options"] == ["UPS", "DHL"]
    services.decide(second, admin_user, {"answer": "UPS"})
    done = wait_for(
        lambda: Decision.objects.filter(review=second).exclude(outcome="pending").first()
    )
    assert done.run is not None and done.run.reply == "approved=True carrier='UPS'"
