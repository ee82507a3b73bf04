"""Slack end to end: the real LangGraph server, a real Celery worker (posting and updating the
cards), Redis and PostgreSQL, the local Slack server, and clicks signed as Slack signs them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client

import nitro_assistants
from nitro_assistants import services
from nitro_assistants.models import Decision, Review, Run, SlackCard, Thread
from nitro_assistants.services import reply_tokens
from nitro_assistants.testing.launchers import CeleryWorker
from nitro_assistants.testing.slack import SlackServer
from tests.admin.conftest import review_url, stamp
from tests.celery_app import app as celery_app
from tests.channels.conftest import (
    TOKEN,
    click_payload,
    make_reviewer,
    post_signed,
    slack_settings,
    slack_user,
)
from tests.channels.test_email_replies import QUOTED, post, reply
from tests.conftest import ROOT
from tests.core.conftest import proxy, wait_for
from tests.core.proxy import Proxy

__all__ = ["proxy"]

pytestmark = [
    pytest.mark.server,
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("a Celery worker process cannot open the SQLite test database"),
]


@pytest.fixture(scope="module")
def module_slack() -> Iterator[SlackServer]:
    with SlackServer(token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def slack_worker(
    proxy: Proxy,
    module_slack: SlackServer,
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CeleryWorker]:
    """A real worker whose settings post cards to the local Slack server; this module's tasks
    go to its queue (the suite's default queue is put back after)."""
    with django_db_blocker.unblock():
        db_name = connection.settings_dict["NAME"]
    queue = f"nitro-slack-{uuid.uuid4().hex[:8]}"
    previous = celery_app.conf.task_default_queue
    celery_app.conf.task_default_queue = queue
    worker = CeleryWorker(
        app="tests.celery_app",
        settings="tests.settings",
        queue=queue,
        name=f"nitro-{queue}",
        log_dir=tmp_path_factory.mktemp("slack-worker"),
        cwd=ROOT,
        env={
            "NITRO_TEST_DB_NAME": db_name,
            "NITRO_TEST_ASSISTANTS_URL": proxy.url,
            "NITRO_TEST_QUEUE": queue,
            "NITRO_TEST_CACHE_PREFIX": django_settings.CACHES["live"]["KEY_PREFIX"],
            "NITRO_TEST_SLACK_API_URL": module_slack.api_url,
        },
    )
    try:
        yield worker.start()
    finally:
        worker.stop()
        celery_app.conf.task_default_queue = previous


@pytest.fixture
def slack(
    settings: Any, proxy: Proxy, module_slack: SlackServer, slack_worker: Any
) -> Iterator[SlackServer]:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "BASE_URL": proxy.url,
        **slack_settings(module_slack.api_url),
    }
    module_slack.clear()
    yield module_slack
    settle()


def settle(timeout: float = 60.0) -> None:
    """Let the worker finish what a test set going (the resume's run to the reply's pause, that
    review's card) before the database is emptied: a TRUNCATE racing its transaction deadlocked
    once in CI. Bounded; what is still going after ``timeout`` is left to the flush as before."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = Run.objects.filter(status__in=["queued", "running"]).exists()
        uncarded = Review.objects.filter(status="pending", slack_cards__isnull=True).exists()
        if not busy and not uncarded:
            time.sleep(1.0)  # the card's own transaction, just committed, and its follow-ups
            return
        time.sleep(0.2)


def held_call(slack: SlackServer) -> tuple[Thread, Review]:
    """A walkthrough conversation paused on its held call, and its card posted by the worker."""
    run = services.start_run("walkthrough", "Can I move my appointment to Tuesday?")
    review = wait_for(
        lambda: Review.objects.filter(
            thread=run.thread, kind="tool_calls", status="pending"
        ).first(),
        60,
    )
    wait_for(lambda: SlackCard.objects.filter(review=review).exists(), 60)
    return run.thread, review


def tool_messages(thread: Thread) -> list[dict[str, Any]]:
    assistant = nitro_assistants.assistants()["walkthrough"]
    return [
        m
        for m in assistant.thread_messages(thread_id=str(thread.thread_id))
        if m.get("type") == "tool"
    ]


def card_text(slack: SlackServer, card: SlackCard) -> str:
    return json.dumps(slack.messages[(card.channel, card.ts)])


def test_a_card_approved_in_slack_runs_the_tool_once(
    slack: SlackServer, django_user_model: Any, client: Client
) -> None:
    jane = make_reviewer(django_user_model, "jane")
    slack_user(slack, "U0JANE", "jane@example.com")
    thread, review = held_call(slack)
    card = SlackCard.objects.get(review=review)
    assert "reschedule_appointment" in card_text(slack, card)

    click = click_payload(slack, review, "nitro_approve")
    assert post_signed(client, click).status_code == 200
    # A second click (a double tap: a new request of the same person) records nothing more.
    assert post_signed(client, {**click, "trigger_id": "1337.44.again"}).status_code == 200
    decision = wait_for(
        lambda: Decision.objects.filter(review=review, outcome="applied").first(), 60
    )
    assert (decision.decided_by, decision.channel) == (jane, "slack")
    assert len(tool_messages(thread)) == 1
    # The worker updated the card: who approved it, where; no buttons left.
    wait_for(lambda: "Approved by jane (Slack)" in card_text(slack, card), 60)
    assert "nitro_approve" not in card_text(slack, card)


def test_a_card_for_a_review_decided_in_the_admin_is_updated_after_slack_s_retry_after(
    slack: SlackServer, django_user_model: Any
) -> None:
    bob = make_reviewer(django_user_model, "bob")
    _thread, review = held_call(slack)
    card = SlackCard.objects.get(review=review)
    slack.fail("chat.update", 429, retry_after=2)
    admin = Client()
    admin.force_login(bob)
    response = admin.post(review_url(review), {**stamp(review), "call-0-action": "approve"})
    assert response.status_code == 302
    assert Decision.objects.get(review=review).channel == "admin"
    wait_for(lambda: "Approved by bob (admin)" in card_text(slack, card), 60)
    first, second = slack.calls("chat.update")[:2]
    assert second["at"] - first["at"] >= 2  # not asked again before Slack's Retry-After
    assert SlackCard.objects.get(pk=card.pk).closed_at is not None


def test_an_e_mail_reply_rejects_with_its_reason(
    slack: SlackServer, settings: Any, django_user_model: Any, client: Client
) -> None:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "INBOUND_EMAIL": {"REPLY_ADDRESS": "reviews+{token}@reply.example.com"},
    }
    jane = make_reviewer(django_user_model, "jane")
    thread, review = held_call(slack)
    address = reply_tokens.reply_address(review, jane.pk)  # what jane's notification carries
    raw = reply(address, "reject: Tuesday is full, offer Wednesday" + QUOTED)
    post(client, raw, address)
    decision = wait_for(
        lambda: Decision.objects.filter(review=review, outcome="applied").first(), 60
    )
    assert (decision.decided_by, decision.channel) == (jane, "email")
    tools = tool_messages(thread)
    assert len(tools) == 1
    assert tools[0].get("status") == "error"  # the tool did not run: the rejection stands in
    # The reason reached the server with the resume (its run's metadata, never the model).
    assistant = nitro_assistants.assistants()["walkthrough"]
    reasons = [
        (run.get("metadata") or {}).get("review_messages")
        for run in assistant.list_runs(thread_id=str(thread.thread_id))
    ]
    assert {review.tool_calls[0]["id"]: "Tuesday is full, offer Wednesday"} in reasons
    wait_for(
        lambda: (
            "Rejected by jane (e-mail reply)"
            in card_text(slack, SlackCard.objects.get(review=review))
        ),
        60,
    )
