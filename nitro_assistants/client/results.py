"""What a run returns and what a paused thread waits on (docs/protocol.md §4–5, §8)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from nitro_assistants.exceptions import ResultShapeError as ResultShapeError
from nitro_assistants.exceptions import ReviewShapeError as ReviewShapeError

REPLY_ACTION = "__reply__"
TOOL_DECISIONS = ("approve", "edit", "reject", "respond")
REPLY_DECISIONS = ("approve", "edit", "reject")
INTERACTION_KINDS = ("question", "blueprint", "plan")
#: Pauses in other dialects (docs/protocol.md §9): an Agent Inbox ``HumanInterrupt``, and any
#: other ``interrupt(value)`` value.
INBOX = "inbox"
INTERRUPT = "interrupt"
DIALECT_KINDS = (INBOX, INTERRUPT)
#: Agent Inbox response types, each with the ``config`` flag that allows it.
INBOX_TYPES = {
    "accept": "allow_accept",
    "edit": "allow_edit",
    "response": "allow_respond",
    "ignore": "allow_ignore",
}
_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")
#: The longest interrupt or run id the client accepts (LangGraph's are 32 hex characters or a
#: UUID); a longer one could not be stored, so it could never be answered.
MAX_ID_LENGTH = 64


def _objects(items: Any, what: str, error: type[ResultShapeError] = ResultShapeError) -> list[Any]:
    """``items`` when it is a list of objects (JSON dicts); else ``error`` naming ``what``."""
    if not isinstance(items, list):
        raise error(f"{what} is {_kind(items)}, not a list")
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise error(f"{what}[{position}] is {_kind(item)}, not an object")
    return items


def _kind(value: Any) -> str:
    names = {
        dict: "an object",
        list: "a list",
        str: "a string",
        type(None): "null",
        bool: "a boolean",
    }
    return names.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def checked_id(value: Any, what: str, error: type[ValueError] = ReviewShapeError) -> str:
    """An interrupt or run id as the server gave it: a string of at most ``MAX_ID_LENGTH``
    printable characters (anything else could not be stored, nor named in an answer)."""
    if not isinstance(value, str) or not value or not value.isprintable() or " " in value:
        raise error(f"{what} is not a readable id: {str(value)[:80]!r}")
    if len(value) > MAX_ID_LENGTH:
        raise error(f"{what} is {len(value)} characters long; at most {MAX_ID_LENGTH} are read")
    return value


def message_text(message: dict[str, Any]) -> str:
    """A message's text: its string content, or its text blocks joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return ""


def _metadata(message: dict[str, Any]) -> dict[str, Any]:
    metadata = message.get("response_metadata")
    return metadata if isinstance(metadata, dict) else {}


def _is_ai(message: dict[str, Any]) -> bool:
    return message.get("type") in ("ai", "AIMessage", "AIMessageChunk") or message.get("role") in (
        "assistant",
        "ai",
    )


@dataclass(frozen=True)
class Delivery:
    """How the platform delivered a reply through the assistant's delivery tool (§7)."""

    status: str
    tool: str | None = None
    attempts: int | None = None
    result: Any = None
    error: str | None = None
    delivered_at: str | None = None
    failed_at: str | None = None
    message_id: str | None = None

    @property
    def delivered(self) -> bool:
        return self.status == "delivered"

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Delivery | None:
        stamp = _metadata(message).get("delivery")
        if not isinstance(stamp, dict) or not stamp.get("status"):
            return None
        attempts = stamp.get("attempts")
        return cls(
            status=str(stamp["status"]),
            tool=stamp.get("tool"),
            attempts=attempts if isinstance(attempts, int) else None,
            result=stamp.get("result"),
            error=stamp.get("error"),
            delivered_at=stamp.get("delivered_at"),
            failed_at=stamp.get("failed_at"),
            message_id=message.get("id"),
        )


@dataclass(frozen=True)
class ReplyDraft:
    """A reply held for review: the text a customer would read."""

    content: str
    allowed_decisions: list[str]
    description: str | None
    interrupt_id: str | None
    message_id: str | None


@dataclass(frozen=True)
class Pause:
    """One pending ``interrupt(value)`` of a graph of its own (docs/protocol.md §9).

    ``kind`` is ``"inbox"`` (an Agent Inbox ``HumanInterrupt``: ``action_request``, ``config``,
    ``description`` are set, ``allowed`` lists the response types its config allows) or
    ``"interrupt"`` (any other value: ``question`` and ``options`` are read from an object that
    has them). ``response_schema`` is the JSON Schema the graph declared for the answer, if any.
    """

    interrupt_id: str | None
    kind: str
    value: Any
    response_schema: dict[str, Any] | None = None
    action_request: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    description: str | None = None
    question: str | None = None
    options: list[Any] | None = None

    @property
    def allowed(self) -> list[str]:
        """The Agent Inbox response types this pause accepts (empty for a plain interrupt)."""
        config = self.config or {}
        return [name for name, flag in INBOX_TYPES.items() if config.get(flag) is True]


@dataclass(frozen=True)
class PendingReview:
    """What a paused thread waits on: its tool calls, its reply, a typed interaction, or pauses
    of a graph of its own.

    ``kind`` is ``"tool_calls"``, ``"reply"``, an interaction kind (``"question"``,
    ``"blueprint"``, ``"plan"``), ``"inbox"`` or ``"interrupt"``. ``interrupt_id`` names the
    pause; ``interrupt_ids`` lists every pending interrupt it covers (one per held call in
    per-call mode, one per branch paused at once). ``pauses`` holds each pending ``"inbox"`` or
    ``"interrupt"`` pause; ``error`` is the graph's error when it refused an answer and the thread
    is stuck on the pause (never decidable); ``problem`` says why a pause of a known dialect was
    read as a plain ``"interrupt"``.
    """

    kind: str
    interrupt_id: str | None
    interrupt_ids: list[str]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reply: ReplyDraft | None = None
    interaction: dict[str, Any] | None = None
    mode: str = "batched"
    raw_interrupts: list[dict[str, Any]] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)
    error: str | None = None
    problem: str | None = None

    def pause(self, interrupt_id: str | None = None) -> Pause | None:
        """The pending pause ``interrupt_id`` names (the first one when it is None)."""
        if interrupt_id is None:
            return self.pauses[0] if self.pauses else None
        return next((p for p in self.pauses if p.interrupt_id == interrupt_id), None)

    @property
    def is_tool_calls(self) -> bool:
        return self.kind == "tool_calls"

    @property
    def is_reply(self) -> bool:
        return self.kind == "reply"


def _allowed_from_schema(schema: Any) -> list[str]:
    """The decision types a per-call interrupt's JSON-Schema ``response_schema`` accepts."""
    if not isinstance(schema, dict):
        return list(TOOL_DECISIONS)
    defs = schema.get("$defs") or {}

    def const_of(node: Any) -> str | None:
        if not isinstance(node, dict):
            return None
        if "$ref" in node:
            node = defs.get(str(node["$ref"]).rsplit("/", 1)[-1], {})
        kind = (node.get("properties") or {}).get("type") or {}
        value = kind.get("const")
        return value if isinstance(value, str) else None

    options = schema.get("oneOf") or schema.get("anyOf") or [schema]
    found = [c for c in (const_of(option) for option in options) if c]
    return found or list(TOOL_DECISIONS)


def _last_ai_with_tool_calls(messages: list[dict[str, Any]]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if _is_ai(messages[index]) and messages[index].get("tool_calls"):
            return index
    return None


def _tool_calls_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls") or []
    return _objects(calls, f"the tool calls of message {message.get('id')!r}")


def _previous_id(messages: list[dict[str, Any]], index: int) -> str | None:
    return messages[index - 1].get("id") if index > 0 else None


def _batched_tool_calls(
    value: dict[str, Any], messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Match each action request to a tool call of the last AI message with tool calls.

    Action requests carry no tool-call id: match by name and equal args first, then by name
    alone, each call matched once, in action-request order.
    """
    requests = _objects(value.get("action_requests") or [], "action_requests", ReviewShapeError)
    configs = _objects(value.get("review_configs") or [], "review_configs", ReviewShapeError)
    index = _last_ai_with_tool_calls(messages)
    if index is None:
        raise ReviewShapeError("the interrupt holds tool calls, but no AI message makes any")
    calls = list(_tool_calls_of(messages[index]))
    previous = _previous_id(messages, index)
    used: set[int] = set()

    def find(name: Any, args: Any, exact: bool) -> int | None:
        for i, call in enumerate(calls):
            if i in used or call.get("name") != name:
                continue
            if exact and call.get("args") != args:
                continue
            return i
        return None

    # Exact matches first for every request, so that a request matched by name alone cannot
    # take the call another request matches exactly.
    matched: dict[int, int] = {}
    for exact in (True, False):
        for position, request in enumerate(requests):
            if position in matched:
                continue
            found = find(request.get("name"), request.get("args"), exact)
            if found is not None:
                matched[position] = found
                used.add(found)

    out = []
    for position, request in enumerate(requests):
        name = request.get("name")
        found = matched.get(position)
        if found is None:
            raise ReviewShapeError(f"the interrupt holds `{name}`, which no tool call matches")
        config: dict[str, Any] = configs[position] if position < len(configs) else {}
        if not config or config.get("action_name") != name:
            config = next((c for c in configs if c.get("action_name") == name), {})
        call = calls[found]
        out.append(
            {
                "previous_message_id": previous,
                "id": call.get("id"),
                "name": name,
                "args": request.get("args", call.get("args") or {}),
                "allowed_decisions": _decisions(config, TOOL_DECISIONS),
                "description": request.get("description"),
            }
        )
    return out


def _decisions(config: dict[str, Any], default: tuple[str, ...]) -> list[str]:
    allowed = config.get("allowed_decisions") or default
    if not isinstance(allowed, list | tuple) or not all(isinstance(d, str) for d in allowed):
        raise ReviewShapeError(f"allowed_decisions is {_kind(allowed)}, not a list of names")
    return list(allowed)


def _per_call_tool_call(
    interrupt: dict[str, Any], messages: list[dict[str, Any]]
) -> dict[str, Any]:
    value = interrupt["value"]
    call_id = value.get("tool_call_id")
    previous = None
    for index, message in enumerate(messages):
        if any(c.get("id") == call_id for c in _tool_calls_of(message)):
            previous = _previous_id(messages, index)
    return {
        "previous_message_id": previous,
        "id": call_id,
        "name": value.get("name"),
        "args": value.get("args") or {},
        "allowed_decisions": _allowed_from_schema(interrupt.get("response_schema")),
        "description": value.get("description"),
        "interrupt_id": interrupt.get("id"),
    }


def pending_review(
    interrupts: list[dict[str, Any]], messages: list[dict[str, Any]], error: str | None = None
) -> PendingReview | None:
    """Read what the pending ``interrupts`` wait on, with the thread's ``messages`` for context.

    A pause of no dialect this client knows, or one that does not read as its dialect, is a
    plain ``"interrupt"`` review of the raw value (never "unreadable": a person can read and
    answer it). ``error`` is the graph's error when it refused an answer to the pause.
    Raises :class:`ReviewShapeError` only for an interrupt id that could not be answered (too
    long, not text) and for messages that are not objects.
    """
    items = _items(interrupts)
    if not items:
        return None
    ids = [checked_id(i["id"], "an interrupt id") for i in items if i.get("id") is not None]
    messages = _objects(messages, "the messages", ReviewShapeError)
    try:
        review = _pending_review(items, messages)
    except ReviewShapeError as exc:
        review = _dialect_review(items, ids, problem=str(exc))
    except ResultShapeError as exc:
        review = _dialect_review(items, ids, problem=str(exc))
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        # A shape no check foresaw: still a pause a person can read, never a crash.
        review = _dialect_review(
            items, ids, problem=f"an interrupt of unexpected shape ({type(exc).__name__})"
        )
    if error is not None:
        review = replace(review, error=error)
    return review


def _items(interrupts: Any) -> list[dict[str, Any]]:
    """The pending interrupts as ``{"id", "value", "response_schema"?}`` objects, whatever the
    server sent: one object, a list of values (strings, ...) or of interrupt objects."""
    if not interrupts:
        return []
    if isinstance(interrupts, dict) or not isinstance(interrupts, list):
        interrupts = [interrupts]
    items = []
    for item in interrupts:
        if isinstance(item, dict) and "value" in item:
            items.append(item)
        else:
            # A bare value, or an object without one: the value is the item itself (keyed by
            # the id it carries, if any).
            named = item.get("id") if isinstance(item, dict) else None
            items.append({"id": named if isinstance(named, str) else None, "value": item})
    return items


def _pending_review(interrupts: list[dict[str, Any]], messages: list[Any]) -> PendingReview:
    ids = [checked_id(i["id"], "an interrupt id") for i in interrupts if i.get("id")]
    first = interrupts[0]
    value = first["value"] if isinstance(first["value"], dict) else {}

    if value.get("type") == "tool_approval":
        held = [
            i
            for i in interrupts
            if isinstance(i["value"], dict) and i["value"].get("type") == "tool_approval"
        ]
        return PendingReview(
            kind="tool_calls",
            interrupt_id=ids[0] if ids else None,
            interrupt_ids=ids,
            tool_calls=[_per_call_tool_call(i, messages) for i in held],
            mode="per_call",
            raw_interrupts=interrupts,
        )
    if value.get("type") == "interaction":
        interaction = value.get("interaction") or {}
        if not isinstance(interaction, dict):
            raise ReviewShapeError(f"the interaction is {_kind(interaction)}, not an object")
        kind = interaction.get("kind")
        if kind not in INTERACTION_KINDS:
            raise ReviewShapeError(f"unknown interaction kind {kind!r}")
        return PendingReview(
            kind=str(kind),
            interrupt_id=ids[0] if ids else None,
            interrupt_ids=ids,
            interaction=interaction,
            mode="interaction",
            raw_interrupts=interrupts,
        )
    if "action_requests" in value:
        requests = _objects(value.get("action_requests") or [], "action_requests", ReviewShapeError)
        if any(r.get("name") == REPLY_ACTION for r in requests):
            request = next(r for r in requests if r.get("name") == REPLY_ACTION)
            configs = _objects(
                value.get("review_configs") or [], "review_configs", ReviewShapeError
            )
            config: dict[str, Any] = next(
                (c for c in configs if c.get("action_name") == REPLY_ACTION), {}
            )
            allowed = [d for d in _decisions(config, REPLY_DECISIONS) if d != "respond"]
            draft = next((m for m in reversed(messages) if _is_ai(m)), None)
            args = request.get("args")
            content = args.get("content") if isinstance(args, dict) else None
            interrupt_id = ids[0] if ids else None
            return PendingReview(
                kind="reply",
                interrupt_id=interrupt_id,
                interrupt_ids=ids,
                reply=ReplyDraft(
                    content=content if isinstance(content, str) else message_text(draft or {}),
                    allowed_decisions=allowed,
                    description=request.get("description"),
                    interrupt_id=interrupt_id,
                    message_id=(draft or {}).get("id"),
                ),
                raw_interrupts=interrupts,
            )
        return PendingReview(
            kind="tool_calls",
            interrupt_id=ids[0] if ids else None,
            interrupt_ids=ids,
            tool_calls=_batched_tool_calls(value, messages),
            raw_interrupts=interrupts,
        )
    return _dialect_review(interrupts, ids)


def _dialect_review(
    interrupts: list[dict[str, Any]], ids: list[str], problem: str | None = None
) -> PendingReview:
    """Pauses of a graph of its own: each an Agent Inbox request, or a plain interrupt."""
    pauses = [_pause(item, problem is None) for item in interrupts]
    return PendingReview(
        kind=pauses[0].kind,
        interrupt_id=ids[0] if ids else None,
        interrupt_ids=ids,
        raw_interrupts=interrupts,
        mode="interrupt",
        pauses=pauses,
        problem=problem,
    )


def _pause(item: dict[str, Any], read_dialects: bool = True) -> Pause:
    value = item.get("value")
    raw_id = item.get("id")
    interrupt_id = raw_id if isinstance(raw_id, str) else None
    schema = item.get("response_schema")
    schema = schema if isinstance(schema, dict) else None
    request = value[0] if isinstance(value, list) and len(value) == 1 else None
    if read_dialects and _is_inbox_request(request):
        assert isinstance(request, dict)
        description = request.get("description")
        return Pause(
            interrupt_id=interrupt_id,
            kind=INBOX,
            value=value,
            response_schema=schema,
            action_request=dict(request["action_request"]),
            config=dict(request["config"]),
            description=description if isinstance(description, str) else None,
        )
    question = value.get("question") if isinstance(value, dict) else None
    options = value.get("options") if isinstance(value, dict) else None
    return Pause(
        interrupt_id=interrupt_id,
        kind=INTERRUPT,
        value=value,
        response_schema=schema,
        question=question if isinstance(question, str) else None,
        options=list(options) if isinstance(options, list) and options else None,
    )


def _is_inbox_request(request: Any) -> bool:
    """An Agent Inbox ``HumanInterrupt``: an action request (a named action and its args) and a
    config of ``allow_*`` booleans."""
    if not isinstance(request, dict):
        return False
    action, config = request.get("action_request"), request.get("config")
    return (
        isinstance(action, dict)
        and isinstance(action.get("action"), str)
        and isinstance(action.get("args"), dict)
        and isinstance(config, dict)
        and all(isinstance(config.get(flag), bool) for flag in INBOX_TYPES.values())
    )


def is_interrupt_id(value: str) -> bool:
    """Interrupt ids are 32 lowercase hex characters; a resume map is keyed only if all are."""
    return bool(_INTERRUPT_ID.fullmatch(value))


@dataclass(frozen=True)
class RunResult:
    """The outcome of a run or a resume (docs/protocol.md §5)."""

    reply: str | None
    interrupted: bool
    review: PendingReview | None
    delivery: Delivery | None
    messages: list[dict[str, Any]]
    raw: dict[str, Any]
    run_id: str | None = None

    @classmethod
    def build(
        cls,
        values: dict[str, Any],
        interrupts: list[dict[str, Any]] | None = None,
        messages: list[dict[str, Any]] | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Read a run's final ``values`` (the ``/runs/wait`` body).

        ``interrupts`` defaults to the body's ``__interrupt__``; ``messages`` to its messages
        (a per-call pause answers without them: pass the thread state's).
        """
        if interrupts is None:
            interrupts = values.get("__interrupt__") or []
        if messages is None:
            messages = values.get("messages") or []
        messages = _objects(messages, "the messages")
        review = pending_review(interrupts, messages)
        interrupted = bool(interrupts)
        last = messages[-1] if messages else None
        reply = None
        delivery = None
        if last is not None and _is_ai(last) and not last.get("tool_calls"):
            delivery = Delivery.from_message(last)
            review_stamp = _metadata(last).get("review")
            held = isinstance(review_stamp, dict) and review_stamp.get("type") == "pending"
            text = message_text(last)
            if not interrupted and not held and text.strip():
                reply = text
        return cls(
            reply=reply,
            interrupted=interrupted,
            review=review,
            delivery=delivery,
            messages=messages,
            raw=values,
            run_id=run_id,
        )
