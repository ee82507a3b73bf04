"""Redaction in the admin and the API (SQLite and PostgreSQL): the reveal permission and its audit
event, searches that would confirm a redacted value, decisions that carry a redaction's mark,
the Slack card, the audit export and the system checks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from nitro_assistants import services
from nitro_assistants.checks import check_settings
from nitro_assistants.exceptions import ThreadResumptionError
from nitro_assistants.models import ApiKey, Decision, Event, Review
from nitro_assistants.services import slack
from tests.admin.conftest import make_tool_review, review_url, stamp

pytestmark = pytest.mark.django_db

CARD = "4111 1111 1111 1111"


@pytest.fixture(autouse=True)
def redact(settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "REDACT": True}


def card_review() -> Review:
    return make_tool_review(
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


def grant(user: Any, codename: str) -> Any:
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="nitro_assistants", codename=codename)
    )
    return type(user).objects.get(pk=user.pk)  # permissions are cached on the instance


def test_a_reveal_needs_the_permission_and_is_audited(
    reviewer: Any, reviewer_client: Client
) -> None:
    review = card_review()
    reveal = reverse("admin:nitro_assistants_review_reveal", args=[review.pk])
    screen = reviewer_client.get(review_url(review))
    assert CARD not in screen.text and "[redacted card]" in screen.text
    assert reveal not in screen.text  # no button for someone who may not reveal
    assert reviewer_client.post(reveal).status_code == 403
    assert not Event.objects.filter(verb="review_revealed").exists()

    grant(reviewer, "reveal_redacted")
    assert reviewer_client.get(reveal).status_code == 403  # a GET reveals nothing
    assert reviewer_client.post(reveal).status_code == 302
    event = Event.objects.get(verb="review_revealed")
    assert event.actor == reviewer and event.review == review and event.hash
    assert event.data["paths"] == ["tool_calls.0.args.card"]
    assert CARD not in json.dumps(event.data)  # the record names the value, never holds it
    assert CARD in reviewer_client.get(review_url(review)).text
    # Revealed for this person only.
    other = Client()
    other.force_login(
        grant(type(reviewer).objects.create_user("other", is_staff=True), "view_review")
    )
    assert CARD not in other.get(review_url(review)).text


def test_a_revealed_review_is_approved_and_edited_on_its_real_values(
    reviewer: Any, reviewer_client: Client
) -> None:
    review = card_review()
    grant(reviewer, "reveal_redacted")
    reviewer_client.post(reverse("admin:nitro_assistants_review_reveal", args=[review.pk]))
    response = reviewer_client.post(
        review_url(review),
        {
            **stamp(review),
            "call-0-action": "edit",
            "call-0-arg__card": CARD,
            "call-0-arg__amount": "15",
        },
    )
    assert response.status_code == 302
    decision = Decision.objects.get(review=review)
    assert decision.tool_calls == [
        {"id": "call_1", "action": "edit", "args": {"card": CARD, "amount": 15}}
    ]


def test_an_unchanged_redacted_value_is_not_sent_as_an_edit(reviewer_client: Client) -> None:
    review = card_review()
    response = reviewer_client.post(
        review_url(review),
        {
            **stamp(review),
            "call-0-action": "edit",
            "call-0-arg__card": "[redacted card]",
            "call-0-arg__amount": "15",
        },
    )
    assert response.status_code == 302
    # Only what changed is taken from the form; the card is what is stored, not its mark.
    assert Decision.objects.get(review=review).tool_calls == [
        {"id": "call_1", "action": "edit", "args": {"card": CARD, "amount": 15}}
    ]


def test_a_decision_carrying_a_redaction_mark_is_refused_on_every_path(reviewer: Any) -> None:
    review = card_review()
    body = {
        "revision": review.revision,
        "digest": review.digest,
        "tool_calls": [{"id": "call_1", "action": "edit", "args": {"card": "[redacted card]1"}}],
    }
    with pytest.raises(ThreadResumptionError, match="redacted value"):
        services.decide(review.pk, reviewer, body)
    key = ApiKey.generate(reviewer, "tests")[1]
    response = Client().post(
        f"/nitro/api/reviews/{review.pk}/decide",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert 400 <= response.status_code < 500
    assert "redacted value" in response.json()["message"]
    assert not Decision.objects.exists()


def test_a_search_that_would_confirm_a_redacted_value_does_not_run(
    reviewer: Any, reviewer_client: Client
) -> None:
    review = card_review()
    queue = reverse("admin:nitro_assistants_review_changelist")
    for term in ("4111 1111", "41111111", CARD):
        response = reviewer_client.get(queue, {"q": term, "status": "all"})
        assert response.status_code == 200
        assert f"{review.pk}/review/" not in response.text
        assert "Redacted values are not searched" in response.text
    threads = reviewer_client.get(
        reverse("admin:nitro_assistants_thread_changelist"), {"q": "4111 1111"}
    )
    assert "Redacted values are not searched" in threads.text
    # Ordinary words still search the conversation.
    found = reviewer_client.get(queue, {"q": "charge my card", "status": "all"})
    assert f"{review.pk}/review/" in found.text
    # Who may reveal may search for it.
    grant(reviewer, "reveal_redacted")
    found = reviewer_client.get(queue, {"q": "4111 1111", "status": "all"})
    assert f"{review.pk}/review/" in found.text


def test_the_slack_card_shows_no_card_number_and_offers_no_approval() -> None:
    review = card_review()
    blocks = slack.card(review)
    text = json.dumps(blocks)
    assert CARD not in text and "[redacted card]" in text
    actions = [e.get("action_id") for b in blocks for e in b.get("elements") or []]
    assert slack.APPROVE not in actions and slack.REJECT in actions


def test_the_audit_export_is_redacted_for_those_who_may_not_reveal(
    reviewer: Any, reviewer_client: Client
) -> None:
    review = card_review()
    services.decide(
        review,  # the instance read: its revision and digest are what was shown
        reviewer,
        {
            "tool_calls": [
                {"id": "call_1", "action": "edit", "args": {"card": "4242 4242 4242 4242"}}
            ],
            "note": "Charge 4242 4242 4242 4242 instead",  # the note is in the audit event
        },
    )
    changelist = reverse("admin:nitro_assistants_thread_changelist")
    data = {"action": "export_audit_jsonl", "_selected_action": [review.thread_id]}
    exported = b"".join(reviewer_client.post(changelist, data).streaming_content).decode()
    assert "review_decided" in exported and "4242" not in exported
    grant(reviewer, "reveal_redacted")
    exported = b"".join(reviewer_client.post(changelist, data).streaming_content).decode()
    assert "4242 4242 4242 4242" in exported


def ids(settings: Any, **redact: Any) -> list[str]:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "REDACT": redact}
    return [
        message.id for message in check_settings() if message.id.startswith("nitro_assistants.E04")
    ]


def test_a_bad_redact_setting_is_a_system_check_error(settings: Any) -> None:
    assert ids(settings, PATTERNS={"order": r"ORD-\d{6}"}) == []
    assert ids(settings, PATTERNS={"order": r"ORD-(\d{6}"}) == ["nitro_assistants.E041"]
    assert ids(settings, BUILTINS=["card", "passport"]) == ["nitro_assistants.E040"]
    assert ids(settings, CALLABLES={"x": "no.such.module.redact"}) == ["nitro_assistants.E042"]
    assert ids(settings, CALLABLES={"x": 3}) == ["nitro_assistants.E042"]


def test_the_api_read_redacts_arguments_but_never_what_a_decision_names(reviewer: Any) -> None:
    review = make_tool_review(
        [
            {
                "id": "4111111111111111",  # an id a redactor would take for a card
                "name": "charge_card",
                "args": {"card": CARD},
                "allowed_decisions": ["approve", "reject"],
            }
        ]
    )
    key = ApiKey.generate(reviewer, "tests")[1]
    read = Client().get(f"/nitro/api/reviews/{review.pk}", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert read.status_code == 200
    body = read.json()
    assert body["tool_calls"][0]["id"] == "4111111111111111"
    assert body["tool_calls"][0]["args"] == {"card": "[redacted card]"}
    assert body["digest"] == review.digest and body["redacted"] == ["tool_calls.0.args.card"]
    assert CARD not in json.dumps(body["conversation"])


QUEUE_URL = "/admin/nitro_assistants/review/"


@pytest.mark.parametrize("action", ["approve_selected", "reject_selected"])
def test_the_bulk_confirmation_page_shows_no_card_number(
    reviewer_client: Client, action: str
) -> None:
    """The page that lists the selected reviews before a bulk decision names each by who it is
    about: the thread's subject, here the customer's message with the card number."""
    review = card_review()
    assert CARD in review.thread.subject  # stored whole; only what is shown is redacted
    page = reviewer_client.post(QUEUE_URL, {"action": action, "_selected_action": [review.pk]})
    assert page.status_code == 200 and f"#{review.pk}" in page.text
    assert CARD not in page.text and "[redacted card]" in page.text


@pytest.mark.parametrize("kept", [7, 9, 12, 17])
def test_a_subject_cut_inside_a_card_number_shows_no_part_of_it(
    reviewer_client: Client, kept: int
) -> None:
    """A subject is cut to 200 characters when stored: the cut can fall inside a card number,
    whose first digits then pass no check. No part of it is shown, however much the cut kept."""
    lead = "Please charge " + "very " * 30  # 164 characters; the cut keeps 199 and a "…"
    lead += "x" * (199 - len(lead) - kept - 1) + " "
    review = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "charge_card",
                "args": {"amount": 12},
                "allowed_decisions": ["approve", "reject"],
            }
        ],
        ask=lead + CARD,
    )
    subject = review.thread.subject
    assert subject.endswith(CARD[:kept] + "…")  # the stored subject holds a part
    pages = [
        reviewer_client.get(review_url(review)).text,
        reviewer_client.get(QUEUE_URL).text,
        reviewer_client.get(f"/admin/nitro_assistants/thread/{review.thread_id}/change/").text,
        reviewer_client.post(
            QUEUE_URL, {"action": "approve_selected", "_selected_action": [review.pk]}
        ).text,
        str(review.thread),
        json.dumps(slack.card(review)),
    ]
    for text in pages:
        assert "4111 1" not in text and "4111…" not in text
    assert "Please charge very" in str(review.thread)  # what is not a value still shows
