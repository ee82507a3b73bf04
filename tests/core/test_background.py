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
