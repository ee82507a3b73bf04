"""The pure policy rules: paths, operators, first match, strictness, and refusals with the field."""

from __future__ import annotations

from typing import Any

import pytest

from nitro_assistants import policy_rules
from nitro_assistants.policy_rules import PolicyError, RuleSet, clean_condition, clean_rule


def holds(path: str, op: str, value: Any, args: Any) -> bool:
    return clean_condition({"path": path, "op": op, "value": value}).holds(args)


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("amount", ("amount",)),
        ("$.order.total", ("order", "total")),
        ("items[0].sku", ("items", 0, "sku")),
        ("items.1", ("items", 1)),
    ],
)
def test_paths(path: str, parts: tuple[Any, ...]) -> None:
    assert policy_rules.parse_path(path) == parts


@pytest.mark.parametrize("path", ["", "  ", "$", "a..b", "a.", "a[x]", "a]b", 3])
def test_bad_paths_are_refused(path: Any) -> None:
    with pytest.raises(PolicyError) as caught:
        clean_condition({"path": path, "op": "eq", "value": 1})
    assert caught.value.field == "conditions"


@pytest.mark.parametrize(
    ("op", "value", "args", "expected"),
    [
        ("eq", 30, {"amount": 30}, True),
        ("eq", 30, {"amount": 30.0}, True),
        ("eq", 1, {"amount": True}, False),  # true is not 1
        ("ne", 30, {"amount": 31}, True),
        ("lt", 100, {"amount": 99.5}, True),
        ("lt", 100, {"amount": 100}, False),
        ("lte", 100, {"amount": 100}, True),
        ("gt", 100, {"amount": 100.01}, True),
        ("gte", 100, {"amount": 100}, True),
        ("gt", 10, {"amount": "12"}, False),  # another type never matches
        ("in", ["EUR", "USD"], {"amount": "EUR"}, True),
        ("in", [1, 2], {"amount": True}, False),
        ("contains", "urgent", {"amount": "very urgent"}, True),
        ("contains", "a", {"amount": ["a", "b"]}, True),
        ("matches", r"^ORD-\d+$", {"amount": "ORD-12"}, True),
        ("matches", r"^ORD-\d+$", {"amount": 12}, False),
    ],
)
def test_operators(op: str, value: Any, args: Any, expected: bool) -> None:
    assert holds("amount", op, value, args) is expected


@pytest.mark.parametrize("op", policy_rules.OPERATORS)
def test_a_missing_argument_never_matches(op: str) -> None:
    value: Any = [1] if op == "in" else ("x" if op == "matches" else 1)
    assert holds("amount", op, value, {"other": 1}) is False
    assert holds("items[3]", op, value, {"items": [1]}) is False


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"path": "a", "op": "bigger", "value": 1}, "unknown operator 'bigger'"),
        ({"path": "a", "op": "in", "value": 1}, "`in` takes a list"),
        ({"path": "a", "op": "matches", "value": "("}, "is not a regular expression"),
        ({"path": "a", "op": "lt", "value": [1]}, "compares with a number or a text"),
        ({"path": "a", "op": "eq"}, "needs a `value`"),
        ({"path": "a", "op": "eq", "value": 1, "extra": 1}, "unknown key 'extra'"),
        ("amount > 3", "must be an object"),
    ],
)
def test_bad_conditions_are_refused(raw: Any, message: str) -> None:
    with pytest.raises(PolicyError, match=message.replace("(", r"\(").replace("[", r"\[")):
        clean_condition(raw)


def rule(id: int, **fields: Any) -> policy_rules.Rule:
    return clean_rule(id=id, position=id, name=f"rule {id}", **fields)


REFUNDS = RuleSet(
    [
        rule(
            1,
            tool="refund_*",
            conditions=[{"path": "amount", "op": "lte", "value": 50}],
            action="auto_approve",
        ),
        rule(
            2,
            tool="refund_*",
            conditions=[{"path": "amount", "op": "gt", "value": 1000}],
            action="auto_reject",
            reason="Too large",
        ),
        rule(3, tool="refund_*", approvals=2, group="Finance"),
    ]
)


def calls(*amounts: float, name: str = "refund_customer") -> list[dict[str, Any]]:
    return [{"id": f"c{i}", "name": name, "args": {"amount": a}} for i, a in enumerate(amounts)]


def test_the_first_matching_rule_decides() -> None:
    assert REFUNDS.handling("a", "tool_calls", calls(30)).action == "auto_approve"
    assert REFUNDS.handling("a", "tool_calls", calls(5000)).action == "auto_reject"
    large = REFUNDS.handling("a", "tool_calls", calls(300))
    assert (large.action, large.approvals, large.group, large.rule_id) == (
        "review",
        2,
        "Finance",
        3,
    )
    assert REFUNDS.handling("a", "tool_calls", calls(30, name="cancel")).rule_id is None


def test_a_review_of_several_calls_gets_the_strictest_handling() -> None:
    assert REFUNDS.handling("a", "tool_calls", calls(30, 300)).rule_id == 3
    assert REFUNDS.handling("a", "tool_calls", calls(30, 5000)).action == "auto_reject"
    # one call no rule matches: a person reviews the whole
    mixed = [*calls(30), {"id": "x", "name": "cancel", "args": {}}]
    assert REFUNDS.handling("a", "tool_calls", mixed) == policy_rules.DEFAULT


def test_assistant_kind_and_reply_text() -> None:
    rules_ = RuleSet(
        [
            rule(
                1,
                assistant="support",
                kind="reply",
                conditions=[{"path": "content", "op": "matches", "value": "(?i)refund"}],
                approvals=2,
            ),
        ]
    )
    reply = {"content": "We will Refund you"}
    assert rules_.handling("support", "reply", reply=reply).approvals == 2
    assert rules_.handling("sales", "reply", reply=reply).rule_id is None
    assert rules_.handling("support", "reply", reply={"content": "Hello"}).rule_id is None


def test_an_edit_never_loosens() -> None:
    review = REFUNDS.handling("a", "tool_calls", calls(300))
    approve = REFUNDS.handling("a", "tool_calls", calls(30))
    reject = REFUNDS.handling("a", "tool_calls", calls(5000))
    assert policy_rules.after_edit(review, approve) is review
    assert policy_rules.after_edit(approve, review) is review
    assert policy_rules.after_edit(review, reject) is reject


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"action": "maybe"}, "action"),
        ({"approvals": 0}, "approvals"),
        ({"approvals": 11}, "approvals"),
        ({"on_deadline": "reject"}, "deadline"),
        ({"deadline": 60, "on_deadline": "escalate"}, "escalate_to"),
        ({"deadline": -1}, "deadline"),
        ({"action": "auto_reject"}, "reason"),
        (
            {"deadline": 60, "on_deadline": "reject", "on_escalation_deadline": "reject"},
            "escalation_deadline",
        ),
    ],
)
def test_bad_rules_name_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError) as caught:
        clean_rule(id=1, **fields)
    assert caught.value.field == field


def test_progress_text() -> None:
    assert (
        policy_rules.progress(1, 2, "Finance")
        == "1 of 2 approvals · waiting for someone in Finance"
    )
    assert policy_rules.progress(2, 2, "Finance") == "2 of 2 approvals"


def test_the_former_module_names_are_the_renamed_modules() -> None:
    """Code and docs written before the rename import ``nitro_assistants.policies`` and call
    ``nitro_assistants.services.policies.rules_changed()``: they get the renamed modules
    themselves, so a name read or patched through either is the same."""
    from nitro_assistants import policies
    from nitro_assistants.services import policies as former_service
    from nitro_assistants.services import policy_enforcement

    assert policies is policy_rules
    assert former_service is policy_enforcement
    assert former_service.rules_changed is policy_enforcement.rules_changed
