"""Where services get their client from: one function, so tests and host apps can swap it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import requests
from django.db import InterfaceError, OperationalError

import nitro_assistants
from nitro_assistants.exceptions import NitroAssistantsError

#: Key of the remote run's metadata that carries the local Run's UUID (the idempotency key).
RUN_KEY = "nitro_run_id"

#: While set, what gives the assistant of a key instead of the configured clients: a test
#: double's, set and put back by :func:`nitro_assistants.testing.fake_assistants`.
stand_in: Callable[[str], Any] | None = None


def assistant_for(assistant_key: str) -> Any:
    """The :class:`~nitro_assistants.client.Assistant` configured under ``assistant_key`` (or
    the stand-in :func:`nitro_assistants.testing.fake_assistants` installed)."""
    if stand_in is not None:
        return stand_in(assistant_key)
    return nitro_assistants.assistants()[assistant_key]


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: connection errors, timeouts, bodies cut mid-way,
    502/503/504, and a lost database connection (the service checks state again when retried)."""
    if getattr(exc, "transient", False) or isinstance(exc, OperationalError | InterfaceError):
        return True
    # A body cut mid-way (ChunkedEncodingError) is a connection that broke, not a bad answer.
    return isinstance(
        exc,
        requests.ConnectionError | requests.Timeout | requests.exceptions.ChunkedEncodingError,
    )


def find_remote_run(assistant: Any, thread_id: str, match: dict[str, str]) -> dict[str, Any] | None:
    """The server's run whose metadata carries every ``match`` item, if any."""
    try:
        remotes = assistant.list_runs(thread_id=thread_id, limit=100)
    except NitroAssistantsError as exc:
        if getattr(exc, "status_code", None) == 404:  # no thread yet: no run either
            return None
        raise
    for remote in remotes:
        sources = [remote.get("metadata") or {}]
        config = (remote.get("kwargs") or {}).get("config") or {}
        sources.append(config.get("metadata") or {})
        for metadata in sources:
            if all(str(metadata.get(k)) == v for k, v in match.items()):
                return dict(remote)
    return None
