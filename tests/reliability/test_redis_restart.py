"""Redis (the broker) restarted with tasks queued: none lost.

The suite's Redis runs with ``--appendonly yes --appendfsync always``: every queued task is on disk
before ``LPUSH`` answers, so even a SIGKILL loses nothing. Without persistence the broker does lose
its queue on a restart; the recorded runs are then enqueued again by ``requeue_stale``.

A worker holding a task's message when Redis goes away (running it, or acknowledging it as Redis
dies) may exit: Celery/kombu 5.7 close the channel twice, the second time after the transport is
gone, and the worker stops with "Unrecoverable error: AttributeError(... 'hostname')". Nothing is
lost then either: the running task finishes first, queued messages stay in Redis and the held one
in its "unacked" hash. The tests do what a process supervisor does (``restart:`` in
docker-compose.yml) and start such a worker again; a crash of any other kind fails them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from nitro_assistants import services
from nitro_assistants.models import Run
from nitro_assistants.testing.launchers import CeleryWorker, RedisServer
from tests.reliability.conftest import celery_broker, remote_runs, wait_for

pytestmark = [pytest.mark.server, pytest.mark.django_db(transaction=True)]

QUEUED = 5
#: The one way a worker may exit when the broker goes away (upstream; see the module docstring).
KNOWN_CRASH = (
    "Unrecoverable error: AttributeError(\"'NoneType' object has no attribute 'hostname'\")"
)


def queued(server: RedisServer, queue: str) -> int:
    """Tasks waiting in ``queue`` on ``server`` (a Redis list)."""
    return int(redis.Redis.from_url(server.url, socket_timeout=5).llen(queue))


def all_succeeded(runs: list[Run]) -> bool:
    pks = [r.pk for r in runs]
    return Run.objects.filter(pk__in=pks, status=Run.Status.SUCCEEDED).count() == len(pks)


def state(broker: RedisServer, queue: str, worker: CeleryWorker) -> str:
    """What a timed-out wait reports: the runs, the queue and the worker's last lines."""
    statuses = sorted(Run.objects.values_list("status", flat=True))
    try:
        waiting: int | str = queued(broker, queue)
    except redis.RedisError as error:
        waiting = f"unreadable ({error})"
    return f"runs: {statuses}\nqueue {queue}: {waiting}\nworker log:\n{worker.log_tail(120)}"


def supervised(worker: CeleryWorker, done: Callable[[], bool]) -> Callable[[], bool]:
    """``done``, polled as a supervisor watching ``worker`` would: started again if it exited."""

    def check() -> bool:
        worker.supervise()
        return done()

    return check


def assert_only_known_crashes(worker: CeleryWorker) -> None:
    assert all(line == KNOWN_CRASH for line in worker.crashes()), worker.crashes()


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
    assert queued(broker, queue) == QUEUED  # no worker yet: all waiting in Redis
    broker.kill()
    broker.start()  # same port and directory: the append-only file is replayed
    assert queued(broker, queue) == QUEUED

    worker = start_worker()
    wait_for(lambda: all_succeeded(runs), 30, explain=lambda: state(broker, queue, worker))
    assert worker.received("nitro_assistants.run_thread") == QUEUED
    assert_each_ran_once(server, runs)


def test_redis_restarted_under_a_running_worker(
    nitro_settings: Any, broker: RedisServer, queue: str, start_worker: Any, server: Any
) -> None:
    worker = start_worker()
    before = services.start_run("plain", "reply: before")
    wait_for(lambda: all_succeeded([before]), 30, explain=lambda: state(broker, queue, worker))
    broker.kill()  # the worker may still be acknowledging ``before``
    broker.start()
    # This process and the worker both reconnect: tasks sent after the restart are run.
    after = [services.start_run("plain", f"reply: after {i}") for i in range(QUEUED)]
    wait_for(
        supervised(worker, lambda: all_succeeded(after)),
        60,
        explain=lambda: state(broker, queue, worker),
    )
    assert_only_known_crashes(worker)
    # ``before`` comes back if its acknowledgement was cut: run again, it changes nothing.
    assert worker.received("nitro_assistants.run_thread") >= QUEUED + 1
    assert_each_ran_once(server, [before, *after])


@pytest.mark.parametrize("down_for", [0.0, 1.5], ids=["back-at-once", "down-1.5s"])
def test_redis_killed_while_a_task_runs_loses_nothing(
    nitro_settings: Any,
    broker: RedisServer,
    queue: str,
    start_worker: Any,
    server: Any,
    down_for: float,
) -> None:
    """The worker holds the running task's message, unacknowledged, when Redis dies: the task
    finishes, its message is delivered again and changes nothing, and a task sent after the
    restart runs. Redis back at once: the worker puts the message back as it reconnects. Down
    for longer: the worker exits (the upstream crash) once the task is done; started again, it
    takes the message back from the "unacked" hash after the visibility timeout (4 s)."""
    worker = start_worker(NITRO_REL_VISIBILITY_TIMEOUT="4")
    held = services.start_run("slow", "reply slowly, please")
    wait_for(
        lambda: Run.objects.filter(pk=held.pk, status=Run.Status.RUNNING).exists(),
        30,
        explain=lambda: state(broker, queue, worker),
    )
    broker.kill()
    time.sleep(down_for)
    broker.start()
    after = services.start_run("plain", "reply: after the restart")
    wait_for(
        supervised(
            worker,
            lambda: (
                all_succeeded([held, after]) and worker.finished("nitro_assistants.run_thread") >= 3
            ),
        ),
        60,
        explain=lambda: state(broker, queue, worker),
    )
    assert_only_known_crashes(worker)
    # held, after, and held again (its acknowledgement was lost with the connection); once more
    # if that second delivery waited on the run's lock past the visibility timeout
    assert worker.received("nitro_assistants.run_thread") >= 3
    for run in (held, after):
        run.refresh_from_db()
        assert run.attempts == 1
        assert len(remote_runs(server, run.thread, nitro_run_id=str(run.pk))) == 1
    assert after.thread.messages[-1]["content"] == "after the restart"


def test_redis_without_persistence_loses_the_queue_and_requeue_stale_recovers(
    nitro_settings: Any, queue: str, start_worker: Any, server: Any, tmp_path: Path
) -> None:
    volatile = RedisServer(workdir=tmp_path / "volatile-redis", appendonly=False).start()
    try:
        with celery_broker(volatile.url, queue):
            runs = [services.start_run("plain", f"reply: queued {i}") for i in range(QUEUED)]
            assert queued(volatile, queue) == QUEUED
            volatile.kill()
            volatile.start()
            assert queued(volatile, queue) == 0  # the broker lost every queued task

            worker = start_worker(broker_url=volatile.url)
            nitro_settings.NITRO_ASSISTANTS = {
                **nitro_settings.NITRO_ASSISTANTS,
                "REQUEUE_AFTER": 0,
            }
            assert Run.objects.filter(status=Run.Status.QUEUED).count() == QUEUED
            assert services.requeue_stale() == {"runs": QUEUED, "decisions": 0, "policies": 0}
            wait_for(
                lambda: all_succeeded(runs), 30, explain=lambda: state(volatile, queue, worker)
            )
            assert worker.received("nitro_assistants.run_thread") == QUEUED
            assert_each_ran_once(server, runs)
    finally:
        volatile.stop()
