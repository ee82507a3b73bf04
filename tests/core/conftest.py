"""Fixtures of the Django-core tests: the package's fake assistant for unit tests, and for the
real thing a proxy in front of the real server (so a test can take it down), a real Celery worker,
signal logs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection

from nitro_assistants import signals, tasks
from nitro_assistants.client import PendingReview
from nitro_assistants.testing import FakeAssistant, fake_assistants, tool_calls_review
from nitro_assistants.testing.launchers import CeleryWorker
from tests.celery_app import app as celery_app
from tests.conftest import ROOT
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


# -- unit tests: the package's fake assistant ---------------------------------------------------


def tool_review(interrupt_id: str | None = None) -> PendingReview:
    """A pause holding the walkthrough's ``reschedule_appointment`` call."""
    return tool_calls_review(
        {
            "id": "call_1",
            "name": "reschedule_appointment",
            "args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"},
        },
        interrupt_id=interrupt_id,
    )


@pytest.fixture
def fake_assistant() -> Iterator[FakeAssistant]:
    """What README "Testing your project" tells a host to write."""
    with fake_assistants() as fake:
        yield fake


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


@pytest.fixture(scope="session")
def celery_worker(
    proxy: Proxy,
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CeleryWorker]:
    """A real ``celery worker`` process on the real Redis broker and the test database."""
    with django_db_blocker.unblock():
        db_name = connection.settings_dict["NAME"]
    queue = f"nitro-tests-{uuid.uuid4().hex[:8]}"
    celery_app.conf.task_default_queue = queue
    worker = CeleryWorker(
        app="tests.celery_app",
        settings="tests.settings",
        queue=queue,
        name=f"nitro-{queue}",
        log_dir=tmp_path_factory.mktemp("worker"),
        cwd=ROOT,
        env={
            "NITRO_TEST_DB_NAME": db_name,
            "NITRO_TEST_ASSISTANTS_URL": proxy.url,
            "NITRO_TEST_QUEUE": queue,
            # The worker replaces the live pages' change token in the Redis cache the test
            # process reads (tests/core/test_worker.py's live test names it in LIVE_CACHE).
            "NITRO_TEST_CACHE_PREFIX": django_settings.CACHES["live"]["KEY_PREFIX"],
            "NITRO_TEST_LIVE_CACHE": "live",
        },
    )
    try:
        yield worker.start()
    finally:
        worker.stop()


@pytest.fixture
def audit_key(settings: Any) -> str:
    """``NITRO_ASSISTANTS["AUDIT_KEY"]`` set: prunes sign their checkpoints, verify checks them."""
    key = "audit-key-of-the-tests-0123456789abcdef"
    settings.NITRO_ASSISTANTS = {**getattr(settings, "NITRO_ASSISTANTS", {}), "AUDIT_KEY": key}
    return key
