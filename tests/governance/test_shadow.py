"""Shadow rules: tried on every review through the real mirror and decide paths, what each would
have done recorded, never acting; and how often each agreed with what people decided."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from nitro_assistants import policy_rules, services
from nitro_assistants.models import Event, Policy, Review, ReviewHandling
from nitro_assistants.services import governance, rule_trials
from nitro_assistants.services.policy_enforcement import shadow_key
from tests.governance.conftest import approve, mirrored, reviewer

pytestmark = pytest.mark.django_db


def shadow_rule(name: str, **fields: Any) -> Policy:
    fields.setdefault("tool", "refund_*")
    return Policy.objects.create(name=name, mode=Policy.Mode.SHADOW, **fields)


def verdicts_of(review: Review) -> dict[str, Any]:
    return dict(ReviewHandling.objects.get(review=review).rule.get("shadow") or {})


def reject(review: Review) -> dict[str, Any]:
    review.refresh_from_db()
    return {
        "tool_calls": [
            {"id": c["id"], "action": "reject", "message": "no"} for c in review.tool_calls
        ],
        "revision": review.revision,
        "digest": review.digest,
    }


def edit(review: Review, amount: float) -> dict[str, Any]:
    review.refresh_from_db()
    return {
        "tool_calls": [
            {"id": c["id"], "action": "edit", "args": {"amount": amount}} for c in review.tool_calls
        ],
        "revision": review.revision,
        "digest": review.digest,
    }


def test_a_shadow_rule_records_what_it_would_have_done_and_never_acts(
    queued: list[Any], finance: Group
) -> None:
    approve_rule = shadow_rule(
        "small refunds (trial)",
        conditions=[{"path": "amount", "op": "lte", "value": 50}],
        action=Policy.Action.AUTO_APPROVE,
    )
    strict_rule = shadow_rule(
        "two in Finance (trial)",
        position=5,
        conditions=[{"path": "amount", "op": "gt", "value": 10}],
        approvals=2,
        group=finance,
        priority=9,
        deadline=datetime.timedelta(minutes=5),
        on_deadline=Policy.OnDeadline.APPROVE,
    )
    review = mirrored(30)

    # Recorded: both rules' verdicts, in the handling's JSON and on an event.
    recorded = verdicts_of(review)
    assert set(recorded) == {shadow_key(approve_rule.pk), shadow_key(strict_rule.pk)}
    assert recorded[shadow_key(approve_rule.pk)]["action"] == "auto_approve"
    assert recorded[shadow_key(strict_rule.pk)] == {
        "rule_id": strict_rule.pk,
        "rule_name": "two in Finance (trial)",
        "rule_version": 1,
        "action": "review",
        "approvals": 2,
        "group": "Finance",
        "group_id": finance.pk,
    }
    shadowed = Event.objects.get(review=review, verb="policy_shadowed").data
    assert {v["rule_name"] for v in shadowed["shadow"]} == {
        "small refunds (trial)",
        "two in Finance (trial)",
    }
    assert not Event.objects.filter(review=review, verb="policy_matched").exists()

    # Never acting: no decision enqueued, no group, no quorum, no deadline, no priority.
    assert queued == []
    row = ReviewHandling.objects.get(review=review)
    assert (row.policy_id, row.action, row.approvals_required, row.group_id, row.due_at) == (
        None,
        "review",
        1,
        None,
        None,
    )
    assert row.priority == 0
    assert governance.apply_policy(review.pk) is None
    assert governance.sweep_deadlines() is not None
    review.refresh_from_db()
    assert review.status == "pending"
    anyone = reviewer("anyone")  # not in Finance: the shadow rule's group restricts nobody
    assert services.may_decide(anyone, review, "admin")
    decision = services.decide(review, anyone, approve(review), via="admin")
    assert decision.reviewer_id == "anyone"


def test_shadow_rules_are_recorded_beside_the_rule_that_acts(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    trial = shadow_rule(
        "large refunds refused (trial)",
        position=25,
        conditions=[{"path": "amount", "op": "gt", "value": 100}],
        action=Policy.Action.AUTO_REJECT,
        reason="trial",
    )
    review = mirrored(300)
    row = ReviewHandling.objects.get(review=review)
    assert row.policy_id == refund_rules["large"].pk  # the enforced rule acts
    assert (row.approvals_required, row.group_id) == (2, finance.pk)
    assert verdicts_of(review)[shadow_key(trial.pk)]["action"] == "auto_reject"
    matched = Event.objects.get(review=review, verb="policy_matched").data
    assert matched["rule"] == "large refunds"
    assert [v["rule_id"] for v in matched["shadow"]] == [trial.pk]
    assert queued == []  # the shadow rejection is not applied

    # A shadow rule that an enforced rule before it wins over has no verdict: it would not
    # have applied (a small refund is auto-approved by position 10 before 25).
    small = mirrored(20)
    assert shadow_key(trial.pk) not in (
        ReviewHandling.objects.get(review=small).rule.get("shadow") or {}
    )


def test_a_review_no_rule_would_handle_has_no_handling_row(queued: list[Any]) -> None:
    shadow_rule("only big", conditions=[{"path": "amount", "op": "gt", "value": 1000}])
    review = mirrored(30)
    assert not ReviewHandling.objects.filter(review=review).exists()
    assert not Event.objects.filter(review=review, verb="policy_shadowed").exists()


def test_a_disabled_shadow_rule_is_not_tried(queued: list[Any]) -> None:
    shadow_rule("off", enabled=False, action=Policy.Action.AUTO_APPROVE)
    review = mirrored(30)
    assert not ReviewHandling.objects.filter(review=review).exists()


def test_an_edit_keeps_the_verdicts_it_arrived_with_and_shows_the_edits(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    trial = shadow_rule(
        "refuse above 1000 (trial)",
        position=15,
        conditions=[{"path": "amount", "op": "gt", "value": 1000}],
        action=Policy.Action.AUTO_REJECT,
        reason="trial",
    )
    review = mirrored(300)
    assert shadow_key(trial.pk) not in verdicts_of(review)
    alice = reviewer("alice", finance)
    services.decide(review, alice, edit(review, 2000), via="admin")
    edited = Event.objects.get(review=review, verb="review_edited").data
    assert [v["rule_name"] for v in edited["shadow"]] == ["refuse above 1000 (trial)"]
    review.refresh_from_db()
    assert review.status == "pending"  # the shadow rejection did not act on the edit either
    assert review.tool_calls[0]["args"]["amount"] == 2000


def test_an_edit_that_moves_the_handling_keeps_the_mirrored_verdicts(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    trial = shadow_rule(
        "medium refunds (trial)",
        position=5,
        conditions=[{"path": "amount", "op": "gt", "value": 60}],
        action=Policy.Action.AUTO_APPROVE,
    )
    review = mirrored(80)  # no enforced rule: the default, with the trial's verdict
    assert verdicts_of(review)[shadow_key(trial.pk)]["action"] == "auto_approve"
    alice = reviewer("alice", finance)
    services.decide(review, alice, edit(review, 300), via="admin")  # under "large refunds" now
    row = ReviewHandling.objects.get(review=review)
    assert row.policy_id == refund_rules["large"].pk
    assert row.rule["shadow"][shadow_key(trial.pk)]["action"] == "auto_approve"


def decide_all(reviews: list[Review], user: User, bodies: list[dict[str, Any]]) -> None:
    for review, body in zip(reviews, bodies, strict=True):
        services.decide(review, user, body, via="admin")


def test_agreement_counts_what_people_decided(queued: list[Any], finance: Group) -> None:
    auto = shadow_rule(
        "approve small (trial)",
        conditions=[{"path": "amount", "op": "lte", "value": 50}],
        action=Policy.Action.AUTO_APPROVE,
    )
    refuse = shadow_rule(
        "refuse big (trial)",
        conditions=[{"path": "amount", "op": "gt", "value": 500}],
        action=Policy.Action.AUTO_REJECT,
        reason="trial",
    )
    finance_only = shadow_rule(
        "Finance decides medium (trial)",
        conditions=[{"path": "amount", "op": "gt", "value": 50}],
        position=50,
        group=finance,
    )
    bob = reviewer("bob")  # not in Finance
    alice = reviewer("alice", finance)
    small = [mirrored(10), mirrored(20), mirrored(30)]
    decide_all(small, bob, [approve(small[0]), approve(small[1]), reject(small[2])])
    edited = mirrored(40)
    services.decide(edited, bob, edit(edited, 45), via="admin")
    big = [mirrored(900), mirrored(1000)]
    decide_all(big, alice, [reject(big[0]), approve(big[1])])
    medium = [mirrored(100), mirrored(200)]
    decide_all(medium, alice, [approve(medium[0]), approve(medium[1])])
    by_bob = mirrored(300)
    services.decide(by_bob, bob, approve(by_bob), via="admin")
    mirrored(15)  # pending: no decision yet, not counted

    found = rule_trials.shadow_agreement([auto, refuse, finance_only])
    # approve small: two approvals agree; a rejection and an edited approval disagree.
    assert (found[auto.pk].agreed, found[auto.pk].disagreed) == (2, 2)
    assert found[auto.pk].rate == 0.5
    assert (found[refuse.pk].agreed, found[refuse.pk].disagreed) == (1, 1)
    # Finance decides (each shadow rule is tried with the enforced rules, not with the other
    # shadow rules): alice, in Finance, decided four; bob, not in Finance, one.
    assert (found[finance_only.pk].agreed, found[finance_only.pk].disagreed) == (4, 1)

    disagreed = [
        verdict.decided.review_id
        for rule_id, verdict in rule_trials.verdicts([auto])
        if verdict.agrees is False
    ]
    assert sorted(disagreed) == sorted([small[2].pk, edited.pk])


def test_decisions_a_rule_made_are_not_counted_as_peoples(
    queued: list[Any], refund_rules: dict[str, Policy]
) -> None:
    trial = shadow_rule(
        "review everything (trial)",
        position=1,
        conditions=[{"path": "amount", "op": "gte", "value": 0}],
    )
    review = mirrored(30)  # "small refunds" (enforced, position 10) approves it
    assert verdicts_of(review)[shadow_key(trial.pk)]["action"] == "review"
    assert governance.apply_policy(review.pk) is not None
    counts = rule_trials.shadow_agreement([trial])[trial.pk]
    assert (counts.agreed, counts.disagreed, counts.not_people) == (0, 0, 1)
    assert counts.rate is None


def test_people_decided_and_agrees_are_plain() -> None:
    assert policy_rules.people_decided(["approve", "approve"]) == "approved"
    assert policy_rules.people_decided(["approve", "edit"]) == "edited"
    assert policy_rules.people_decided(["reject", "respond"]) == "rejected"
    assert policy_rules.people_decided(["approve", "reject"]) == "mixed"
    quorum = {"action": "review", "approvals": 2}
    assert not policy_rules.agrees(quorum, "approved", approvers=1)
    assert policy_rules.agrees(quorum, "approved", approvers=2)
    assert policy_rules.agrees(quorum, "rejected", approvers=1)
    assert not policy_rules.agrees({"action": "review"}, "approved", in_group=False)
    assert not policy_rules.agrees({"action": "auto_reject"}, "mixed")
