"""Where services get their client from: one function, so tests and host apps can swap it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import requests
from django.db import InterfaceError, OperationalError

import nitro_assistants

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
