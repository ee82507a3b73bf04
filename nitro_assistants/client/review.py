"""Validate a reviewer's decision against the pause and build the resume (docs/protocol.md §4, §6).

Everything here runs before any request: a resume the graph refuses is stored and replayed by
every later resume, leaving a batched thread stuck, so nothing invalid may be sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nitro_assistants.client.results import REPLY_ACTION, PendingReview, is_interrupt_id
from nitro_assistants.exceptions import ThreadResumptionError


def _fail(message: str) -> ThreadResumptionError:
    return ThreadResumptionError(message)


def _blank(value: Any) -> bool:
    return not isinstance(value, str) or not value.strip()


def _reviews_by_id(
    tool_calls: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Reviews as a list, each with its ``id``; a mapping keyed by tool-call id is accepted too."""
    if isinstance(tool_calls, Mapping):
        items = []
        for call_id, review in tool_calls.items():
            if not isinstance(review, Mapping):
                raise _fail(f"The review of tool call `{call_id}` must be an object")
            items.append({**review, "id": call_id})
        return items
    out = []
    for review in tool_calls:
        if not isinstance(review, Mapping):
            raise _fail("Each tool-call review must be an object with an `id` and an `action`")
        out.append(dict(review))
    return out


def _tool_decision(call: dict[str, Any], review: dict[str, Any]) -> dict[str, Any]:
    action = review.get("action")
    allowed = call["allowed_decisions"]
    if action is None:
        raise _fail(
            f"The review of tool call `{call['id']}` needs an `action`: one of {', '.join(allowed)}"
        )
    if action not in allowed:
        raise _fail(
            f"Invalid review action `{action}` for tool call `{call['id']}` ({call['name']}); "
            f"allowed: {', '.join(allowed)}"
        )
    decision: dict[str, Any] = {"type": action}
    if action == "edit":
        args = review.get("args")
        if not isinstance(args, Mapping) or not args:
            raise _fail(
                f"An edit of tool call `{call['id']}` needs `args`: the arguments to change"
            )
        model_args = call.get("args") or {}
        unknown = sorted(set(args) - set(model_args))
        if unknown:
            raise _fail(
                f"Tool call `{call['id']}` ({call['name']}) has no argument "
                f"{', '.join(f'`{a}`' for a in unknown)}; it has "
                f"{', '.join(f'`{a}`' for a in model_args) or 'none'}"
            )
        # Top-level merge: each argument given replaces the model's value outright.
        decision["edited_action"] = {"name": call["name"], "args": {**model_args, **args}}
    elif action == "respond":
        if _blank(review.get("message")):
            raise _fail(
                f"`respond` to tool call `{call['id']}` needs a `message`: the tool's result"
            )
        decision["message"] = review["message"]
    elif action == "reject" and not isinstance(review.get("message") or "", str):
        # The reason itself is recorded, never shown to the model (which gets LangChain's
        # neutral notice): it travels in the resume's metadata, see ``review_messages``.
        raise _fail(f"The reject message for tool call `{call['id']}` must be text")
    return decision


def review_messages(
    tool_calls: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]] | None,
) -> dict[str, str]:
    """Reject reasons by tool-call id, for the resume's ``config.metadata`` (never the model)."""
    if tool_calls is None:
        return {}
    return {
        str(review["id"]): review["message"]
        for review in _reviews_by_id(tool_calls)
        if review.get("action") == "reject" and isinstance(review.get("message"), str)
    }


def _tool_decisions(
    pending: PendingReview,
    tool_calls: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    reviews = _reviews_by_id(tool_calls)
    held = {call["id"]: call for call in pending.tool_calls}
    seen: set[str] = set()
    for review in reviews:
        call_id = review.get("id")
        if call_id not in held:
            raise _fail(
                f"Tool call `{call_id}` is not under review; under review: "
                f"{', '.join(f'`{i}`' for i in held) or '(none)'}"
            )
        if call_id in seen:
            raise _fail(f"Tool call `{call_id}` is reviewed more than once")
        seen.add(str(call_id))
    missing = [i for i in held if i not in seen]
    if missing:
        raise _fail(
            "Every tool call under review needs a decision; missing: "
            + ", ".join(f"`{i}`" for i in missing)
        )
    by_id = {r["id"]: r for r in reviews}
    return [(call, _tool_decision(call, by_id[call["id"]])) for call in pending.tool_calls]


def _reply_decision(pending: PendingReview, reply: Mapping[str, Any]) -> dict[str, Any]:
    assert pending.reply is not None
    action = reply.get("action")
    allowed = pending.reply.allowed_decisions
    if action not in allowed:
        raise _fail(
            f"Invalid review action `{action}` for the reply; allowed: {', '.join(allowed)}"
        )
    decision: dict[str, Any] = {"type": action}
    if action == "edit":
        if _blank(reply.get("content")):
            raise _fail("A reply `edit` needs `content`: the whole new text")
        decision["edited_action"] = {"name": REPLY_ACTION, "args": {"content": reply["content"]}}
    elif action == "reject" and reply.get("message") is not None:
        if not isinstance(reply["message"], str):
            raise _fail("The reject message for the reply must be text")
        decision["message"] = reply["message"]
    return decision


def build_resume(
    pending: PendingReview,
    *,
    reply: Mapping[str, Any] | None,
    tool_calls: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]] | None,
    answer: Any,
    reviewer_id: str,
    reviewed_at: str,
) -> dict[str, Any]:
    """The ``command.resume`` answering ``pending``, keyed by interrupt id.

    Raises :class:`ThreadResumptionError` for anything the pause does not allow.
    """
    who = {"reviewer_id": reviewer_id, "reviewed_at": reviewed_at}
    if reply is not None:
        if pending.kind != "reply":
            raise _fail(
                f"A reply review was sent, but the thread is paused on {pending.kind.replace('_', ' ')}"
            )
        return _keyed(pending, {"decisions": [{**_reply_decision(pending, reply), **who}]})
    if tool_calls is not None:
        if pending.kind != "tool_calls":
            raise _fail(
                f"A tool-call review was sent, but the thread is paused on "
                f"{'its reply' if pending.kind == 'reply' else 'a ' + pending.kind}"
            )
        decided = _tool_decisions(pending, tool_calls)
        if pending.mode == "per_call":
            return {call["interrupt_id"]: {**decision, **who} for call, decision in decided}
        return _keyed(pending, {"decisions": [{**d, **who} for _, d in decided]})
    if pending.kind in ("tool_calls", "reply"):
        raise _fail(
            f"An interaction answer was sent, but the thread is paused on {pending.kind.replace('_', ' ')}"
        )
    return _keyed(pending, answer)


def _keyed(pending: PendingReview, value: Any) -> dict[str, Any]:
    if pending.interrupt_id and is_interrupt_id(pending.interrupt_id):
        return {pending.interrupt_id: value}
    if len(pending.interrupt_ids) > 1:
        raise _fail("The pause has several interrupts without ids: it cannot be answered safely")
    # A pause reported without an id is resumed unkeyed (only valid with one interrupt).
    return value if isinstance(value, dict) else {"value": value}
