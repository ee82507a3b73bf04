"""``NaN``, ``Infinity``, ``-Infinity`` and numbers too large for a float (``1e999``) sent to the
decide API: Python's json reads them, but they are not JSON and PostgreSQL's ``jsonb`` refuses
them, so each is a 400 ``invalid_json`` naming the field where it was, and nothing is recorded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User

from nitro_assistants.models import ApiKey, Decision, Event, Review
from tests.admin.conftest import make_tool_review
from tests.interactions.conftest import Api, assert_error, plan, step

pytestmark = pytest.mark.django_db

#: As written in the body, and the word the message names.
TOKENS = [
    ("NaN", "NaN"),
    ("Infinity", "Infinity"),
    ("-Infinity", "-Infinity"),
    ("1e999", "Infinity"),
]
NUMBER_FIELD = {"name": "count", "label": "Count", "widget": "number", "required": True, "help": ""}


def nothing_recorded(review: Review) -> None:
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert not Decision.objects.exists()
    assert not Event.objects.filter(verb__in=["review_decided", "interaction_decided"]).exists()


def post_raw(client: Any, url: str, text: str, key: str) -> Any:
    """``text`` as it is: ``json.dumps`` writes NaN too, but not 1e999."""
    return client.post(
        url, data=text, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}"
    )


@pytest.mark.parametrize(("token", "shown"), TOKENS)
def test_a_non_finite_number_in_an_edits_args_is_a_400_naming_the_argument(
    client: Any, grant: Any, fake: Any, token: str, shown: str
) -> None:
    user = grant(User.objects.create_user("bot"), "nitro_assistants.decide_review")
    key = ApiKey.generate(user, "tests")[1]
    review = make_tool_review()
    edit = {"id": "call_1", "action": "edit", "args": {"appointment_id": "@", "day": "Friday"}}
    body = {"revision": review.revision, "digest": review.digest, "tool_calls": [edit]}
    text = json.dumps(body).replace('"@"', token)
    response = post_raw(client, f"/nitro/api/reviews/{review.pk}/decide", text, key)
    error = assert_error(response, 400, "invalid_json", "tool_calls[0].args.appointment_id")
    assert f"is {shown}" in error["message"], error
    assert "non-finite numbers" in error["message"], error
    assert error["details"]["retryable"] is False
    nothing_recorded(review)


@pytest.mark.parametrize(("token", "shown"), TOKENS)
def test_a_non_finite_number_in_a_plan_edit_is_a_400_naming_the_field(
    api: Api, interaction: Any, registered_operations: Any, token: str, shown: str
) -> None:
    review = interaction("plan", plan(step("s1", input={"count": 1}, fields=[NUMBER_FIELD])))
    body = {
        "revision": review.revision,
        "digest": review.digest,
        "decision": "approve",
        "edits": {"s1": {"count": "@"}},
    }
    text = json.dumps(body).replace('"@"', token)
    url = f"/nitro/api/sessions/{review.thread.thread_id}/interactions/int-1/decide"
    assert api.key is not None
    error = assert_error(post_raw(api.client, url, text, api.key), 400, "invalid_json")
    assert error["details"]["field"] == "edits.s1.count", error
    assert f"is {shown}" in error["message"], error
    nothing_recorded(review)


@pytest.mark.parametrize(("token", "shown"), TOKENS)
def test_a_body_that_is_a_non_finite_number_is_a_400(
    api: Api, interaction: Any, token: str, shown: str
) -> None:
    review = interaction("plan", plan(step("s1")))
    url = f"/nitro/api/sessions/{review.thread.thread_id}/interactions/int-1/decide"
    assert api.key is not None
    error = assert_error(post_raw(api.client, url, token, api.key), 400, "invalid_json")
    assert error["details"]["field"] is None
    assert f"is {shown}" in error["message"], error
    nothing_recorded(review)
