"""Decided reviews as data: a record per review, and its line in each dataset format.

Pure Python, no Django: :mod:`nitro_assistants.services.datasets` reads the reviews and builds
the records (:func:`record`); this module writes them out as

- ``jsonl``: the record itself, one JSON object a line;
- ``openai``: the OpenAI fine-tuning chat format, ``{"messages": [...]}`` with the conversation
  up to the pause and, last, the assistant message as the person decided it (an edited call
  with its edited arguments, an edited reply with its edited text); reviews with nothing
  approved or edited have no line (a rejection is no target to learn);
- ``langsmith``: a LangSmith dataset file, one ``{"inputs", "outputs", "metadata"}`` example a
  line (what ``Client.create_examples`` takes).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from nitro_assistants.exceptions import InvalidArgumentError

FORMATS = ("jsonl", "openai", "langsmith")

#: Actions under which a held call or reply goes on as decided (the rest answer it instead).
GOES_ON = ("approve", "edit")

#: Keys whose values name or link things (ids, roles, hashes): never redacted, so a record still
#: joins up with the audit trail and the thread. Not ``name``: a message's ``name`` can be a
#: person's (a tool's name passes the redactors as it is).
KEPT = frozenset(
    {
        "id",
        "tool_call_id",
        "type",
        "role",
        "action",
        "actions",
        "status",
        "kind",
        "review",
        "decision",
        "thread",
        "assistant",
        "reviewer",
        "user",
        "channel",
        "rule",
        "version",
        "outcome",
        "revision",
        "digest",
        "hash",
        "prev_hash",
        "chain",
        "seq",
        "event",
        "verb",
        "at",
        "decided_at",
        "message_id",
    }
)

#: A message's ``type`` (LangChain) or ``role`` to its OpenAI role.
_ROLES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "AIMessage": "assistant",
    "AIMessageChunk": "assistant",
    "tool": "tool",
    "system": "system",
}


def redacted(value: Any, text: Callable[[str], str], key: str = "") -> Any:
    """A copy of the JSON-like ``value`` with every string passed through ``text``, but the
    values of :data:`KEPT` keys (ids, roles, hashes) and mapping keys themselves."""
    if key in KEPT:
        return value
    if isinstance(value, str):
        return text(value)
    if isinstance(value, Mapping):
        return {k: redacted(item, text, str(k)) for k, item in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(item, text) for item in value]
    return value


def content_text(content: Any) -> str:
    """A message's content as text (a list of blocks: its text blocks joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(block.get("text", "")) if isinstance(block, dict) else str(block)
            for block in content
            if not isinstance(block, dict) or block.get("type", "text") == "text"
        )
    return "" if content is None else json.dumps(content, sort_keys=True)


def merged_args(held: Any, edited: Any) -> Any:
    """An edit's arguments merged into the held call's (``{**held, **edited}``), as decided."""
    if isinstance(held, dict) and isinstance(edited, dict):
        return {**held, **edited}
    return edited


def decided_calls(
    proposed: list[dict[str, Any]], decided: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Each held call with what the person chose: ``action``, the ``args`` it goes on with (the
    edit merged in), and the ``message`` of a rejection or a response."""
    choices = {str(c.get("id")): c for c in decided or [] if isinstance(c, dict)}
    out = []
    for call in proposed:
        choice = choices.get(str(call.get("id")), {})
        action = choice.get("action")
        entry: dict[str, Any] = {"id": call.get("id"), "name": call.get("name"), "action": action}
        if action == "edit":
            entry["args"] = merged_args(call.get("args"), choice.get("args"))
        elif action == "approve":
            entry["args"] = call.get("args")
        if choice.get("message") is not None:
            entry["message"] = choice.get("message")
        out.append(entry)
    return out


def record(
    *,
    review: Mapping[str, Any],
    conversation: list[dict[str, Any]],
    decision: Mapping[str, Any],
    rule: Mapping[str, Any] | None,
    executed: Any,
    event: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One decided review as data (the ``jsonl`` line). ``review``: its pk, kind, assistant,
    thread, revision, digest and payload; ``decision``: the Decision's fields; ``executed``:
    what then ran (the decision record's); ``event``: the audit event vouching for it."""
    kind = review["kind"]
    payload = review.get("payload") or {}
    proposed: dict[str, Any]
    decided: dict[str, Any] = {"actions": list(decision.get("actions") or [])}
    if kind == "tool_calls":
        calls = [
            {"id": c.get("id"), "name": c.get("name"), "args": c.get("args")}
            for c in payload.get("tool_calls") or []
            if isinstance(c, dict)
        ]
        proposed = {"tool_calls": calls}
        decided["tool_calls"] = decided_calls(calls, decision.get("tool_calls"))
    elif kind == "reply":
        draft = payload.get("reply")
        draft = draft if isinstance(draft, dict) else {}
        proposed = {"reply": content_text(draft.get("content"))}
        choice = dict(decision.get("reply") or {})
        action = choice.get("action")
        decided["reply"] = {
            "action": action,
            "content": content_text(choice.get("content"))
            if action == "edit"
            else proposed["reply"]
            if action == "approve"
            else None,
        }
        if choice.get("message") is not None:
            decided["reply"]["message"] = choice.get("message")
    else:
        proposed = {
            key: payload[key] for key in ("interaction", "pauses", "value") if key in payload
        }
        decided["answer"] = decision.get("answer")
    decided["note"] = decision.get("note") or ""
    return {
        "review": review["pk"],
        "kind": kind,
        "assistant": review.get("assistant"),
        "thread": review.get("thread"),
        "conversation": conversation,
        "proposed": proposed,
        "decided": decided,
        "executed": executed,
        "outcome": decision.get("outcome"),
        "provenance": {
            "review": review["pk"],
            "revision": review.get("revision"),
            "digest": review.get("digest"),
            "decision": decision.get("pk"),
            "reviewer": decision.get("reviewer_id"),
            "user": decision.get("decided_by_id"),
            "channel": decision.get("channel") or "",
            "decided_at": decision.get("decided_at"),
            "rule": dict(rule) if rule else None,
            "event": dict(event) if event else None,
        },
    }


# -- OpenAI chat messages --------------------------------------------------------------------


def openai_call(call: Mapping[str, Any], args: Any = None) -> dict[str, Any]:
    """A tool call as an OpenAI assistant message carries it: ``arguments`` is a JSON text."""
    return {
        "id": str(call.get("id")),
        "type": "function",
        "function": {
            "name": str(call.get("name")),
            "arguments": json.dumps(call.get("args") if args is None else args, sort_keys=True),
        },
    }


def openai_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A mirrored message (LangChain or OpenAI style) as an OpenAI chat message."""
    role = _ROLES.get(str(message.get("type") or message.get("role") or ""), "system")
    out: dict[str, Any] = {"role": role, "content": content_text(message.get("content"))}
    if role == "assistant":
        calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
        if calls:
            out["tool_calls"] = [
                openai_call(c) if "function" not in c else dict(c) | {"type": "function"}
                for c in calls
            ]
    elif role == "tool":
        out["tool_call_id"] = str(message.get("tool_call_id") or "")
    return out


def _call_ids(message: Mapping[str, Any]) -> set[str]:
    return {str(c.get("id")) for c in message.get("tool_calls") or [] if isinstance(c, dict)}


def context_messages(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The conversation before what the review held, as OpenAI messages (the AI message that
    made the held calls is left out: the decided one takes its place)."""
    held = {str(c.get("id")) for c in row["proposed"].get("tool_calls") or []}
    messages = []
    for message in row["conversation"]:
        if held and _call_ids(message) & held:
            break
        messages.append(openai_message(message))
    return messages


def _held_message_text(row: Mapping[str, Any]) -> str:
    """The text of the AI message that made the held calls (what it said beside them)."""
    held = {str(c.get("id")) for c in row["proposed"].get("tool_calls") or []}
    for message in row["conversation"]:
        if _call_ids(message) & held:
            return content_text(message.get("content"))
    return ""


def target_message(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The assistant message as the person decided it: the approved and edited calls (edits
    merged in), or the approved or edited reply; None when nothing went on as proposed or
    edited (rejected, answered, a typed interaction)."""
    decided = row["decided"]
    if row["kind"] == "tool_calls":
        calls = [c for c in decided.get("tool_calls") or [] if c.get("action") in GOES_ON]
        if not calls:
            return None
        return {
            "role": "assistant",
            "content": _held_message_text(row),
            "tool_calls": [openai_call(c, c.get("args")) for c in calls],
        }
    reply = decided.get("reply") or {}
    if row["kind"] == "reply" and reply.get("action") in GOES_ON:
        return {"role": "assistant", "content": reply.get("content") or ""}
    return None


def openai_line(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The OpenAI fine-tuning example of a record (None: the record has no target). Earlier
    assistant messages carry ``weight: 0``: nobody reviewed them, so they are not trained on."""
    target = target_message(row)
    if target is None:
        return None
    context = [{**m, "weight": 0} if m["role"] == "assistant" else m for m in context_messages(row)]
    return {"messages": [*context, target]}


def langsmith_line(row: Mapping[str, Any]) -> dict[str, Any]:
    """The LangSmith example of a record: the conversation in, the decision out."""
    return {
        "inputs": {"messages": context_messages(row), "proposed": row["proposed"]},
        "outputs": {
            "message": target_message(row),
            "decided": row["decided"],
            "executed": row["executed"],
        },
        "metadata": {
            "kind": row["kind"],
            "assistant": row["assistant"],
            "thread": row["thread"],
            "outcome": row["outcome"],
            **row["provenance"],
        },
    }


def lines(rows: Iterable[dict[str, Any]], fmt: str) -> Iterator[str]:
    """Each record as a line of ``fmt`` (newline included); records without a line in it
    (the ``openai`` format's, see :func:`openai_line`) are skipped."""
    if fmt not in FORMATS:
        raise InvalidArgumentError(f"`{fmt}` is not a dataset format; one of {', '.join(FORMATS)}")
    for row in rows:
        out: dict[str, Any] | None
        if fmt == "openai":
            out = openai_line(row)
        elif fmt == "langsmith":
            out = langsmith_line(row)
        else:
            out = row
        if out is not None:
            yield json.dumps(out, ensure_ascii=False, default=str) + "\n"
