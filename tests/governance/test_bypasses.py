"""Issue 34: the ways an attack run walked around the rules, each as the case it found, through
the real mirror path and ``services.decide`` (the admin's, bulk actions' and the API's one
entry) or the decide API itself. Every test here failed on the commit before its fix."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from nitro_assistants import services
from nitro_assistants.exceptions import (
    InteractionDecisionError,
    PolicyForbiddenError,
)
from nitro_assistants.models import ApiKey, Approval, Decision, Policy, Review, ReviewHandling
from nitro_assistants.services import decidable_by, governance
from nitro_assistants.services.policy_enforcement import lapsed_approvals, waiting_for
from tests.governance.conftest import approve, mirrored, reviewer

pytestmark = pytest.mark.django_db


def edit(review: Review, **args: Any) -> dict[str, Any]:
    """An edit naming only the arguments it changes, as the admin screen posts it."""
    review.refresh_from_db()
    return {
        "tool_calls": [{"id": "call_0", "action": "edit", "args": args}],
        "revision": review.revision,
        "digest": review.digest,
    }


@pytest.fixture
def fee_rule(finance: Group) -> Policy:
    """Fees above 100 need one approval, by Finance."""
    return Policy.objects.create(
        name="large fees",
        position=5,
        tool="refund_*",
        conditions=[{"path": "amount", "op": "gt", "value": 100}],
        approvals=1,
        group=finance,
    )


# -- partial edits are merged into the held call ----------------------------------------------


def test_a_partial_edit_is_decided_stored_and_sent_as_the_whole_call(queued: list[Any]) -> None:
    review = mirrored(80)
    carol = reviewer("carol")
    decision = services.decide(review, carol, edit(review, amount=60), via="admin")
    assert isinstance(decision, Decision)
    assert decision.tool_calls == [
        {"id": "call_0", "action": "edit", "args": {"order_id": 7, "amount": 60}}
    ]
    assert decision.run is not None
    assert decision.run.input["tool_calls"][0]["args"] == {"order_id": 7, "amount": 60}


def test_a_partial_edit_under_quorum_keeps_every_argument(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    first = services.decide(review, alice, edit(review, amount=250), via="admin")
    assert isinstance(first, Approval)
    review.refresh_from_db()
    assert review.tool_calls[0]["args"] == {"order_id": 7, "amount": 250}
    decision = services.decide(review, bob, approve(review), via="admin")
    assert isinstance(decision, Decision)
    assert decision.tool_calls == [
        {"id": "call_0", "action": "edit", "args": {"order_id": 7, "amount": 250}}
    ]


# -- the rules read the merged call --------------------------------------------------------------


def test_a_rule_on_an_argument_the_edit_left_alone_still_applies(
    queued: list[Any], finance: Group
) -> None:
    Policy.objects.create(
        name="order 7 refunds over 1000",
        tool="refund_*",
        conditions=[
            {"path": "order_id", "op": "eq", "value": 7},
            {"path": "amount", "op": "gt", "value": 1000},
        ],
        group=finance,
    )
    review = mirrored(20)
    carol = reviewer("carol")
    with pytest.raises(PolicyForbiddenError, match="Finance"):
        services.decide(review, carol, edit(review, amount=4000), via="admin")
    assert not Decision.objects.filter(review=review).exists()


# -- types: an edit keeps the held value's type; rules fail closed on what they cannot compare --


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("5000", "must be a number"),
        (True, "must be a number"),
        ([5000], "must be a number"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        (-float("inf"), "finite"),
    ],
)
def test_an_edit_of_another_type_is_a_field_error_and_nothing_is_recorded(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group, value: Any, says: str
) -> None:
    review = mirrored(20)
    alice = reviewer("alice", finance)
    with pytest.raises(InteractionDecisionError, match=says) as raised:
        services.decide(review, alice, edit(review, amount=value), via="admin")
    assert raised.value.field == "tool_calls[0].args.amount"
    review.refresh_from_db()
    assert (review.status, review.revision) == ("pending", 1)
    assert not Decision.objects.filter(review=review).exists()


def test_a_string_number_through_the_api_is_a_400_naming_the_argument(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(20)
    alice = reviewer("alice", finance)
    key = ApiKey.generate(alice, "tests")[1]
    response = Client().post(
        f"/nitro/api/reviews/{review.pk}/decide",
        data=json.dumps(edit(review, amount="5000")),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 400, response.content
    assert response.json()["details"]["field"] == "tool_calls[0].args.amount"
    assert not Decision.objects.filter(review=review).exists()


def test_a_held_value_the_rules_cannot_compare_fails_closed_and_says_so(
    queued: list[Any], refund_rules: dict[str, Policy]
) -> None:
    review = mirrored("5000")  # type: ignore[arg-type]  # the model sent a string
    row = ReviewHandling.objects.get(review=review)
    # The strictest of the rules that could apply: the auto-rejection above 5000.
    assert row.action == Policy.Action.AUTO_REJECT
    assert "amount gt 5000" in row.handling.unsure
    assert '"5000"' in row.handling.unsure


def test_an_auto_rejected_review_cannot_be_approved_by_a_person_before_the_policy_runs(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(9000)  # the rejection is enqueued (apply_policy), not yet applied
    assert ReviewHandling.objects.get(review=review).action == Policy.Action.AUTO_REJECT
    alice = reviewer("alice", finance)
    with pytest.raises(PolicyForbiddenError, match="huge refunds"):
        services.decide(review, alice, approve(review), via="admin")
    assert not Decision.objects.filter(review=review).exists()


# -- a rule's group, on edit and on every way a review ends --------------------------------------


def test_an_edit_into_a_groups_rule_is_refused_to_an_outsider(
    queued: list[Any], fee_rule: Policy, finance: Group
) -> None:
    review = mirrored(20)  # no rule: anyone may decide
    carol = reviewer("carol")
    with pytest.raises(PolicyForbiddenError, match="only members of Finance"):
        services.decide(review, carol, edit(review, amount=500), via="admin")
    review.refresh_from_db()
    assert (review.status, review.revision) == ("pending", 1)
    assert not ReviewHandling.objects.filter(review=review).exists()
    # A member of Finance may make the same edit, and it is decided at once (one approval).
    alice = reviewer("alice", finance)
    decision = services.decide(review, alice, edit(review, amount=500), via="admin")
    assert isinstance(decision, Decision)
    assert ReviewHandling.objects.get(review=review).policy == fee_rule


def test_an_edit_into_a_groups_rule_is_refused_to_an_outsider_over_the_api(
    queued: list[Any], fee_rule: Policy
) -> None:
    review = mirrored(20)
    carol = reviewer("carol")
    key = ApiKey.generate(carol, "tests")[1]
    response = Client().post(
        f"/nitro/api/reviews/{review.pk}/decide",
        data=json.dumps(edit(review, amount=500)),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 403, response.content
    assert "Finance" in response.json()["message"]
    assert not Decision.objects.filter(review=review).exists()


def test_an_edit_between_two_groups_rules_is_refused(
    queued: list[Any], fee_rule: Policy, finance: Group, managers: Group
) -> None:
    Policy.objects.create(
        name="managers' refunds",
        position=1,
        tool="refund_*",
        conditions=[{"path": "amount", "op": "gt", "value": 1000}],
        group=managers,
    )
    review = mirrored(500)  # under Finance's rule
    both = reviewer("both", finance, managers)
    with pytest.raises(PolicyForbiddenError, match="no one group may decide it"):
        services.decide(review, both, edit(review, amount=2000), via="admin")
    assert not Decision.objects.filter(review=review).exists()


def test_dismissing_asks_the_rules_group_too(
    queued: list[Any], refund_rules: dict[str, Policy]
) -> None:
    review = mirrored(300)  # two approvals by Finance
    carol = reviewer("carol")
    with pytest.raises(PolicyForbiddenError, match="Finance"):
        services.dismiss(review, carol, via="admin")
    review.refresh_from_db()
    assert review.status == "pending"


def test_an_outsider_is_refused_a_rejection_and_the_queue_does_not_offer_the_review(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    carol, alice = reviewer("carol"), reviewer("alice", finance)
    reject = {**approve(review), "tool_calls": [{"id": "call_0", "action": "reject"}]}
    with pytest.raises(PolicyForbiddenError):
        services.decide(review, carol, reject, via="api")
    assert not services.may_decide(carol, review, "admin")
    assert not Review.objects.filter(decidable_by(carol, "admin"), pk=review.pk).exists()
    assert Review.objects.filter(decidable_by(alice, "admin"), pk=review.pk).exists()


# -- approvals that lapse --------------------------------------------------------------------------


def test_an_approval_by_someone_deactivated_before_the_quorum_no_longer_counts(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    assert isinstance(services.decide(review, alice, approve(review), via="admin"), Approval)
    User.objects.filter(pk=alice.pk).update(is_active=False)
    second = services.decide(review, bob, approve(review), via="admin")
    assert isinstance(second, Approval)  # not applied: alice's approval lapsed
    assert waiting_for(review) == "1 of 2 approvals · waiting for someone in Finance"
    assert [(a.user.username, why) for a, why in lapsed_approvals(review)] == [
        ("alice", "deactivated")
    ]


def test_an_approval_by_someone_taken_out_of_the_group_no_longer_counts(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    services.decide(review, alice, approve(review), via="admin")
    alice.groups.remove(finance)
    assert isinstance(services.decide(review, bob, approve(review), via="admin"), Approval)
    assert [(a.user.username, why) for a, why in lapsed_approvals(review)] == [
        ("alice", "no longer in Finance")
    ]


def test_the_review_screen_says_whose_approval_lapsed(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    services.decide(review, alice, approve(review), via="admin")
    User.objects.filter(pk=alice.pk).update(is_active=False)
    client = Client()
    client.force_login(bob)
    page = client.get(f"/admin/nitro_assistants/review/{review.pk}/review/")
    assert page.status_code == 200
    html = page.content.decode()
    (lapsed,) = re.findall(r'<dd class="nitro-lapsed">(.*?)</dd>', html)
    assert lapsed == "alice's approval lapsed (deactivated)"


# -- what an approval runs after a quorum edit ------------------------------------------------------


def test_a_deadline_approving_an_edited_review_runs_the_edited_call(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    """Found while looking for the next bypass: the deadline approved "as the assistant held
    it", so after Alice edited a $300 refund to $250 (awaiting a second approval) the deadline
    ran $300 while the review showed $250."""
    rule = refund_rules["large"]
    rule.on_deadline = Policy.OnDeadline.APPROVE
    rule.save()
    review = mirrored(300)
    alice = reviewer("alice", finance)
    assert isinstance(
        services.decide(review, alice, edit(review, amount=250), via="admin"), Approval
    )
    row = ReviewHandling.objects.get(review=review)
    assert governance.sweep_deadlines(now=row.due_at + datetime.timedelta(seconds=1)) == {
        "approved": 1
    }
    decision = Decision.objects.get(review=review)
    assert decision.tool_calls == [
        {"id": "call_0", "action": "edit", "args": {"order_id": 7, "amount": 250}}
    ]


def test_an_approval_by_someone_whose_permission_was_revoked_no_longer_counts(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    services.decide(review, alice, approve(review), via="admin")
    alice.user_permissions.remove(Permission.objects.get(codename="decide_review"))
    assert isinstance(services.decide(review, bob, approve(review), via="admin"), Approval)
    assert [(a.user.username, why) for a, why in lapsed_approvals(review)] == [
        ("alice", "may no longer decide")
    ]


def test_bulk_actions_ask_the_rules_group_per_review(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    finance_only, anyones = mirrored(300), mirrored(80)
    carol = reviewer("carol")
    client = Client()
    client.force_login(carol)
    for action, extra in (("approve_selected", {}), ("reject_selected", {"reason": "no"})):
        client.post(
            "/admin/nitro_assistants/review/",
            {
                "action": action,
                "_selected_action": [finance_only.pk, anyones.pk],
                "post": "yes",
                **extra,
            },
            follow=True,
        )
        assert not Decision.objects.filter(review=finance_only).exists()
    # The review no rule holds was decided by the first action; the Finance one by neither.
    assert Decision.objects.filter(review=anyones).count() == 1
    finance_only.refresh_from_db()
    assert finance_only.status == "pending"
