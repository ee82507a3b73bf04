"""The review rules, in one place: pure Python, typed, no Django import.

What each review kind is, what a decision on it may contain, how a decision body is checked
(field-level errors before anything is stored or sent), the digest of what a reviewer is shown,
the resume value each kind is answered with, and which status a review may move to from which.
The agent middleware, the services, the admin forms, the JSON API and its OpenAPI document all
read these; none of them restates a rule.

Protocol background: docs/protocol.md §4 (tool calls), §6 (replies), §8 (typed interactions).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import jsonschema

from nitro_assistants import previews
from nitro_assistants.client.results import DIALECT_KINDS as DIALECT_KINDS
from nitro_assistants.client.results import (
    INBOX,
    INTERRUPT,
    MAX_ID_LENGTH,
    REPLY_DECISIONS,
    TOOL_DECISIONS,
    PendingReview,
    is_interrupt_id,
)
from nitro_assistants.client.results import INTERACTION_KINDS as INTERACTION_KINDS
from nitro_assistants.client.review import build_resume, dialect_resume
from nitro_assistants.exceptions import (
    InteractionConflictError,
    InteractionDecisionError,
    ReviewExpiredError,
    ReviewNotPendingError,
    ThreadResumptionError,
)

# -- kinds ------------------------------------------------------------------------------------

TOOL_CALLS: Final = "tool_calls"
REPLY: Final = "reply"
QUESTION: Final = "question"
BLUEPRINT: Final = "blueprint"
PLAN: Final = "plan"
#: Held tool calls and reply drafts (HumanInTheLoopMiddleware and our reply contract, §4, §6).
REVIEW_KINDS: Final = (TOOL_CALLS, REPLY)
#: Pauses of graphs of their own (§9): an Agent Inbox request (``inbox``), any other
#: ``interrupt(value)`` (``interrupt``).
INBOX_KIND: Final = INBOX
INTERRUPT_KIND: Final = INTERRUPT
#: Every kind a review can be, in the order the admin lists them.
KINDS: Final = (*REVIEW_KINDS, *INTERACTION_KINDS, *DIALECT_KINDS)
#: Where an interaction keeps its content (§8).
CONTENT_KEY: Final = {QUESTION: "questions", BLUEPRINT: "blueprint", PLAN: "plan"}

#: What a reviewer may do with one held call, and with a reply draft.
TOOL_CALL_ACTIONS: Final = TOOL_DECISIONS
REPLY_ACTIONS: Final = REPLY_DECISIONS
#: The decisions of a typed interaction, and which each kind takes (``cancel`` dismisses any).
DECISIONS: Final = ("answer", "accept", "approve", "request_revision", "cancel")
DECISIONS_BY_KIND: Final = {
    QUESTION: ("answer", "cancel"),
    BLUEPRINT: ("accept", "request_revision", "cancel"),
    PLAN: ("approve", "request_revision", "cancel"),
}

# -- statuses and the state machine ------------------------------------------------------------

PENDING: Final = "pending"
DECIDED: Final = "decided"
APPLIED: Final = "applied"
SUPERSEDED: Final = "superseded"
FAILED: Final = "failed"
ANSWERED: Final = "answered"
ACCEPTED: Final = "accepted"
REVISION_REQUESTED: Final = "revision_requested"
CANCELLED: Final = "cancelled"
EXECUTING: Final = "executing"
COMPLETED: Final = "completed"
DISMISSED: Final = "dismissed"
#: Nobody answered in time: terminal, and the assistant was told so (:func:`expired_answer`).
EXPIRED: Final = "expired"

#: Tool-call and reply reviews: decided (stored, resume enqueued), then applied on the server,
#: or failed there; superseded when the thread moved past the pause.
REVIEW_LIFECYCLE: Final[dict[str, tuple[str, ...]]] = {
    PENDING: (DECIDED, SUPERSEDED, DISMISSED, EXPIRED),
    DECIDED: (APPLIED, FAILED, SUPERSEDED),
    APPLIED: (),
    FAILED: (),
    SUPERSEDED: (),
    DISMISSED: (),
    EXPIRED: (),
}
#: Pauses of graphs of their own (§9): as tool calls and replies, and failed straight from
#: pending when the graph refused an answer and is stuck on the pause (then only dismissed).
DIALECT_LIFECYCLE: Final[dict[str, tuple[str, ...]]] = {
    PENDING: (DECIDED, SUPERSEDED, DISMISSED, FAILED, EXPIRED),
    DECIDED: (APPLIED, FAILED, SUPERSEDED),
    APPLIED: (),
    FAILED: (DISMISSED,),
    SUPERSEDED: (),
    DISMISSED: (),
    EXPIRED: (),
}
#: Typed interactions (§8): the decision names the status (an approved plan executes its steps
#: and ends completed or failed); a decision the assistant could not be told of fails it.
INTERACTION_LIFECYCLE: Final[dict[str, tuple[str, ...]]] = {
    PENDING: (
        ANSWERED,
        ACCEPTED,
        REVISION_REQUESTED,
        CANCELLED,
        EXECUTING,
        SUPERSEDED,
        DISMISSED,
        EXPIRED,
    ),
    ANSWERED: (FAILED, SUPERSEDED),
    ACCEPTED: (FAILED, SUPERSEDED),
    REVISION_REQUESTED: (FAILED, SUPERSEDED),
    CANCELLED: (FAILED, SUPERSEDED),
    EXECUTING: (COMPLETED, FAILED),
    COMPLETED: (),
    FAILED: (),
    SUPERSEDED: (),
    DISMISSED: (),
    EXPIRED: (),
}
TRANSITIONS: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    **{kind: REVIEW_LIFECYCLE for kind in REVIEW_KINDS},
    **{kind: INTERACTION_LIFECYCLE for kind in INTERACTION_KINDS},
    **{kind: DIALECT_LIFECYCLE for kind in DIALECT_KINDS},
}
#: The interaction's status once a decision is recorded.
STATUS_AFTER: Final = {
    "answer": ANSWERED,
    "accept": ACCEPTED,
    "approve": EXECUTING,
    "request_revision": REVISION_REQUESTED,
    "cancel": CANCELLED,
}
#: Statuses in which a review is open: waiting for a person, or (a tool-call or reply decision
#: not yet applied, a plan running its steps) for its outcome. A move out of them closes it
#: (``closed_at``); a thread with an open review keeps its audit events when they are pruned.
OPEN_STATUSES: Final = frozenset({PENDING, DECIDED, EXECUTING})
#: Statuses in which a review's pause is still the server's, whatever its decision: not decided
#: yet, or a tool-call or reply decision recorded and not yet applied. Not the same as open: an
#: interaction answered (closed for people) is one too until its decision is applied, and an
#: executing plan whose decision was applied is open but no longer the server's pause
#: (:func:`is_unapplied`).
UNAPPLIED_STATUSES: Final = frozenset({PENDING, DECIDED})


def is_unapplied(status: str, decision_pending: bool) -> bool:
    """Whether a review in ``status`` is still the pause the server shows: the thread has not
    moved past it, so a mirror of that pause is this review, not a new one. ``decision_pending``:
    it has a decision whose outcome is still pending (recorded, not yet applied)."""
    return status in UNAPPLIED_STATUSES or decision_pending


#: The word for "every status" in a status filter: the admin queue's and the API list's.
ALL_STATUSES = "all"


def statuses_for(kind: str | None = None) -> tuple[str, ...]:
    """The statuses a review of ``kind`` can be in (every kind's when ``kind`` is None), in
    lifecycle order."""
    lifecycles = [TRANSITIONS[kind]] if kind in TRANSITIONS else list(TRANSITIONS.values())
    seen: dict[str, None] = {}
    for lifecycle in lifecycles:
        for status in lifecycle:
            seen.setdefault(status, None)
    return tuple(seen)


def may_move(kind: str, current: str, target: str) -> bool:
    """Whether a review of ``kind`` may go from ``current`` to ``target``."""
    return target in TRANSITIONS.get(kind, REVIEW_LIFECYCLE).get(current, ())


# -- limits (the decide API's, §8) ---------------------------------------------------------------

MAX_REVISION: Final = 9007199254740991
MAX_ANSWERS, MAX_COMMENTS, MAX_DISABLED_STEPS = 4, 30, 12
MAX_NOTE, MAX_ID, MAX_DIGEST = 4000, 128, 128
#: The fields an interaction decision body may carry.
BODY_FIELDS: Final = (
    "decision",
    "digest",
    "revision",
    "answers",
    "comments",
    "disabledSteps",
    "edits",
    "note",
)
#: The fields a tool-call or reply decision body may carry.
REVIEW_BODY_FIELDS: Final = (
    "revision",
    "digest",
    "interrupt_id",
    "tool_calls",
    "reply",
    "note",
    # the paths of the held content the reviewer was shown (previews.py)
    "shown",
)
#: The fields a decision on ``inbox``/``interrupt`` pauses may carry: ``answer`` (the pause
#: ``interrupt_id`` names, or the only one) or ``answers`` (``{interrupt_id: answer}``).
DIALECT_BODY_FIELDS: Final = ("revision", "digest", "interrupt_id", "answer", "answers", "note")


def _invalid(field: str, *issues: str) -> InteractionDecisionError:
    return InteractionDecisionError(issues[0], field=field, issues=list(issues))


def _is_text(value: Any, limit: int, *, blank_ok: bool = False) -> bool:
    return isinstance(value, str) and len(value) <= limit and (blank_ok or bool(value.strip()))


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


# -- digests --------------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, unicode kept: the form a digest is taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def interaction_digest(interaction: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of an interaction's content: its questions, blueprint or
    plan (§8)."""
    content = interaction.get(CONTENT_KEY.get(str(interaction.get("kind")), ""), interaction)
    return hashlib.sha256(canonical_json(content).encode()).hexdigest()


def review_digest(kind: str, payload: Mapping[str, Any]) -> str:
    """SHA-256 of what a reviewer is shown of a review: an interaction's content, the pauses of
    a graph of its own, or the held tool calls / reply draft."""
    if kind in INTERACTION_KINDS and isinstance(payload.get("interaction"), Mapping):
        return interaction_digest(payload["interaction"])
    if kind in DIALECT_KINDS:
        pauses = payload.get("pauses") or []
        return hashlib.sha256(canonical_json({"pauses": pauses}).encode()).hexdigest()
    shown = {"tool_calls": payload.get("tool_calls") or [], "reply": payload.get("reply")}
    return hashlib.sha256(canonical_json(shown).encode()).hexdigest()


# -- the stamp: revision and digest of what was shown ---------------------------------------------


def clean_stamp(body: Mapping[str, Any]) -> tuple[int, str]:
    """The ``revision`` and ``digest`` a decision body names; field errors otherwise."""
    digest = body.get("digest")
    if not isinstance(digest, str) or not digest or len(digest) > MAX_DIGEST:
        raise _invalid("digest", f"`digest` must be a string of 1 to {MAX_DIGEST} characters")
    revision = body.get("revision")
    if (
        isinstance(revision, bool)
        or not isinstance(revision, int)
        or not 1 <= revision <= MAX_REVISION
    ):
        raise _invalid("revision", f"`revision` must be an integer from 1 to {MAX_REVISION}")
    return revision, digest


def check_stamp(
    *,
    label: str,
    revision: int,
    digest: str,
    status: str,
    shown_revision: int,
    shown_digest: str,
    interrupt_id: str | None = None,
    shown_interrupt_id: str | None = None,
) -> None:
    """Refuse (409 material) a decision on anything but the pending revision as it was shown.
    ``label`` names the review in the message, e.g. ``interaction int-1`` or ``review #12``."""
    if shown_revision != revision:
        raise InteractionConflictError(
            f"Revision {shown_revision} is not the current one: {label} is at revision {revision}",
            field="revision",
        )
    if status == EXPIRED:
        raise expired_error(label)
    if status != PENDING:
        raise InteractionConflictError(
            f"Revision {revision} of {label} is {status}: only a pending review can be decided",
            field="revision",
        )
    if shown_interrupt_id is not None and shown_interrupt_id != (interrupt_id or ""):
        raise InteractionConflictError(
            f"{label} is paused on another interrupt than the one shown", field="interrupt_id"
        )
    if shown_digest != digest:
        raise InteractionConflictError(
            f"The digest does not match revision {revision} of {label}: it changed since it "
            "was shown",
            field="digest",
        )


# -- a tool-call or reply decision -----------------------------------------------------------------


def clean_review_decision(
    pending: PendingReview,
    body: Mapping[str, Any],
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Check a decision on held tool calls or a reply draft against the pause, with the client's
    own rules (a resume the graph refuses leaves a batched thread stuck, §4), and return what is
    kept: ``{"reply": {...} | None, "tool_calls": [...] | None, "note": str}``.

    ``body`` holds ``reply: {"action", "content"?, "message"?}`` or ``tool_calls: [{"id",
    "action", "args"?, "message"?}, ...]`` (one per held call), and an optional ``note``.
    Raises :class:`ThreadResumptionError` (an :class:`InteractionDecisionError` naming the
    field where one is at fault). An edit is merged into the held call's arguments and checked by
    type (:func:`merged_args`) and against the call's argument schema in ``schemas`` (by call
    id, :func:`edit_schemas`) where the server published one.
    """
    unknown = sorted(set(body) - set(REVIEW_BODY_FIELDS))
    if unknown:
        raise _invalid(unknown[0], *(f"Unknown field `{name}`" for name in unknown))
    reply, tool_calls = body.get("reply"), body.get("tool_calls")
    if pending.kind not in REVIEW_KINDS:
        raise ThreadResumptionError(f"A {pending.kind} review is decided with an interaction body")
    if (reply is None) == (tool_calls is None):
        raise _invalid("", "Pass exactly one of reply or tool_calls")
    if reply is not None and not isinstance(reply, Mapping):
        raise _invalid("reply", "`reply` must be an object with an `action`")
    if tool_calls is not None and not isinstance(tool_calls, list | tuple):
        raise _invalid("tool_calls", "`tool_calls` must be a list, one review per held call")
    if tool_calls is not None and not all(isinstance(item, Mapping) for item in tool_calls):
        raise _invalid("tool_calls", "Each item of `tool_calls` must be an object with an `id`")
    note = body.get("note", "")
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        raise _invalid("note", f"`note` must be a string of at most {MAX_NOTE} characters")
    try:
        shown = previews.clean_shown(body.get("shown"))
    except ValueError as exc:
        raise _invalid("shown", str(exc)) from None
    seen: dict[str, Any] = {} if shown is None else {"shown": shown}
    if reply is not None:
        _check_part(reply, "reply", REPLY_FIELDS)
    for index, item in enumerate(tool_calls or []):
        _check_part(item, f"tool_calls[{index}]", TOOL_CALL_FIELDS)
    build_resume(
        pending,
        reply=reply,
        tool_calls=tool_calls,
        answer=None,
        reviewer_id="validation",
        reviewed_at="",
    )
    if reply is not None:
        keys = ("action", "content") if reply.get("action") == "edit" else ("action",)
        cleaned = {k: reply[k] for k in keys}
        if reply.get("action") == "reject" and reply.get("message"):
            cleaned["message"] = str(reply["message"])
        return {"reply": cleaned, "tool_calls": None, "note": note.strip(), **seen}
    by_id = {str(item["id"]): (index, item) for index, item in enumerate(tool_calls or [])}
    items = []
    for call in pending.tool_calls:
        index, item = by_id[str(call["id"])]
        kept: dict[str, Any] = {"id": call["id"], "action": item["action"]}
        if item["action"] == "edit":
            field = f"tool_calls[{index}].args"
            kept["args"] = merged_args(call, item["args"], field)
            schema = (schemas or {}).get(str(call["id"]))
            problem = _schema_problem(schema, kept["args"]) if schema else None
            if problem is not None:
                where, why = problem
                raise _invalid(f"{field}.{where}" if where else field, why)
        if item["action"] in ("respond", "reject") and item.get("message"):
            kept["message"] = str(item["message"])
        items.append(kept)
    return {"reply": None, "tool_calls": items, "note": note.strip(), **seen}


def clean_dialect_decision(pending: PendingReview, body: Mapping[str, Any]) -> dict[str, Any]:
    """Check a decision on ``inbox``/``interrupt`` pauses against them with the client's own
    rules (a wrong Agent Inbox shape wedges the thread for good, §9) and return what is kept:
    ``{"answers": {interrupt_id: resume value}, "note": str}`` (an Agent Inbox response as the
    one ``{"type", "args"}``; the client wraps it in the list the graph expects).

    ``body`` holds ``answer`` (for the pause ``interrupt_id`` names, else the only one pending)
    or ``answers: {interrupt_id: answer}`` for several, and an optional ``note``. Raises
    :class:`ThreadResumptionError` (an :class:`InteractionDecisionError` naming the field).
    """
    unknown = sorted(set(body) - set(DIALECT_BODY_FIELDS))
    if unknown:
        raise _invalid(unknown[0], *(f"Unknown field `{name}`" for name in unknown))
    if pending.kind not in DIALECT_KINDS:
        raise ThreadResumptionError(f"A {pending.kind} review is not answered with `answer`")
    if ("answer" in body) == ("answers" in body):
        raise _invalid("answer", "Pass exactly one of answer or answers")
    note = body.get("note", "")
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        raise _invalid("note", f"`note` must be a string of at most {MAX_NOTE} characters")
    if "answers" in body:
        answers = body["answers"]
        if not isinstance(answers, Mapping) or not answers:
            raise _invalid("answers", "`answers` must be an object: {interrupt_id: answer}")
        named: dict[str | None, Any] = dict(answers)
    else:
        interrupt_id = body.get("interrupt_id") or None
        if interrupt_id is None and len(pending.pauses) > 1:
            raise _invalid("interrupt_id", "Several pauses are pending: name the interrupt_id")
        named = {interrupt_id or pending.interrupt_id: body["answer"]}
    try:
        resume = dialect_resume(pending, named)
    except ThreadResumptionError as exc:
        field = "answers" if "answers" in body else "answer"
        raise _invalid(field, str(exc)) from None
    if not isinstance(resume, dict) or not all(is_interrupt_id(k) for k in resume):
        raise _invalid("answer", "These pauses have no interrupt ids: they cannot be answered")
    kinds = {pause.interrupt_id: pause.kind for pause in pending.pauses}
    kept = {k: (v[0] if kinds.get(k) == INBOX else v) for k, v in resume.items()}
    for pause in pending.pauses:
        answer = kept.get(pause.interrupt_id or "")
        if pause.kind == INBOX and isinstance(answer, Mapping) and answer.get("type") == "edit":
            # An Agent Inbox edit holds every argument: each keeps the held value's type, as a
            # tool call's edit does (merged_args).
            field = f"answers.{pause.interrupt_id}" if "answers" in body else "answer"
            held = (pause.action_request or {}).get("args") or {}
            for name, value in answer["args"]["args"].items():
                problem = value_type_problem(held.get(name), value)
                if problem is not None:
                    raise _invalid(f"{field}.args.args.{name}", f"`{name}` {problem}")
    return {"answers": kept, "note": note.strip()}


def merged_args(call: Mapping[str, Any], edited: Mapping[str, Any], field: str) -> dict[str, Any]:
    """The arguments an edit of the held ``call`` stands for: the call's full arguments with the
    edit's keys replaced (an edit names only what it changes: the admin posts that way, and the
    server itself merges them so, §4), each edited value checked against the held one's type.

    Everything after validation (the rules, the quorum's versions, the digest, the resume, the
    decision record) sees this merged call, never the partial edit. Raises
    :class:`InteractionDecisionError` naming the argument (``tool_calls[0].args.amount``)."""
    held = call.get("args") if isinstance(call.get("args"), Mapping) else {}
    assert isinstance(held, Mapping)
    for name, value in edited.items():
        where = f"{field}.{name}"
        if name not in held:
            raise _invalid(
                where,
                f"The call has no argument `{name}`; it has "
                f"{', '.join(f'`{a}`' for a in held) or 'none'}",
            )
        problem = value_type_problem(held[name], value)
        if problem is not None:
            raise _invalid(where, f"`{name}` {problem}")
    return {**held, **edited}


def edit_schemas(pending: Any) -> dict[str, dict[str, Any]]:
    """The JSON Schema of each held call's arguments, by call id, where the server publishes one:
    a per-call pause's ``response_schema`` holds the tool's own argument schema in its ``edit``
    branch (LangChain's ``HumanInTheLoopMiddleware``, docs/protocol.md §4); a batched pause's
    ``review_configs`` may carry ``args_schema``. Internal references (``$defs``) are kept."""
    found: dict[str, dict[str, Any]] = {}
    by_name: dict[str, dict[str, Any]] = {}
    for raw in getattr(pending, "raw_interrupts", None) or []:
        value = raw.get("value") if isinstance(raw, Mapping) else None
        if not isinstance(value, Mapping):
            continue
        if value.get("type") == "tool_approval" and value.get("tool_call_id"):
            schema = _edit_branch_args(raw.get("response_schema"))
            if schema is not None:
                found[str(value["tool_call_id"])] = schema
        for config in _dicts(value.get("review_configs")):
            if isinstance(config.get("args_schema"), dict) and config.get("action_name"):
                by_name[str(config["action_name"])] = config["args_schema"]
    for call in getattr(pending, "tool_calls", None) or []:
        name = str(call.get("name") or "")
        if str(call.get("id")) not in found and name in by_name:
            found[str(call.get("id"))] = by_name[name]
    return found


def _edit_branch_args(schema: Any) -> dict[str, Any] | None:
    """The ``args`` schema of the ``edit`` branch of a per-call ``response_schema``."""
    if not isinstance(schema, Mapping):
        return None
    defs = schema.get("$defs") or {}

    def resolved(node: Any) -> Any:
        while isinstance(node, Mapping) and "$ref" in node:
            node = defs.get(str(node["$ref"]).rsplit("/", 1)[-1])
        return node

    for option in schema.get("oneOf") or schema.get("anyOf") or [schema]:
        branch = resolved(option)
        if not isinstance(branch, Mapping):
            continue
        properties = branch.get("properties") or {}
        if (properties.get("type") or {}).get("const") != "edit":
            continue
        action = resolved(properties.get("edited_action"))
        args = (action.get("properties") or {}).get("args") if isinstance(action, Mapping) else None
        args = resolved(args)
        if isinstance(args, Mapping):
            return {**args, "$defs": defs} if defs else dict(args)
    return None


def _schema_problem(schema: Mapping[str, Any], args: Mapping[str, Any]) -> tuple[str, str] | None:
    """(the path at fault, why) when ``args`` does not fit ``schema``; None when it does, or when
    the schema itself is unusable (the held value's type still applies)."""
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(dict(args)))
    except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.RefResolutionError):
        return None
    if error is None:
        return None
    path = ".".join(str(part) for part in error.absolute_path)
    return path, error.message


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def value_type_problem(held: Any, value: Any) -> str | None:
    """Why ``value`` cannot stand in for the held value ``held`` (None: it can): a value of
    another JSON type (``"5000"`` for ``20``, ``1`` for ``true``), a number that is not finite
    (JSON has one number type: ``19.99`` may stand in for ``20``); objects and lists are checked item by item against the held
    ones. A held ``null`` takes any value (the rules then fail closed on what they cannot
    compare: :mod:`nitro_assistants.policy_rules`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number (NaN and Infinity are not JSON numbers)"
    if held is None:
        return _non_finite_inside(value)
    want, got = _json_type(held), _json_type(value)
    if want != got:
        article = "an" if want[0] in "aeiou" else "a"
        return f"must be {article} {want}, as the assistant gave it; got {got} {_short(value)}"
    if want == "object":
        for key, item in value.items():
            if key in held:
                problem = value_type_problem(held[key], item)
            else:
                problem = _non_finite_inside(item)
            if problem is not None:
                return f"(at `{key}`) {problem}"
    if want == "list":
        kinds = {_json_type(item) for item in held}
        for position, item in enumerate(value):
            problem = (
                value_type_problem(held[0], item) if len(kinds) == 1 else _non_finite_inside(item)
            )
            if problem is not None:
                return f"(item {position}) {problem}"
    return None


def _non_finite_inside(value: Any) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number (NaN and Infinity are not JSON numbers)"
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            problem = _non_finite_inside(item)
            if problem is not None:
                return problem
    return None


def _short(value: Any) -> str:
    text = canonical_json(value)
    return text if len(text) <= 40 else text[:39] + "…"


#: What one held call's decision, and a reply's, may hold.
TOOL_CALL_FIELDS: Final = ("id", "action", "args", "message")
REPLY_FIELDS: Final = ("action", "content", "message")


def _check_part(part: Mapping[str, Any], field: str, fields: Sequence[str]) -> None:
    """One call's decision (or the reply's) holds only its fields, each of its type: a field the
    action does not use is not dropped silently when it is wrong."""
    unknown = sorted(set(part) - set(fields))
    if unknown:
        raise _invalid(f"{field}.{unknown[0]}", *(f"Unknown field `{name}`" for name in unknown))
    if "args" in part and not isinstance(part["args"], Mapping):
        raise _invalid(f"{field}.args", "`args` must be an object: the arguments to change")
    for name in ("content", "message"):
        if part.get(name) is not None and not isinstance(part[name], str):
            raise _invalid(f"{field}.{name}", f"`{name}` must be a string")


def approve_everything(kind: str, tool_calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The decision "approve all this review holds" (a reply as drafted, every held call)."""
    if kind == REPLY:
        return {"reply": {"action": "approve"}}
    if kind == TOOL_CALLS:
        return {"tool_calls": [{"id": call["id"], "action": "approve"} for call in tool_calls]}
    raise ThreadResumptionError(f"A {kind} review has no plain approval")


def reject_everything(
    kind: str, tool_calls: Sequence[Mapping[str, Any]], reason: str
) -> dict[str, Any]:
    """The decision "reject all this review holds", with one reason."""
    if kind == REPLY:
        return {"reply": {"action": "reject", "message": reason}, "note": reason}
    if kind == TOOL_CALLS:
        calls = [{"id": call["id"], "action": "reject", "message": reason} for call in tool_calls]
        return {"tool_calls": calls, "note": reason}
    raise ThreadResumptionError(f"A {kind} review has no plain rejection")


def pause_expiry(
    raw_interrupts: Sequence[Any],
) -> tuple[datetime.datetime | None, list[str]]:
    """When a pause expires by its own word: the earliest ``expiresAt`` (AG-UI 1.1) in its
    interrupts' values (a typed interaction's may sit in ``value.interaction``), an ISO 8601
    timestamp with an offset. Returns it (None: none) and why each value that is not one was
    set aside (a value without an offset, not a text, not a date)."""
    found: list[datetime.datetime] = []
    problems: list[str] = []
    for interrupt in raw_interrupts or ():
        value = interrupt.get("value") if isinstance(interrupt, Mapping) else None
        if not isinstance(value, Mapping):
            continue
        candidates = [value.get("expiresAt")]
        inner = value.get("interaction")
        if isinstance(inner, Mapping):
            candidates.append(inner.get("expiresAt"))
        for raw in candidates:
            if raw is None:
                continue
            shown = json.dumps(raw)[:80] if _jsonable(raw) else repr(raw)[:80]
            if not isinstance(raw, str):
                problems.append(f"expiresAt {shown} is not an ISO 8601 text")
                continue
            try:
                when = datetime.datetime.fromisoformat(raw)
            except ValueError:
                problems.append(f"expiresAt {shown} is not an ISO 8601 timestamp")
                continue
            if when.tzinfo is None or when.utcoffset() is None:
                problems.append(f"expiresAt {shown} has no UTC offset")
                continue
            found.append(when)
    return (min(found) if found else None), problems


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def expiry_reason(expired_at: str) -> str:
    """What the assistant reads when a review expired at ``expired_at`` (ISO 8601)."""
    return (
        f"Expired unanswered: no reviewer answered before {expired_at}. "
        "Nothing was approved; treat it as not done."
    )


def expired_answer(pending: PendingReview, expired_at: str) -> dict[str, Any]:
    """What an expired review tells the assistant, per kind (docs/protocol.md#expiry), as a
    decision is kept: ``{"tool_calls"|"reply"|"answers"|"answer", "note"}``.

    - held tool calls: each rejected with :func:`expiry_reason` as its message (``respond``
      with it where a call does not allow ``reject``); the tool does not run;
    - a reply draft: rejected with that reason; it is not sent;
    - an Agent Inbox request: a ``response`` with the reason (``ignore`` where responses are
      not allowed);
    - a plain ``interrupt()``: ``{"expired": true, "expiredAt", "reason"}``;
    - a typed interaction: the interaction resume with ``decision: "expired"``, no answers,
      ``expired: true``, ``expiredAt`` and the reason as its ``note``.

    Raises ``ThreadResumptionError`` when the pause allows none of these (the expiry is not
    forced: the review stays for people)."""
    reason = expiry_reason(expired_at)
    kind = pending.kind
    if kind == TOOL_CALLS:
        calls = []
        for call in pending.tool_calls:
            allowed = list(call.get("allowed_decisions") or TOOL_DECISIONS)
            action = "reject" if "reject" in allowed else "respond" if "respond" in allowed else ""
            if not action:
                raise ThreadResumptionError(
                    f"The held call {call.get('name')!r} allows neither reject nor respond: "
                    "an expiry cannot tell the assistant"
                )
            calls.append({"id": call["id"], "action": action, "message": reason})
        body: dict[str, Any] = {"tool_calls": calls, "note": reason}
    elif kind == REPLY:
        body = {"reply": {"action": "reject", "message": reason}, "note": reason}
    elif kind in DIALECT_KINDS:
        answers: dict[str, Any] = {}
        for pause in pending.pauses:
            if pause.kind == INBOX:
                allowed = pause.allowed
                if "response" in allowed:
                    answers[str(pause.interrupt_id)] = {"type": "response", "args": reason}
                elif "ignore" in allowed:
                    answers[str(pause.interrupt_id)] = {"type": "ignore", "args": None}
                else:
                    raise ThreadResumptionError(
                        "This Agent Inbox request allows neither a response nor ignore: an "
                        "expiry cannot tell the assistant"
                    )
            else:
                answers[str(pause.interrupt_id)] = {
                    "expired": True,
                    "expiredAt": expired_at,
                    "reason": reason,
                }
        return clean_dialect_decision(pending, {"answers": answers, "note": reason})
    else:
        return {"answer": None, "note": reason}  # a typed interaction: expired_resume_value
    cleaned = clean_review_decision(pending, body)
    for call in cleaned.get("tool_calls") or []:
        if call["action"] == "reject":  # the model reads this reason (a person's it does not)
            call["expired"] = True
    return cleaned


def expired_resume_value(decided_by: str, expired_at: str) -> dict[str, Any]:
    """The resume of a typed interaction that expired: :func:`resume_value`'s shape with
    ``decision: "expired"``, no answers, ``expired: true`` and ``expiredAt`` (§8)."""
    return {
        "decision": "expired",
        "answers": [],
        "comments": [],
        "disabledSteps": [],
        "edits": {},
        "note": expiry_reason(expired_at),
        "decidedBy": decided_by,
        "expired": True,
        "expiredAt": expired_at,
    }


def same_review_decision(recorded: Mapping[str, Any], cleaned: Mapping[str, Any]) -> bool:
    """Whether a recorded tool-call/reply decision is the one ``cleaned`` describes (a replay)."""
    return (
        recorded.get("reply") == cleaned.get("reply")
        and recorded.get("tool_calls") == cleaned.get("tool_calls")
        and recorded.get("answers") == cleaned.get("answers")
    )


# -- deciding a tool-call, reply or inbox/interrupt review: the one check ---------------------------


@dataclasses.dataclass(frozen=True)
class ReviewState:
    """A tool-call, reply or ``inbox``/``interrupt`` review as it was read (under its lock):
    what a decision on it is checked against (:func:`check_decision`)."""

    pk: Any
    #: What it holds, as the client reads a pause (so local validation is the client's own).
    pending: PendingReview
    status: str
    #: The status as people read it, for the error: ``"decided"``.
    status_label: str
    revision: int
    digest: str
    #: The argument schemas of the held calls, by call id (:func:`edit_schemas`).
    schemas: Mapping[str, Mapping[str, Any]] | None = None
    #: The review itself, carried by :class:`ReviewNotPendingError` (opaque here).
    review: object = None


@dataclasses.dataclass(frozen=True)
class CheckedDecision:
    """A decision :func:`check_decision` let through: ``cleaned`` (edits merged into the held
    calls' full arguments and checked by type), made on ``stamp`` (revision, digest); ``replay``
    when it is the one the same person already recorded (record nothing)."""

    cleaned: dict[str, Any]
    stamp: tuple[int, str]
    replay: bool = False


def not_pending(
    pk: Any, status_label: str, review: object = None, *, status: str = ""
) -> ReviewNotPendingError:
    """The error for a review that was decided, superseded or closed already (expired:
    :class:`ReviewExpiredError`, when ``status`` says so)."""
    if status == EXPIRED:
        return expired_error(f"review #{pk}", review)
    return ReviewNotPendingError(f"Review #{pk} was already {status_label}.", review=review)


def expired_error(label: str, review: object = None) -> ReviewExpiredError:
    """The refusal of a decision or dismissal of a review that expired."""
    return ReviewExpiredError(
        f"{label[0].upper()}{label[1:]} expired unanswered: it can no longer be decided or "
        "dismissed (the assistant was told nobody answered).",
        review=review,
    )


def validate_review_decision(
    pending: PendingReview,
    decision: Mapping[str, Any],
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Check a decision on a tool-call, reply or ``inbox``/``interrupt`` pause against it, with
    the client's own rules (docs/protocol.md §4: a resume the graph refuses leaves a batched
    thread stuck), its stamp (``revision``, ``digest``) set aside. Returns the cleaned decision
    (:func:`clean_review_decision`, :func:`clean_dialect_decision`); raises
    ``ThreadResumptionError``."""
    if any(len(str(i)) > MAX_ID_LENGTH for i in pending.interrupt_ids):
        # Mirrored before the client refused such ids: its decision could not be stored.
        raise ThreadResumptionError(
            f"This pause cannot be answered: its interrupt id is longer than {MAX_ID_LENGTH} "
            "characters."
        )
    if pending.kind in DIALECT_KINDS:
        if pending.error:
            raise ThreadResumptionError(
                "The graph refused an answer to this pause and is stuck on it: "
                f"{pending.error}. It cannot be answered; dismiss it."
            )
        body = {k: v for k, v in decision.items() if k not in ("revision", "digest")}
        return clean_dialect_decision(pending, body)
    body = {k: v for k, v in decision.items() if k not in ("revision", "digest", "interrupt_id")}
    return clean_review_decision(pending, body, schemas)


def check_decision(
    state: ReviewState,
    decision: Mapping[str, Any],
    *,
    shown: tuple[int, str] | None = None,
    recorded: Mapping[str, Any] | None = None,
) -> CheckedDecision:
    """Every check a decision on a tool-call, reply or ``inbox``/``interrupt`` review passes
    before anything is stored, in the order their errors are reported.

    ``decision`` names the ``revision`` and ``digest`` it was made on, or ``shown`` gives them
    (the caller holds the review it showed); ``recorded`` is the decision the same person
    already recorded on this review (``{"reply", "tool_calls", "answers"}``), if any: the same
    decision on the same revision again is a replay. Raises ``InteractionDecisionError`` (the
    stamp or the body does not fit), ``ReviewNotPendingError`` (decided or closed already),
    ``InteractionConflictError`` (the review moved on since it was shown) and
    ``ThreadResumptionError``."""
    if "revision" in decision or "digest" in decision or shown is None:
        if shown is None and not ("revision" in decision and "digest" in decision):
            raise InteractionDecisionError(
                "Name the `revision` and `digest` of the review as it was shown",
                field="revision" if "revision" not in decision else "digest",
            )
        stamp = clean_stamp(decision)
    else:
        stamp = shown
    try:
        cleaned = validate_review_decision(state.pending, decision, state.schemas)
    except ThreadResumptionError:
        if state.status != PENDING:
            raise not_pending(
                state.pk, state.status_label, state.review, status=state.status
            ) from None
        raise
    if (
        recorded is not None
        and stamp == (state.revision, state.digest)
        and same_review_decision(recorded, cleaned)
    ):
        return CheckedDecision(cleaned, stamp, replay=True)
    if state.status != PENDING:
        raise not_pending(state.pk, state.status_label, state.review, status=state.status)
    check_stamp(
        label=f"review #{state.pk}",
        revision=state.revision,
        digest=state.digest,
        status=state.status,
        shown_revision=stamp[0],
        shown_digest=stamp[1],
        interrupt_id=state.pending.interrupt_id,
        shown_interrupt_id=(
            str(decision["interrupt_id"])
            if decision.get("interrupt_id") and state.pending.kind not in DIALECT_KINDS
            else None  # inbox/interrupt: the id names one of the pauses, checked above
        ),
    )
    return CheckedDecision(dict(cleaned), stamp)


@dataclasses.dataclass(frozen=True)
class InteractionState:
    """A typed interaction's review (one revision) as it was read (under its lock): what a
    decision on it is checked against (:func:`check_interaction_decision`)."""

    interaction_id: str
    kind: str
    status: str
    revision: int
    digest: str
    interrupt_id: str | None
    #: Its content (questions, blueprint or plan), and why it cannot be decided as it came.
    interaction: Mapping[str, Any]
    problems: Sequence[str] = ()


def check_interaction_decision(
    state: InteractionState,
    decision: Mapping[str, Any],
    *,
    shown: tuple[int, str] | None = None,
    recorded: Callable[[], Mapping[str, Any] | None] = lambda: None,
    replaced: Callable[[], bool] = lambda: False,
) -> CheckedDecision:
    """Every check a decision on a typed interaction passes before anything is stored (docs/
    protocol.md §8), in the order their errors are reported; :func:`check_decision`'s
    counterpart.

    ``shown`` stands in for a stamp the decision does not name; ``recorded`` reads the latest
    decision the same person recorded on this interaction (``{"decision", "revisions"}``: its
    value and the revisions it was made on), ``replaced`` whether a later revision replaced this
    one: each is asked only when its answer matters (they read the database). Raises
    ``InteractionDecisionError`` (the body does not fit: the field at fault) and
    ``InteractionConflictError`` (stale: another revision, digest or interrupt)."""
    if shown is not None and "revision" not in decision and "digest" not in decision:
        decision = {**decision, "revision": shown[0], "digest": shown[1]}
    shown_interrupt = decision.get("interrupt_id")
    body = clean_body({k: v for k, v in decision.items() if k != "interrupt_id"})
    stamp = (body["revision"], body["digest"])
    earlier = recorded()
    if (
        earlier is not None
        and earlier.get("decision") == body["decision"]
        and body["revision"] in earlier.get("revisions", ())
    ):
        return CheckedDecision(body, stamp, replay=True)
    label = f"interaction {state.interaction_id}"
    if shown_interrupt and str(shown_interrupt) != (state.interrupt_id or ""):
        raise InteractionConflictError(
            f"Interaction {state.interaction_id} is paused on another interrupt than the one shown",
            field="interrupt_id",
        )
    if body["revision"] == state.revision and replaced():
        raise InteractionConflictError(
            f"Revision {state.revision} of {label} has been replaced", field="revision"
        )
    check_stamp(
        label=label,
        revision=state.revision,
        digest=state.digest,
        status=state.status,
        shown_revision=body["revision"],
        shown_digest=body["digest"],
    )
    check_content(state.kind, state.interaction, body, problems=state.problems)
    return CheckedDecision(body, stamp)


# -- a typed interaction: its arrival ---------------------------------------------------------------


def plan_steps(plan: Any) -> list[dict[str, Any]]:
    return _dicts(plan.get("steps")) if isinstance(plan, dict) else []


def interaction_problems(
    interaction: Mapping[str, Any], operation_exists: Callable[[str], bool]
) -> list[str]:
    """Why an interaction cannot be decided as it arrived (empty when it can): for a plan, a step
    naming an operation nobody registered (``operation_exists`` says), an unknown or circular
    ``dependsOn``."""
    problems: list[str] = []
    kind = interaction.get("kind")
    if kind not in CONTENT_KEY:
        return [f"Unknown interaction kind {kind!r}"]
    if len(str(interaction.get("interactionId") or "")) > MAX_ID:
        problems.append(f"The interactionId is longer than {MAX_ID} characters")
    if kind != PLAN:
        return problems
    steps = plan_steps(interaction.get("plan"))
    ids = [str(step.get("stepId") or "") for step in steps]
    if not steps:
        problems.append("The plan has no steps")
    if "" in ids or len(set(ids)) != len(ids):
        problems.append("Every step needs a stepId of its own")
    for step in steps:
        action = str(step.get("action") or "")
        if not operation_exists(action):
            problems.append(f"Step {step.get('stepId')!s}: unknown action {action!r}")
        for dependency in step.get("dependsOn") or []:
            if dependency not in ids:
                problems.append(
                    f"Step {step.get('stepId')!s} depends on unknown step {dependency!r}"
                )
    if not problems and _has_cycle(steps):
        problems.append("The steps' dependsOn form a cycle")
    return problems


def _has_cycle(steps: list[dict[str, Any]]) -> bool:
    graph = {str(s.get("stepId")): [str(d) for d in s.get("dependsOn") or []] for s in steps}
    done: set[str] = set()
    visiting: set[str] = set()

    def visit(node: str) -> bool:
        if node in done:
            return False
        if node in visiting:
            return True
        visiting.add(node)
        if any(visit(dep) for dep in graph.get(node, [])):
            return True
        visiting.discard(node)
        done.add(node)
        return False

    return any(visit(node) for node in graph)


# -- a typed interaction: the request body on its own -----------------------------------------------


def clean_body(body: Any) -> dict[str, Any]:
    """Check an interaction decision body's shape and limits (without looking at the interaction)
    and return it with defaults filled in. Raises :class:`InteractionDecisionError` naming the
    field."""
    if not isinstance(body, dict):
        raise _invalid("", "The body must be a JSON object")
    unknown = sorted(set(body) - set(BODY_FIELDS))
    if unknown:
        raise _invalid(unknown[0], *(f"Unknown field `{name}`" for name in unknown))
    decision = body.get("decision")
    if decision not in DECISIONS:
        raise _invalid("decision", f"`decision` must be one of {', '.join(DECISIONS)}")
    revision, digest = clean_stamp(body)
    cleaned: dict[str, Any] = {"decision": decision, "digest": digest, "revision": revision}
    cleaned["answers"] = _clean_list(body, "answers", MAX_ANSWERS, _clean_answer)
    cleaned["comments"] = _clean_list(body, "comments", MAX_COMMENTS, _clean_comment)
    cleaned["disabledSteps"] = _clean_list(body, "disabledSteps", MAX_DISABLED_STEPS, _clean_id)
    if len(set(cleaned["disabledSteps"])) != len(cleaned["disabledSteps"]):
        raise _invalid("disabledSteps", "A step is listed more than once")
    edits = body.get("edits", {})
    if not isinstance(edits, dict) or not all(
        isinstance(fields, dict) and len(step) <= MAX_ID for step, fields in edits.items()
    ):
        raise _invalid("edits", "`edits` must be an object of objects: {stepId: {field: value}}")
    cleaned["edits"] = {step: dict(fields) for step, fields in edits.items() if fields}
    note = body.get("note", "")
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        raise _invalid("note", f"`note` must be a string of at most {MAX_NOTE} characters")
    cleaned["note"] = note.strip()
    return cleaned


def _clean_list(body: dict[str, Any], name: str, limit: int, clean: Any) -> list[Any]:
    value = body.get(name, [])
    if not isinstance(value, list):
        raise _invalid(name, f"`{name}` must be an array")
    if len(value) > limit:
        raise _invalid(name, f"`{name}` takes at most {limit} items; got {len(value)}")
    return [clean(item, f"{name}[{index}]") for index, item in enumerate(value)]


def _clean_id(value: Any, field: str) -> str:
    if not _is_text(value, MAX_ID):
        raise _invalid(
            field, f"`{field}` must be a non-blank string of at most {MAX_ID} characters"
        )
    return str(value)


def _clean_answer(item: Any, field: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise _invalid(field, f"`{field}` must be an object with a questionId")
    unknown = sorted(set(item) - {"questionId", "optionIds", "text"})
    if unknown:
        raise _invalid(f"{field}.{unknown[0]}", f"Unknown field `{unknown[0]}`")
    answer: dict[str, Any] = {
        "questionId": _clean_id(item.get("questionId"), f"{field}.questionId")
    }
    option_ids = item.get("optionIds", [])
    if not isinstance(option_ids, list) or len(option_ids) > 50:
        raise _invalid(f"{field}.optionIds", "`optionIds` must be an array of at most 50 ids")
    answer["optionIds"] = [
        _clean_id(option, f"{field}.optionIds[{i}]") for i, option in enumerate(option_ids)
    ]
    if "text" in item:
        if not isinstance(item["text"], str) or len(item["text"]) > MAX_NOTE:
            raise _invalid(
                f"{field}.text", f"`text` must be a string of at most {MAX_NOTE} characters"
            )
        if item["text"].strip():
            answer["text"] = item["text"].strip()
    return answer


def _clean_comment(item: Any, field: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise _invalid(field, f"`{field}` must be an object with a text")
    unknown = sorted(set(item) - {"text", "stepId", "field"})
    if unknown:
        raise _invalid(f"{field}.{unknown[0]}", f"Unknown field `{unknown[0]}`")
    if not _is_text(item.get("text"), MAX_NOTE):
        raise _invalid(
            f"{field}.text", f"A comment needs a non-blank `text` of at most {MAX_NOTE} characters"
        )
    comment = {"text": item["text"].strip()}
    for key in ("stepId", "field"):
        if key in item:
            comment[key] = _clean_id(item[key], f"{field}.{key}")
    return comment


# -- a typed interaction: the body against its content ----------------------------------------------


def _not_with(body: Mapping[str, Any], decision: str, *names: str) -> None:
    for name in names:
        if body.get(name):
            raise _invalid(name, f"`{name}` does not go with the decision `{decision}`")


def check_content(
    kind: str,
    interaction: Mapping[str, Any],
    body: Mapping[str, Any],
    problems: Sequence[str] = (),
) -> None:
    """Check a cleaned body against the interaction's content; raises with the field at fault.
    ``problems`` are those :func:`interaction_problems` found when it arrived."""
    decision = body["decision"]
    allowed = DECISIONS_BY_KIND.get(kind, ("cancel",))
    if decision not in allowed:
        raise _invalid(
            "decision",
            f"A {kind} interaction takes {', '.join(allowed)}; not `{decision}`",
        )
    if decision != "answer":
        _not_with(body, decision, "answers")
    if decision != "request_revision":
        _not_with(body, decision, "comments")
    if decision != "approve":
        _not_with(body, decision, "disabledSteps", "edits")
    if decision == "answer":
        _check_answers(interaction, body["answers"])
    elif decision == "request_revision":
        if not body["note"] and not body["comments"]:
            raise _invalid("note", "A revision request needs a `note` or `comments`")
        _check_comments(kind, interaction, body["comments"])
    elif decision == "approve":
        if problems:
            raise _invalid("decision", "This plan cannot be approved as it is", *problems)
        _check_approval(interaction.get("plan"), body["disabledSteps"], body["edits"])


def _check_answers(interaction: Mapping[str, Any], answers: list[dict[str, Any]]) -> None:
    questions = {str(q.get("questionId")): q for q in _dicts(interaction.get("questions"))}
    seen: set[str] = set()
    for index, answer in enumerate(answers):
        field = f"answers[{index}]"
        question = questions.get(answer["questionId"])
        if question is None:
            raise _invalid(f"{field}.questionId", f"No question {answer['questionId']!r}")
        if answer["questionId"] in seen:
            raise _invalid(
                f"{field}.questionId", f"Question {answer['questionId']!r} is answered twice"
            )
        seen.add(answer["questionId"])
        input_kind = question.get("input") or "single_select"
        options = {str(o.get("optionId")) for o in _dicts(question.get("options"))}
        unknown = [o for o in answer["optionIds"] if o not in options]
        if unknown:
            raise _invalid(
                f"{field}.optionIds",
                *(f"Question {answer['questionId']!r} has no option {o!r}" for o in unknown),
            )
        if len(set(answer["optionIds"])) != len(answer["optionIds"]):
            raise _invalid(f"{field}.optionIds", "An option is chosen more than once")
        single = input_kind == "single_select" and not question.get("multiple")
        if single and len(answer["optionIds"]) > 1:
            raise _invalid(
                f"{field}.optionIds", f"Question {answer['questionId']!r} takes one option"
            )
        free_text = input_kind == "text" or bool(question.get("allowOther"))
        if "text" in answer and not free_text:
            raise _invalid(
                f"{field}.text",
                f"Question {answer['questionId']!r} takes no free text, only options",
            )
        if input_kind == "text" and "text" not in answer:
            raise _invalid(
                f"{field}.text", f"Question {answer['questionId']!r} needs a text answer"
            )
        if not answer["optionIds"] and "text" not in answer:
            raise _invalid(f"{field}.optionIds", f"The answer to {answer['questionId']!r} is empty")
    missing = [
        q for q, question in questions.items() if not question.get("optional") and q not in seen
    ]
    if missing:
        raise _invalid("answers", *(f"Question {q!r} needs an answer" for q in missing))


def step_fields(step: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A plan step's editable fields by name."""
    return {str(f.get("name")): f for f in _dicts(step.get("fields")) if f.get("name")}


def _check_comments(
    kind: str, interaction: Mapping[str, Any], comments: list[dict[str, Any]]
) -> None:
    steps = {str(s.get("stepId")): s for s in plan_steps(interaction.get("plan"))}
    content = interaction.get(CONTENT_KEY.get(kind, ""))
    for index, comment in enumerate(comments):
        field = f"comments[{index}]"
        step_id, name = comment.get("stepId"), comment.get("field")
        if kind != PLAN:
            if step_id is not None:
                raise _invalid(f"{field}.stepId", f"A {kind} has no steps")
            if name is not None and not (isinstance(content, dict) and name in content):
                raise _invalid(f"{field}.field", f"The {kind} has no field {name!r}")
            continue
        if step_id is None:
            if name is not None and not (isinstance(content, dict) and name in content):
                raise _invalid(
                    f"{field}.field", f"The plan has no field {name!r}; pin it to a stepId"
                )
            continue
        if step_id not in steps:
            raise _invalid(f"{field}.stepId", f"The plan has no step {step_id!r}")
        if (
            name is not None
            and name not in step_fields(steps[step_id])
            and name not in steps[step_id]
        ):
            raise _invalid(f"{field}.field", f"Step {step_id!r} has no field {name!r}")


def option_values(options: Any) -> list[Any] | None:
    """The values a field's ``options`` allow (``value``, else ``optionId``, else the option)."""
    if not isinstance(options, list) or not options:
        return None
    values = []
    for option in options:
        if isinstance(option, dict):
            values.append(option.get("value", option.get("optionId")))
        else:
            values.append(option)
    return values


#: What each field widget takes as an edit. An unknown widget takes a text, a number or a
#: boolean: never an object or a list, which no widget edits.
TEXT_WIDGETS: Final = frozenset({"text", "textarea", "email", "url", "date", "datetime", "time"})
NUMBER_WIDGETS: Final = frozenset({"number", "integer", "range"})
BOOLEAN_WIDGETS: Final = frozenset({"checkbox", "boolean", "toggle", "switch"})
MULTIPLE_WIDGETS: Final = frozenset({"multiselect", "multi_select", "checkboxes"})
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def widget_problem(spec: Mapping[str, Any], value: Any) -> str | None:
    """Why ``value`` does not fit the field ``spec`` (its widget and options), or None."""
    widget = str(spec.get("widget") or "text").lower()
    allowed = option_values(spec.get("options"))
    if widget in MULTIPLE_WIDGETS:
        if not isinstance(value, list):
            return f"Field {spec.get('name')!r} ({widget}) takes a list of options"
        if allowed is not None and (bad := [v for v in value if v not in allowed]):
            return f"{bad[0]!r} is not an option of field {spec.get('name')!r}"
        return None
    if allowed is not None:
        if value not in allowed:
            return f"{value!r} is not an option of field {spec.get('name')!r}"
        return None
    if widget in NUMBER_WIDGETS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"Field {spec.get('name')!r} ({widget}) takes a number"
        return None
    if widget in BOOLEAN_WIDGETS:
        if not isinstance(value, bool):
            return f"Field {spec.get('name')!r} ({widget}) takes true or false"
        return None
    if widget in TEXT_WIDGETS:
        if not isinstance(value, str):
            return f"Field {spec.get('name')!r} ({widget}) takes a text"
        if widget == "date" and value and not _DATE.fullmatch(value):
            return f"Field {spec.get('name')!r} takes a date as YYYY-MM-DD"
        if len(value) > MAX_NOTE:
            return f"Field {spec.get('name')!r} takes at most {MAX_NOTE} characters"
        return None
    if value is not None and not isinstance(value, str | int | float | bool):
        return f"Field {spec.get('name')!r} ({widget}) takes a text, a number or true/false"
    return None


def _check_approval(plan: Any, disabled: list[str], edits: dict[str, dict[str, Any]]) -> None:
    steps = {str(s.get("stepId")): s for s in plan_steps(plan)}
    for index, step_id in enumerate(disabled):
        if step_id not in steps:
            raise _invalid(f"disabledSteps[{index}]", f"The plan has no step {step_id!r}")
        if not steps[step_id].get("optional"):
            raise _invalid(
                f"disabledSteps[{index}]",
                f"Step {step_id!r} is not optional: it cannot be turned off",
            )
    for step_id, values in edits.items():
        if step_id not in steps:
            raise _invalid(f"edits.{step_id}", f"The plan has no step {step_id!r}")
        if step_id in disabled or steps[step_id].get("enabled") is False:
            raise _invalid(
                f"edits.{step_id}", f"Step {step_id!r} is turned off: it cannot be edited"
            )
        declared = step_fields(steps[step_id])
        for name, value in values.items():
            field = f"edits.{step_id}.{name}"
            if name not in declared:
                raise _invalid(
                    field,
                    f"Step {step_id!r} has no editable field {name!r}; it has "
                    + (", ".join(repr(d) for d in declared) or "none"),
                )
            spec = declared[name]
            if spec.get("required") and (value is None or value == ""):
                raise _invalid(field, f"Field {name!r} of step {step_id!r} is required")
            if value is None or (value == "" and not spec.get("required")):
                continue
            problem = widget_problem(spec, value)
            if problem is not None:
                raise _invalid(field, problem)


def enabled_steps(plan: Any, disabled: Sequence[str] = ()) -> list[dict[str, Any]]:
    return [
        step
        for step in plan_steps(plan)
        if step.get("enabled") is not False and str(step.get("stepId")) not in disabled
    ]


def apply_edits(interaction: Mapping[str, Any], edits: Mapping[str, Mapping[str, Any]]) -> Any:
    """A copy of ``interaction`` with a plan's step edits written into the steps' inputs."""
    edited = json.loads(json.dumps(interaction))
    for step in plan_steps(edited.get("plan")):
        changes = edits.get(str(step.get("stepId")))
        if changes:
            step["input"] = {**(step.get("input") or {}), **changes}
    return edited


def resume_value(decided_by: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """What the assistant is resumed with on an interaction decision (§8)."""
    return {
        "decision": body["decision"],
        "answers": list(body.get("answers") or []),
        "comments": list(body.get("comments") or []),
        "disabledSteps": list(body.get("disabledSteps") or []),
        "edits": dict(body.get("edits") or {}),
        "note": body.get("note") or None,
        "decidedBy": decided_by,
    }
