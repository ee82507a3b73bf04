"""Graphs the reliability suite's LangGraph server runs: the scripted model and tools of
tests/graphs/agents.py, slowed down where a fault has to land in the middle of something.

- ``slow``: a human message containing ``slowly`` makes the model think ``NITRO_SLOW_SECONDS``
  (a run to stop the server in); the held ``reschedule_appointment`` takes as long once approved
  (a resume to kill the worker, or stop the server, in); after the held (fast)
  ``cancel_appointment`` ran, the model thinks as long before it answers (a resume whose stream
  has already reported the tool when the server stops).
"""

from __future__ import annotations

import os
import time
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from nitro_assistants.agent import ReviewMiddleware
from nitro_assistants.agent.testing import (
    ScriptedChatModel,
    cancel_appointment,
    lookup_appointment,
)
from tests.graphs.agents import plain, tools, walkthrough

SLOW_SECONDS = float(os.environ.get("NITRO_SLOW_SECONDS", "3"))


class SlowChatModel(ScriptedChatModel):
    """Thinks ``SLOW_SECONDS`` before answering a human message that says ``slowly``."""

    def answer(self, messages: list[BaseMessage]) -> Any:
        last = messages[-1] if messages else None
        if isinstance(last, HumanMessage) and "slowly" in str(last.content):
            time.sleep(SLOW_SECONDS)
        if isinstance(last, ToolMessage) and last.name == "cancel_appointment":
            time.sleep(SLOW_SECONDS)
        return super().answer(messages)


@tool
def reschedule_appointment(appointment_id: int, day: str, time: str) -> str:
    """Move an appointment to another day and time (slowly)."""
    _sleep(SLOW_SECONDS)
    return f"Appointment {appointment_id} moved to {day} at {time}"


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


slow = create_agent(
    SlowChatModel(),
    tools=[reschedule_appointment, cancel_appointment, lookup_appointment],
    middleware=[ReviewMiddleware({"reschedule_appointment": True, "cancel_appointment": True})],
)

__all__ = ["plain", "slow", "tools", "walkthrough"]
