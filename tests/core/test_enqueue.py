"""Services enqueue by task name, and reach the project's Celery app from any thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, _state

from nitro_assistants import tasks
from nitro_assistants.services.enqueue import celery_app, is_fallback, send
from tests.celery_app import app as project_app


@pytest.fixture
def fallback_is_the_default() -> Iterator[Celery]:
    """What a threaded web server can meet: Celery's own fallback app became the default (it is
    created whenever the current app is asked for before the project's app exists), and a new
    thread has no current app of its own."""
    before = _state.default_app
    fallback = Celery("default", fixups=[], set_as_current=False)
    _state.set_default_app(fallback)
    try:
        yield fallback
    finally:
        _state.set_default_app(before)


def in_a_thread(function: Any) -> Any:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(function()))
    thread.start()
    thread.join()
    return result[0]


def test_a_thread_without_a_current_app_sends_through_the_projects_app(
    fallback_is_the_default: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert in_a_thread(lambda: _state.get_current_app()) is fallback_is_the_default
    assert is_fallback(fallback_is_the_default)
    assert not is_fallback(project_app)
    chosen = in_a_thread(celery_app)  # the project's app (here one of the apps tests created)
    assert not is_fallback(chosen) and chosen.main in ("nitro_tests", "reviewsite")
    sent: list[tuple[Any, ...]] = []
    monkeypatch.setattr(chosen.tasks["nitro_assistants.run_thread"], "delay", sent.append)
    in_a_thread(lambda: send("nitro_assistants.run_thread", "run-1"))
    assert sent == ["run-1"]


def test_the_task_sent_is_the_one_the_tasks_module_registered() -> None:
    assert (
        celery_app().tasks["nitro_assistants.resume_thread"]
        is tasks.resume_thread._get_current_object()
    )
