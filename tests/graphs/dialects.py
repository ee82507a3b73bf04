"""Graphs pausing the ways LangGraph graphs in the wild do (docs/protocol.md §9): Agent Inbox's
``HumanInterrupt``, plain ``interrupt(value)`` values, parallel branches pausing at once, and a
declared ``response_schema``. The real LangGraph server runs them in the tests."""

from __future__ import annotations

import asyncio
import operator
import warnings
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # deprecated, but shipped and used
    from langgraph.prebuilt.interrupt import ActionRequest, HumanInterrupt, HumanInterruptConfig


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    log: Annotated[list[Any], operator.add]


def _say(text: str) -> dict[str, Any]:
    return {"messages": [AIMessage(content=text)]}


# -- Agent Inbox: accept, edit, respond, ignore as config allows --------------------------------

INBOX_CONFIG = HumanInterruptConfig(
    allow_ignore=True, allow_respond=True, allow_edit=True, allow_accept=False
)


def _prepare(state: State) -> dict[str, Any]:
    return {"log": ["prepared"]}


def _refund(state: State) -> dict[str, Any]:
    request = HumanInterrupt(
        action_request=ActionRequest(action="send_refund", args={"order_id": 1234, "amount": 50.0}),
        config=INBOX_CONFIG,
        description="### Refund request\n\nSend a refund of **$50.00** for order **#1234**?",
    )
    response = interrupt([request])[0]
    # As Agent Inbox graphs do: refuse what the config does not allow (this wedges the thread).
    kind = response["type"]
    if kind == "accept" and not INBOX_CONFIG["allow_accept"]:
        raise ValueError("accept is not allowed")
    if kind == "edit":
        args = response["args"]["args"]
        return _say(f"refund sent: order {args['order_id']} amount {args['amount']}")
    if kind == "response":
        return _say(f"noted: {response['args']}")
    if kind == "ignore":
        return _say("refund ignored")
    if kind == "accept":
        return _say("refund sent as asked")
    raise ValueError(f"unknown response type {kind!r}")


inbox = (
    StateGraph(State)
    .add_node("prepare", _prepare)
    .add_node("refund", _refund)
    .add_edge(START, "prepare")
    .add_edge("prepare", "refund")
    .add_edge("refund", END)
    .compile()
)


# -- plain interrupt(): a bare string, then an object with options ------------------------------


def _ask(state: State) -> dict[str, Any]:
    approved = interrupt("Approve a refund of $50?")
    carrier = interrupt({"question": "Which carrier?", "options": ["UPS", "DHL"]})
    return _say(f"approved={approved!r} carrier={carrier!r}")


plain_interrupt = (
    StateGraph(State).add_node("ask", _ask).add_edge(START, "ask").add_edge("ask", END).compile()
)


# -- a pause with its own expiry (AG-UI 1.1 ``expiresAt``): the user's message is the time ---------


def _confirm(state: State) -> dict[str, Any]:
    expires_at = str(state["messages"][-1].content)
    answer = interrupt({"question": "Ship the order today?", "expiresAt": expires_at})
    return _say(f"answer={answer!r}")


expiring = (
    StateGraph(State)
    .add_node("confirm", _confirm)
    .add_edge(START, "confirm")
    .add_edge("confirm", END)
    .compile()
)


# -- two parallel branches pausing at once --------------------------------------------------------


def _left(state: State) -> dict[str, Any]:
    return {"log": [f"left={interrupt('Left branch: proceed?')!r}"]}


def _right(state: State) -> dict[str, Any]:
    return {"log": [f"right={interrupt({'question': 'Right branch: which size?'})!r}"]}


def _join(state: State) -> dict[str, Any]:
    return _say(" ".join(sorted(str(item) for item in state.get("log") or [])))


parallel = (
    StateGraph(State)
    .add_node("left", _left)
    .add_node("right", _right)
    .add_node("join", _join)
    .add_edge(START, "left")
    .add_edge(START, "right")
    .add_edge(["left", "right"], "join")
    .add_edge("join", END)
    .compile()
)


# -- a declared response_schema -------------------------------------------------------------------

SIZE_SCHEMA = {
    "type": "object",
    "properties": {
        "size": {"type": "string", "enum": ["S", "M", "L"]},
        "quantity": {"type": "integer", "minimum": 1},
        "note": {"type": "string"},
    },
    "required": ["size", "quantity"],
    "additionalProperties": False,
}


def _order(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "Which size, how many?"}, response_schema=SIZE_SCHEMA)
    return _say(f"ordered {answer['quantity']} x {answer['size']}")


schema = (
    StateGraph(State)
    .add_node("order", _order)
    .add_edge(START, "order")
    .add_edge("order", END)
    .compile()
)


# -- a run that takes long: the stop button cancels it on the server (services/stops.py) --------


async def _linger(state: State) -> dict[str, Any]:
    await asyncio.sleep(120)
    return _say("finished lingering")


slow = (
    StateGraph(State)
    .add_node("linger", _linger)
    .add_edge(START, "linger")
    .add_edge("linger", END)
    .compile()
)
