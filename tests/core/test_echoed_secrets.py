"""An Assistants server (or a proxy in front of it) whose error page echoes the request's headers:
the API key it echoes never reaches ``Run.error``, ``Decision.error``, Event data, the log, the
``run_failed`` payload, or an admin page a view-only staff member can open. A real HTTP server on
a local socket, the real tasks, database and admin."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from nitro_assistants import services, tasks
from nitro_assistants.models import Decision, Event, Run
from tests.core.conftest import sent
from tests.factories import ReviewFactory
from tests.rawserver import RawServer, answer

pytestmark = pytest.mark.django_db

API_KEY = f"sk-echo-{uuid.uuid4().hex}"


def echo_headers(conn: Any, request: bytes) -> None:
    head = request.split(b"\r\n\r\n")[0].decode()
    page = f"<html><h1>502 upstream failed</h1><pre>Request was:\n{head}</pre></html>"
    conn.sendall(answer("500 Internal Server Error", page.encode(), "text/html"))


@pytest.fixture(params=["bearer", "x-api-key"])
def echo_server(request: Any, settings: Any) -> Iterator[RawServer]:
    server = RawServer(echo_headers)
    config = settings.NITRO_ASSISTANTS
    settings.NITRO_ASSISTANTS = {
        **config,
        "BASE_URL": server.url,
        "AUTH": request.param,
        "DEFINITIONS": {k: {**d, "api_key": API_KEY} for k, d in config["DEFINITIONS"].items()},
    }
    yield server
    server.stop()


@pytest.fixture
def every_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    for name in ("nitro_assistants", "nitro_assistants.client", "nitro_assistants.tasks", "celery"):
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def view_only_staff() -> Client:
    user = User.objects.create_user("viewer", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="nitro_assistants", codename__startswith="view_"
        )
    )
    client = Client()
    client.force_login(user)
    return client


def assert_nowhere(run: Run, signal_log: list[Any], logs: pytest.LogCaptureFixture) -> None:
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert "502 upstream failed" in run.error  # the page still says what went wrong
    assert "[redacted]" in run.error
    assert API_KEY not in run.error
    for event in Event.objects.filter(thread=run.thread):
        assert API_KEY not in json.dumps(event.data), event.verb
    for decision in Decision.objects.filter(run=run):
        assert API_KEY not in decision.error
    failed = sent(signal_log, "run_failed")
    assert len(failed) == 1
    assert API_KEY not in repr(failed[0])
    for record in logs.records:
        assert API_KEY not in record.getMessage(), record.name
        assert API_KEY not in logging.Formatter().format(record), record.name
    viewer = view_only_staff()
    shown = 0
    for url in [
        f"/admin/nitro_assistants/run/{run.pk}/change/",
        f"/admin/nitro_assistants/thread/{run.thread_id}/change/",
        "/admin/nitro_assistants/run/",
        "/admin/nitro_assistants/event/",
        "/admin/nitro_assistants/decision/",
        *(f"/admin/nitro_assistants/decision/{d.pk}/change/" for d in Decision.objects.all()),
        *(f"/admin/nitro_assistants/event/{e.pk}/change/" for e in Event.objects.all()),
    ]:
        page = viewer.get(url)
        assert page.status_code == 200, url
        body = page.content.decode()
        assert API_KEY not in body, url
        shown += "502 upstream failed" in body
    assert shown, "no page showed the error at all: the search proves nothing"


def test_an_echoed_key_in_a_failed_run_is_redacted_everywhere(
    echo_server: RawServer,
    signal_log: list[Any],
    every_log: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = services.start_run("walkthrough", "hi")
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.run_thread.apply(args=(str(run.pk),)).get() == "failed"
    assert API_KEY.encode() in echo_server.requests[0]  # sent, and echoed back
    assert_nowhere(run, signal_log, every_log)


def test_an_echoed_key_in_a_failed_resume_is_redacted_everywhere(
    echo_server: RawServer,
    signal_log: list[Any],
    every_log: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    review = ReviewFactory()
    with django_capture_on_commit_callbacks(execute=False):
        decision = services.decide(
            review, None, {"tool_calls": [{"id": "call_1", "action": "approve"}]}
        )
    with django_capture_on_commit_callbacks(execute=True):
        tasks.resume_thread.apply(args=(decision.pk,)).get()
    decision.refresh_from_db()
    assert decision.outcome == Decision.Outcome.FAILED
    assert API_KEY not in decision.error and "[redacted]" in decision.error
    assert decision.run is not None
    assert_nowhere(decision.run, signal_log, every_log)
