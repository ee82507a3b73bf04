"""The ``REDACT`` setting applied: what the admin, the API, notifications and exports show of a
review and its thread. Only copies pass through here; the stored rows are never changed."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, TypeVar

from django.db.models import Model

from nitro_assistants.exceptions import UsageError
from nitro_assistants.models import Decision, Review, Thread
from nitro_assistants.redaction import HIDDEN, MARK, Redaction
from nitro_assistants.redaction_setting import (
    REVEAL_PERMISSION,
    configured_secrets,
    current,
    may_reveal,
)

__all__ = [
    "IDENTIFYING",
    "REVEAL_PERMISSION",
    "configured_secrets",
    "current",
    "hidden_paths",
    "holds_redaction",
    "is_redacted",
    "may_reveal",
    "shown",
    "shown_decision",
    "shown_fields",
    "shown_instance",
    "shown_review",
    "shown_text",
    "shown_thread",
]


_M = TypeVar("_M", bound=Model)


def shown(value: Any, redaction: Redaction | None = None) -> Any:
    """``value`` as a reviewer may read it."""
    return (redaction if redaction is not None else current()).value(value)


def shown_text(text: str, redaction: Redaction | None = None) -> str:
    return (redaction if redaction is not None else current()).text(text)


def shown_subject(subject: str, redaction: Redaction | None = None) -> str:
    """A thread's stored subject as a reviewer reads it (:meth:`Redaction.cut_text`)."""
    return (redaction if redaction is not None else current()).cut_text(subject)


def hidden_paths(review: Review, redaction: Redaction | None = None) -> list[str]:
    """The dotted paths of the review's payload that a reviewer is not shown whole
    (``tool_calls.0.args.card``)."""
    redaction = redaction if redaction is not None else current()
    hidden: list[str] = []
    if redaction:
        redaction.value(review.payload or {}, hidden)
    return hidden


def is_redacted(text: str) -> bool:
    """Whether ``text`` holds a redaction's mark (or is a value hidden whole)."""
    return MARK in text or HIDDEN in text


def shown_review(review: Review, redaction: Redaction | None = None) -> Review:
    """A copy of ``review`` (and of its thread) with the payload and the thread's mirrored
    values redacted, for rendering; its ``revision`` and ``digest`` are the stored ones, so a
    decision made on it is checked against what is stored. Never saved."""
    redaction = redaction if redaction is not None else current()
    if not redaction:
        return review
    review_copy = _unsaved_copy(review)
    review_copy._state.fields_cache["thread"] = shown_thread(review.thread, redaction)
    review_copy.payload = redaction.value(review.payload or {})
    return review_copy


def shown_thread(thread: Thread, redaction: Redaction | None = None) -> Thread:
    """A copy of ``thread`` with its mirrored values and context redacted. Never saved."""
    redaction = redaction if redaction is not None else current()
    if not redaction:
        return thread
    thread_copy = _unsaved_copy(thread)
    thread_copy.values = redaction.value(thread.values or {})
    thread_copy.context = redaction.value(thread.context or {})
    thread_copy.subject = redaction.cut_text(thread.subject or "")
    return thread_copy


def shown_decision(decision: Decision, redaction: Redaction | None = None) -> Decision:
    """A copy of ``decision`` with what it sent (an edit, a reason, an answer) redacted."""
    redaction = redaction if redaction is not None else current()
    if not redaction:
        return decision
    decision_copy = _unsaved_copy(decision)
    decision_copy.reply = redaction.value(decision.reply)
    decision_copy.tool_calls = redaction.value(decision.tool_calls)
    decision_copy.answer = redaction.value(decision.answer)
    decision_copy.note = redaction.text(decision.note or "")
    decision_copy.error = redaction.text(decision.error or "")
    return decision_copy


def _unsaved_copy(instance: _M) -> _M:
    """A copy of a model instance for showing: its own state and cache of related rows (so
    redacting it leaves the original alone), and a ``save()`` that refuses."""
    shown = copy.copy(instance)
    shown._state = copy.copy(instance._state)
    shown._state.fields_cache = dict(instance._state.fields_cache)
    shown.save = _never_saved  # type: ignore[method-assign]
    return shown


def _never_saved(*args: Any, **kwargs: Any) -> None:
    raise UsageError("A redacted copy for showing is never saved.")


def holds_redaction(value: Any) -> bool:
    """Whether a decision's ``value`` carries a redaction's mark: sent on, it would replace the
    real value with the mark (a reviewer edited around a value they were not shown)."""
    if isinstance(value, str):
        return is_redacted(value)
    if isinstance(value, Mapping):
        return any(holds_redaction(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(holds_redaction(item) for item in value)
    return False


#: Fields of an API read that name things rather than hold content: never redacted (a digest
#: or an id cut up by a redactor would make the read useless to decide with).
IDENTIFYING = frozenset(
    {"id", "sessionId", "interactionId", "interruptIds", "digest", "revision", "kind", "status"}
)


def shown_fields(mapping: Mapping[str, Any], keep: frozenset[str] = IDENTIFYING) -> dict[str, Any]:
    """``mapping`` with every value redacted but those of ``keep``'s keys."""
    redaction = current()
    if not redaction:
        return dict(mapping)
    return {key: value if key in keep else redaction.value(value) for key, value in mapping.items()}


#: Text fields of the app's models that name or link things (hashes, ids, statuses): shown as
#: they are in the admin's read-only pages.
UNREDACTED_FIELDS = frozenset(
    {
        "hash",
        "prev_hash",
        "actor_ref",
        "digest",
        "interrupt_id",
        "message_id",
        "interaction_id",
        "remote_run_id",
        "reviewer_id",
        "verb",
        "kind",
        "status",
        "outcome",
        "channel",
        "assistant_key",
        "tool",
        "origin",
    }
)


def shown_instance(instance: Any) -> Any:
    """A copy of a model instance with its text and JSON fields redacted (but those of
    :data:`UNREDACTED_FIELDS`), for a read-only page. Never saved."""
    redaction = current()
    if not redaction or instance is None:
        return instance
    shown_copy = copy.copy(instance)
    shown_copy._state = copy.copy(instance._state)
    shown_copy._state.fields_cache = dict(instance._state.fields_cache)
    deferred = instance.get_deferred_fields()
    for model_field in instance._meta.concrete_fields:
        name = model_field.attname
        if name in UNREDACTED_FIELDS or name in deferred or model_field.is_relation:
            continue
        value = getattr(instance, name)
        if isinstance(value, str | dict | list):
            setattr(shown_copy, name, redaction.value(value))
    shown_copy.save = _never_saved
    return shown_copy
