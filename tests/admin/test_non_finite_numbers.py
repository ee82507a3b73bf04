"""NaN, Infinity and numbers too large for a float typed into the admin's decision forms (and a
policy rule's conditions): they are not JSON and PostgreSQL's ``jsonb`` refuses them, so each is
a form error on the field (a 400 page that keeps what was typed), never a 500, and nothing is
decided or saved."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import Client

from nitro_assistants.models import Decision, Policy, Review
from tests.admin.conftest import make_tool_review, review_url, stamp
from tests.factories import ReviewFactory
from tests.governance.test_admin import ADD as POLICY_ADD
from tests.governance.test_admin import rule_form

pytestmark = pytest.mark.django_db

CALL = {
    "id": "c1",
    "name": "refund",
    "args": {"amount": 50.0, "count": 2, "slot": {"day": "Tuesday"}},
    "allowed_decisions": ["approve", "edit", "reject"],
}
#: What a reviewer may type where JSON is asked for, and the word the error names.
NON_FINITE_JSON = [
    ("NaN", "NaN"),
    ("Infinity", "Infinity"),
    ("-Infinity", "-Infinity"),
    ("1e999", "Infinity"),
    ('{"day": NaN}', "`day` is NaN"),
    ("[1, -1e999]", "`[1]` is -Infinity"),
]
NON_FINITE_NUMBERS = ["nan", "NaN", "inf", "-Infinity", "1e999"]


def refused(response: Any, review: Review, text: str) -> None:
    assert response.status_code == 400, response.status_code
    assert text in response.content.decode()
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert not Decision.objects.exists()


@pytest.mark.parametrize(("value", "text"), NON_FINITE_JSON)
def test_a_non_finite_number_in_a_json_argument_edit_is_a_form_error(
    reviewer_client: Client, value: str, text: str
) -> None:
    review = make_tool_review([CALL])
    response = reviewer_client.post(
        review_url(review),
        {
            **stamp(review),
            "call-0-action": "edit",
            "call-0-arg__amount": "50.0",
            "call-0-arg__count": "2",
            "call-0-arg__slot": value,
        },
    )
    refused(response, review, text)
    assert "non-finite numbers" in response.content.decode()


@pytest.mark.parametrize("value", NON_FINITE_NUMBERS)
@pytest.mark.parametrize("field", ["amount", "count"])
def test_a_non_finite_number_in_a_number_argument_edit_is_a_form_error(
    reviewer_client: Client, field: str, value: str
) -> None:
    review = make_tool_review([CALL])
    typed = {"call-0-arg__amount": "50.0", "call-0-arg__count": "2", f"call-0-arg__{field}": value}
    response = reviewer_client.post(
        review_url(review),
        {
            **stamp(review),
            "call-0-action": "edit",
            "call-0-arg__slot": '{"day": "Tuesday"}',
            **typed,
        },
    )
    refused(response, review, "Enter a")


def interrupt_review(pause: dict[str, Any]) -> Review:
    interrupt_id = uuid.uuid4().hex
    return ReviewFactory(
        kind=Review.Kind.INTERRUPT,
        interrupt_ids=[interrupt_id],
        payload={"pauses": [{"interrupt_id": interrupt_id, **pause}]},
    )


@pytest.mark.parametrize(("value", "text"), NON_FINITE_JSON)
def test_a_non_finite_number_in_a_pauses_json_answer_is_a_form_error(
    reviewer_client: Client, value: str, text: str
) -> None:
    review = interrupt_review({"kind": "interrupt", "value": "How much?"})
    response = reviewer_client.post(review_url(review), {**stamp(review), "pause-0-json": value})
    refused(response, review, text)


@pytest.mark.parametrize("value", NON_FINITE_NUMBERS)
def test_a_non_finite_number_in_a_pauses_number_field_is_a_form_error(
    reviewer_client: Client, value: str
) -> None:
    schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
    review = interrupt_review(
        {"kind": "interrupt", "value": "How much?", "response_schema": schema}
    )
    response = reviewer_client.post(
        review_url(review), {**stamp(review), "pause-0-prop_amount": value}
    )
    refused(response, review, "Enter a number")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e999"])
def test_a_non_finite_number_in_a_policy_rules_conditions_is_refused_on_the_field(
    superuser_client: Client, value: str
) -> None:
    conditions = f'[{{"path": "amount", "op": "gt", "value": {value}}}]'
    response = superuser_client.post(POLICY_ADD, rule_form(conditions=conditions))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "non-finite numbers" in " ".join(errors["conditions"]), errors
    assert not Policy.objects.exists()
