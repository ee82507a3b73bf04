"""Fixtures of the fault-injection suite: real processes it can break.

- ``lg_server``: a ``langgraph dev`` of its own (graphs of tests/reliability/graphs.py), stopped
  and started again on the same port and working directory by the tests;
- ``redis_server``: a ``redis-server`` of its own on a free port (append-only file, fsync always),
  never the machine's Redis; ``broker`` points this process's Celery app at it;
- ``start_worker``: Celery worker processes (killed with SIGKILL by some tests), each with its
  own log and a log of the signals it sent.

The processes are the package's launchers (nitro_assistants/testing/launchers.py).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.db import connection

from nitro_assistants.testing.launchers import CeleryWorker, LangGraphServer, RedisServer
from tests.celery_app import app as celery_app
from tests.conftest import ROOT

GRAPHS = Path(__file__).parent / "graphs.py"
SLOW_SECONDS = 3.0  # tests/reliability/graphs.py: the slow model and tool


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.1,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it is truthy; on timeout fail with what ``explain`` tells (a
    worker's log, a queue's length) so a failure far away, in CI, can be read."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}{detail}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def lg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LangGraphServer]:
    server = LangGraphServer(
        workdir=tmp_path_factory.mktemp("rel-langgraph"),
        graphs={name: f"{GRAPHS}:{name}" for name in ("slow", "tools", "walkthrough", "plain")},
        dependencies=[str(ROOT)],
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(lg_server: LangGraphServer) -> Iterator[LangGraphServer]:
    """The suite's server, up; started again after a test that left it down."""
    if lg_server.process is None:
        lg_server.start()
    yield lg_server
    if lg_server.process is None:
        lg_server.start()


def crash(server: LangGraphServer) -> None:
    """SIGKILL the server: no graceful drain, nothing written to ``.langgraph_api`` since its last
    periodic flush (every 10 s)."""
    server.kill()


def remote_runs(server: LangGraphServer, thread: Any, **match: str) -> list[dict[str, Any]]:
    """The server's runs of ``thread`` whose metadata carries every ``match`` item."""
    response = requests.get(
        f"{server.url}/threads/{thread.thread_id}/runs", params={"limit": 100}, timeout=10
    )
    if response.status_code == 404:  # not created yet
        return []
    response.raise_for_status()
    return [
        run
        for run in response.json()
        if all(str((run.get("metadata") or {}).get(k)) == v for k, v in match.items())
    ]


@pytest.fixture
def nitro_settings(settings: Any, server: LangGraphServer) -> Any:
    """This process talks to the suite's server, with the slow assistant defined."""
    config = settings.NITRO_ASSISTANTS
    settings.NITRO_ASSISTANTS = {
        **config,
        "BASE_URL": server.url,
        "DEFINITIONS": {
            **config["DEFINITIONS"],
            "slow": {"api_key": "test-key", "assistant_id": "slow"},
        },
    }
    return settings


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(workdir=tmp_path_factory.mktemp("rel-redis")).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def celery_broker(url: str, queue: str) -> Iterator[None]:
    """Point this process's Celery app (what ``.delay()`` sends with) at ``url`` / ``queue``."""
    conf = celery_app.conf
    saved = (conf.broker_url, conf.task_default_queue)

    def reset() -> None:  # the pools are built again, from the new URL, on the next send
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    conf.broker_url, conf.task_default_queue = url, queue
    reset()
    try:
        yield
    finally:
        conf.broker_url, conf.task_default_queue = saved
        reset()


@pytest.fixture
def queue() -> str:
    return f"rel-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def broker(redis_server: RedisServer, queue: str) -> Iterator[RedisServer]:
    if redis_server.process is None:
        redis_server.start()
    with celery_broker(redis_server.url, queue):
        yield redis_server


@pytest.fixture
def test_db_name(django_db_setup: None, django_db_blocker: Any) -> str:
    with django_db_blocker.unblock():
        return str(connection.settings_dict["NAME"])


class Worker(CeleryWorker):
    """A worker of ``tests.reliability.worker_app``, which logs every nitro_assistants signal
    it sends (JSON lines in :attr:`signal_log`), so a test can count them across processes."""

    @property
    def signal_log(self) -> Path:
        return self.log_dir / f"{self.name}.signals.jsonl"

    def environment(self) -> dict[str, str]:
        return {"NITRO_REL_SIGNAL_LOG": str(self.signal_log), **super().environment()}

    def signals(self, name: str | None = None) -> list[dict[str, str]]:
        try:
            lines = self.signal_log.read_text().splitlines()
        except OSError:
            return []
        sent = [json.loads(line) for line in lines if line.strip()]
        return [s for s in sent if name is None or s["signal"] == name]


@pytest.fixture
def start_worker(
    broker: RedisServer,
    queue: str,
    server: LangGraphServer,
    test_db_name: str,
    tmp_path: Path,
) -> Iterator[Callable[..., Worker]]:
    """``start_worker(pool=, concurrency=, **env)``: a worker on the suite's broker, queue,
    database and server."""
    workers: list[Worker] = []

    def start(
        broker_url: str | None = None, pool: str = "threads", concurrency: int = 4, **env: str
    ) -> Worker:
        worker = Worker(
            app="tests.reliability.worker_app",
            settings="tests.reliability.settings",
            queue=queue,
            log_dir=tmp_path / "workers",
            pool=pool,
            concurrency=concurrency,
            loglevel="DEBUG",
            cwd=ROOT,
            name=f"rel-{uuid.uuid4().hex[:8]}",
            env={
                "NITRO_TEST_DB_NAME": test_db_name,
                "NITRO_TEST_BROKER_URL": broker_url or broker.url,
                "NITRO_TEST_QUEUE": queue,
                "NITRO_TEST_ASSISTANTS_URL": server.url,
                **env,
            },
        )
        workers.append(worker)
        return worker.start()

    yield start
    for worker in workers:
        worker.stop()
