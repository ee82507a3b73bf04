"""End to end against the real LangGraph server: an assistant asks, the opener decides through the
API, the resume task delivers the decision, and the assistant gets it (or asks again)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from nitro_assistants import services, tasks
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import ApiKey, Decision, Review, Run, Thread
from tests.interactions.conftest import QUESTIONS, Api, assert_error

pytestmark = [pytest.mark.server, pytest.mark.django_db]


def ask(kind: str, content: Any, interaction_id: str, title: str = "Please decide") -> str:
    payload = {"kind": kind, "title": title, "content": content, "interaction_id": interaction_id}
    return "ask: " + json.dumps(payload)


@pytest.fixture
def real_api(client: Client, opener: Any, server_settings: Any) -> Api:
    return Api(client, ApiKey.generate(opener, "e2e")[1])


@pytest.fixture
def resume_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The resume task runs right here (through Celery's task machinery) when it is enqueued."""
    monkeypatch.setattr(
        tasks.resume_thread, "delay", lambda pk: tasks.resume_thread.apply(args=(pk,)).get()
    )


def open_thread(opener: Any, message: str, capture: Any) -> Thread:
    with capture(execute=True):
        run = services.start_run("interactions", message, user=opener)
    with capture(execute=True):
        services.execute_run(run.pk)
    return Thread.objects.get(pk=run.thread_id)


def test_question_answered_through_the_api_reaches_the_assistant(
    real_api: Api, opener: Any, resume_inline: None, django_capture_on_commit_callbacks: Any
) -> None:
    thread = open_thread(
        opener, ask("question", QUESTIONS, "int-day"), django_capture_on_commit_callbacks
    )
    review = Review.objects.get(thread=thread, status="pending")
    assert (review.kind, review.interaction_id, review.revision) == ("question", "int-day", 1)
    shown = real_api.get(f"sessions/{thread.thread_id}/interactions/int-day").json()
    assert shown["questions"] == QUESTIONS and shown["status"] == "pending"

    answers = [{"questionId": "day", "optionIds": ["fri"]}]
    with django_capture_on_commit_callbacks(execute=True):
        response = real_api.decide(review, {"decision": "answer", "answers": answers})
    assert response.status_code == 200, response.json()
    decision = Decision.objects.get(review=review)
    assert decision.outcome == Decision.Outcome.APPLIED
    # The assistant (the scripted model) echoes the resume value it was given.
    assert decision.run is not None and decision.run.status == Run.Status.SUCCEEDED
    assert json.loads(decision.run.reply.removeprefix("Done! ")) == decision.answer
    thread.refresh_from_db()
    assert thread.status == Thread.Status.IDLE
    assert decision.answer["answers"] == answers and decision.answer["decidedBy"] == "olivia"
    assert (
        real_api.get(f"sessions/{thread.thread_id}/interactions/int-day").json()["decision"][
            "delivery"
        ]
        == "applied"
    )


def test_request_revision_brings_revision_2(
    real_api: Api, opener: Any, resume_inline: None, django_capture_on_commit_callbacks: Any
) -> None:
    plan = {"steps": [{"stepId": "s1", "title": "Reschedule", "action": "crm.reschedule"}]}
    thread = open_thread(
        opener, ask("plan", plan, "int-plan", "Move it"), django_capture_on_commit_callbacks
    )
    first = Review.objects.get(thread=thread, status="pending")
    assert first.payload["problems"] == ["Step s1: unknown action 'crm.reschedule'"]
    with django_capture_on_commit_callbacks(execute=True):
        response = real_api.decide(
            first, {"decision": "request_revision", "note": "Friday instead"}
        )
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "revision_requested"
    listed = real_api.get(f"sessions/{thread.thread_id}/interactions").json()["items"]
    assert len(listed) == 1
    (second,) = listed
    assert (second["interactionId"], second["revision"], second["status"]) == (
        "int-plan",
        2,
        "pending",
    )
    assert second["title"] == "Move it (revised)" and second["summary"] == "Revised: Friday instead"
    assert second["origin"] == "assistant"
    stale = real_api.decide(first, {"decision": "cancel"})
    assert_error(stale, 409, "conflict", "revision")


def test_server_down_the_decision_is_recorded_and_delivered_later(
    real_api: Api,
    opener: Any,
    server_settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    thread = open_thread(
        opener, ask("blueprint", {"agents": []}, "int-bp"), django_capture_on_commit_callbacks
    )
    review = Review.objects.get(thread=thread, status="pending")
    queued: list[int] = []
    monkeypatch.setattr(tasks.resume_thread, "delay", queued.append)
    server_settings.stop()
    try:
        with django_capture_on_commit_callbacks(execute=True):
            response = real_api.decide(review, {"decision": "accept"})
        # The request does not wait on the server: the decision is stored and its delivery
        # queued, whether the server answers now or not.
        assert response.status_code == 200, response.json()
        assert response.json()["status"] == "accepted"
    finally:
        server_settings.start()
    (decision_pk,) = queued
    assert Decision.objects.get(pk=decision_pk).outcome == Decision.Outcome.PENDING
    # What the task does once the server is back: the first request may meet a pooled connection
    # the restart closed (a transient error, which the task retries).
    for _attempt in range(3):
        try:
            services.execute_resume(decision_pk)
            break
        except NitroAssistantsError as exc:
            assert exc.transient, exc  # noqa: PT017 - a retry loop, not an expected raise
    assert Decision.objects.get(pk=decision_pk).outcome == Decision.Outcome.APPLIED
