"""Error texts the services store, log and signal: readable, bounded, storable, and without secrets.

A failure's text lands in ``Run.error``, ``Decision.error``, Event data, the log, the
``run_failed`` payload and admin pages; it comes from the server, a proxy or an exception of any
kind, so it is cleaned once, here, before any of those see it.
"""

from __future__ import annotations

import traceback

from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.redacting import configured_secrets
from nitro_assistants.redaction import secrets_redactor

#: Characters of an error text kept (the rest is cut, marked with an ellipsis).
ERROR_LIMIT = 2000


__all__ = ["clean_error", "configured_secrets", "error_text", "traceback_text"]


def clean_error(text: object) -> str:
    """``text`` made safe to store and show: secrets redacted, NUL characters (PostgreSQL text
    and jsonb refuse them) and unpaired surrogates escaped, at most ``ERROR_LIMIT`` long."""
    # The reviewers' secrets redactor: a key found in any case, escaped, or cut short.
    cleaned = secrets_redactor(configured_secrets())(str(text)).replace("\x00", "\\x00")
    cleaned = cleaned.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(cleaned) > ERROR_LIMIT:
        cleaned = cleaned[: ERROR_LIMIT - 1] + "…"
    return cleaned or "unknown error"


def traceback_text(exc: BaseException, limit: int = 8000) -> str:
    """The last ``limit`` characters of ``exc``'s traceback, for the log, secrets redacted."""
    text = "".join(traceback.format_exception(exc))
    return secrets_redactor(configured_secrets())(text)[-limit:]


def error_text(exc: BaseException) -> str:
    """What to record for ``exc``: the package's own errors by their message, any other by its
    type and message (``RecursionError: maximum recursion depth exceeded``), cleaned."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not stop the failure being recorded
        message = ""
    if not isinstance(exc, NitroAssistantsError):
        message = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return clean_error(message or type(exc).__name__)
