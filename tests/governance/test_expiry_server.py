"""Honest expiry end to end: the real LangGraph server, a real Celery worker, Redis and
PostgreSQL. An expired tool call reaches the graph as a rejection that says so; a plain
interrupt's own ``expiresAt`` is honoured and the graph reads the documented expiry value."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from django.utils import timezone

import nitro_assistants
from nitro_assistants import services
from nitro_assistants.models import Decision, Event, Policy, Review, Thread
from nitro_assistants.services import governance
from nitro_assistants.testing.launchers import CeleryWorker
from tests.core.conftest import wait_for

pytestmark = [pytest.mark.server, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker(server_settings: Any, celery_worker: CeleryWorker) -> CeleryWorker:
    return celery_worker


def pending(thread: Thread) -> Review:
    return wait_for(lambda: Review.objects.filter(thread=thread, status="pending").first(), 60)


def applied(review: Review) -> Decision:
    return wait_for(lambda: Decision.objects.filter(review=review, outcome="applied").first(), 90)


def test_an_expired_tool_call_reaches_the_graph_as_a_rejection_that_says_so(
    worker: CeleryWorker,
) -> None:
    Policy.objects.create(
        name="refunds expire",
        tool="refund_*",
        deadline=datetime.timedelta(minutes=30),
        on_deadline=Policy.OnDeadline.EXPIRE,
    )
    calls = [{"name": "refund_customer", "args": {"order_id": 7, "amount": 300}}]
    thread = services.start_run("refunds", "tools:" + json.dumps(calls)).thread
    review = pending(thread)
    assert review.expires_at is not None
    later = review.expires_at + datetime.timedelta(seconds=1)
    assert governance.sweep_deadlines(now=later) == {"expired": 1}
    decision = applied(review)
    assert decision.reviewer_id == "expiry:refunds expire"
    review.refresh_from_db()
    assert review.status == "expired"  # stays expired once the assistant was told
    assistant = nitro_assistants.assistants()["refunds"]
    results = [
        str(m.get("content"))
        for m in assistant.thread_messages(thread_id=str(thread.thread_id))
        if m.get("type") == "tool"
    ]
    assert len(results) == 1
    assert "Expired unanswered" in results[0] and "Refunded" not in results[0]
    assert assistant.under_review(thread_id=str(thread.thread_id)) is None
    assert Event.objects.filter(review=review, verb="review_expired").count() == 1
    # The evidence: what the expiry decided is what ran (the refund did not).
    recorded = Event.objects.filter(review=review, verb="decision_recorded").latest("pk").data
    assert recorded["mismatches"] == []


def test_a_pauses_own_expires_at_is_honoured_and_the_graph_reads_it_expired(
    worker: CeleryWorker,
) -> None:
    expires_at = (timezone.now() + datetime.timedelta(minutes=10)).isoformat()
    thread = services.start_run("expiring", expires_at).thread
    review = pending(thread)
    assert review.kind == "interrupt"
    assert review.expires_at == datetime.datetime.fromisoformat(expires_at)
    assert governance.sweep_deadlines(now=timezone.now()) == {"warned": 1}  # within 15 minutes
    later = review.expires_at + datetime.timedelta(seconds=1)
    assert governance.sweep_deadlines(now=later) == {"expired": 1}
    applied(review)
    messages = nitro_assistants.assistants()["expiring"].thread_messages(
        thread_id=str(thread.thread_id)
    )
    last = str(messages[-1].get("content"))
    assert last.startswith("answer={") and "'expired': True" in last
    assert f"'expiredAt': '{expires_at}'" in last and "Expired unanswered" in last
