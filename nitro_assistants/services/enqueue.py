"""Celery work is enqueued by task name, after the transaction commits.

Services never import :mod:`nitro_assistants.tasks` (the tasks import the services): they name
the task. The task object registered under that name is used when this process has it (so
``CELERY_TASK_ALWAYS_EAGER`` runs it in place, as the embedded demo does); otherwise the name is
sent to the broker for a worker that has it.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, _state
from django.db import transaction


def is_fallback(app: Celery) -> bool:
    """True for the app Celery makes for itself when no other was created
    (``celery._state._get_current_app``: ``Celery("default", fixups=[], set_as_current=False)``),
    which would send every task to amqp://localhost, where no worker of the project listens. An
    app a project creates keeps Celery's built-in fix-ups."""
    return (
        app is _state.default_app
        and app.main == "default"
        and not app.fixups
        and not app.set_as_current
    )


def celery_app() -> Celery:
    """The project's Celery app, in any thread: the thread's current app, else the default app,
    else (a thread that has neither, while Celery's own fallback is the default) the app the
    project created. Celery's ``current_app`` alone is thread-local: in a thread of a threaded
    web server or a test's thread it can be the fallback app."""
    app: Celery = _state.get_current_app()
    if not is_fallback(app):
        return app
    for candidate in _state._get_active_apps():
        if not is_fallback(candidate):
            return candidate
    return app


def send(name: str, *args: Any, countdown: float | None = None, **kwargs: Any) -> None:
    """Send the task ``name`` now (outside a transaction's life cycle)."""
    app = celery_app()
    task = app.tasks.get(name)
    if task is None:
        app.send_task(name, args=args, kwargs=kwargs, countdown=countdown)
    elif countdown is None:
        task.delay(*args, **kwargs)
    else:
        task.apply_async(args, kwargs, countdown=countdown)


def enqueue(name: str, *args: Any, countdown: float | None = None, **kwargs: Any) -> None:
    """Send the task ``name`` once the current transaction commits (at once outside one): a
    rolled-back state change enqueues nothing."""
    transaction.on_commit(lambda: send(name, *args, countdown=countdown, **kwargs))
