"""NUL characters and lone surrogates in the admin: PostgreSQL stores neither, so a JSON argument
edit holding one (``\\u0000``, ``\\ud800``) is a form error, a text field's NUL too, and a NUL
in the API key list's query a 400; never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from nitro_assistants.models import Decision, Review
from tests.admin.conftest import make_reply_review, make_tool_review, review_url, stamp

pytestmark = pytest.mark.django_db

OBJECT_CALL = {
    "id": "c1",
    "name": "book",
    "args": {"slot": {"day": "Tuesday"}, "note": "hi"},
    "allowed_decisions": ["approve", "edit", "reject"],
}


def refused(response: Any, review: Review, text: str) -> None:
    assert response.status_code == 400
    assert text in response.content.decode()
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert not Decision.objects.exists()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ('{"day": "Tues\\u0000day"}', "`day` contains a NUL character"),
        ('{"day": "Tues\\ud800day"}', "`day` contains a lone surrogate (\\ud800)"),
        ('{"da\\u0000y": "Tuesday"}', "This value has a key that contains a NUL character"),
        ('"\\u0000"', "This value contains a NUL character"),
    ],
)
def test_a_json_argument_edit_that_cannot_be_stored_is_a_form_error(
    reviewer_client: Client, value: str, text: str
) -> None:
    review = make_tool_review([OBJECT_CALL])
    response = reviewer_client.post(
        review_url(review),
        {**stamp(review), "call-0-action": "edit", "call-0-arg__slot": value},
    )
    refused(response, review, text)
    assert "\\u" in response.content.decode()  # the value is shown back, escaped


@pytest.mark.parametrize("field", ["arg__note", "message"])
def test_a_nul_in_a_text_field_of_the_tool_call_form_is_a_form_error(
    reviewer_client: Client, field: str
) -> None:
    review = make_tool_review([OBJECT_CALL])
    action = "edit" if field.startswith("arg__") else "reject"
    response = reviewer_client.post(
        review_url(review), {**stamp(review), "call-0-action": action, f"call-0-{field}": "a\x00b"}
    )
    refused(response, review, "Null characters are not allowed.")


def test_a_nul_in_an_edited_reply_is_a_form_error(reviewer_client: Client) -> None:
    review = make_reply_review()
    response = reviewer_client.post(
        review_url(review), {**stamp(review), "reply-action": "edit", "reply-content": "Hi\x00"}
    )
    refused(response, review, "Null characters are not allowed.")


@pytest.mark.parametrize("query", ["q=a%00b", "revoked_at__isnull=%00", "us%00er=1"])
def test_a_nul_in_the_api_key_lists_query_is_a_400(superuser_client: Client, query: str) -> None:
    """The app's read-only lists refuse a NUL in their query (tests/admin/test_malformed_input.py);
    the API key list is a plain ModelAdmin and needs the same."""
    response = superuser_client.get(f"/admin/nitro_assistants/apikey/?{query}")
    assert response.status_code == 400
