"""Policies, quorum and deadlines through the real mirror and decide paths (scripted server)."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.utils import timezone

from nitro_assistants import services, signals
from nitro_assistants.exceptions import (
    InteractionConflictError,
    InteractionDecisionError,
    InteractionForbiddenError,
    PolicyForbiddenError,
)
from nitro_assistants.models import Approval, Decision, Event, Policy, Review, ReviewHandling
from nitro_assistants.services import governance
from nitro_assistants.services.policy_enforcement import waiting_for
from tests.governance.conftest import approve, mirrored, reviewer

pytestmark = pytest.mark.django_db


def verbs(review: Review) -> list[str]:
    return list(Event.objects.filter(review=review).values_list("verb", flat=True))


def event(review: Review, verb: str) -> dict[str, Any]:
    return Event.objects.filter(review=review, verb=verb).latest("pk").data


def test_a_rules_decision_that_meets_a_database_restart_is_retried(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    refund_rules: dict[str, Policy],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The cluster (docs/scale.md): PostgreSQL restarting failed six apply_policy tasks for good,
    # and the small refunds their rule approves at once were left pending for people.
    from django.db import OperationalError

    from nitro_assistants import tasks

    with django_capture_on_commit_callbacks(execute=True):
        review = mirrored(30)
    real = governance.apply_policy
    tries: list[int] = []

    def restarting(pk: int) -> Any:
        tries.append(pk)
        if len(tries) == 1:
            raise OperationalError("terminating connection due to administrator command")
        return real(pk)

    monkeypatch.setattr(tasks.governance, "apply_policy", restarting)
    with django_capture_on_commit_callbacks(execute=True):
        decision_pk = tasks.apply_policy.apply(args=(review.pk,)).get()
    assert tries == [review.pk, review.pk]
    review.refresh_from_db()
    assert review.status == "decided"
    assert Decision.objects.get(review=review).pk == decision_pk


def test_a_rules_decision_whose_task_was_lost_is_enqueued_again_by_the_sweep(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    refund_rules: dict[str, Policy],
    finance: Group,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        small = mirrored(30)  # its rule approves it at once: apply_policy enqueued, then lost
        mirrored(300)  # two people in Finance: nothing to enqueue again
    queued.clear()
    from nitro_assistants.conf import app_settings

    now = timezone.now()
    assert services.requeue_stale(now)["policies"] == 0  # not yet: its task may be on its way
    later = now + datetime.timedelta(seconds=app_settings.REQUEUE_AFTER + 1)
    assert services.requeue_stale(later)["policies"] == 1
    assert [args for name, args in queued if name == "nitro_assistants.apply_policy"] == [
        (small.pk,)
    ]
    with django_capture_on_commit_callbacks(execute=True):
        assert governance.apply_policy(small.pk) is not None
    queued.clear()
    assert services.requeue_stale(later)["policies"] == 0  # decided: not again


def test_a_small_refund_is_approved_by_its_rule_after_commit(
    django_capture_on_commit_callbacks: Any, queued: list[Any], refund_rules: dict[str, Policy]
) -> None:
    auto: list[dict[str, Any]] = []
    signals.review_auto_decided.connect(lambda sender, **kw: auto.append(kw), weak=False)
    with django_capture_on_commit_callbacks(execute=True):
        review = mirrored(30)
        assert queued == []  # nothing leaves before commit
    assert queued == [("nitro_assistants.apply_policy", (review.pk,))]
    assert event(review, "policy_matched")["rule"] == "small refunds"

    with django_capture_on_commit_callbacks(execute=True):
        decision = governance.apply_policy(review.pk)
    assert governance.apply_policy(review.pk) is None  # delivered twice: decided once
    assert decision is not None
    review.refresh_from_db()
    assert review.status == "decided"
    assert decision.reviewer_id == "policy:small refunds"
    assert decision.decided_by is None
    assert decision.tool_calls == [{"id": "call_0", "action": "approve"}]
    assert ("nitro_assistants.resume_thread", (decision.pk,)) in queued
    data = event(review, "review_auto_decided")
    rule = refund_rules["small"]
    assert (data["rule"], data["rule_id"], data["rule_version"], data["by"]) == (
        "small refunds",
        rule.pk,
        1,
        "policy",
    )
    assert "small refunds" in event(review, "review_decided")["note"]
    assert [kw["by"] for kw in auto] == ["policy"] and auto[0]["decision"] == decision

    # Changing the rule never rewrites what it decided.
    rule.conditions = [{"path": "amount", "op": "lte", "value": 10}]
    rule.save()
    assert Policy.objects.get(pk=rule.pk).version == 2
    assert event(review, "review_auto_decided")["rule_version"] == 1
    assert ReviewHandling.objects.get(review=review).handling.rule_version == 1


def test_a_huge_refund_is_rejected_with_the_rules_reason(
    queued: list[Any], refund_rules: dict[str, Policy]
) -> None:
    review = mirrored(9000)
    decision = governance.apply_policy(review.pk)
    assert decision is not None
    assert decision.tool_calls == [
        {
            "id": "call_0",
            "action": "reject",
            "message": "Refunds above 5000 go through the bank, not the assistant",
        }
    ]


def test_a_person_deciding_first_leaves_the_policy_nothing(
    queued: list[Any], refund_rules: dict[str, Policy]
) -> None:
    review = mirrored(30)
    alice = reviewer("alice")
    services.decide(review, alice, approve(review), via="admin")
    assert governance.apply_policy(review.pk) is None
    assert Decision.objects.get().reviewer_id == "alice"


def test_a_large_refund_needs_two_distinct_people_in_finance(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice, bob, eve = reviewer("alice", finance), reviewer("bob", finance), reviewer("eve")
    assert waiting_for(review) == "0 of 2 approvals · waiting for someone in Finance"
    handling = ReviewHandling.objects.get(review=review)
    assert (handling.approvals_required, handling.priority) == (2, 5)
    assert handling.due_at is not None

    with pytest.raises(InteractionForbiddenError, match="Only members of Finance"):
        services.decide(review, eve, approve(review), via="admin")
    first = services.decide(review, alice, approve(review), via="admin")
    assert isinstance(first, Approval)
    again = services.decide(review, alice, approve(review), via="admin")
    assert again == first  # the same person never counts twice
    review.refresh_from_db()
    assert review.status == "pending"
    assert waiting_for(review) == "1 of 2 approvals · waiting for someone in Finance"
    assert not Decision.objects.exists()

    decision = services.decide(review, bob, approve(review), via="admin")
    assert isinstance(decision, Decision)
    review.refresh_from_db()
    assert review.status == "decided"
    assert decision.reviewer_id == "bob"
    assert decision.note == "Approved by alice, bob"
    assert decision.tool_calls == [{"id": "call_0", "action": "approve"}]
    assert [
        e["approvals"]
        for e in Event.objects.filter(review=review, verb="review_approved").values_list(
            "data", flat=True
        )
    ] == [1, 2]
    with pytest.raises(InteractionConflictError):
        services.decide(review, eve, approve(review))


def test_any_reject_ends_a_quorum(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    services.decide(review, alice, approve(review), via="admin")
    review.refresh_from_db()
    decision = services.decide(
        review,
        bob,
        {
            "tool_calls": [{"id": "call_0", "action": "reject", "message": "no"}],
            "revision": review.revision,
            "digest": review.digest,
        },
        via="admin",
    )
    assert isinstance(decision, Decision)
    assert decision.actions == ["reject"]


def test_a_mixed_decision_is_refused_on_a_quorum(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300, calls=2)
    alice = reviewer("alice", finance)
    body = {
        "tool_calls": [
            {"id": "call_0", "action": "approve"},
            {"id": "call_1", "action": "reject"},
        ],
        "revision": review.revision,
        "digest": review.digest,
    }
    with pytest.raises(InteractionDecisionError, match="needs 2 approvals"):
        services.decide(review, alice, body, via="admin")
    assert not Approval.objects.exists()


def test_the_person_who_started_it_may_not_approve_a_quorum(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group, settings: Any
) -> None:
    alice = reviewer("alice", finance)
    review = mirrored(300, opened_by=alice)
    with pytest.raises(InteractionForbiddenError, match="someone else must approve"):
        services.decide(review, alice, approve(review), via="admin")
    # They may still reject it.
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "SEPARATE_DUTIES": "never"}
    assert isinstance(services.decide(review, alice, approve(review), via="admin"), Approval)


def test_separation_always_covers_single_approvals(queued: list[Any], settings: Any) -> None:
    alice = reviewer("alice")
    review = mirrored(80, opened_by=alice)  # no rule: one approval
    assert isinstance(services.decide(review, alice, approve(review), via="admin"), Decision)
    review = mirrored(80, opened_by=alice)
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "SEPARATE_DUTIES": "always"}
    with pytest.raises(InteractionForbiddenError):
        services.decide(review, alice, approve(review), via="admin")


def edit(review: Review, amount: float) -> dict[str, Any]:
    review.refresh_from_db()
    return {
        "tool_calls": [
            {"id": "call_0", "action": "edit", "args": {"order_id": 7, "amount": amount}}
        ],
        "revision": review.revision,
        "digest": review.digest,
    }


def test_an_edit_raising_the_amount_moves_it_under_the_stricter_rule(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(80)  # no rule matches: one approval by anyone
    assert not ReviewHandling.objects.filter(review=review).exists()
    alice, bob, carol = reviewer("alice", finance), reviewer("bob", finance), reviewer("carol")
    shown_first = review.digest
    # Carol is not in Finance: an edit that puts the refund under Finance's rule is refused
    # before anything is recorded (issue 34: a rule's group was ignored on edit).
    with pytest.raises(PolicyForbiddenError, match="only members of Finance"):
        services.decide(review, carol, edit(review, 300), via="admin")
    review.refresh_from_db()
    assert (review.status, review.revision, review.digest) == ("pending", 1, shown_first)
    assert not ReviewHandling.objects.filter(review=review).exists()
    first = services.decide(review, alice, edit(review, 300), via="admin")
    assert isinstance(first, Approval)  # not applied: the large-refund rule now holds it
    review.refresh_from_db()
    assert review.status == "pending"
    assert review.revision == 2
    assert review.tool_calls[0]["args"]["amount"] == 300
    assert event(review, "policy_matched")["why"] == "edited"
    assert waiting_for(review) == "1 of 2 approvals · waiting for someone in Finance"
    with pytest.raises(InteractionConflictError):  # approving what was shown before the edit
        services.decide(
            review,
            bob,
            {
                "tool_calls": [{"id": "call_0", "action": "approve"}],
                "revision": 1,
                "digest": shown_first,
            },
            via="admin",
        )
    decision = services.decide(review, bob, approve(review), via="admin")
    assert isinstance(decision, Decision)
    # The server is told of the edit the approvers approved.
    assert decision.tool_calls == [
        {"id": "call_0", "action": "edit", "args": {"order_id": 7, "amount": 300}}
    ]


def test_an_edit_restarts_the_count_and_never_loosens(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    services.decide(review, alice, approve(review), via="admin")
    services.decide(review, bob, edit(review, 30), via="admin")  # below the auto-approve limit
    review.refresh_from_db()
    assert review.status == "pending"
    assert ReviewHandling.objects.get(review=review).approvals_required == 2
    assert waiting_for(review) == "1 of 2 approvals · waiting for someone in Finance"
    assert [a.user.username for a in services.policy_enforcement.approved_by(review)] == ["bob"]
    decision = services.decide(review, alice, approve(review), via="admin")
    assert isinstance(decision, Decision)
    assert decision.tool_calls[0]["args"] == {"order_id": 7, "amount": 30}


def test_an_edit_under_a_rejecting_rule_is_rejected_by_it(
    queued: list[Any], refund_rules: dict[str, Policy]
) -> None:
    review = mirrored(80)
    carol = reviewer("carol")
    decision = services.decide(review, carol, edit(review, 9000), via="admin")
    assert isinstance(decision, Decision)
    assert decision.actions == ["reject"]
    assert decision.reviewer_id == "policy:huge refunds"


# -- deadlines ------------------------------------------------------------------------------------


@pytest.fixture
def escalating(finance: Group, managers: Group) -> Policy:
    return Policy.objects.create(
        name="large refunds",
        tool="refund_*",
        approvals=2,
        group=finance,
        deadline=datetime.timedelta(hours=4),
        on_deadline=Policy.OnDeadline.ESCALATE,
        escalate_to=managers,
        escalation_deadline=datetime.timedelta(hours=1),
        on_escalation_deadline=Policy.AfterEscalation.REJECT,
    )


def test_a_deadline_escalates_then_rejects_each_once(
    django_capture_on_commit_callbacks: Any, queued: list[Any], escalating: Policy, managers: Group
) -> None:
    escalated: list[dict[str, Any]] = []
    signals.review_escalated.connect(lambda sender, **kw: escalated.append(kw), weak=False)
    review = mirrored(300)
    start = timezone.now()
    assert governance.sweep_deadlines(now=start + datetime.timedelta(hours=3)) == {}
    with django_capture_on_commit_callbacks(execute=True):
        done = governance.sweep_deadlines(now=start + datetime.timedelta(hours=4, minutes=1))
    assert done == {"escalated": 1}
    handling = ReviewHandling.objects.get(review=review)
    assert (handling.group, handling.priority, handling.stage) == (managers, 1, "escalated")
    assert [kw["group"] for kw in escalated] == [managers]
    assert event(review, "review_escalated")["rule"] == "large refunds"
    assert waiting_for(Review.objects.get(pk=review.pk)).endswith("someone in Managers")
    assert governance.sweep_deadlines(now=start + datetime.timedelta(hours=4, minutes=2)) == {}

    done = governance.sweep_deadlines(now=start + datetime.timedelta(hours=5, minutes=2))
    assert done == {"rejected": 1}
    decision = Decision.objects.get(review=review)
    assert decision.reviewer_id == "deadline:large refunds"
    assert decision.channel == "deadline"
    assert decision.actions == ["reject"]
    assert event(review, "review_auto_decided")["by"] == "deadline"
    assert governance.sweep_deadlines(now=start + datetime.timedelta(days=1)) == {}
    assert verbs(review).count("review_escalated") == 1


def test_a_deadline_with_nothing_to_do_flags_it_overdue_once(
    queued: list[Any], refund_rules: dict[str, Policy]
) -> None:
    review = mirrored(300)
    later = timezone.now() + datetime.timedelta(hours=5)
    assert governance.sweep_deadlines(now=later) == {"overdue": 1}
    assert governance.sweep_deadlines(now=later) == {}
    review.refresh_from_db()
    assert review.status == "pending"


@pytest.mark.postgresql("row locks with SKIP LOCKED")
@pytest.mark.django_db(transaction=True)
def test_two_racing_sweeps_apply_each_deadline_once(
    queued: list[Any], finance: Group, managers: Group
) -> None:
    # Refunds under 115 escalate (no decision's own lock guards that), the others are rejected.
    Policy.objects.create(
        name="small: escalate",
        position=1,
        tool="refund_*",
        conditions=[{"path": "amount", "op": "lt", "value": 115}],
        deadline=datetime.timedelta(minutes=5),
        on_deadline=Policy.OnDeadline.ESCALATE,
        escalate_to=managers,
    )
    Policy.objects.create(
        name="others: reject",
        position=2,
        tool="refund_*",
        deadline=datetime.timedelta(minutes=5),
        on_deadline=Policy.OnDeadline.REJECT,
    )
    reviews = [mirrored(100 + i) for i in range(30)]
    later = timezone.now() + datetime.timedelta(minutes=6)
    results: list[dict[str, int]] = []
    barrier = threading.Barrier(2)

    def sweep() -> None:
        barrier.wait()
        try:
            results.append(governance.sweep_deadlines(now=later))
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total: dict[str, int] = {}
    for result in results:
        for done, n in result.items():
            total[done] = total.get(done, 0) + n
    assert total == {"escalated": 15, "rejected": 15}
    assert Decision.objects.count() == 15
    assert not Event.objects.filter(verb="deadline_failed").exists()
    for review in reviews:
        applied = Event.objects.filter(
            review=review, verb__in=["review_escalated", "review_auto_decided"]
        )
        assert applied.count() == 1, list(applied.values_list("verb", flat=True))


@pytest.mark.postgresql("row locks")
@pytest.mark.django_db(transaction=True)
def test_two_last_approvers_at_once_apply_it_once(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    review = mirrored(300)
    alice, bob, carol = (reviewer(name, finance) for name in ("alice", "bob", "carol"))
    services.decide(review, carol, approve(review), via="admin")
    body = approve(review)
    outcomes: list[Any] = []
    barrier = threading.Barrier(2)

    def approve_as(user: Any) -> None:
        barrier.wait()
        try:
            outcomes.append(services.decide(review.pk, user, body, via="admin"))
        except Exception as exc:  # the loser's refusal is the point
            outcomes.append(exc)
        finally:
            connection.close()

    # Carol approved: Alice and Bob are both the last approver of two.
    threads = [threading.Thread(target=approve_as, args=(u,)) for u in (alice, bob)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(type(o).__name__ for o in outcomes) == ["Decision", "ReviewNotPendingError"]
    assert Decision.objects.filter(review=review).count() == 1
    assert [name for name, _ in queued].count("nitro_assistants.resume_thread") == 1


def test_a_deadline_decision_the_call_does_not_allow_is_recorded_not_raised(
    queued: list[Any],
) -> None:
    Policy.objects.create(
        name="approve when late",
        tool="refund_*",
        deadline=datetime.timedelta(minutes=5),
        on_deadline=Policy.OnDeadline.APPROVE,
    )
    review = mirrored(100)
    Review.objects.filter(pk=review.pk).update(
        payload={
            **review.payload,
            "tool_calls": [{**review.tool_calls[0], "allowed_decisions": ["reject"]}],
        }
    )
    later = timezone.now() + datetime.timedelta(minutes=6)
    assert governance.sweep_deadlines(now=later) == {"failed": 1}
    assert governance.sweep_deadlines(now=later) == {}
    review.refresh_from_db()
    assert review.status == "pending"
    assert "approve" in event(review, "deadline_failed")["error"]
