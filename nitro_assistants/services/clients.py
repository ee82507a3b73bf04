"""Where services get their client from: one function, so tests and host apps can swap it."""

from __future__ import annotations

from typing import Any

import requests
from django.db import InterfaceError, OperationalError

import nitro_assistants


def assistant_for(assistant_key: str) -> Any:
    """The :class:`~nitro_assistants.client.Assistant` configured under ``assistant_key``."""
    return nitro_assistants.assistants()[assistant_key]


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: connection errors, timeouts, 502/503/504, and a lost
    database connection (the service checks state again when retried)."""
    if getattr(exc, "transient", False) or isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, requests.ConnectionError | requests.Timeout)
