"""No approval of what was not shown, against the real LangGraph server (issue 38, part 2): a
held call whose argument a rule names is drawn collapsed on the review screen, its approval is
refused until that argument is opened (admin) or stated as shown (API), and the approved call
then runs on the server as the assistant proposed it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from nitro_assistants import services
from nitro_assistants.models import ApiKey, Decision, Event, Policy, Review, Run
from tests.core.conftest import enqueued
from tests.governance.conftest import reviewer

__all__ = ["enqueued"]

pytestmark = [pytest.mark.server, pytest.mark.django_db]

#: 700 characters: longer than the 600 a value is drawn whole up to.
DAY = "Tuesday. " + "The customer asked for the slot after the school run, not before. " * 10
PAY = json.dumps(
    {"name": "reschedule_appointment", "args": {"appointment_id": 42, "day": DAY, "time": "10"}}
)
PATH = "tool_calls.0.args.day"


def held_on_the_server(django_capture_on_commit_callbacks: Any) -> Review:
    Policy.objects.create(name="read the day", tool="reschedule_appointment", must_show=["day"])
    with django_capture_on_commit_callbacks(execute=True):
        run = services.start_run("walkthrough", f"tools: [{PAY}]")
    with django_capture_on_commit_callbacks(execute=True):
        run = services.execute_run(run.pk)
    assert run.status == Run.Status.INTERRUPTED
    review = Review.objects.get(status="pending")
    assert review.tool_calls[0]["args"]["day"] == DAY
    assert review.handling.rule["must_show"] == [PATH]
    return review


def form(review: Review, opened: list[str]) -> dict[str, Any]:
    return {
        "interrupt_id": review.interrupt_id or "",
        "revision": review.revision,
        "digest": review.digest,
        "opened": json.dumps(opened),
        "call-0-action": "approve",
        "call-0-arg__appointment_id": "42",
        "call-0-arg__day": DAY,
        "call-0-arg__time": "10",
    }


def test_an_approval_in_the_admin_is_refused_until_the_collapsed_argument_is_opened(
    server_settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    review = held_on_the_server(django_capture_on_commit_callbacks)
    client = Client()
    client.force_login(reviewer("ann"))
    url = reverse("admin:nitro_assistants_review_review", args=[review.pk])
    screen = client.get(url)
    assert screen.status_code == 200
    # The held call in the conversation draws the day folded, marked as one to open.
    assert f'data-nitro-path="{PATH}" data-nitro-must-show' in screen.text
    assert "Approving needs these shown first" in screen.text

    refused = client.post(url, form(review, []))
    assert refused.status_code == 400
    assert f"Approving needs `{PATH}` shown" in refused.text
    assert not Decision.objects.exists()

    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(url, form(review, [PATH]))
    assert done.status_code == 302, done.text[:2000]
    decision = Decision.objects.get(review=review)
    assert decision.shown == [PATH] and decision.channel == "admin"
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(decision.pk)
    review.thread.refresh_from_db()
    results = [m for m in review.thread.messages if m.get("type") == "tool"]
    assert any("moved to Tuesday." in str(m.get("content")) for m in results), results
    # The decision's record in the audit chain says what was shown.
    record = Event.objects.get(review=review, verb="decision_recorded").data
    assert record["shown"]["paths"] == [PATH]


def test_an_approval_over_the_api_is_refused_until_it_states_the_part_shown(
    server_settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    review = held_on_the_server(django_capture_on_commit_callbacks)
    key = ApiKey.generate(reviewer("ann"), "tests")[1]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    read = client.get(f"/nitro/api/reviews/{review.pk}").json()
    assert read["tool_calls"][0]["must_show"] == [
        {"path": PATH, "collapsed": True, "redacted": False}
    ]
    body = {
        "revision": read["revision"],
        "digest": read["digest"],
        "tool_calls": [{"id": read["tool_calls"][0]["id"], "action": "approve"}],
    }
    url = f"/nitro/api/reviews/{review.pk}/decide"
    refused = client.post(url, body, content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["details"]["field"] == "shown"
    assert refused.json()["code"] == "invalid_json"
    done = client.post(url, {**body, "shown": [PATH]}, content_type="application/json")
    assert done.status_code == 200, done.text
    assert done.json()["decision"]["shown"] == [PATH]
