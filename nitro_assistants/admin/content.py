"""What a review asks and what was answered, drawn for reading: tool arguments as key/value rows,
plans as numbered steps with their inputs and fields, questions as their options, blueprints as
their sections, edits side by side, and descriptions as safe Markdown.

Everything here returns plain data for the templates (which escape it), except
:func:`render_markdown`, whose HTML comes from markdown-it-py with raw HTML off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from nitro_assistants.models import Decision, Review
from nitro_assistants.previews import MAX_DEPTH, is_long, overlaps
from nitro_assistants.rules import plan_steps

# -- Markdown ---------------------------------------------------------------------------------


def _link_open(
    self: RendererHTML, tokens: list[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    # A link in model-written text leads off the admin: the new page gets no handle on this one
    # (noopener) and learns nothing of where it came from (noreferrer).
    tokens[idx].attrSet("rel", "noopener noreferrer")
    return self.renderToken(tokens, idx, options, env)


def _markdown() -> MarkdownIt:
    # CommonMark with raw HTML off: ``<script>`` and ``<b>`` come out as text. markdown-it's own
    # link check already refuses javascript:, vbscript:, file: and data: URLs. Images are off
    # (a model's image is a request to wherever it points, from every reviewer's browser).
    md = MarkdownIt("commonmark", {"html": False}).disable("image")
    md.add_render_rule("link_open", _link_open)
    return md


MARKDOWN = _markdown()


def render_markdown(text: Any) -> SafeString:
    """``text`` (Markdown, written by a model or a host) as HTML that is safe to embed."""
    if not text:
        return mark_safe("")
    # Safe: markdown-it escapes all text and refuses raw HTML (``html: False``).
    html: str = MARKDOWN.render(str(text))
    return mark_safe(html)  # noqa: S308


# -- values -----------------------------------------------------------------------------------


@dataclass
class Shown:
    """One value, as the ``value.html`` template draws it."""

    kind: str  # "text" | "empty" | "json" | "list" | "rows"
    text: str = ""
    first_line: str = ""
    long: bool = False
    items: list[Shown] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    #: Where it is in the review's payload (``tool_calls.0.args.body``), for a held call's
    #: arguments; blank elsewhere. A collapsed value with a path is recorded when opened.
    path: str = ""
    #: A rule names it (or a part of it) as to be shown before approval: drawn open.
    must_show: bool = False


@dataclass
class Row:
    key: str
    value: Shown
    changed: bool = False


def _first_line(text: str) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= 100 else line[:99] + "…"


def _text(kind: str, text: str, path: str = "", required: tuple[str, ...] = ()) -> Shown:
    long = is_long(text)
    return Shown(
        kind=kind,
        text=text,
        first_line=_first_line(text),
        long=long,
        path=path,
        must_show=long and any(overlaps(path, p) for p in required),
    )


def _within(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else ""


def show_value(value: Any, depth: int = 0, path: str = "", required: tuple[str, ...] = ()) -> Shown:
    """A JSON value for reading: text as text, an object as key/value rows, a list of plain
    values as a list; what is nested deeper than :data:`MAX_DEPTH` as indented JSON (the same
    measure as :func:`nitro_assistants.previews.collapsed`). ``path``: where it is in the
    review's payload; ``required``: the paths a rule says must be shown (drawn open)."""
    if value is None or value == "" or value == [] or value == {}:
        return Shown(kind="empty")
    if isinstance(value, bool):
        return Shown(kind="text", text="yes" if value else "no")
    if isinstance(value, (int, float, str)):
        return _text("text", str(value), path, required)
    if depth >= MAX_DEPTH:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
        return _text("json", text, path, required)
    if isinstance(value, dict):
        return Shown(kind="rows", rows=key_values(value, depth + 1, path, required))
    if isinstance(value, list):
        return Shown(
            kind="list",
            items=[
                show_value(item, depth + 1, _within(path, index), required)
                for index, item in enumerate(value)
            ],
        )
    return _text("text", str(value), path, required)


def key_values(
    mapping: Any, depth: int = 0, path: str = "", required: tuple[str, ...] = ()
) -> list[Row]:
    """``mapping``'s entries as rows, in its order (``path``, ``required``: as
    :func:`show_value`)."""
    if not isinstance(mapping, dict):
        return []
    return [
        Row(key=str(key), value=show_value(value, depth, _within(path, key), required))
        for key, value in mapping.items()
    ]


def side_by_side(proposed: Any, approved: Any) -> list[dict[str, Any]]:
    """Each key of what the model proposed and what the reviewer approved, with both values,
    the changed ones marked."""
    proposed = proposed if isinstance(proposed, dict) else {}
    approved = approved if isinstance(approved, dict) else {}
    keys = [*proposed, *(key for key in approved if key not in proposed)]
    return [
        {
            "key": str(key),
            "proposed": show_value(proposed.get(key)),
            "approved": show_value(approved.get(key)),
            "changed": proposed.get(key) != approved.get(key),
        }
        for key in keys
    ]


# -- what a review holds ----------------------------------------------------------------------


def _interaction(review: Review) -> dict[str, Any]:
    interaction = review.payload.get("interaction") if isinstance(review.payload, dict) else None
    return interaction if isinstance(interaction, dict) else {}


def _labelled(options: Any) -> list[dict[str, str]]:
    shown = []
    for option in options if isinstance(options, list) else []:
        if isinstance(option, dict):
            value = option.get("value", option.get("optionId", option.get("label")))
            shown.append({"value": str(value), "label": str(option.get("label", value))})
        else:
            shown.append({"value": str(option), "label": str(option)})
    return shown


def show_plan(
    plan: Any,
    disabled: list[str] | None = None,
    edits: dict[str, dict[str, Any]] | None = None,
    proposed: Any = None,
    comments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A plan as numbered steps: each with its operation, input, fields, warnings and, once
    decided, whether it was turned off, what was edited (proposed beside approved) and the
    reviewer's comments on it."""
    disabled = disabled or []
    edits = edits or {}
    before = {str(s.get("stepId")): s for s in plan_steps(proposed)} if proposed else {}
    notes: dict[str, list[str]] = {}
    general: list[str] = []
    for comment in comments or []:
        if isinstance(comment, dict) and comment.get("text"):
            target = (
                notes.setdefault(str(comment["stepId"]), []) if comment.get("stepId") else general
            )
            target.append(str(comment["text"]))
    steps = []
    for number, step in enumerate(plan_steps(plan), start=1):
        step_id = str(step.get("stepId") or "")
        raw_input = step.get("input")
        step_input: dict[str, Any] = raw_input if isinstance(raw_input, dict) else {}
        changed = edits.get(step_id) or {}
        original_input = (before.get(step_id) or {}).get("input") or {}
        steps.append(
            {
                "number": number,
                "id": step_id,
                "title": str(step.get("title") or step_id),
                "action": str(step.get("action") or ""),
                "optional": bool(step.get("optional")),
                "off_by_assistant": step.get("enabled") is False,
                "turned_off": step_id in disabled,
                "depends_on": [str(d) for d in step.get("dependsOn") or []],
                "cost": str(step.get("costClass") or ""),
                "warnings": [str(w) for w in step.get("warnings") or []],
                "input": key_values(step_input),
                "fields": [
                    {
                        "name": str(spec.get("name")),
                        "label": str(spec.get("label") or spec.get("name")),
                        "widget": str(spec.get("widget") or ""),
                        "required": bool(spec.get("required")),
                        "options": _labelled(spec.get("options")),
                        "help": str(spec.get("help") or ""),
                    }
                    for spec in step.get("fields") or []
                    if isinstance(spec, dict) and spec.get("name")
                ],
                "edits": side_by_side(
                    {k: original_input.get(k) for k in changed},
                    {k: step_input.get(k, v) for k, v in changed.items()},
                )
                if changed
                else [],
                "comments": notes.get(step_id, []),
            }
        )
    prerequisites = plan.get("prerequisites") if isinstance(plan, dict) else None
    return {
        "steps": steps,
        "prerequisites": [show_value(p, 1) for p in prerequisites or []],
        "comments": general,
    }


def show_questions(questions: Any, answers: list[dict[str, Any]] | None = None) -> list[Any]:
    """Each question with its options; once answered, the ones chosen and the text given."""
    given = {str(a.get("questionId")): a for a in answers or [] if isinstance(a, dict)}
    shown = []
    for number, question in enumerate(questions if isinstance(questions, list) else [], start=1):
        if not isinstance(question, dict):
            continue
        answer = given.get(str(question.get("questionId"))) or {}
        chosen = {str(o) for o in answer.get("optionIds") or []}
        shown.append(
            {
                "number": number,
                "id": str(question.get("questionId") or ""),
                "prompt": str(question.get("prompt") or question.get("questionId") or ""),
                "input": str(question.get("input") or "single_select"),
                "optional": bool(question.get("optional")),
                "allow_other": bool(question.get("allowOther")),
                "options": [
                    {
                        "id": str(o.get("optionId")),
                        "label": str(o.get("label") or o.get("optionId")),
                        "description": str(o.get("description") or ""),
                        "chosen": str(o.get("optionId")) in chosen,
                    }
                    for o in question.get("options") or []
                    if isinstance(o, dict)
                ],
                "described": any(
                    isinstance(o, dict) and o.get("description")
                    for o in question.get("options") or []
                ),
                "answered": bool(answer),
                "text": str(answer.get("text") or ""),
            }
        )
    return shown


#: A blueprint's sections in the order a reader wants them, with their headings.
BLUEPRINT_SECTIONS = {
    "trigger": "Trigger",
    "agents": "Agents",
    "capabilities": "Capabilities",
    "outputs": "Outputs",
    "checkpoints": "Checkpoints",
    "environment": "Environment",
    "costClass": "Cost class",
    "gaps": "Gaps",
}


def show_blueprint(blueprint: Any) -> list[dict[str, Any]]:
    """A blueprint as its sections (known ones first, in a reader's order, then any other)."""
    if not isinstance(blueprint, dict):
        return [{"title": "Blueprint", "value": show_value(blueprint)}]
    keys = [k for k in BLUEPRINT_SECTIONS if k in blueprint]
    keys += [k for k in blueprint if k not in BLUEPRINT_SECTIONS]
    return [
        {"key": key, "title": BLUEPRINT_SECTIONS.get(key, key), "value": show_value(blueprint[key])}
        for key in keys
    ]


def show_calls(review: Review) -> list[dict[str, Any]]:
    """The held tool calls, each with its arguments as rows."""
    return [
        {
            "id": str(call.get("id") or ""),
            "name": str(call.get("name") or ""),
            "args": key_values(call.get("args") or {}),
            "allowed": [str(a) for a in call.get("allowed_decisions") or []],
        }
        for call in review.tool_calls
    ]


def show_interaction(review: Review, decision: Decision | None = None) -> dict[str, Any]:
    """What a question, blueprint or plan asks, readable; with ``decision``, what was answered
    folded in (options chosen, steps turned off, edits, comments)."""
    interaction = _interaction(review)
    answer = (decision.answer if decision else None) or {}
    shown: dict[str, Any] = {
        "title": str(interaction.get("title") or ""),
        "summary": str(interaction.get("summary") or ""),
        "kind": review.kind,
    }
    if review.kind == Review.Kind.QUESTION:
        shown["questions"] = show_questions(interaction.get("questions"), answer.get("answers"))
    elif review.kind == Review.Kind.BLUEPRINT:
        shown["sections"] = show_blueprint(interaction.get("blueprint"))
    elif review.kind == Review.Kind.PLAN:
        shown["plan"] = show_plan(
            interaction.get("plan"),
            disabled=[str(s) for s in answer.get("disabledSteps") or []],
            edits=answer.get("edits") or {},
            proposed=_proposed_plan(review) if answer.get("edits") else None,
            comments=answer.get("comments"),
        )
    return shown


def _proposed_plan(review: Review) -> Any:
    """The plan as the assistant proposed it, before the reviewer's edits made ``review`` (a
    revision of origin ``user``)."""
    earlier = (
        Review.objects.filter(
            thread_id=review.thread_id,
            interaction_id=review.interaction_id,
            revision__lt=review.revision,
        )
        .order_by("-revision")
        .only("payload")
        .first()
    )
    return _interaction(earlier).get("plan") if earlier else None


def decided_items(decision: Decision, review: Review) -> list[dict[str, Any]]:
    """Each decided item (the reply, or each held call) with its action and message and, for an
    edit, what the model proposed beside what the reviewer approved."""
    if decision.answer:
        return []  # an interaction's answer is drawn within its content (show_interaction)
    if decision.reply:
        reply = decision.reply
        action = str(reply.get("action") or "")
        draft = str((review.reply or {}).get("content") or "")
        return [
            {
                "name": "reply",
                "action": action,
                "message": str(reply.get("message") or ""),
                "proposed_text": draft if action == "edit" else "",
                "approved_text": str(reply.get("content") or "") if action == "edit" else "",
            }
        ]
    calls = {str(call.get("id")): call for call in review.tool_calls}
    items = []
    for item in decision.tool_calls or []:
        call = calls.get(str(item.get("id"))) or {}
        raw_proposed, raw_edited = call.get("args"), item.get("args")
        proposed: dict[str, Any] = raw_proposed if isinstance(raw_proposed, dict) else {}
        edited: dict[str, Any] | None = raw_edited if isinstance(raw_edited, dict) else None
        items.append(
            {
                "name": str(call.get("name") or item.get("id")),
                "action": str(item.get("action") or ""),
                "message": str(item.get("message") or ""),
                "args": key_values(proposed) if edited is None else [],
                "side_by_side": side_by_side(proposed, {**proposed, **edited})
                if edited is not None
                else [],
            }
        )
    return items
