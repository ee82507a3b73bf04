"""Celery work is enqueued by task name, after the transaction commits.

Services never import :mod:`nitro_assistants.tasks` (the tasks import the services): they name
the task. The task object registered under that name is used when this process has it (so
``CELERY_TASK_ALWAYS_EAGER`` runs it in place, as the embedded demo does); otherwise the name is
sent to the broker for a worker that has it.
"""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.db import transaction


def send(name: str, *args: Any, countdown: float | None = None, **kwargs: Any) -> None:
    """Send the task ``name`` now (outside a transaction's life cycle)."""
    task = current_app.tasks.get(name)
    if task is None:
        current_app.send_task(name, args=args, kwargs=kwargs, countdown=countdown)
    elif countdown is None:
        task.delay(*args, **kwargs)
    else:
        task.apply_async(args, kwargs, countdown=countdown)


def enqueue(name: str, *args: Any, countdown: float | None = None, **kwargs: Any) -> None:
    """Send the task ``name`` once the current transaction commits (at once outside one): a
    rolled-back state change enqueues nothing."""
    transaction.on_commit(lambda: send(name, *args, countdown=countdown, **kwargs))
