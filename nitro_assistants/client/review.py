"""A reviewer's decision (:class:`Resume`), validated against the pause and built into the
resume the graph reads (docs/protocol.md §4, §6).

Everything here runs before any request: a resume the graph refuses is stored and replayed by
every later resume, leaving a batched thread stuck, so nothing invalid may be sent.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import jsonschema

from nitro_assistants.client.results import (
    DIALECT_KINDS,
    INBOX,
    INBOX_TYPES,
    REPLY_ACTION,
    Pause,
    PendingReview,
    is_interrupt_id,
)
from nitro_assistants.exceptions import ThreadResumptionError, UsageError

#: How tool calls are reviewed: ``[{"id", "action", ...}]``, or ``{call id: {"action", ...}}``.
ToolCallReviews = Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Resume:
    """What a reviewer sends to resume a paused thread: who, what they decided, and about which
    pause. :meth:`~nitro_assistants.client.Assistants.review` and ``start_review`` take one::

        client.review(thread_id, assistant_id, Resume(reviewer_id="jane", tool_calls=[...]))

    Give exactly one of ``reply``, ``tool_calls``, ``answer`` or ``answers``, matching the pause;
    the client checks it against the pause before anything is sent.
    """

    #: Who decided; recorded in the resumed run's metadata.
    reviewer_id: str
    #: The pause decided (required for a reply; for ``answer``, the pause it answers).
    interrupt_id: str | None = None
    #: A reply review: ``{"action": "approve"|"edit"|"reject", "content"?, "message"?}``.
    reply: Mapping[str, Any] | None = None
    #: One per held call: ``[{"id", "action": "approve"|"edit"|"reject"|"respond", ...}]``.
    tool_calls: ToolCallReviews | None = None
    #: The resume value of a typed interaction, an Agent Inbox ``HumanResponse``, or the JSON
    #: value a plain ``interrupt()`` resumes with.
    answer: Any = None
    #: Several inbox or interrupt pauses answered at once: ``{interrupt_id: answer}``.
    answers: Mapping[str, Any] | None = None
    #: When it was decided (default: now).
    reviewed_at: datetime | str | None = None
    #: The resumed run's ``context``.
    context: dict[str, Any] | None = None
    #: The pause the reviewer was shown, if the caller holds it: not read again before sending
    #: (see :meth:`~nitro_assistants.client.Assistants.review`).
    pending: PendingReview | None = None

    @classmethod
    def given(cls, resume: Resume | str | None, fields: Mapping[str, Any]) -> Resume:
        """The resume a call names: ``resume`` itself, or one built from ``fields``, the
        keywords the client's methods took before :class:`Resume` (a ``str`` given as
        ``resume`` is the reviewer's id, as the third argument of ``review`` was). Raises
        :class:`~nitro_assistants.exceptions.UsageError` (a ``TypeError``) for a name that is
        not one of the fields, or for a :class:`Resume` given with fields beside it."""
        if isinstance(resume, Resume):
            if fields:
                raise UsageError(
                    f"Pass a Resume or its fields, not both; got also {', '.join(sorted(fields))}"
                )
            return resume
        unexpected = set(fields) - _RESUME_FIELDS
        if unexpected:
            raise UsageError(f"Unexpected arguments: {', '.join(sorted(unexpected))}")
        if resume is not None:
            if "reviewer_id" in fields:
                raise UsageError("reviewer_id is given twice: as an argument and as a keyword")
            return cls(reviewer_id=resume, **fields)
        if "reviewer_id" not in fields:
            raise UsageError("A review needs a Resume, or reviewer_id and the decision")
        return cls(**fields)


_RESUME_FIELDS = frozenset(field.name for field in dataclasses.fields(Resume))


def _fail(message: str) -> ThreadResumptionError:
    return ThreadResumptionError(message)


def _blank(value: Any) -> bool:
    return not isinstance(value, str) or not value.strip()


def _reviews_by_id(
    tool_calls: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Reviews as a list, each with its ``id``; a mapping keyed by tool-call id is accepted too."""
    if isinstance(tool_calls, Mapping):
        items = []
        for call_id, review in tool_calls.items():
            if not isinstance(review, Mapping):
                raise _fail(f"The review of tool call `{call_id}` must be an object")
            items.append({**review, "id": call_id})
        return items
    out = []
    for review in tool_calls:
        if not isinstance(review, Mapping):
            raise _fail("Each tool-call review must be an object with an `id` and an `action`")
        out.append(dict(review))
    return out


def _tool_decision(call: dict[str, Any], review: dict[str, Any]) -> dict[str, Any]:
    action = review.get("action")
    allowed = call["allowed_decisions"]
    if action is None:
        raise _fail(
            f"The review of tool call `{call['id']}` needs an `action`: one of {', '.join(allowed)}"
        )
    if action not in allowed:
        raise _fail(
            f"Invalid review action `{action}` for tool call `{call['id']}` ({call['name']}); "
            f"allowed: {', '.join(allowed)}"
        )
    decision: dict[str, Any] = {"type": action}
    if action == "edit":
        args = review.get("args")
        if not isinstance(args, Mapping) or not args:
            raise _fail(
                f"An edit of tool call `{call['id']}` needs `args`: the arguments to change"
            )
        model_args = call.get("args") or {}
        unknown = sorted(set(args) - set(model_args))
        if unknown:
            raise _fail(
                f"Tool call `{call['id']}` ({call['name']}) has no argument "
                f"{', '.join(f'`{a}`' for a in unknown)}; it has "
                f"{', '.join(f'`{a}`' for a in model_args) or 'none'}"
            )
        # Top-level merge: each argument given replaces the model's value outright.
        decision["edited_action"] = {"name": call["name"], "args": {**model_args, **args}}
    elif action == "respond":
        if _blank(review.get("message")):
            raise _fail(
                f"`respond` to tool call `{call['id']}` needs a `message`: the tool's result"
            )
        decision["message"] = review["message"]
    elif action == "reject" and not isinstance(review.get("message") or "", str):
        # The reason itself is recorded, never shown to the model (which gets LangChain's
        # neutral notice): it travels in the resume's metadata, see ``review_messages``.
        raise _fail(f"The reject message for tool call `{call['id']}` must be text")
    elif action == "reject" and review.get("expired") is True and review.get("message"):
        # An expiry's rejection is no person's reason: the model is told plainly that nobody
        # answered in time, so it does not take the call for refused on its merits.
        decision["message"] = review["message"]
    return decision


def review_messages(
    tool_calls: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]] | None,
) -> dict[str, str]:
    """Reject reasons by tool-call id, for the resume's ``config.metadata`` (never the model)."""
    if tool_calls is None:
        return {}
    return {
        str(review["id"]): review["message"]
        for review in _reviews_by_id(tool_calls)
        if review.get("action") == "reject" and isinstance(review.get("message"), str)
    }


def _tool_decisions(
    pending: PendingReview,
    tool_calls: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]],
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    reviews = _reviews_by_id(tool_calls)
    held = {call["id"]: call for call in pending.tool_calls}
    seen: set[str] = set()
    for review in reviews:
        call_id = review.get("id")
        if call_id not in held:
            raise _fail(
                f"Tool call `{call_id}` is not under review; under review: "
                f"{', '.join(f'`{i}`' for i in held) or '(none)'}"
            )
        if call_id in seen:
            raise _fail(f"Tool call `{call_id}` is reviewed more than once")
        seen.add(str(call_id))
    missing = [i for i in held if i not in seen]
    if missing:
        raise _fail(
            "Every tool call under review needs a decision; missing: "
            + ", ".join(f"`{i}`" for i in missing)
        )
    by_id = {r["id"]: r for r in reviews}
    return [(call, _tool_decision(call, by_id[call["id"]])) for call in pending.tool_calls]


def _reply_decision(pending: PendingReview, reply: Mapping[str, Any]) -> dict[str, Any]:
    assert pending.reply is not None
    action = reply.get("action")
    allowed = pending.reply.allowed_decisions
    if action not in allowed:
        raise _fail(
            f"Invalid review action `{action}` for the reply; allowed: {', '.join(allowed)}"
        )
    decision: dict[str, Any] = {"type": action}
    if action == "edit":
        if _blank(reply.get("content")):
            raise _fail("A reply `edit` needs `content`: the whole new text")
        decision["edited_action"] = {"name": REPLY_ACTION, "args": {"content": reply["content"]}}
    elif action == "reject" and reply.get("message") is not None:
        if not isinstance(reply["message"], str):
            raise _fail("The reject message for the reply must be text")
        decision["message"] = reply["message"]
    return decision


def inbox_response(pause: Pause, answer: Any) -> list[dict[str, Any]]:
    """The list-of-one ``HumanResponse`` an Agent Inbox graph expects for ``answer`` (one
    ``{"type", "args"}``), checked against the pause's ``config``: a type it forbids, or a wrong
    shape, wedges the thread for good (docs/protocol.md §9), so nothing of the kind is sent."""
    if isinstance(answer, list) and len(answer) == 1:
        answer = answer[0]  # already wrapped: the same response
    if not isinstance(answer, Mapping):
        raise _fail(
            'An Agent Inbox answer is one response: {"type": "accept"|"edit"|"response"|"ignore", '
            '"args": ...}'
        )
    unknown = sorted(set(answer) - {"type", "args"})
    if unknown:
        raise _fail(f"An Agent Inbox response has no field {', '.join(map(repr, unknown))}")
    kind, args = answer.get("type"), answer.get("args")
    allowed = pause.allowed
    if kind not in INBOX_TYPES:
        raise _fail(f"Unknown Agent Inbox response type {kind!r}; one of {', '.join(INBOX_TYPES)}")
    if kind not in allowed:
        raise _fail(
            f"This pause does not allow `{kind}` ({INBOX_TYPES[kind]} is false); allowed: "
            f"{', '.join(allowed) or '(none)'}"
        )
    request = pause.action_request or {}
    if kind in ("accept", "ignore"):
        if args is not None:
            raise _fail(f"`{kind}` takes no args")
        return [{"type": kind, "args": None}]
    if kind == "response":
        if _blank(args):
            raise _fail("`response` needs args: the text of the response")
        return [{"type": "response", "args": args}]
    # edit: the action and all of its arguments.
    if not isinstance(args, Mapping) or not isinstance(args.get("args"), Mapping):
        raise _fail('`edit` needs args {"action": ..., "args": {...all the arguments...}}')
    action = args.get("action", request.get("action"))
    if action != request.get("action"):
        raise _fail(f"`edit` changes the arguments of `{request.get('action')}`, not `{action}`")
    model_args = request.get("args") or {}
    unknown = sorted(set(args["args"]) - set(model_args))
    missing = sorted(set(model_args) - set(args["args"]))
    if unknown or missing:
        raise _fail(
            f"`edit` of `{action}` needs all its arguments and only those "
            f"({', '.join(f'`{a}`' for a in model_args) or 'none'})"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
            + (f"; missing: {', '.join(missing)}" if missing else "")
        )
    return [{"type": "edit", "args": {"action": action, "args": dict(args["args"])}}]


#: The keys naming an option object's value, in the order read (``rules.option_values`` reads
#: ``value``, then ``optionId``); an option with none of them is named by its ``label``.
OPTION_KEYS = ("value", "id", "optionId")


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values: ``true`` is not ``1`` (Python's ``True == 1`` would let it pass)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping | list | tuple) or isinstance(b, Mapping | list | tuple):
        return False
    return bool(a == b)


def option_value(option: Any) -> Any:
    """What answers with ``option``: a string or number as it is; of an object, its ``value``
    (else ``id``, else ``optionId``, else ``label``)."""
    if isinstance(option, Mapping):
        for key in (*OPTION_KEYS, "label"):
            if option.get(key) is not None:
                return option[key]
    return option


def option_answers(options: Iterable[Any]) -> list[Any]:
    """Every answer ``options`` allow: each option as it is (the admin sends a chosen object
    whole), and an object's value (what a caller of the API sends)."""
    found: list[Any] = []
    for option in options:
        for candidate in (option, option_value(option)):
            if not any(_same(candidate, known) for known in found):
                found.append(candidate)
    return found


def _option_names(options: Iterable[Any]) -> str:
    names = []
    for option in options:
        value = option_value(option)
        name = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        label = option.get("label") if isinstance(option, Mapping) else None
        names.append(f"{name} ({label})" if isinstance(label, str) and label != name else name)
    return ", ".join(names)


def _schema_problem(schema: dict[str, Any], answer: Any) -> str | None:
    """Why ``answer`` does not fit the JSON Schema ``schema``, or None."""
    try:
        validator = jsonschema.validators.validator_for(schema)
        validator.check_schema(schema)
        error = jsonschema.exceptions.best_match(validator(schema).iter_errors(answer))
    except jsonschema.exceptions.SchemaError as exc:
        raise _fail(
            f"The pause's response_schema is not a valid JSON Schema: {exc.message}"
        ) from None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"The answer does not fit the pause's response_schema{f' at {where}' if where else ''}: {error.message}"


def interrupt_answer(pause: Pause, answer: Any) -> Any:
    """``answer`` to a plain interrupt, checked: JSON, not null (the graph fails on it), one of
    the pause's ``options`` when its value declares some, and valid against its
    ``response_schema`` when it declares one.

    Options bind the answer when they are answers: with a ``response_schema`` that none of them
    fits (the schema asks for an object, say), the schema alone says what an answer is.
    """
    if answer is None:
        raise _fail("An answer is needed: null resumes nothing (the graph fails on it)")
    try:
        json.dumps(answer, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise _fail(f"The answer is not JSON: {exc}") from None
    schema = pause.response_schema
    options = list(pause.options or [])
    if schema is not None:  # options the schema refuses are not answers
        options = [
            o
            for o in options
            if any(_schema_problem(schema, a) is None for a in option_answers([o]))
        ]
    if options and not any(_same(answer, a) for a in option_answers(options)):
        shown = json.dumps(answer, ensure_ascii=False)
        raise _fail(
            f"{shown[:200]} is not one of the pause's options; allowed: {_option_names(options)}"
        )
    if schema is not None and (problem := _schema_problem(schema, answer)) is not None:
        raise _fail(problem)
    return answer


def dialect_answer(pause: Pause, answer: Any) -> Any:
    """The resume value answering one ``"inbox"`` or ``"interrupt"`` pause."""
    if pause.kind == INBOX:
        return inbox_response(pause, answer)
    return interrupt_answer(pause, answer)


def dialect_resume(pending: PendingReview, answers: Mapping[str | None, Any]) -> Any:
    """The ``command.resume`` answering the pauses ``answers`` names (by interrupt id), keyed by
    interrupt id: each answer checked against its own pause. Pauses not named stay pending."""
    if pending.error is not None:
        raise _fail(
            f"The graph refused an answer to this pause and is stuck on it: {pending.error}. "
            "It cannot be answered; dismiss it"
        )
    if not answers:
        raise _fail("Name at least one pause to answer")
    resume: dict[str, Any] = {}
    for interrupt_id, answer in answers.items():
        pause = pending.pause(interrupt_id)
        if pause is None:
            raise _fail(
                f"Interrupt {interrupt_id} is not pending; pending: "
                + (", ".join(str(p.interrupt_id) for p in pending.pauses) or "(none)")
            )
        value = dialect_answer(pause, answer)
        if interrupt_id is None or not is_interrupt_id(interrupt_id):
            if len(pending.pauses) > 1:
                raise _fail("The pause has several interrupts without ids: it cannot be answered")
            return value  # a pause reported without an id is resumed unkeyed
        resume[interrupt_id] = value
    return resume


def build_resume(
    pending: PendingReview,
    *,
    reply: Mapping[str, Any] | None,
    tool_calls: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]] | None,
    answer: Any,
    reviewer_id: str,
    reviewed_at: str,
    interrupt_id: str | None = None,
    answers: Mapping[str, Any] | None = None,
) -> Any:
    """The ``command.resume`` answering ``pending``, keyed by interrupt id.

    For ``"inbox"`` and ``"interrupt"`` pauses: ``answer`` answers the pause ``interrupt_id``
    names (the only one pending, when it is None), ``answers`` several by interrupt id.
    Raises :class:`ThreadResumptionError` for anything the pause does not allow.
    """
    who = {"reviewer_id": reviewer_id, "reviewed_at": reviewed_at}
    if pending.kind in DIALECT_KINDS:
        if reply is not None or tool_calls is not None:
            raise _fail(
                f"The thread is paused on {'an Agent Inbox request' if pending.kind == INBOX else 'an interrupt'}: "
                "answer it with `answer`, not a reply or tool-call review"
            )
        if answers is None:
            if interrupt_id is None and len(pending.pauses) > 1:
                raise _fail(
                    "Several pauses are pending: name the interrupt_id to answer, or pass answers"
                )
            return dialect_resume(pending, {interrupt_id or pending.interrupt_id: answer})
        named: dict[str | None, Any] = {key: value for key, value in answers.items()}
        return dialect_resume(pending, named)
    if answers is not None:
        raise _fail(f"`answers` answers inbox and interrupt pauses, not a {pending.kind} review")
    if reply is not None:
        if pending.kind != "reply":
            raise _fail(
                f"A reply review was sent, but the thread is paused on {pending.kind.replace('_', ' ')}"
            )
        return _keyed(pending, {"decisions": [{**_reply_decision(pending, reply), **who}]})
    if tool_calls is not None:
        if pending.kind != "tool_calls":
            raise _fail(
                f"A tool-call review was sent, but the thread is paused on "
                f"{'its reply' if pending.kind == 'reply' else 'a ' + pending.kind}"
            )
        decided = _tool_decisions(pending, tool_calls)
        if pending.mode == "per_call":
            return {call["interrupt_id"]: {**decision, **who} for call, decision in decided}
        return _keyed(pending, {"decisions": [{**d, **who} for _, d in decided]})
    if pending.kind in ("tool_calls", "reply"):
        raise _fail(
            f"An interaction answer was sent, but the thread is paused on {pending.kind.replace('_', ' ')}"
        )
    return _keyed(pending, answer)


def _keyed(pending: PendingReview, value: Any) -> dict[str, Any]:
    if pending.interrupt_id and is_interrupt_id(pending.interrupt_id):
        return {pending.interrupt_id: value}
    if len(pending.interrupt_ids) > 1:
        raise _fail("The pause has several interrupts without ids: it cannot be answered safely")
    # A pause reported without an id is resumed unkeyed (only valid with one interrupt).
    return value if isinstance(value, dict) else {"value": value}
