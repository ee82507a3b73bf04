"""The demo assistant, served by ``langgraph dev`` (see langgraph.json beside this file).

A virtual confirmation assistant: it holds calls to ``reschedule_appointment`` and
``cancel_appointment`` for review, holds its replies (``__reply__``), delivers settled replies
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
from langchain_core.messages import BaseMessage, HumanMessage
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


class DemoChatModel(ScriptedChatModel):
    """The scripted model, reading a seeded customer's message as its command in ``SCRIPT``."""

    def answer(self, messages: list[BaseMessage]) -> Any:
        if messages and isinstance(messages[-1], HumanMessage):
            command = SCRIPT.get(messages[-1].text.strip())
            if command is not None:
                messages = [*messages[:-1], HumanMessage(content=command)]
        return super().answer(messages)


def _model() -> Any:
    name = os.environ.get("DEMO_MODEL", "").strip()
    if not name:
        return DemoChatModel()
    from langchain.chat_models import init_chat_model

    return init_chat_model(name)


graph = create_agent(
    _model(),
    tools=[*APPOINTMENT_TOOLS, ask_reader],
    system_prompt="You confirm and reschedule appointments for customers by SMS. Be brief.",
    middleware=[
        DeliveryMiddleware(send_sms, attempts=2, backoff=0.1),
        ReviewMiddleware(
            {
                "reschedule_appointment": True,
                "cancel_appointment": {"allowed_decisions": ["approve", "reject"]},
                "__reply__": {
                    "allowed_decisions": ["approve", "edit", "reject"],
                    "description": "Review this SMS before it is sent",
                },
            }
        ),
    ],
)
