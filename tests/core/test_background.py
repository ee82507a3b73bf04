"""RUN_MODE = "background": no worker waits on a model; the server's webhook (or a poll) collects."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client

from nitro_assistants import services
from nitro_assistants.models import Review, Run
from nitro_assistants.services.runs import webhook_url
from tests.core.conftest import wait_for
from tests.factories import RunFactory


@pytest.fixture
def background(settings: Any, server_settings: Any) -> Any:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "RUN_MODE": "background"}
    return settings


def collects(enqueued: list[Any]) -> list[tuple[Any, ...]]:
    return [args for name, args in enqueued if name == "nitro_assistants.collect_run"]


@pytest.mark.server
@pytest.mark.django_db(transaction=True)
def test_the_webhook_collects_a_background_run(
    background: Any, live_server: Any, enqueued: list[Any]
) -> None:
    background.NITRO_ASSISTANTS = {
        **background.NITRO_ASSISTANTS,
        "WEBHOOK_URL": f"{live_server.url}/nitro/webhook/",
    }
    run = services.start_run("walkthrough", "Can I move my appointment to Tuesday?")
    run = services.execute_run(run.pk)
    assert run.status == Run.Status.RUNNING  # returned without waiting for the model
    assert run.remote_run_id
    assert collects(enqueued) == []  # nothing to poll: the webhook will say when it ends
    (args,) = wait_for(lambda: collects(enqueued), 20)
    assert args == (str(run.pk),)
    run = services.collect_run(run.pk, wait=True)
    assert run.status == Run.Status.INTERRUPTED
    assert Review.objects.get(thread=run.thread, status="pending").kind == "tool_calls"


@pytest.mark.server
@pytest.mark.django_db
def test_without_a_webhook_the_run_is_polled(
    background: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    run = services.start_run("walkthrough", "reply: polled")
    with django_capture_on_commit_callbacks(execute=True):
        run = services.execute_run(run.pk)
    assert collects(enqueued) == [(str(run.pk),)]
    run = wait_for(
        lambda: services.collect_run(run.pk, wait=False).finished and Run.objects.get(pk=run.pk), 20
    )
    assert run.status == Run.Status.INTERRUPTED  # paused on its reply draft
    assert Review.objects.get(thread=run.thread).reply["content"] == "polled"


@pytest.mark.django_db
def test_the_webhook_refuses_forged_tokens(
    settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "WEBHOOK_URL": "http://testserver/nitro/webhook/",
    }
    client = Client()
    run = RunFactory()
    url = webhook_url(run)
    assert url is not None
    forged = url.replace(str(run.pk), str(uuid.uuid4()))
    assert client.post(forged, {}, content_type="application/json").status_code == 403
    assert client.get(url).status_code == 405
    assert collects(enqueued) == []
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(url, {}, content_type="application/json").status_code == 202
    assert collects(enqueued) == [(str(run.pk),)]
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "WEBHOOK_SECRET": "rotated"}
    assert client.post(url, {}, content_type="application/json").status_code == 403


def _paused_on_a_tool_call(django_capture_on_commit_callbacks: Any) -> Review:
    run = services.start_run("tools", "Can I move my appointment to Tuesday?")
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_run(run.pk)
    run = wait_for(
        lambda: services.collect_run(run.pk, wait=False).finished and Run.objects.get(pk=run.pk), 20
    )
    return Review.objects.get(thread=run.thread, status="pending")


@pytest.mark.server
@pytest.mark.django_db
def test_a_background_resume_holds_no_worker_and_is_collected(
    background: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    review = _paused_on_a_tool_call(django_capture_on_commit_callbacks)
    call = review.tool_calls[0]["id"]
    decision = services.decide(review, None, {"tool_calls": [{"id": call, "action": "approve"}]})
    with django_capture_on_commit_callbacks(execute=True):
        decision = services.execute_resume(decision.pk)
    # Sent and returned: the decision waits for the poll, no worker waits for the model.
    assert decision.outcome == "pending"
    assert decision.run.remote_run_id
    assert collects(enqueued)[-1] == (str(decision.run.pk),)
    run = wait_for(
        lambda: (
            services.collect_run(decision.run.pk, wait=False).finished
            and Run.objects.get(pk=decision.run.pk)
        ),
        20,
    )
    decision.refresh_from_db()
    review.refresh_from_db()
    assert (decision.outcome, review.status, run.status) == ("applied", "applied", "succeeded")
    assert run.thread.values["messages"][-1]["content"] == (
        "Done! Appointment 42 moved to Tuesday at 10:00"
    )


@pytest.mark.server
@pytest.mark.django_db
def test_a_background_resume_the_server_ignored_is_superseded(
    background: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any, monkeypatch: Any
) -> None:
    """Another client decided the pause after ours was checked: the server ignores our keyed
    resume, and collecting it must say superseded, not applied."""
    from nitro_assistants.client import Assistants

    review = _paused_on_a_tool_call(django_capture_on_commit_callbacks)
    call = review.tool_calls[0]["id"]
    assistant = services.clients.assistant_for("tools")
    seen = assistant.thread_state(thread_id=str(review.thread.thread_id))
    elsewhere = Assistants(base_url=assistant.client.base_url, api_key="k")
    elsewhere.review(
        thread_id=str(review.thread.thread_id),
        assistant_id="tools",
        reviewer_id="someone-else",
        tool_calls=[{"id": call, "action": "reject"}],
    )
    monkeypatch.setattr(assistant.client, "_state", lambda thread_id, error: seen)
    decision = services.decide(review, None, {"tool_calls": [{"id": call, "action": "approve"}]})
    with django_capture_on_commit_callbacks(execute=True):
        decision = services.execute_resume(decision.pk)
    monkeypatch.undo()
    assert decision.run.remote_run_id, "the resume was sent: the server, not our check, ignored it"
    wait_for(lambda: services.collect_run(decision.run.pk, wait=False).finished, 20)
    decision.refresh_from_db()
    review.refresh_from_db()
    assert (decision.outcome, review.status) == ("superseded", "superseded")
