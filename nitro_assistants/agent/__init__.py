"""Agent-side middleware for a self-hosted LangGraph server (extra ``agent``).

:class:`ReviewMiddleware` holds tool calls and the final reply for review (docs/protocol.md §6);
:class:`DeliveryMiddleware` sends settled replies through a delivery tool (§7);
:class:`~nitro_assistants.agent.testing.ScriptedChatModel` is a deterministic model for tests and demos.
"""

from __future__ import annotations

from nitro_assistants.agent.delivery import DeliveryMiddleware
from nitro_assistants.agent.interactions import ask_reader, request_interaction
from nitro_assistants.agent.review import REPLY, ReviewMiddleware

__all__ = ["REPLY", "DeliveryMiddleware", "ReviewMiddleware", "ask_reader", "request_interaction"]
