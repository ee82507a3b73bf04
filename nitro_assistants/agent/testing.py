"""A deterministic chat model for tests and demos: no key, no network.

Shipped in the package (like django-anymail's test backend) so the example site and the tests use the
same double. It reads the last message and answers by a small script:

- a human message ``tools: [{"name": ..., "args": {...}}, ...]`` → an AI message calling those tools;
- ``reply: <text>`` → the reply ``<text>``;
- ``error: <text>`` → raises ``ValueError(<text>)`` inside the graph (a failed run);
- "... move my appointment to <Day> ..." → a ``reschedule_appointment`` call for appointment 42;
- any other human text → ``You said: <text>``;
- ``ask: {"kind": ..., "title": ..., "content": ..., "interaction_id"?: ...}`` → an ``ask_reader``
  call (a typed interaction, see :mod:`nitro_assistants.agent.interactions`); when the reader asks
  for a revision, the model asks again under the same interaction id with ``(revised)`` in the title;
- after tool results → ``Done! <each tool result>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

_MOVE = re.compile(r"move my appointment to (\w+)", re.IGNORECASE)


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        block.get("text", "") if isinstance(block, dict) else str(block) for block in content
    )


class ScriptedChatModel(BaseChatModel):
    """Answers from the conversation alone, the same way every time."""

    working_text: str = "Let me do that for you."

    @property
    def _llm_type(self) -> str:
        return "nitro-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self.answer(messages)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def answer(self, messages: list[BaseMessage]) -> AIMessage:
        turn = len(messages)
        last = messages[-1] if messages else None
        if isinstance(last, ToolMessage) and last.name == "ask_reader":
            revised = self._revise(messages, last)
            if revised is not None:
                return revised
        if isinstance(last, ToolMessage):
            results = []
            for message in reversed(messages):
                if not isinstance(message, ToolMessage):
                    break
                results.append(_text(message))
            return AIMessage(content="Done! " + "; ".join(reversed(results)))
        text = _text(last).strip() if isinstance(last, HumanMessage) else ""
        if text.startswith("tools:"):
            calls = json.loads(text.removeprefix("tools:"))
            return AIMessage(
                content=self.working_text,
                tool_calls=[
                    {"id": f"call-{turn}-{i}", "name": c["name"], "args": c.get("args", {})}
                    for i, c in enumerate(calls)
                ],
            )
        if text.startswith("ask:"):
            args = json.loads(text.removeprefix("ask:"))
            return AIMessage(
                content="I need your input.",
                tool_calls=[{"id": f"call-{turn}-0", "name": "ask_reader", "args": args}],
            )
        if text.startswith("reply:"):
            return AIMessage(content=text.removeprefix("reply:").strip())
        if text.startswith("error:"):
            raise ValueError(text.removeprefix("error:").strip())
        if match := _MOVE.search(text):
            args = {"appointment_id": 42, "day": match.group(1).capitalize(), "time": "10:00"}
            return AIMessage(
                content=self.working_text,
                tool_calls=[
                    {"id": f"call-{turn}-0", "name": "reschedule_appointment", "args": args}
                ],
            )
        return AIMessage(content=f"You said: {text}")

    def _revise(self, messages: list[BaseMessage], result: ToolMessage) -> AIMessage | None:
        try:
            decision = json.loads(_text(result))
        except ValueError:
            return None
        if decision.get("decision") != "request_revision":
            return None
        asked = next(
            (
                call
                for message in reversed(messages)
                if isinstance(message, AIMessage)
                for call in message.tool_calls
                if call["id"] == result.tool_call_id
            ),
            None,
        )
        if asked is None:
            return None
        args = dict(asked["args"])
        if not args.get("interaction_id"):
            return None
        args["title"] = f"{str(args.get('title', '')).removesuffix(' (revised)')} (revised)"
        if decision.get("note"):
            args["summary"] = f"Revised: {decision['note']}"
        return AIMessage(
            content="Here is a revised version.",
            tool_calls=[{"id": f"call-{len(messages)}-0", "name": "ask_reader", "args": args}],
        )


# Appointment tools the scripted model calls: the demo assistant and the test graphs share them.


@tool
def reschedule_appointment(appointment_id: int, day: str, time: str) -> str:
    """Move an appointment to another day and time."""
    return f"Appointment {appointment_id} moved to {day} at {time}"


@tool
def cancel_appointment(appointment_id: int) -> str:
    """Cancel an appointment."""
    return f"Appointment {appointment_id} cancelled"


@tool
def lookup_appointment(appointment_id: int) -> str:
    """Read an appointment (never held for review)."""
    return f"Appointment {appointment_id} is on Monday at 09:00"


APPOINTMENT_TOOLS = [reschedule_appointment, cancel_appointment, lookup_appointment]
