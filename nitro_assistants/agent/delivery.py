"""The delivery tool contract for ``create_agent``: docs/protocol.md §7."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from langchain.agents.middleware.types import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime

from nitro_assistants.agent.review import is_reply, message_text, review_type, stamp
from nitro_assistants.exceptions import InvalidArgumentError


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def delivery_status(message: BaseMessage) -> str | None:
    stamp_ = (getattr(message, "response_metadata", None) or {}).get("delivery")
    return stamp_.get("status") if isinstance(stamp_, dict) else None


class DeliveryMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Sends every settled reply through a delivery tool and stamps the outcome on it.

    A reply settles when it is approved, edited, or was never under review. It is stamped
    ``delivery = {"status": "pending"}`` in its own step (so a run cut off mid-delivery leaves
    that stamp), then the tool is called with ``{"content": <reply text>}`` up to ``attempts``
    times, and the stamp becomes ``delivered`` (``result``, ``delivered_at``, ``attempts``) or
    ``failed`` (``error``, ``failed_at``, ``attempts``). A new human message removes a reply
    still stamped ``pending``: it may never have reached the customer.

    List it *before* :class:`~nitro_assistants.agent.ReviewMiddleware` in ``middleware=[...]``,
    so that the review settles a reply before this middleware sees it.
    """

    def __init__(
        self,
        tool: BaseTool | Callable[[str], Any],
        *,
        attempts: int = 3,
        backoff: float = 0.2,
    ) -> None:
        super().__init__()
        if attempts < 1:
            raise InvalidArgumentError("attempts must be at least 1")
        self.tool = tool
        self.tool_name = tool.name if isinstance(tool, BaseTool) else getattr(tool, "__name__", "")
        self.attempts = attempts
        self.backoff = backoff

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages = state["messages"]
        if not messages or not isinstance(messages[-1], HumanMessage):
            return None
        stale = [m.id for m in messages[:-1] if delivery_status(m) == "pending" and m.id]
        return {"messages": [RemoveMessage(id=i) for i in stale if i]} if stale else None

    def _settled(self, message: BaseMessage | None) -> bool:
        return (
            isinstance(message, AIMessage)
            and is_reply(message)
            and review_type(message) != "pending"
            and delivery_status(message) is None
        )

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        last = state["messages"][-1] if state["messages"] else None
        if not self._settled(last):
            return None
        assert isinstance(last, AIMessage)
        return {"messages": [stamp(last, "delivery", self._pending())]}

    def _to_deliver(self, state: AgentState[Any]) -> AIMessage | None:
        """The reply this run ends on, when it is settled and not yet delivered."""
        last = state["messages"][-1] if state["messages"] else None
        if not isinstance(last, AIMessage):
            return None
        if delivery_status(last) == "pending" or self._settled(last):
            return last
        return None

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        reply = self._to_deliver(state)
        if reply is None:
            return None
        return {"messages": [stamp(reply, "delivery", self._deliver(message_text(reply)))]}

    async def aafter_agent(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        # The server runs graphs on an event loop that refuses blocking calls: call the tool in
        # a worker thread and wait between attempts without blocking the loop.
        reply = self._to_deliver(state)
        if reply is None:
            return None
        outcome = await self._adeliver(message_text(reply))
        return {"messages": [stamp(reply, "delivery", outcome)]}

    def _pending(self) -> dict[str, Any]:
        return {"status": "pending", "tool": self.tool_name, "attempts": 0}

    def _call(self, content: str) -> Any:
        if isinstance(self.tool, BaseTool):
            return self.tool.invoke({"content": content})
        return self.tool(content)

    def _deliver(self, content: str) -> dict[str, Any]:
        error = ""
        for attempt in range(1, self.attempts + 1):
            try:
                result = self._call(content)
            except Exception as exc:  # the tool's failure is the outcome we record
                error = f"{type(exc).__name__}: {exc}"
                if attempt < self.attempts and self.backoff:
                    time.sleep(self.backoff * 2 ** (attempt - 1))
                continue
            return self._delivered(result, attempt)
        return self._failed(error)

    async def _adeliver(self, content: str) -> dict[str, Any]:
        error = ""
        for attempt in range(1, self.attempts + 1):
            try:
                result = await asyncio.to_thread(self._call, content)
            except Exception as exc:  # the tool's failure is the outcome we record
                error = f"{type(exc).__name__}: {exc}"
                if attempt < self.attempts and self.backoff:
                    await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
                continue
            return self._delivered(result, attempt)
        return self._failed(error)

    def _delivered(self, result: Any, attempt: int) -> dict[str, Any]:
        return {
            "status": "delivered",
            "tool": self.tool_name,
            "attempts": attempt,
            "result": result
            if isinstance(result, str | int | float | dict | list)
            else str(result),
            "delivered_at": _now(),
        }

    def _failed(self, error: str) -> dict[str, Any]:
        return {
            "status": "failed",
            "tool": self.tool_name,
            "attempts": self.attempts,
            "error": error,
            "failed_at": _now(),
        }
