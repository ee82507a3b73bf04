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
from nitro_assistants.services.errors import clean_error, traceback_text
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


# -- issue 34: a key echoed back inexactly ------------------------------------------------------

WEBHOOK_SECRET = f"whsec-{uuid.uuid4().hex}"


def mangled(key: str) -> dict[str, str]:
    """How a server or proxy echoes a key it shortens, shouts or puts in a URL."""
    return {
        "prefix": f"{key[:12]}...",
        "suffix": f"...{key[-12:]}",
        "upper": key.upper(),
        "url": "https://auth.test/keys?k=" + "".join(f"%{b:02X}" for b in key.encode()),
    }


def leaked(text: str, secret: str = API_KEY) -> list[str]:
    """The pieces of ``secret`` (8 characters in a row, any case) found in ``text``."""
    low, secret = text.lower(), secret.lower()
    return [secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8] in low]


def echo_mangled(conn: Any, request: bytes) -> None:
    key = API_KEY if API_KEY.encode() in request else "(no key)"
    shapes = "\n".join(f"{name}: {shown}" for name, shown in mangled(key).items())
    page = f"<html><h1>502 upstream failed</h1><pre>Key not recognised:\n{shapes}</pre></html>"
    conn.sendall(answer("500 Internal Server Error", page.encode(), "text/html"))


@pytest.fixture
def secrets_configured(settings: Any) -> None:
    config = settings.NITRO_ASSISTANTS
    settings.NITRO_ASSISTANTS = {
        **config,
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
        "DEFINITIONS": {k: {**d, "api_key": API_KEY} for k, d in config["DEFINITIONS"].items()},
    }


@pytest.mark.parametrize("shape", ["prefix", "suffix", "upper", "url"])
@pytest.mark.parametrize("secret", [API_KEY, WEBHOOK_SECRET], ids=["api_key", "webhook"])
def test_clean_error_redacts_a_secret_echoed_inexactly(
    secrets_configured: None, shape: str, secret: str
) -> None:
    text = f"upstream said: {mangled(secret)[shape]} (HTTP 401)"
    cleaned = clean_error(text)
    assert cleaned.startswith("upstream said: ") and cleaned.endswith(" (HTTP 401)")
    assert "[redacted]" in cleaned
    assert leaked(cleaned, secret) == []


def test_traceback_text_redacts_a_secret_echoed_inexactly(secrets_configured: None) -> None:
    try:
        raise RuntimeError("; ".join(mangled(API_KEY).values()))
    except RuntimeError as exc:
        text = traceback_text(exc)
    assert "RuntimeError" in text and "[redacted]" in text
    assert leaked(text) == []


def test_a_key_echoed_inexactly_in_a_failed_run_is_redacted_everywhere(
    settings: Any,
    signal_log: list[Any],
    every_log: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    server = RawServer(echo_mangled)
    config = settings.NITRO_ASSISTANTS
    settings.NITRO_ASSISTANTS = {
        **config,
        "BASE_URL": server.url,
        "DEFINITIONS": {k: {**d, "api_key": API_KEY} for k, d in config["DEFINITIONS"].items()},
    }
    try:
        run = services.start_run("walkthrough", "hi")
        with django_capture_on_commit_callbacks(execute=True):
            assert tasks.run_thread.apply(args=(str(run.pk),)).get() == "failed"
    finally:
        server.stop()
    run.refresh_from_db()
    assert "Key not recognised" in run.error and "[redacted]" in run.error
    assert leaked(run.error) == []
    for event in Event.objects.filter(thread=run.thread):
        assert leaked(json.dumps(event.data)) == [], event.verb
    (failed,) = sent(signal_log, "run_failed")
    assert leaked(repr(failed)) == []
    for record in every_log.records:
        assert leaked(logging.Formatter().format(record)) == [], record.name
