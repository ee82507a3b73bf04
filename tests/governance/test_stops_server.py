"""The stop button on the real LangGraph server: a running run is cancelled with the server's
own cancel endpoint (services/stops.py, the client's ``cancel_run``)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

import nitro_assistants
from nitro_assistants.models import Event, Run, Stop, Thread
from nitro_assistants.services import stops
from tests.core.conftest import wait_for

pytestmark = [pytest.mark.server, pytest.mark.django_db(transaction=True)]


def test_a_stop_cancels_a_running_run_on_the_server(server_settings: Any) -> None:
    assistant = nitro_assistants.assistants()["slow"]
    thread = Thread.objects.create(assistant_key="slow")
    remote = assistant.start_run(
        str(thread.thread_id), [{"role": "user", "content": "take your time"}]
    )
    run = Run.objects.create(thread=thread, status="running", remote_run_id=remote["run_id"])
    wait_for(
        lambda: assistant.get_run(str(thread.thread_id), run.remote_run_id)["status"] == "running",
        60,
    )

    row = stops.stop(None, scope="thread", thread=thread, reason="stop it now")

    assert row.cancelled_runs == [run.remote_run_id] and row.cancel_failures == []
    status = wait_for(
        lambda: (
            (s := assistant.get_run(str(thread.thread_id), run.remote_run_id)["status"])
            not in ("pending", "running")
            and s
        ),
        60,
    )
    assert status == "interrupted"
    assert Event.objects.filter(verb="run_cancelled", thread=thread).exists()
    # Cancelling a run that has ended is not an error.
    assistant.cancel_run(str(thread.thread_id), run.remote_run_id)


def test_a_cancel_the_server_does_not_answer_keeps_the_stop(server_settings: Any) -> None:
    thread = Thread.objects.create(assistant_key="slow")
    Run.objects.create(thread=thread, status="running", remote_run_id=str(uuid.uuid4()))
    server_settings.stop()  # the server is down: the cancel cannot reach it
    try:
        row = stops.stop(None, scope="assistant", assistant="slow", reason="server on fire")
    finally:
        server_settings.start()
    assert Stop.objects.get(pk=row.pk).in_force
    assert row.cancelled_runs == []
    assert [f["run"] for f in row.cancel_failures] == [Run.objects.get().remote_run_id]
    assert row.cancel_failures[0]["error"]
    assert Event.objects.filter(verb="stop_cancel_failed", thread=thread).exists()
    assert stops.stop_for_run(thread, "slow") == row


def test_a_stop_cancels_the_run_a_worker_waits_on(server_settings: Any) -> None:
    """In "wait" mode the server's run id comes with its answer: while the worker waits on
    ``runs/wait`` our run has none. The stop finds the server's run by the id our run sent in
    its metadata and cancels it; the worker's wait ends and the run is finished, not left
    running."""
    from django.db import connection

    from nitro_assistants import services
    from nitro_assistants.services import clients

    run = services.start_run("slow", "take your time")
    thread = Thread.objects.get(pk=run.thread_id)
    assistant = nitro_assistants.assistants()["slow"]
    outcome: list[Any] = []

    def work() -> None:
        try:
            outcome.append(services.execute_run(run.pk))
        except Exception as exc:  # the test reads it
            outcome.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    match = {clients.RUN_KEY: str(run.pk)}
    remote = wait_for(
        lambda: (
            (found := clients.find_remote_run(assistant, str(thread.thread_id), match))
            and found["status"] == "running"
            and found
        ),
        60,
    )
    assert Run.objects.get(pk=run.pk).remote_run_id == ""  # the worker is still waiting

    row = stops.stop(None, scope="assistant", assistant="slow", reason="stop it now")

    assert row.cancelled_runs == [remote["run_id"]] and row.cancel_failures == []
    worker.join(90)
    assert not worker.is_alive(), "the worker still waits on a cancelled run"
    assert Run.objects.get(pk=run.pk).finished, outcome
    assert Event.objects.filter(verb="run_cancelled", thread=thread).exists()
