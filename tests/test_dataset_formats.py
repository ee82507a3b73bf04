"""The dataset formats on their own (no Django, no database): what each line holds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nitro_assistants import dataset_formats as formats
from nitro_assistants.exceptions import InvalidArgumentError

CALLS = [
    {"id": "c1", "name": "refund", "args": {"amount": 20, "reason": "late"}},
    {"id": "c2", "name": "email_customer", "args": {"to": "jane@example.com"}},
    {"id": "c3", "name": "close_ticket", "args": {}},
]


def row(decided: list[dict[str, Any]]) -> dict[str, Any]:
    return formats.record(
        review={"pk": 1, "kind": "tool_calls", "payload": {"tool_calls": CALLS}},
        conversation=[
            {"role": "user", "content": [{"type": "text", "text": "Refund me"}, {"type": "image"}]},
            {"type": "ai", "content": "On it.", "tool_calls": CALLS},
        ],
        decision={"pk": 2, "actions": [d["action"] for d in decided], "tool_calls": decided},
        rule=None,
        executed=None,
        event=None,
    )


def test_only_the_approved_and_edited_calls_are_the_target() -> None:
    record = row(
        [
            {"id": "c1", "action": "edit", "args": {"amount": 15}},
            {"id": "c2", "action": "reject", "message": "Not by e-mail"},
            {"id": "c3", "action": "approve"},
        ]
    )
    line = formats.openai_line(record)
    assert line is not None
    assert line["messages"][0] == {"role": "user", "content": "Refund me"}
    target = line["messages"][-1]
    assert target["content"] == "On it."
    assert [c["id"] for c in target["tool_calls"]] == ["c1", "c3"]
    assert json.loads(target["tool_calls"][0]["function"]["arguments"]) == {
        "amount": 15,
        "reason": "late",
    }
    assert record["decided"]["tool_calls"][1] == {
        "id": "c2",
        "name": "email_customer",
        "action": "reject",
        "message": "Not by e-mail",
    }


def test_a_review_answered_without_running_anything_has_no_openai_line() -> None:
    record = row([{"id": c["id"], "action": "reject"} for c in CALLS])
    assert formats.openai_line(record) is None
    assert list(formats.lines([record], "openai")) == []
    [example] = [json.loads(line) for line in formats.lines([record], "langsmith")]
    assert example["outputs"]["message"] is None


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="`csv` is not a dataset format"):
        list(formats.lines([], "csv"))


def test_redaction_leaves_what_names_things() -> None:
    record = row([{"id": "c2", "action": "approve"}])
    shown = formats.redacted(record, lambda text: text.replace("jane@example.com", "[x]"))
    assert shown["proposed"]["tool_calls"][1]["args"]["to"] == "[x]"
    assert shown["decided"]["tool_calls"][0]["id"] == "c1"
    assert shown["kind"] == "tool_calls"
