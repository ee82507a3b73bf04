"""Policies end to end: the real LangGraph server, a real Celery worker, Redis and PostgreSQL."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

import nitro_assistants
from nitro_assistants import services
from nitro_assistants.exceptions import PolicyForbiddenError
from nitro_assistants.models import Approval, Decision, Event, Policy, Review, Thread
from nitro_assistants.services import governance, rule_trials
from nitro_assistants.testing.launchers import CeleryWorker
from tests.core.conftest import wait_for
from tests.governance.conftest import reviewer

pytestmark = [pytest.mark.server, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def assistant(
    server_settings: Any, celery_worker: CeleryWorker, refund_rules: dict[str, Policy]
) -> Any:
    return nitro_assistants.assistants()["refunds"]


def ask_refund(amount: float) -> Thread:
    calls = [{"name": "refund_customer", "args": {"order_id": 7, "amount": amount}}]
    return services.start_run("refunds", "tools:" + json.dumps(calls)).thread


def pending(thread: Thread) -> Review:
    return wait_for(lambda: Review.objects.filter(thread=thread, status="pending").first(), 60)


def tool_results(assistant: Any, thread: Thread) -> list[str]:
    return [
        str(m.get("content"))
        for m in assistant.thread_messages(thread_id=str(thread.thread_id))
        if m.get("type") == "tool"
    ]


def applied(review: Review) -> Decision:
    return wait_for(lambda: Decision.objects.filter(review=review, outcome="applied").first(), 60)


def body(review: Review, **edit: Any) -> dict[str, Any]:
    review.refresh_from_db()
    call = review.tool_calls[0]
    item: dict[str, Any] = {"id": call["id"], "action": "approve"}
    if edit:
        item = {"id": call["id"], "action": "edit", "args": {**call["args"], **edit}}
    return {"tool_calls": [item], "revision": review.revision, "digest": review.digest}


def test_a_small_refund_is_approved_by_the_policy_and_the_tool_runs(assistant: Any) -> None:
    thread = ask_refund(30)
    review = wait_for(lambda: Review.objects.filter(thread=thread).first(), 60)
    decision = applied(review)
    assert decision.reviewer_id == "policy:small refunds"
    assert decision.decided_by is None
    assert tool_results(assistant, thread) == ["Refunded 30 on order 7"]
    audit = Event.objects.get(review=review, verb="review_auto_decided").data
    assert (audit["rule"], audit["rule_version"], audit["by"]) == ("small refunds", 1, "policy")
    assert assistant.under_review(thread_id=str(thread.thread_id)) is None


def test_a_large_refund_needs_two_people(assistant: Any, finance: Group) -> None:
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    thread = ask_refund(300)
    review = pending(thread)
    assert isinstance(services.decide(review, alice, body(review), via="admin"), Approval)
    assert tool_results(assistant, thread) == []  # one approval of two: nothing runs
    assert assistant.under_review(thread_id=str(thread.thread_id)) is not None
    decision = services.decide(review, bob, body(review), via="admin")
    assert isinstance(decision, Decision)
    applied(review)
    assert tool_results(assistant, thread) == ["Refunded 300 on order 7"]


def test_an_edit_raising_the_amount_moves_it_under_the_stricter_rule(
    assistant: Any, finance: Group
) -> None:
    alice, bob, carol = reviewer("alice", finance), reviewer("bob", finance), reviewer("carol")
    thread = ask_refund(80)  # no rule: one approval by anyone would do
    review = pending(thread)
    with pytest.raises(PolicyForbiddenError):  # Carol is not in Finance
        services.decide(review, carol, body(review, amount=800), via="admin")
    recorded = services.decide(review, alice, body(review, amount=800), via="admin")
    assert isinstance(recorded, Approval)  # held: two people in Finance must approve 800
    review.refresh_from_db()
    assert review.handling.policy == Policy.objects.get(name="large refunds")
    services.decide(review, bob, body(review), via="admin")
    applied(review)
    (result,) = tool_results(assistant, thread)
    assert "a human reviewer replaced this tool call" in result  # the edit reached the server
    assert result.endswith("Refunded 800 on order 7")


def test_a_deadline_escalates_then_rejects_on_the_server(
    assistant: Any, finance: Group, managers: Group
) -> None:
    rule = Policy.objects.get(name="large refunds")
    rule.deadline = datetime.timedelta(hours=4)
    rule.on_deadline = Policy.OnDeadline.ESCALATE
    rule.escalate_to = managers
    rule.escalation_deadline = datetime.timedelta(hours=1)
    rule.on_escalation_deadline = Policy.AfterEscalation.REJECT
    rule.save()  # a new version: the worker compiles the rules again
    thread = ask_refund(300)
    review = pending(thread)
    start = timezone.now()
    assert governance.sweep_deadlines(now=start + datetime.timedelta(hours=4, minutes=1)) == {
        "escalated": 1
    }
    assert governance.sweep_deadlines(now=start + datetime.timedelta(hours=5, minutes=2)) == {
        "rejected": 1
    }
    decision = applied(review)
    assert decision.reviewer_id == "deadline:large refunds"
    (result,) = tool_results(assistant, thread)
    assert "Refunded" not in result  # the refund never ran
    verbs = list(Event.objects.filter(review=review).values_list("verb", flat=True))
    assert verbs.count("review_escalated") == 1 and verbs.count("review_auto_decided") == 1


def test_shadow_rules_never_act_on_the_server_and_their_agreement_shows(
    assistant: Any, finance: Group
) -> None:
    refuse = Policy.objects.create(
        name="refuse refunds above 100 (trial)",
        mode=Policy.Mode.SHADOW,
        position=25,
        tool="refund_*",
        conditions=[{"path": "amount", "op": "gt", "value": 100}],
        action=Policy.Action.AUTO_REJECT,
        reason="trial",
    )
    through = Policy.objects.create(
        name="refunds up to 100 go through (trial)",
        mode=Policy.Mode.SHADOW,
        position=25,
        tool="refund_*",
        conditions=[{"path": "amount", "op": "lte", "value": 100}],
        action=Policy.Action.AUTO_APPROVE,
    )
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    large = ask_refund(300)  # "large refunds" acts; the trial would have refused it
    review = pending(large)
    services.decide(review, alice, body(review), via="admin")
    services.decide(review, bob, body(review), via="admin")
    applied(review)
    assert tool_results(assistant, large) == ["Refunded 300 on order 7"]  # not refused
    mid = ask_refund(80)  # no enforced rule; the trial would have approved it at once
    review = pending(mid)
    assert assistant.under_review(thread_id=str(mid.thread_id)) is not None  # it waited
    services.decide(review, alice, body(review), via="admin")
    applied(review)
    assert tool_results(assistant, mid) == ["Refunded 80 on order 7"]

    found = rule_trials.shadow_agreement([refuse, through])
    assert (found[refuse.pk].agreed, found[refuse.pk].disagreed) == (0, 1)
    assert (found[through.pk].agreed, found[through.pk].disagreed) == (1, 0)
