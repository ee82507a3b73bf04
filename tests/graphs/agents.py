"""The graphs the real LangGraph server runs in the tests (see tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.tools import ToolException, tool

from nitro_assistants.agent import DeliveryMiddleware, ReviewMiddleware
from nitro_assistants.agent.interactions import ask_reader
from nitro_assistants.agent.testing import APPOINTMENT_TOOLS, ScriptedChatModel


@tool
def send_sms(content: str) -> str:
    """Send the reply to the customer by SMS."""
    if "FAIL" in content:
        raise RuntimeError("SMS gateway refused the message")
    # Blocking file I/O, as a real gateway client would do: the server's event loop must not run it.
    with Path("outbox.jsonl").open("a", encoding="utf-8") as outbox:
        outbox.write(json.dumps({"content": content}) + "\n")
    return f"sms queued ({len(content)} chars)"


@tool
def refund_customer(order_id: int, amount: float) -> str:
    """Refund an order (held for review; policy rules decide by amount)."""
    return f"Refunded {amount:g} on order {order_id}"


@tool
def void_order(order_id: int) -> str:
    """Void an order (held for review). Always fails: the tool's error is handled, so the run
    goes on with an error ToolMessage (``status: "error"``), as a real tool's failure does."""
    raise ToolException(f"order {order_id} is already shipped")


void_order.handle_tool_error = True

TOOLS = APPOINTMENT_TOOLS
HELD = {
    "reschedule_appointment": True,
    "cancel_appointment": {"allowed_decisions": ["approve", "reject"]},
}

walkthrough = create_agent(
    ScriptedChatModel(),
    tools=TOOLS,
    middleware=[
        DeliveryMiddleware(send_sms, attempts=2, backoff=0.05),
        ReviewMiddleware(
            {
                **HELD,
                "__reply__": {
                    "allowed_decisions": ["approve", "edit", "reject"],
                    "description": "Review this SMS before it is sent",
                },
            }
        ),
    ],
)

tools = create_agent(ScriptedChatModel(), tools=TOOLS, middleware=[ReviewMiddleware(HELD)])

per_call = create_agent(
    ScriptedChatModel(),
    tools=TOOLS,
    middleware=[ReviewMiddleware(HELD, interrupt_mode="per_call")],
)

plain = create_agent(ScriptedChatModel(), tools=TOOLS)

refunds = create_agent(
    ScriptedChatModel(),
    tools=[*TOOLS, refund_customer, void_order],
    middleware=[ReviewMiddleware({"refund_customer": True, "void_order": True})],
)

interactions = create_agent(ScriptedChatModel(), tools=[*TOOLS, ask_reader])
