"""Redis (the broker) restarted with tasks queued: none lost.

The suite's Redis runs with ``--appendonly yes --appendfsync always``: every queued task is on disk
before ``LPUSH`` answers, so even a SIGKILL loses nothing. Without persistence the broker does lose
its queue on a restart; the recorded runs are then enqueued again by ``requeue_stale``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nitro_assistants import services
from nitro_assistants.models import Run
from tests.reliability.conftest import celery_broker, remote_runs, wait_for
from tests.reliability.processes import RedisServer

pytestmark = [pytest.mark.server, pytest.mark.django_db(transaction=True)]

QUEUED = 5


def all_succeeded(runs: list[Run]) -> bool:
    pks = [r.pk for r in runs]
    return Run.objects.filter(pk__in=pks, status=Run.Status.SUCCEEDED).count() == len(pks)


def assert_each_ran_once(server: Any, runs: list[Run]) -> None:
    for run in runs:
        run.refresh_from_db()
        assert run.attempts == 1
        assert len(remote_runs(server, run.thread, nitro_run_id=str(run.pk))) == 1
        assert run.thread.messages[-1]["content"] == run.input["messages"][0]["content"][7:]


def test_redis_killed_with_tasks_queued_loses_none(
    nitro_settings: Any, broker: RedisServer, queue: str, start_worker: Any, server: Any
) -> None:
    runs = [services.start_run("plain", f"reply: queued {i}") for i in range(QUEUED)]
    assert broker.client().llen(queue) == QUEUED  # no worker yet: all waiting in Redis
    broker.kill()
    broker.start()  # same port and directory: the append-only file is replayed
    assert broker.client().llen(queue) == QUEUED

    worker = start_worker()
    wait_for(lambda: all_succeeded(runs), 30)
    assert worker.received("nitro_assistants.run_thread") == QUEUED
    assert_each_ran_once(server, runs)


def test_redis_restarted_under_a_running_worker(
    nitro_settings: Any, broker: RedisServer, start_worker: Any, server: Any
) -> None:
    worker = start_worker()
    before = services.start_run("plain", "reply: before")
    wait_for(lambda: all_succeeded([before]), 30)
    broker.kill()
    broker.start()
    # This process and the worker both reconnect: tasks sent after the restart are run.
    after = [services.start_run("plain", f"reply: after {i}") for i in range(QUEUED)]
    wait_for(lambda: all_succeeded(after), 60)
    assert worker.received("nitro_assistants.run_thread") == QUEUED + 1
    assert_each_ran_once(server, [before, *after])


def test_redis_without_persistence_loses_the_queue_and_requeue_stale_recovers(
    nitro_settings: Any, queue: str, start_worker: Any, server: Any, tmp_path: Path
) -> None:
    volatile = RedisServer(workdir=tmp_path / "volatile-redis", appendonly=False).start()
    try:
        with celery_broker(volatile.url, queue):
            runs = [services.start_run("plain", f"reply: queued {i}") for i in range(QUEUED)]
            assert volatile.client().llen(queue) == QUEUED
            volatile.kill()
            volatile.start()
            assert volatile.client().llen(queue) == 0  # the broker lost every queued task

            worker = start_worker(broker_url=volatile.url)
            nitro_settings.NITRO_ASSISTANTS = {
                **nitro_settings.NITRO_ASSISTANTS,
                "REQUEUE_AFTER": 0,
            }
            assert Run.objects.filter(status=Run.Status.QUEUED).count() == QUEUED
            assert services.requeue_stale() == {"runs": QUEUED, "decisions": 0}
            wait_for(lambda: all_succeeded(runs), 30)
            assert worker.received("nitro_assistants.run_thread") == QUEUED
            assert_each_ran_once(server, runs)
    finally:
        volatile.stop()
