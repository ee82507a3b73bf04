"""What a reviewer reads in the admin: the mirrored conversation cut at the held call
(:mod:`nitro_assistants.conversation`), drawn as the templates want it, and short summaries.

Everything here returns plain data (strings, dicts); templates escape it. Nothing builds HTML.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.utils.translation import gettext_lazy as _

from nitro_assistants import redacting
from nitro_assistants.admin.content import Row, key_values
from nitro_assistants.client.results import message_text
from nitro_assistants.conversation import (
    held_call_ids,
    held_messages,
    interaction_call_ids,
    role_of,
)
from nitro_assistants.models import Decision, Review
from nitro_assistants.previews import LONG_CHARS, LONG_LINES

#: What a held call's badge says once it is decided, by the decision's action on it.
VERDICTS = {
    "approve": _("approved"),
    "edit": _("edited"),
    "reject": _("rejected"),
    "respond": _("responded"),
}


def pretty_json(value: Any) -> str:
    """Arguments as a reader wants them: indented, keys in the model's order, unicode kept."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def short_json(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_line(text: str, limit: int = 100) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass
class ShownCall:
    id: str
    name: str
    args: str
    held: bool = False
    rows: list[Row] = field(default_factory=list)  # the arguments as key/value rows
    #: Once the review is decided: the decision's action on this call ("approve", ...), and
    #: what its badge says ("approved") in place of "held for review".
    action: str = ""
    verdict: str = ""


@dataclass
class ShownMessage:
    """One message of the conversation as the templates draw it."""

    role: str  # human | ai | tool | system
    id: str
    text: str
    tool_calls: list[ShownCall] = field(default_factory=list)
    tool_call_id: str = ""
    tool_name: str = ""
    status: str = ""
    held: bool = False
    review_stamp: str = ""
    delivery: str = ""

    @property
    def long(self) -> bool:
        """A long message (a tool's big result, a pasted document) is drawn collapsed."""
        return len(self.text) > LONG_CHARS * 2 or self.text.count("\n") >= LONG_LINES * 2

    @property
    def first_line(self) -> str:
        return first_line(self.text)


def show_message(
    message: dict[str, Any],
    held_ids: frozenset[str] = frozenset(),
    positions: Mapping[str, int] | None = None,
    required: tuple[str, ...] = (),
) -> ShownMessage:
    """``message`` as the templates draw it. ``positions``: the held calls' places among the
    review's calls (by id), so their arguments carry their paths (``tool_calls.0.args.body``);
    ``required``: the paths a rule says must be shown, drawn open."""
    role = role_of(message)
    positions = positions or {}
    calls = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        call_id = str(call.get("id") or "")
        held = call_id in held_ids
        index = positions.get(call_id) if held else None
        path = f"tool_calls.{index}.args" if index is not None else ""
        calls.append(
            ShownCall(
                id=call_id,
                name=str(call.get("name") or ""),
                args=pretty_json(call.get("args") or {}),
                held=held,
                rows=key_values(call.get("args") or {}, 0, path, required if path else ()),
            )
        )
    metadata = message.get("response_metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    review = metadata.get("review")
    review = review if isinstance(review, dict) else {}
    delivery = metadata.get("delivery")
    delivery = delivery if isinstance(delivery, dict) else {}
    return ShownMessage(
        role=role,
        id=str(message.get("id") or ""),
        text=message_text(message),
        tool_calls=calls,
        tool_call_id=str(message.get("tool_call_id") or ""),
        tool_name=str(message.get("name") or ""),
        status=str(message.get("status") or ""),
        held=any(call.held for call in calls),
        review_stamp=str(review.get("type") or ""),
        delivery=str(delivery.get("status") or ""),
    )


def held_conversation(
    review: Review, decision: Decision | None = None, required: tuple[str, ...] = ()
) -> list[ShownMessage]:
    """The conversation up to what ``review`` holds (:func:`nitro_assistants.conversation.
    held_messages`), the held calls marked: "held for review" while it waits, else what was
    decided on each (approved, edited, rejected, responded), or the review's status when no
    decision covers the call (superseded, dismissed). ``required``: as :func:`show_message`."""
    held = held_call_ids(review)
    positions = {str(call.get("id") or ""): i for i, call in enumerate(review.tool_calls)}
    shown = [show_message(m, held, positions, required) for m in held_messages(review)]
    asked = interaction_call_ids(review)
    if asked:
        # A typed interaction's form draws what its tool call asked and what was decided: the
        # call and its JSON result are not drawn above it again (the AI's own words stay).
        kept = []
        for message in shown:
            if message.role == "tool" and message.tool_call_id in asked:
                continue
            message.tool_calls = [call for call in message.tool_calls if call.id not in asked]
            if message.text or message.tool_calls or message.role != "ai":
                kept.append(message)
        shown = kept
    if review.status == Review.Status.PENDING:
        return shown
    actions = {
        str(item.get("id")): str(item.get("action") or "")
        for item in (decision.tool_calls if decision else None) or []
        if isinstance(item, dict)
    }
    for message in shown:
        for call in message.tool_calls:
            if not call.held:
                continue
            call.action = actions.get(call.id, "")
            verdict = VERDICTS.get(call.action)
            call.verdict = str(verdict if verdict else review.get_status_display())
    return shown


def _inside_braces(text: str) -> str:
    """``{"a": 1}`` → ``"a": 1``; a cut object keeps its ``…`` (only its ``{`` goes)."""
    return text[1:-1] if text.endswith("}") else text[1:]


def held_summary(review: Review) -> str:
    """One line for the queue: the held calls in short, or the reply's first line; redacted
    before it is cut short (a card number cut in half no longer looks like one)."""
    payload = review.payload if isinstance(review.payload, dict) else {}
    redaction = redacting.current()
    if review.kind == Review.Kind.TOOL_CALLS:
        # Only what the line shows is redacted: the queue draws a hundred of them.
        return "; ".join(
            f"{call.get('name')}"
            f"({_inside_braces(short_json(redaction.value(call.get('args') or {}), 60))})"
            for call in payload.get("tool_calls") or []
            if isinstance(call, dict)
        )
    if review.kind == Review.Kind.REPLY:
        reply = payload.get("reply")
        content = str((reply if isinstance(reply, dict) else {}).get("content") or "")
        return first_line(redaction.text(content))
    interaction = redaction.value(payload.get("interaction"))
    if isinstance(interaction, dict):
        return first_line(str(interaction.get("title") or interaction.get("summary") or ""))
    return ""
