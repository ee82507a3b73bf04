"""Who and what a conversation is about, for people: ``"Jane Doe · +1 555 0100 · order 1234"``.

``NITRO_ASSISTANTS["THREAD_SUBJECT"]`` says how (docs/django.md "Settings"):

- a list of keys, each looked up in the thread's context (the context its runs are sent with)
  and, when the context has no value there, in the thread's metadata (what the host passed when
  it started the thread: ``start_run(..., metadata=...)``). A dotted key walks into nested
  objects (``"customer.name"``); a ``(label, key)`` pair prefixes the value
  (``("order", "order_id")`` → ``order 1234``). The values found are joined with `` · ``.
  One list for both, rather than a ``metadata.`` prefix: a setting written for the context
  means what it meant, no key of the host's is reserved, and a value moved between the two
  needs no change of the setting;
- or the dotted path of a callable taking the thread (its ``context``, ``metadata`` and
  ``values``) and returning the text.

Either way, a thread whose subject comes out blank is described by its customer's first message
(its first line), so no list ever shows a bare id. The text is computed when the thread is saved
(its context or metadata set, its conversation mirrored) into ``Thread.subject``: lists read a column, they
never call the host's code per row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

from nitro_assistants.conf import app_settings

logger = logging.getLogger(__name__)

#: ``Thread.subject``'s length; a longer description is cut with an ellipsis.
SUBJECT_LENGTH = 200
SEPARATOR = " · "
HUMAN_TYPES = ("human", "user")


def _lookup(context: Any, key: str) -> Any:
    value = context
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _shown(value: Any) -> str:
    if value is None or isinstance(value, (dict, list)):
        return ""  # a structure is not a name: the key points at the wrong level
    return " ".join(str(value).split())


def from_keys(keys: list[Any] | tuple[Any, ...], context: Any, metadata: Any = None) -> str:
    """The values of ``keys`` that are there, each from ``context`` or else from ``metadata``,
    joined with `` · ``."""
    parts = []
    for entry in keys:
        label, key = (entry[0], entry[1]) if isinstance(entry, (list, tuple)) else ("", entry)
        value = _shown(_lookup(context, str(key))) or _shown(_lookup(metadata, str(key)))
        if value:
            parts.append(f"{label} {value}" if label else value)
    return SEPARATOR.join(parts)


def first_customer_line(values: Any) -> str:
    """The first non-blank line of the first customer message of a mirrored snapshot."""
    messages = values.get("messages") if isinstance(values, dict) else None
    for message in messages or []:
        if not isinstance(message, dict):
            continue
        if str(message.get("type") or message.get("role") or "") not in HUMAN_TYPES:
            continue
        content = message.get("content")
        if isinstance(content, list):  # content blocks: the text ones
            content = " ".join(
                str(block.get("text") or "")
                for block in content
                if isinstance(block, dict) and block.get("type") == "text"
            )
        for line in str(content or "").splitlines():
            if line.strip():
                return " ".join(line.split())
    return ""


def describer() -> Callable[[Any], str] | list[Any] | None:
    """The setting, resolved: a callable, a list of keys, or None (not set)."""
    setting = app_settings.THREAD_SUBJECT
    if isinstance(setting, str):
        return import_string(setting)  # type: ignore[no-any-return]
    return list(setting) if setting else None


def setting_problem() -> str | None:
    """Why ``THREAD_SUBJECT`` cannot be used, or None: for the system check."""
    setting = app_settings.THREAD_SUBJECT
    if setting is None or setting == [] or setting == ():
        return None
    if isinstance(setting, str):
        try:
            found = import_string(setting)
        except ImportError as exc:
            return f"{setting!r} cannot be imported ({exc})"
        return None if callable(found) else f"{setting!r} is not callable"
    if not isinstance(setting, (list, tuple)):
        return f"it is a {type(setting).__name__}, not a list of keys or a dotted path"
    for entry in setting:
        if isinstance(entry, str) and entry:
            continue
        if (
            isinstance(entry, (list, tuple))
            and len(entry) == 2
            and all(isinstance(part, str) and part for part in entry)
        ):
            continue
        return f"{entry!r} is neither a key nor a (label, key) pair"
    return None


def cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SUBJECT_LENGTH else text[: SUBJECT_LENGTH - 1] + "…"


def describe(thread: Any) -> str:
    """What ``thread`` (a Thread, or anything with its ``context``, ``metadata`` and ``values``)
    is about.

    A callable of the host that fails is logged and the thread described by its first message
    instead: mirroring a conversation never fails because its description did.
    """
    text = ""
    try:
        how = describer()
        if callable(how):
            text = str(how(thread) or "")
        elif how:
            text = from_keys(
                how,
                getattr(thread, "context", None) or {},
                getattr(thread, "metadata", None) or {},  # a historical model may have none
            )
    except Exception:
        logger.exception("NITRO_ASSISTANTS['THREAD_SUBJECT'] failed on thread %s", thread.pk)
        text = ""
    return cut(text or first_customer_line(getattr(thread, "values", None)))
