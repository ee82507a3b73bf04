"""Properties of shadow rules, derandomized: for any rule set, marking some rules shadow never
changes the handling a review gets from the others (a shadow rule never acts), and each verdict
recorded is exactly what the rule, enforced at its position, would have given the review."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nitro_assistants import policy_rules
from tests.governance.test_policy_properties import held_args, rule_fields


@st.composite
def rule_sets_with_shadows(draw: Any) -> tuple[list[dict[str, Any]], set[int]]:
    count = draw(st.integers(1, 6))
    fields = [draw(rule_fields(i)) for i in range(count)]
    shadow = draw(st.sets(st.sampled_from([f["id"] for f in fields])))
    return fields, shadow


def calls(args: dict[str, Any], second: dict[str, Any] | None) -> list[dict[str, Any]]:
    found = [{"id": "call_0", "name": "refund_customer", "args": args}]
    if second is not None:
        found.append({"id": "call_1", "name": "other", "args": second})
    return found


@settings(derandomize=True, max_examples=400, deadline=None)
@given(
    drawn=rule_sets_with_shadows(),
    held=held_args,
    second=st.one_of(st.none(), held_args),
)
def test_shadow_rules_never_change_the_handling_and_record_what_they_would_do(
    drawn: tuple[list[dict[str, Any]], set[int]],
    held: dict[str, Any],
    second: dict[str, Any] | None,
) -> None:
    fields, shadow = drawn
    rules = [
        policy_rules.clean_rule(**f, mode="shadow" if f["id"] in shadow else "enforce")
        for f in fields
    ]
    with_shadows = policy_rules.RuleSet(rules)
    enforced_only = policy_rules.RuleSet(r for r in rules if not r.shadow)
    held_calls = calls(held, second)
    acting = with_shadows.handling("walkthrough", "tool_calls", held_calls)
    assert acting == enforced_only.handling("walkthrough", "tool_calls", held_calls)
    assert acting.rule_id not in shadow

    verdicts = {
        v.rule_id: v for v in with_shadows.shadow_verdicts("walkthrough", "tool_calls", held_calls)
    }
    for rule in rules:
        if not rule.shadow:
            continue
        enforced = policy_rules.RuleSet(
            [*enforced_only.rules, dataclasses.replace(rule, shadow=False)]
        ).handling("walkthrough", "tool_calls", held_calls)
        if enforced.rule_id == rule.id:
            assert verdicts.get(rule.id) == enforced
        else:
            assert rule.id not in verdicts
