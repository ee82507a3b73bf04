"""What a reviewer reads of a conversation: the thread's mirrored messages cut at what a review
holds. Plain reading, no state changed; the admin and the JSON API both show it, each in its own
form (the admin as ``admin.conversation.ShownMessage``, the API as JSON)."""

from __future__ import annotations

from typing import Any

from nitro_assistants.models import Review
from nitro_assistants.rules import CONTENT_KEY, canonical_json

#: A message's ``type`` (LangChain) or ``role`` (OpenAI style) to the role a reader is shown.
ROLES = {
    "human": "human",
    "user": "human",
    "ai": "ai",
    "assistant": "ai",
    "AIMessage": "ai",
    "AIMessageChunk": "ai",
    "tool": "tool",
    "system": "system",
}


def role_of(message: dict[str, Any]) -> str:
    """``human``, ``ai``, ``tool`` or ``system`` (anything unknown reads as ``system``)."""
    return ROLES.get(str(message.get("type") or message.get("role") or ""), "system")


def call_ids(message: dict[str, Any]) -> set[str]:
    """The ids of the tool calls a message makes."""
    return {str(c.get("id")) for c in message.get("tool_calls") or [] if isinstance(c, dict)}


def held_call_ids(review: Review) -> frozenset[str]:
    """The ids of the tool calls ``review`` holds (none for any other kind)."""
    if review.kind != Review.Kind.TOOL_CALLS:
        return frozenset()
    return frozenset(str(call.get("id")) for call in review.tool_calls)


def raised_interaction(call: dict[str, Any], interaction: dict[str, Any]) -> bool:
    """Whether ``call`` is the tool call that asked ``interaction`` (``agent.ask_reader``'s, or
    any tool's whose arguments carry the interaction's kind, title and content as they do): the
    same content asked again later is the same question, an earlier revision is not."""
    args = call.get("args")
    if not isinstance(args, dict):
        return False
    kind = str(interaction.get("kind") or "")
    asked_id = args.get("interaction_id")
    return (
        args.get("kind") == kind
        and args.get("title") == interaction.get("title")
        and (not asked_id or asked_id == interaction.get("interactionId"))
        and canonical_json(args.get("content"))
        == canonical_json(interaction.get(CONTENT_KEY.get(kind, "")))
    )


def interaction_call_ids(review: Review) -> frozenset[str]:
    """The ids of the tool calls that asked what ``review`` (a typed interaction) holds, so a
    reader is not shown them, nor their JSON results, above the form that draws them (none for
    any other kind)."""
    interaction = review.payload.get("interaction") if isinstance(review.payload, dict) else None
    if review.kind not in CONTENT_KEY or not isinstance(interaction, dict):
        return frozenset()
    return frozenset(
        str(call.get("id"))
        for message in review.thread.messages
        if isinstance(message, dict)
        for call in message.get("tool_calls") or []
        if isinstance(call, dict) and call.get("id") and raised_interaction(call, interaction)
    )


def _index_of(messages: list[dict[str, Any]], message_id: Any) -> int | None:
    if not message_id:
        return None
    for index, message in enumerate(messages):
        if message.get("id") == message_id:
            return index
    return None


def held_messages(review: Review) -> list[dict[str, Any]]:
    """The thread's mirrored messages up to what ``review`` holds, as mirrored.

    Tool calls: up to and including the AI message that made the held calls (found by call id,
    else the message after ``previous_message_id``). Reply: the messages before the draft (the
    draft itself is the review's ``reply``). A typed interaction: the whole conversation. The
    snapshot may have moved on since the pause, so the cut is by id, never by position from the
    end.
    """
    messages = [m for m in review.thread.messages if isinstance(m, dict)]
    if review.kind == Review.Kind.TOOL_CALLS:
        held = held_call_ids(review)
        end = None
        for index, message in enumerate(messages):
            if call_ids(message) & held:
                end = index + 1
                break
        if end is None and review.tool_calls:
            previous = _index_of(messages, review.tool_calls[0].get("previous_message_id"))
            if previous is not None:
                end = min(previous + 2, len(messages))
        return messages[:end]
    if review.kind == Review.Kind.REPLY:
        draft = review.reply or {}
        end = _index_of(messages, draft.get("message_id"))
        if end is None and messages and role_of(messages[-1]) == "ai":
            end = len(messages) - 1
        return messages[:end]
    return messages
