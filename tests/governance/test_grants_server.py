"""Grants end to end (issue 36): the real LangGraph server, a real Celery worker, Redis and
PostgreSQL. A grant given with an approval approves the next call it covers (the tool runs on the
server) and not a wider one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

import nitro_assistants
from nitro_assistants import services
from nitro_assistants.models import Decision, Grant, Policy, Review, Thread
from nitro_assistants.services import grants
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


def applied(thread: Thread) -> Decision:
    return wait_for(
        lambda: Decision.objects.filter(review__thread=thread, outcome="applied").first(), 60
    )


def tool_results(assistant: Any, thread: Thread) -> list[str]:
    return [
        str(m.get("content"))
        for m in assistant.thread_messages(thread_id=str(thread.thread_id))
        if m.get("type") == "tool"
    ]


def test_a_grant_approves_the_next_matching_call_on_the_server_and_not_a_wider_one(
    assistant: Any,
) -> None:
    gina = reviewer("gina")
    gina.user_permissions.add(Permission.objects.get(codename="grant_approval"))
    gina = User.objects.get(pk=gina.pk)
    # 80: no rule matches (the default handling: one approval), so a grant may follow it.
    first = ask_refund(80)
    review = pending(first)
    body = {
        "tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}],
        "revision": review.revision,
        "digest": review.digest,
    }
    grants.decide_with_grant(
        review.pk,
        gina,
        body,
        {"scope": "assistant", "uses": 2, "args": {"amount": {"max": 80}}},
        via="admin",
    )
    applied(first)
    grant = Grant.objects.get()

    wider = ask_refund(95)  # above the grant's maximum: people decide it
    held = pending(wider)
    covered = ask_refund(70)
    decision = applied(covered)
    assert (decision.channel, decision.grant_id, decision.decided_by_id) == (
        "grant",
        grant.pk,
        None,
    )
    assert tool_results(assistant, covered) == ["Refunded 70 on order 7"]
    assert not Decision.objects.filter(review=held).exists()
    held.refresh_from_db()
    assert held.status == "pending"
    assert tool_results(assistant, wider) == []

    last = ask_refund(60)  # the second and last use
    assert applied(last).grant_id == grant.pk
    grant.refresh_from_db()
    assert (grant.uses, grant.uses_left, grant.state) == (2, 0, "used_up")
    spent = ask_refund(60)  # used up: people decide it
    assert pending(spent).status == "pending"
    assert not Decision.objects.filter(review__thread=spent).exists()
