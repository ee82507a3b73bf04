"""Redaction end to end, against the real LangGraph server: a card number in a conversation is
never shown to a reviewer (queue, review screen, e-mail, API read), and still reaches the tool
when the call is approved."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core import mail
from django.test import Client
from django.urls import reverse

from nitro_assistants import services
from nitro_assistants.models import ApiKey, Decision, Event, Review, Run
from nitro_assistants.services import notifications

pytestmark = [pytest.mark.server, pytest.mark.django_db]

CARD = "4111 1111 1111 1111"
PAY = json.dumps(
    {"name": "reschedule_appointment", "args": {"appointment_id": 42, "day": CARD, "time": "10:00"}}
)
EMAIL = {"email": {"BACKEND": "nitro_assistants.services.notifiers.EmailNotifier"}}


def leaks(text: str) -> bool:
    """Whether ``text`` shows the card, or a long enough piece of it, in any spacing."""
    squeezed = text.replace(" ", "").replace("-", "").replace("\\u00a0", "")
    return "41111111" in squeezed


@pytest.fixture
def redacting(server_settings: Any, settings: Any) -> Any:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "REDACT": True,
        "NOTIFIERS": EMAIL,
        "NOTIFY_BASE_URL": "https://reviews.example.com",
        # Replies read: the e-mail then shows what the review holds.
        "INBOUND_EMAIL": {"REPLY_ADDRESS": "reviews+{token}@reply.example.com"},
    }
    return settings


@pytest.fixture
def reviewer(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user(
        "reviewer", email="reviewer@example.com", password="pw", is_staff=True
    )
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="nitro_assistants",
            codename__in=["view_review", "view_thread", "view_event", "decide_review"],
        )
    )
    return user


def test_a_card_number_is_never_shown_and_still_reaches_the_tool(
    redacting: Any, reviewer: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        run = services.start_run("walkthrough", f"tools: [{PAY}]")
    with django_capture_on_commit_callbacks(execute=True):
        run = services.execute_run(run.pk)
    assert run.status == Run.Status.INTERRUPTED
    review = Review.objects.get(status="pending")
    assert review.tool_calls[0]["args"]["day"] == CARD  # stored as the assistant sent it

    client = Client()
    client.force_login(reviewer)
    queue = client.get(reverse("admin:nitro_assistants_review_changelist"))
    assert queue.status_code == 200
    assert "[redacted card]" in queue.text and not leaks(queue.text)

    screen = client.get(reverse("admin:nitro_assistants_review_review", args=[review.pk]))
    assert screen.status_code == 200
    assert "[redacted card]" in screen.text and not leaks(screen.text)
    thread_page = client.get(
        reverse("admin:nitro_assistants_thread_change", args=[review.thread_id])
    )
    assert thread_page.status_code == 200 and not leaks(thread_page.text)

    key = ApiKey.generate(reviewer, "tests")[1]
    read = client.get(f"/nitro/api/reviews/{review.pk}", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert read.status_code == 200
    assert not leaks(read.text)
    assert "tool_calls.0.args.day" in read.json()["redacted"]
    assert read.json()["digest"] == review.digest  # the read still decides what it showed

    # The pause queued the reviewer's e-mail (review_requested): send it.
    assert notifications.send_batch("email", reviewer.pk) == 1
    (message,) = mail.outbox
    assert "[redacted card]" in message.body
    assert not leaks(message.body) and not leaks(message.alternatives[0][0])

    # Approved as shown: the form posts back the redacted value it drew, unchanged.
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("admin:nitro_assistants_review_review", args=[review.pk]),
            {
                "interrupt_id": review.interrupt_id or "",
                "revision": review.revision,
                "digest": review.digest,
                "call-0-action": "approve",
                "call-0-arg__appointment_id": "42",
                "call-0-arg__day": "[redacted card]",
                "call-0-arg__time": "10:00",
            },
        )
    assert response.status_code == 302, response.text[:2000]
    decision = Decision.objects.get(review=review)
    assert decision.tool_calls == [{"id": review.tool_calls[0]["id"], "action": "approve"}]
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(decision.pk)
    review.thread.refresh_from_db()
    results = [m for m in review.thread.messages if m.get("type") == "tool"]
    # The tool ran on the card number itself, not on what the reviewer was shown.
    assert any(f"moved to {CARD}" in str(m.get("content")) for m in results), results
    assert not Event.objects.filter(verb="review_revealed").exists()


def test_an_edit_around_a_redacted_value_is_refused_and_nothing_is_sent(
    redacting: Any, reviewer: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        run = services.start_run("walkthrough", f"tools: [{PAY}]")
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_run(run.pk)
    review = Review.objects.get(status="pending")
    client = Client()
    client.force_login(reviewer)
    response = client.post(
        reverse("admin:nitro_assistants_review_review", args=[review.pk]),
        {
            "interrupt_id": review.interrupt_id or "",
            "revision": review.revision,
            "digest": review.digest,
            "call-0-action": "edit",
            "call-0-arg__appointment_id": "42",
            "call-0-arg__day": "[redacted card] or Friday",
            "call-0-arg__time": "11:00",
        },
    )
    assert response.status_code == 400
    assert "redacted value" in response.text
    assert not Decision.objects.filter(review=review).exists()
