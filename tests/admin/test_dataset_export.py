"""The review queue's "Export dataset…" action: the permission, the format page, the streamed
file, redaction unless its person may reveal, and bad input answered on the page."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from nitro_assistants.models import Decision, Event, Review
from tests.admin.conftest import VIEW_PERMISSIONS, make_tool_review

pytestmark = pytest.mark.django_db

CARD = "4111 1111 1111 1111"
QUEUE = "admin:nitro_assistants_review_changelist"


def exporter(django_user_model: Any, *extra: str) -> Client:
    user = django_user_model.objects.create_user("exporter", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="nitro_assistants",
            codename__in=[*VIEW_PERMISSIONS, "export_dataset", *extra],
        )
    )
    client = Client()
    client.force_login(user)
    return client


def decided(action: str = "edit", args: dict[str, Any] | None = None) -> Review:
    review = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "charge_card",
                "args": {"card": CARD, "amount": 12},
                "allowed_decisions": ["approve", "edit", "reject"],
            }
        ],
        ask=f"Please charge my card {CARD}",
    )
    Review.objects.filter(pk=review.pk).update(status=Review.Status.DECIDED)
    choice: dict[str, Any] = {"id": "call_1", "action": action}
    if args is not None:
        choice["args"] = args
    Decision.objects.create(
        review=review,
        reviewer_id="alice",
        decided_at=review.requested_at,
        tool_calls=[choice],
        channel=Decision.Channel.ADMIN,
    )
    return review


def post(client: Client, reviews: list[Review], **data: Any) -> Any:
    return client.post(
        reverse(QUEUE),
        {"action": "export_dataset", "_selected_action": [str(r.pk) for r in reviews], **data},
    )


def lines(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"] == "application/x-ndjson"
    text = b"".join(response.streaming_content).decode()
    return [json.loads(line) for line in text.splitlines()]


def test_the_page_offers_the_formats_then_streams_the_file(django_user_model: Any) -> None:
    client = exporter(django_user_model)
    review = decided("edit", {"amount": 15})
    page = post(client, [review])
    assert page.status_code == 200
    text = page.content.decode()
    for fmt in ("jsonl", "openai", "langsmith"):
        assert f'value="{fmt}"' in text
    assert "unredacted" not in text  # only for those who may reveal
    response = post(client, [review], post="yes", format="openai")
    assert response["Content-Disposition"].startswith('attachment; filename="reviews-openai-')
    [line] = lines(response)
    [call] = line["messages"][-1]["tool_calls"]
    assert json.loads(call["function"]["arguments"])["amount"] == 15


def test_the_action_needs_the_export_permission(looker_client: Client) -> None:
    review = decided()
    response = post(looker_client, [review])
    assert response.status_code == 403
    response = post(looker_client, [review], post="yes", format="jsonl")
    assert response.status_code == 403


def test_the_export_is_redacted_unless_its_person_may_reveal_and_asks(
    django_user_model: Any, settings: Any
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "REDACT": True}
    review = decided("approve")
    plain = exporter(django_user_model)
    # Asking for it without the permission changes nothing.
    [row] = lines(post(plain, [review], post="yes", format="jsonl", unredacted="on"))
    assert CARD not in json.dumps(row) and "[redacted card]" in json.dumps(row)
    assert row["provenance"]["digest"] == review.digest  # what names things is kept


def test_those_who_may_reveal_choose_unredacted(django_user_model: Any, settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "REDACT": True}
    review = decided("approve")
    client = exporter(django_user_model, "reveal_redacted")
    assert "unredacted" in post(client, [review]).content.decode()
    [row] = lines(post(client, [review], post="yes", format="jsonl"))
    assert CARD not in json.dumps(row)  # redacted unless ticked
    assert not Event.objects.filter(verb="dataset_exported_unredacted").exists()
    [row] = lines(post(client, [review], post="yes", format="jsonl", unredacted="on"))
    assert row["decided"]["tool_calls"][0]["args"]["card"] == CARD
    # On the record, as a reveal is: who, the format, how many reviews; never the values.
    (event,) = Event.objects.filter(verb="dataset_exported_unredacted")
    assert str(event.actor_id) == client.session["_auth_user_id"]
    assert (event.thread_id, event.data["format"], event.data["reviews"]) == (None, "jsonl", 1)
    assert CARD not in json.dumps(event.data)


def test_an_unknown_format_is_a_form_error(django_user_model: Any) -> None:
    client = exporter(django_user_model)
    review = decided()
    response = post(client, [review], post="yes", format="csv")
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()


def test_a_selection_without_a_decided_review_is_refused_with_a_message(
    django_user_model: Any,
) -> None:
    client = exporter(django_user_model)
    pending = make_tool_review()
    response = post(client, [pending], post="yes", format="jsonl")
    assert response.status_code == 302
    page = client.get(response["Location"])
    assert "none of the selected reviews has been decided" in page.content.decode()


def test_only_the_ticked_decided_reviews_are_exported(django_user_model: Any) -> None:
    client = exporter(django_user_model)
    picked, other, pending = decided("approve"), decided("reject"), make_tool_review()
    rows = lines(post(client, [picked, pending], post="yes", format="jsonl"))
    assert [row["review"] for row in rows] == [picked.pk]
    assert other.pk not in [row["review"] for row in rows]
