"""Reply review for ``create_agent``: docs/protocol.md §6 on top of LangChain's tool-call review."""

from __future__ import annotations

import operator
from datetime import UTC, datetime
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import HumanInTheLoopMiddleware, InterruptOnConfig
from langchain.agents.middleware.types import (
    AgentState,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import interrupt

from nitro_assistants.client.results import REPLY_ACTION
from nitro_assistants.exceptions import InvalidArgumentError
from nitro_assistants.rules import REPLY_ACTIONS as REPLY_DECISIONS

REPLY = REPLY_ACTION


def message_text(message: BaseMessage) -> str:
    """The text of a message: a string content, or its text blocks joined."""
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        block.get("text", "")
        if isinstance(block, dict) and block.get("type") == "text"
        else (block if isinstance(block, str) else "")
        for block in content
    )


def is_reply(message: BaseMessage | None) -> bool:
    """An AI message with text and no tool calls: a run's final reply."""
    return (
        isinstance(message, AIMessage)
        and not message.tool_calls
        and bool(message_text(message).strip())
    )


def stamp(message: AIMessage, key: str, value: dict[str, Any]) -> AIMessage:
    """A copy of ``message`` (same id, so it replaces the original) with one metadata stamp set."""
    metadata = {**(message.response_metadata or {}), key: value}
    return message.model_copy(update={"response_metadata": metadata})


def review_type(message: BaseMessage) -> str | None:
    review = (getattr(message, "response_metadata", None) or {}).get("review")
    return review.get("type") if isinstance(review, dict) else None


def _reviewer(decision: dict[str, Any]) -> dict[str, Any]:
    """``reviewer_id`` and ``reviewed_at`` from the decision, else from the resume's metadata."""
    try:
        metadata = get_config().get("metadata") or {}
    except RuntimeError:
        metadata = {}
    reviewer_id = decision.get("reviewer_id") or metadata.get("reviewer_id")
    reviewed_at = (
        decision.get("reviewed_at")
        or metadata.get("reviewed_at")
        or datetime.now(UTC).isoformat().replace("+00:00", "Z")
    )
    return {"reviewer_id": reviewer_id, "reviewed_at": reviewed_at}


class ReviewState(AgentState[Any]):
    """The agent state with the reply-review log."""

    hitl_edited_tool_calls: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]  # type: ignore[valid-type]
    reply_reviews: NotRequired[Annotated[list[dict[str, Any]], operator.add]]  # type: ignore[valid-type]
    """One entry per reply decision: who, when, what; a rejection's reason lives only here."""


class ReviewMiddleware(HumanInTheLoopMiddleware):  # type: ignore[type-arg]
    """``HumanInTheLoopMiddleware`` that also holds the agent's final reply for review.

    List ``"__reply__": True`` (or ``{"allowed_decisions": [...], "description": ...}``) in
    ``interrupt_on`` beside the tools. The draft is stamped ``response_metadata.review =
    {"type": "pending"}`` as the model returns it, and the run pauses on one interrupt shaped
    like a batched tool review with the reserved name ``__reply__``. ``approve`` stamps it
    ``approved``, ``edit`` replaces its content under the same message id and stamps it
    ``edited``, ``reject`` removes it (the reason goes to the ``reply_reviews`` log, never to the
    model). A new human message removes a draft nobody decided.
    """

    state_schema = ReviewState  # type: ignore[assignment]

    def __init__(
        self,
        interrupt_on: dict[str, bool | InterruptOnConfig],
        *,
        reply_description: str = "Review this reply before it is sent",
        **kwargs: Any,
    ) -> None:
        tools = {name: config for name, config in interrupt_on.items() if name != REPLY}
        super().__init__(tools, **kwargs)
        reply = interrupt_on.get(REPLY, False)
        self.reply_config: InterruptOnConfig | None = None
        if reply is True:
            self.reply_config = {"allowed_decisions": list(REPLY_DECISIONS)}
        elif isinstance(reply, dict):
            allowed = list(reply.get("allowed_decisions") or REPLY_DECISIONS)
            if not set(allowed) <= set(REPLY_DECISIONS):
                raise InvalidArgumentError(
                    f"`{REPLY}` allows only {', '.join(REPLY_DECISIONS)}; got {', '.join(allowed)}"
                )
            self.reply_config = {**reply, "allowed_decisions": allowed}  # type: ignore[typeddict-item]
        self.reply_description = reply_description

    # The draft is stamped as the model returns it, so it is never in the state unstamped.
    def wrap_model_call(self, request: ModelRequest, handler: Any) -> Any:
        return self._stamp_draft(handler(request))

    async def awrap_model_call(self, request: ModelRequest, handler: Any) -> Any:
        return self._stamp_draft(await handler(request))

    def _stamp_draft(self, response: Any) -> Any:
        if self.reply_config is None or not isinstance(response, ModelResponse):
            return response
        response.result = [
            stamp(m, "review", {"type": "pending"}) if is_reply(m) else m  # type: ignore[arg-type]
            for m in response.result
        ]
        return response

    def before_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages = state["messages"]
        if self.reply_config is None or not messages or not isinstance(messages[-1], HumanMessage):
            return None
        stale = [m for m in messages[:-1] if review_type(m) == "pending" and m.id]
        if not stale:
            return None
        return {"messages": [RemoveMessage(id=m.id) for m in stale if m.id]}

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        messages = state["messages"]
        last = messages[-1] if messages else None
        if not isinstance(last, AIMessage):
            return None
        if last.tool_calls:
            return super().after_model(state, runtime)
        if self.reply_config is None or review_type(last) != "pending":
            return None
        return self._review_reply(last)

    def _review_reply(self, draft: AIMessage) -> dict[str, Any]:
        config = self.reply_config or {"allowed_decisions": list(REPLY_DECISIONS)}
        allowed = config["allowed_decisions"]
        description = config.get("description") or self.reply_description
        content = message_text(draft)
        request = {
            "action_requests": [
                {"name": REPLY, "args": {"content": content}, "description": description}
            ],
            "review_configs": [{"action_name": REPLY, "allowed_decisions": allowed}],
        }
        decisions = interrupt(request)["decisions"]
        if len(decisions) != 1:
            raise InvalidArgumentError(f"A reply review takes one decision; got {len(decisions)}")
        decision = decisions[0]
        kind = decision.get("type")
        if kind not in allowed:
            raise InvalidArgumentError(
                f"Decision type {kind!r} is not allowed for the reply; allowed: {', '.join(allowed)}"
            )
        reviewer = _reviewer(decision)
        log = {"message_id": draft.id, "type": kind, **reviewer}
        if kind == "reject":
            log["message"] = decision.get("message")
            return {"messages": [RemoveMessage(id=draft.id or "")], "reply_reviews": [log]}
        settled = draft
        if kind == "edit":
            new_content = ((decision.get("edited_action") or {}).get("args") or {}).get("content")
            if not isinstance(new_content, str) or not new_content.strip():
                raise InvalidArgumentError("A reply edit needs the whole new content")
            settled = draft.model_copy(update={"content": new_content})
        settled = stamp(
            settled, "review", {"type": "approved" if kind == "approve" else "edited", **reviewer}
        )
        return {"messages": [settled], "reply_reviews": [log]}
