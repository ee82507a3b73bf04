"""The demo assistant, served by ``langgraph dev`` (see langgraph.json beside this file).

A virtual confirmation assistant: it holds calls to ``reschedule_appointment``,
``cancel_appointment`` and ``refund`` for review (the demo's policy rules decide some of them), holds its replies (``__reply__``), delivers settled replies
through ``send_sms`` (which writes to an outbox file the site shows, and refuses messages with a
link, as carriers do), and can ask typed questions and propose plans (``ask_reader``).

The model is the deterministic :class:`~nitro_assistants.agent.testing.ScriptedChatModel` (no key,
no network), given the commands of ``script.SCRIPT`` for the seeded customers' messages. Set
``DEMO_MODEL`` to ``provider:model`` (e.g. ``openai:gpt-4o-mini``, with the provider's LangChain
package installed and its API key in the environment) to use a real one.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from nitro_assistants.agent import DeliveryMiddleware, ReviewMiddleware, ask_reader
from nitro_assistants.agent.testing import APPOINTMENT_TOOLS, ScriptedChatModel
from reviewsite.agent.script import SCRIPT

OUTBOX = Path(
    os.environ.get("DEMO_OUTBOX", Path(__file__).resolve().parents[2] / "var" / "outbox.jsonl")
)


@tool
def send_sms(content: str) -> str:
    """Send a reply to the customer by SMS (the demo writes it to the outbox file)."""
    if re.search(r"https?://", content):
        raise RuntimeError("SMS gateway refused the message: the carrier blocks links")
    OUTBOX.parent.mkdir(parents=True, exist_ok=True)
    entry = {"at": datetime.now(UTC).isoformat(), "to": "+1 555 0100", "content": content}
    with OUTBOX.open("a", encoding="utf-8") as outbox:
        outbox.write(json.dumps(entry) + "\n")
    return f"sent to {entry['to']}"


@tool
def refund(appointment_id: int, amount: float, reason: str) -> str:
    """Refund the customer ``amount`` dollars for appointment ``appointment_id``."""
    return f"Refunded ${amount:.2f} for appointment {appointment_id} ({reason})"


class DemoChatModel(ScriptedChatModel):
    """The scripted model, reading a seeded customer's message as its command in ``SCRIPT``,
    and telling the customer what a reviewer's answer or approved plan means for them."""

    def answer(self, messages: list[BaseMessage]) -> Any:
        last = messages[-1] if messages else None
        if isinstance(last, HumanMessage):
            command = SCRIPT.get(last.text.strip())
            if command is not None:
                messages = [*messages[:-1], HumanMessage(content=command)]
        elif isinstance(last, ToolMessage) and last.name == "ask_reader":
            said = _after_decision(messages, last)
            if said:
                return AIMessage(content=said)
        return super().answer(messages)


def _after_decision(messages: list[BaseMessage], result: ToolMessage) -> str:
    """The reply to the customer once the reviewer answered the question or approved the plan;
    '' for anything else (the scripted model revises a plan sent back, and so on)."""
    try:
        decision = json.loads(result.text)
    except ValueError:
        return ""
    asked = next(
        (
            call["args"]
            for message in messages
            if isinstance(message, AIMessage)
            for call in message.tool_calls
            if call["id"] == result.tool_call_id
        ),
        {},
    )
    content = asked.get("content")
    if decision.get("decision") == "answer" and isinstance(content, list):
        labels = {
            option.get("optionId"): option.get("label")
            for question in content
            for option in question.get("options") or []
        }
        chosen = [
            str(labels.get(option, option))
            for answer in decision.get("answers") or []
            for option in answer.get("optionIds") or []
        ] + [str(a["text"]) for a in decision.get("answers") or [] if a.get("text")]
        if chosen:
            return f"Thanks for waiting! We can do {' or '.join(chosen)}. Shall I book it?"
    if decision.get("decision") == "approve" and isinstance(content, dict):
        for step in content.get("steps") or []:
            if step.get("action") == "crm.reschedule" and step.get("stepId") not in (
                decision.get("disabledSteps") or []
            ):
                moved = {
                    **(step.get("input") or {}),
                    **decision.get("edits", {}).get(step["stepId"], {}),
                }
                return f"Done: you're booked for {moved.get('day')} at {moved.get('time')}."
    return ""


def _model() -> Any:
    name = os.environ.get("DEMO_MODEL", "").strip()
    if not name:
        return DemoChatModel()
    from langchain.chat_models import init_chat_model

    return init_chat_model(name)


graph = create_agent(
    _model(),
    tools=[*APPOINTMENT_TOOLS, refund, ask_reader],
    system_prompt="You confirm and reschedule appointments for customers by SMS. Be brief.",
    middleware=[
        DeliveryMiddleware(send_sms, attempts=2, backoff=0.1),
        ReviewMiddleware(
            {
                "reschedule_appointment": True,
                "cancel_appointment": {"allowed_decisions": ["approve", "reject"]},
                "refund": {"allowed_decisions": ["approve", "reject"]},
                "__reply__": {
                    "allowed_decisions": ["approve", "edit", "reject"],
                    "description": "Review this SMS before it is sent",
                },
            }
        ),
    ],
)
