"""The review screen's forms for questions, blueprints and plans: each builds the decide body and
goes through ``services.decide`` like the API does."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from nitro_assistants import operations
from nitro_assistants.models import Decision, Review
from tests.interactions.conftest import BLUEPRINT, DAY_FIELD, QUESTIONS, plan, step

pytestmark = pytest.mark.django_db


def screen(review: Review) -> str:
    return f"/admin/nitro_assistants/review/{review.pk}/review/"


def post(client: Client, review: Review, data: dict[str, Any]) -> Any:
    stamp = {
        "interrupt_id": review.interrupt_id or "",
        "revision": review.revision,
        "digest": review.digest,
    }
    return client.post(screen(review), {**stamp, **data})


def test_question_form_answers(
    admin_client: Client, interaction: Any, run_tasks_inline: Any
) -> None:
    review = interaction("question", QUESTIONS)
    page = admin_client.get(screen(review)).content.decode()
    assert "Which day?" in page and "Tuesday" in page and 'name="q-1-text"' in page
    # Nothing chosen for the required question: the service's message, nothing stored.
    refused = post(admin_client, review, {"interaction-decision": "answer"})
    assert refused.status_code == 400
    assert "needs an answer" in refused.content.decode()
    assert not Decision.objects.exists()
    response = post(
        admin_client,
        review,
        {"interaction-decision": "answer", "q-0-options": "fri", "q-1-text": "after 3pm"},
    )
    assert response.status_code == 302
    answer = Decision.objects.get(review=review).answer
    assert answer["answers"] == [
        {"questionId": "day", "optionIds": ["fri"]},
        {"questionId": "why", "optionIds": [], "text": "after 3pm"},
    ]
    assert answer["decidedBy"] == "admin"


def test_blueprint_form_sends_it_back_with_a_note(
    admin_client: Client, interaction: Any, run_tasks_inline: Any
) -> None:
    review = interaction("blueprint", BLUEPRINT)
    assert "costClass" in admin_client.get(screen(review)).content.decode()
    refused = post(admin_client, review, {"interaction-decision": "request_revision"})
    assert refused.status_code == 400
    response = post(
        admin_client,
        review,
        {"interaction-decision": "request_revision", "interaction-note": "Use prod"},
    )
    assert response.status_code == 302
    review.refresh_from_db()
    assert review.status == "revision_requested"
    assert Decision.objects.get(review=review).answer["note"] == "Use prod"


def test_plan_form_approves_with_a_step_off_and_a_field_edited(
    admin_client: Client,
    interaction: Any,
    registered_operations: list[Any],
    run_tasks_inline: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    review = interaction(
        "plan",
        plan(step("s1", input={"day": "Tuesday"}, fields=[DAY_FIELD]), step("s2", optional=True)),
    )
    page = admin_client.get(screen(review)).content.decode()
    assert 'name="step-1-run"' in page and 'name="step-0-run"' not in page
    with django_capture_on_commit_callbacks(execute=True):
        response = post(
            admin_client,
            review,
            {"interaction-decision": "approve", "step-0-field__day": "Friday", "step-1-run": ""},
        )
    assert response.status_code == 302
    edited = Review.objects.get(interaction_id="int-1", revision=2)
    assert edited.origin == "user" and edited.status == "completed"
    answer = Decision.objects.get(review=edited).answer
    assert answer["disabledSteps"] == ["s2"] and answer["edits"] == {"s1": {"day": "Friday"}}
    assert registered_operations == [("test.ok", {"day": "Friday"}, "admin")]


def test_plan_form_sends_comments_per_step(
    admin_client: Client, interaction: Any, run_tasks_inline: Any, registered_operations: Any
) -> None:
    review = interaction("plan", plan(step("s1"), step("s2")))
    response = post(
        admin_client,
        review,
        {"interaction-decision": "request_revision", "step-1-comment": "Not on Sunday"},
    )
    assert response.status_code == 302
    assert Decision.objects.get(review=review).answer["comments"] == [
        {"text": "Not on Sunday", "stepId": "s2"}
    ]


def test_a_decided_interaction_shows_what_was_delivered(
    admin_client: Client, interaction: Any, run_tasks_inline: Any
) -> None:
    review = interaction("blueprint", BLUEPRINT)
    post(admin_client, review, {"interaction-decision": "accept", "interaction-note": "Ship it"})
    page = admin_client.get(screen(review)).content.decode()
    assert "Submit decision" not in page
    assert "&quot;decision&quot;: &quot;accept&quot;" in page
    assert "&quot;decidedBy&quot;: &quot;admin&quot;" in page


def test_an_approved_plan_shows_each_steps_result_on_its_review_screen(
    admin_client: Client,
    interaction: Any,
    registered_operations: Any,
    run_tasks_inline: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    @operations.operation("test.script_link")
    def script_link(input: dict[str, Any], user: Any) -> dict[str, Any]:
        return {"message": "linked", "link": "javascript:alert(1)"}

    try:
        review = interaction(
            "plan", plan(step("s1"), step("s2", action="test.fail"), step("s3", "test.script_link"))
        )
        with django_capture_on_commit_callbacks(execute=True):
            post(admin_client, review, {"interaction-decision": "approve"})
    finally:
        operations.unregister("test.script_link")
    page = admin_client.get(screen(review)).content.decode()
    table = page[page.index('class="module nitro-step-results"') :]
    rows = re.findall(r'<tr class="nitro-step-(\w+)">(.*?)</tr>', table, re.S)
    assert [status for status, _ in rows] == ["completed", "failed", "completed"]
    assert (
        "done" in rows[0][1] and '<a href="https://crm.example/42">appointment 42</a>' in rows[0][1]
    )
    assert "CRM refused the change" in rows[1][1]
    # A link an operation returns is followed only if it is http(s) or a path on this site.
    assert "linked" in rows[2][1] and "<a " not in rows[2][1]
    assert "javascript:alert(1)" in rows[2][1]


def test_plan_form_edits_number_and_yes_no_fields_as_their_types(
    admin_client: Client, interaction: Any, registered_operations: Any, run_tasks_inline: Any
) -> None:
    fields = [
        {"name": "minutes", "label": "Minutes", "widget": "number", "required": True},
        {"name": "urgent", "label": "Urgent", "widget": "checkbox"},
    ]
    review = interaction("plan", plan(step("s1", fields=fields, input={"minutes": 15})))
    page = admin_client.get(screen(review)).content.decode()
    assert 'type="number"' in page and 'value="15"' in page
    # Untouched: no edit at all (15 is not sent back as 15.0 or "15").
    untouched = post(
        admin_client, review, {"interaction-decision": "approve", "step-0-field__minutes": "15"}
    )
    assert untouched.status_code == 302, untouched.content.decode()[:3000]
    assert Decision.objects.get(review=review).answer["edits"] == {}


def test_plan_form_edit_of_a_number_field_is_a_number(
    admin_client: Client, interaction: Any, registered_operations: Any, run_tasks_inline: Any
) -> None:
    fields = [
        {"name": "minutes", "label": "Minutes", "widget": "number", "required": True},
        {"name": "urgent", "label": "Urgent", "widget": "checkbox"},
    ]
    review = interaction("plan", plan(step("s1", fields=fields, input={"minutes": 15})))
    response = post(
        admin_client,
        review,
        {
            "interaction-decision": "approve",
            "step-0-field__minutes": "20",
            "step-0-field__urgent": "true",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    (decision,) = Decision.objects.all()
    assert decision.answer["edits"] == {"s1": {"minutes": 20, "urgent": True}}


@pytest.mark.parametrize("typed", ["nan", "NaN", "inf", "-Infinity", "1e999"])
def test_plan_form_refuses_a_number_field_that_is_not_finite(
    admin_client: Client, interaction: Any, registered_operations: Any, typed: str
) -> None:
    """NaN and infinity are not JSON (and 1e999 reads as infinity): a form error, not a 500."""
    fields = [{"name": "minutes", "label": "Minutes", "widget": "number", "required": True}]
    review = interaction("plan", plan(step("s1", fields=fields, input={"minutes": 15})))
    response = post(
        admin_client, review, {"interaction-decision": "approve", "step-0-field__minutes": typed}
    )
    assert response.status_code == 400
    assert "Enter a number." in response.content.decode()
    assert not Decision.objects.exists()
