"""Properties of the policy engine (issue 34), derandomized: for any held call, any rule set and
any edit, the handling an edited review gets is never looser than the rules give the merged
call from scratch, nor than the one it had; who may decide never widens; a number sent as a
text never escapes a rule that compares numbers; and, through ``services.decide`` itself, a
person's decision is recorded only where the merged call's handling lets that person decide
alone."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nitro_assistants import policy_rules, rules, services
from nitro_assistants.exceptions import InteractionDecisionError, PolicyForbiddenError
from nitro_assistants.models import Approval, Decision, Policy, ReviewHandling
from nitro_assistants.services import policy_enforcement
from tests.governance.conftest import mirrored, reviewer

GROUPS = {1: "Finance", 2: "Managers"}
OPS = ("eq", "ne", "lt", "lte", "gt", "gte", "in")

amounts = st.one_of(
    st.integers(min_value=-10, max_value=10_000),
    st.floats(min_value=-10, max_value=10_000, allow_nan=False, allow_infinity=False),
)


@st.composite
def conditions(draw: Any) -> dict[str, Any]:
    path = draw(st.sampled_from(["amount", "order_id"]))
    op = draw(st.sampled_from(OPS))
    value: Any = draw(st.lists(amounts, min_size=1, max_size=3)) if op == "in" else draw(amounts)
    return {"path": path, "op": op, "value": value}


@st.composite
def rule_fields(draw: Any, index: int) -> dict[str, Any]:
    action = draw(st.sampled_from(policy_rules.ACTIONS))
    group_id = draw(st.sampled_from([None, 1, 2]))
    return {
        "id": index + 1,
        "position": draw(st.integers(0, 5)),
        "tool": draw(st.sampled_from(["", "refund_*", "refund_customer", "other"])),
        "conditions": draw(st.lists(conditions(), max_size=2)),
        "action": action,
        "approvals": draw(st.integers(1, 3)),
        "group": GROUPS.get(group_id, "") if group_id else "",
        "group_id": group_id,
        "reason": "no" if action == policy_rules.AUTO_REJECT else "",
        "name": f"rule {index + 1}",
    }


@st.composite
def rule_sets(draw: Any) -> list[dict[str, Any]]:
    count = draw(st.integers(0, 5))
    return [draw(rule_fields(i)) for i in range(count)]


def compiled(fields: list[dict[str, Any]]) -> policy_rules.RuleSet:
    return policy_rules.RuleSet(policy_rules.clean_rule(**f) for f in fields)


def handling_of(rule_set: policy_rules.RuleSet, args: dict[str, Any]) -> policy_rules.Handling:
    call = {"id": "call_0", "name": "refund_customer", "args": args}
    return rule_set.handling("walkthrough", "tool_calls", [call])


def may(handling: policy_rules.Handling, groups: set[int]) -> bool:
    """Whether a person in ``groups`` may decide under ``handling`` (not a superuser)."""
    return handling.group_id is None or handling.group_id in groups


held_args = st.fixed_dictionaries({"order_id": st.integers(1, 9), "amount": amounts})
edits = st.fixed_dictionaries({}, optional={"order_id": st.integers(1, 9), "amount": amounts})


@settings(derandomize=True, max_examples=400, deadline=None)
@given(fields=rule_sets(), held=held_args, edit=edits)
def test_an_edit_never_loosens_the_handling_nor_widens_who_decides(
    fields: list[dict[str, Any]], held: dict[str, Any], edit: dict[str, Any]
) -> None:
    rule_set = compiled(fields)
    merged = rules.merged_args({"args": held}, edit, "tool_calls[0].args")
    assert set(merged) == set(held)  # an edit never drops an argument
    current = handling_of(rule_set, held)
    fresh = handling_of(rule_set, merged)
    try:
        after = policy_rules.after_edit(current, fresh)
    except policy_rules.EditConflictError:
        assert current.group_id is not None and fresh.group_id is not None
        assert current.group_id != fresh.group_id
        return
    assert after.strictness >= fresh.strictness
    assert after.strictness >= current.strictness
    if after.action == policy_rules.REVIEW:
        for groups in ({1}, {2}, {1, 2}, set()):
            if may(after, groups):
                assert may(current, groups) or current.action != policy_rules.REVIEW
                assert may(fresh, groups) or fresh.action != policy_rules.REVIEW


@settings(derandomize=True, max_examples=400, deadline=None)
@given(fields=rule_sets(), held=held_args)
def test_a_number_sent_as_text_never_escapes_a_rule(
    fields: list[dict[str, Any]], held: dict[str, Any]
) -> None:
    rule_set = compiled(fields)
    as_number = handling_of(rule_set, held)
    as_text = handling_of(rule_set, {**held, "amount": str(held["amount"])})
    assert as_text.strictness >= as_number.strictness


@pytest.fixture
def groups(db: None) -> dict[int, Group]:
    return {key: Group.objects.create(pk=key, name=name) for key, name in GROUPS.items()}


@pytest.mark.django_db
@settings(
    derandomize=True,
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    fields=rule_sets(),
    amount=st.integers(1, 10_000),
    edit=edits,
    member_of=st.sets(st.sampled_from([1, 2])),
)
def test_decide_records_a_persons_decision_only_where_the_merged_call_lets_them(
    groups: dict[int, Group],
    fields: list[dict[str, Any]],
    amount: int,
    edit: dict[str, Any],
    member_of: set[int],
) -> None:
    with transaction.atomic():
        policy_enforcement.forget_rules()
        for f in fields:
            Policy.objects.create(
                name=f["name"],
                position=f["position"],
                tool=f["tool"],
                conditions=f["conditions"],
                action=f["action"],
                approvals=f["approvals"] if f["action"] == policy_rules.REVIEW else 1,
                group=groups[f["group_id"]] if f["group_id"] else None,
                reason=f["reason"],
            )
        review = mirrored(amount)
        person = reviewer("person", *(groups[g] for g in member_of))
        held = review.tool_calls[0]["args"]
        merged = {**held, **edit}
        rule_set = policy_enforcement.ruleset()
        from_scratch = handling_of(rule_set, merged)
        before = policy_enforcement.current_handling(
            ReviewHandling.objects.filter(review=review).first()
        )
        action = "edit" if edit else "approve"
        body: dict[str, Any] = {
            "tool_calls": [{"id": "call_0", "action": action, **({"args": edit} if edit else {})}],
            "revision": review.revision,
            "digest": review.digest,
        }
        try:
            outcome = services.decide(review, person, body, via="admin")
        except (PolicyForbiddenError, InteractionDecisionError):
            outcome = None
        if isinstance(outcome, Decision) and outcome.decided_by_id == person.pk:
            # Decided by this person alone: the merged call's rules and the handling it had
            # both let them, with one approval.
            for handling in (from_scratch, before):
                assert handling.action != policy_rules.AUTO_REJECT
                if handling.action == policy_rules.REVIEW:
                    assert handling.approvals <= 1
                    assert may(handling, member_of)
            assert outcome.tool_calls is not None
            if edit:
                assert outcome.tool_calls[0]["args"] == merged
        if isinstance(outcome, Approval):
            row = ReviewHandling.objects.get(review=review)
            assert row.approvals_required >= max(from_scratch.approvals, before.approvals)
            review.refresh_from_db()
            assert review.tool_calls[0]["args"] == merged
        transaction.set_rollback(True)
