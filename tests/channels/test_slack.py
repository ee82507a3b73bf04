"""Deciding from Slack against the local Slack server (nitro_assistants.testing.slack): the card,
the signed interaction endpoint, who a Slack user is, the revision and digest a card carries,
and every refusal (nothing applied, said to the person who clicked)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from django.test import Client

from nitro_assistants import rules, services, signals
from nitro_assistants.models import (
    Decision,
    Event,
    Notification,
    Policy,
    Review,
    SlackCard,
    SlackUser,
)
from nitro_assistants.services import notifications
from nitro_assistants.services import policy_enforcement as policies
from nitro_assistants.services import slack as slack_service
from nitro_assistants.services.lifecycle import fail_review
from nitro_assistants.testing.slack import SlackServer, signed_headers
from tests.admin.conftest import make_tool_review
from tests.channels.conftest import (
    CHANNEL,
    SECRET,
    TEAM,
    card_of,
    click_payload,
    make_reviewer,
    post_signed,
    posted_buttons,
    slack_user,
)
from tests.factories import ReviewFactory

pytestmark = pytest.mark.django_db


def post_card(server: SlackServer, review: Review) -> SlackCard:
    """Queue and send the card of ``review`` as the notifier does after it is requested."""
    notifications.notify(Notification.Kind.REQUESTED, review=review, users=[])
    assert notifications.send_batch("slack") == 1
    return SlackCard.objects.get(review=review)


@pytest.fixture
def jane(django_user_model: Any, slack: SlackServer) -> Any:
    user = make_reviewer(django_user_model, "jane")
    slack_user(slack, "U0JANE", "jane@example.com")
    return user


def ephemeral(server: SlackServer) -> list[str]:
    return [call["text"] for call in server.calls("chat.postEphemeral")]


def test_the_card_shows_what_is_held_and_its_buttons_carry_the_revision_shown(
    slack: SlackServer,
) -> None:
    review = make_tool_review()
    card = post_card(slack, review)
    (posted,) = slack.calls("chat.postMessage")
    assert posted["channel"] == CHANNEL
    assert (card.channel, card.ts) == card_of(slack, review)
    assert (card.revision, card.digest) == (review.revision, review.digest)
    shown = json.dumps(posted["blocks"])
    assert "reschedule_appointment" in shown
    assert "Tuesday" in shown
    buttons = posted_buttons(slack, review)
    assert set(buttons) == {"nitro_approve", "nitro_reject", "nitro_open"}
    assert buttons["nitro_open"]["url"].startswith("https://reviews.example.com/")
    value = slack_service.read_value(buttons["nitro_approve"]["value"])
    assert value == {"r": review.pk, "v": review.revision, "d": review.digest, "a": "approve"}


def test_what_an_assistant_wrote_cannot_mention_the_channel_or_make_links(
    slack: SlackServer,
) -> None:
    calls = [
        {
            "id": "call_1",
            "name": "send_sms",
            "args": {"text": "<!channel> <https://evil.example|click me> & more"},
            "allowed_decisions": ["approve", "reject"],
        }
    ]
    post_card(slack, make_tool_review(calls))
    shown = json.dumps(slack.calls("chat.postMessage")[0]["blocks"])
    assert "<!channel>" not in shown
    assert "<https://evil" not in shown
    assert "&lt;!channel&gt;" in shown


def test_a_call_too_long_to_show_whole_cannot_be_approved_from_the_card(
    slack: SlackServer,
) -> None:
    """Approving approves everything held: a card that could show only part of it offers no
    approve button (reject and the admin's link stay)."""
    calls = [
        {
            "id": "call_1",
            "name": "send_sms",
            "args": {"text": "x" * 3000},
            "allowed_decisions": ["approve", "reject"],
        }
    ]
    post_card(slack, make_tool_review(calls))
    review = Review.objects.get()
    assert set(posted_buttons(slack, review)) == {"nitro_reject", "nitro_open"}
    assert "Too long to show whole here" in json.dumps(slack.calls("chat.postMessage")[0])


def test_approve_in_slack_decides_as_the_mapped_user_with_the_channel_recorded(
    slack: SlackServer, jane: Any, client: Client
) -> None:
    review = make_tool_review()
    post_card(slack, review)
    response = post_signed(client, click_payload(slack, review, "nitro_approve"))
    assert response.status_code == 200
    decision = Decision.objects.get(review=review)
    assert decision.decided_by == jane
    assert decision.channel == "slack"
    assert decision.tool_calls == [{"id": "call_1", "action": "approve"}]
    event = Event.objects.get(review=review, verb="review_decided")
    assert event.data["channel"] == "slack"
    assert ephemeral(slack) == [f"Recorded: review #{review.pk} approved."]
    # The card says who decided where once the review ended (the task's work, done here).
    assert slack_service.close_cards(review.pk) == 1
    (update,) = slack.calls("chat.update")
    assert "Approved by jane (Slack)" in json.dumps(update["blocks"])
    assert "nitro_approve" not in json.dumps(update["blocks"])


def test_an_explicit_mapping_wins_over_the_e_mail_address(
    slack: SlackServer, jane: Any, django_user_model: Any, client: Client
) -> None:
    bob = make_reviewer(django_user_model, "bob")
    SlackUser.objects.create(slack_user_id="U0JANE", user=bob)
    review = make_tool_review()
    post_card(slack, review)
    post_signed(client, click_payload(slack, review, "nitro_approve"))
    assert Decision.objects.get(review=review).decided_by == bob
    assert slack.calls("users.info") == []


def test_reject_asks_the_reason_in_a_modal_and_records_it(
    slack: SlackServer, jane: Any, client: Client
) -> None:
    review = make_tool_review()
    post_card(slack, review)
    assert post_signed(client, click_payload(slack, review, "nitro_reject")).status_code == 200
    assert not Decision.objects.exists()
    (opened,) = slack.calls("views.open")
    view = opened["view"]
    assert opened["trigger_id"] == "1337.42.abcdef"
    submission = {
        "type": "view_submission",
        "team": {"id": TEAM},
        "user": {"id": "U0JANE", "team_id": TEAM},
        "view": {
            **view,
            "state": {"values": {"reason": {"reason": {"type": "plain_text_input", "value": ""}}}},
        },
    }
    empty = post_signed(client, submission)
    assert empty.json() == {
        "response_action": "errors",
        "errors": {"reason": "Say why it is rejected: the assistant is told."},
    }
    assert not Decision.objects.exists()
    submission["view"]["state"]["values"]["reason"]["reason"]["value"] = "Tuesday is full"
    assert post_signed(client, submission).status_code == 200
    decision = Decision.objects.get(review=review)
    assert decision.tool_calls == [
        {"id": "call_1", "action": "reject", "message": "Tuesday is full"}
    ]
    assert (decision.note, decision.channel) == ("Tuesday is full", "slack")


def test_a_question_s_options_are_buttons_that_answer_it(
    slack: SlackServer, jane: Any, client: Client
) -> None:
    question = {
        "questionId": "carrier",
        "prompt": "Which carrier?",
        "options": [{"optionId": "ups", "label": "UPS"}, {"optionId": "dhl", "label": "DHL"}],
    }
    payload = {"interaction": {"interactionId": "i1", "kind": "question", "questions": [question]}}
    review = ReviewFactory(kind="question", payload=payload, interaction_id="i1")
    post_card(slack, review)
    buttons = posted_buttons(slack, review)
    assert [b["text"]["text"] for b in buttons.values()] == ["UPS", "DHL", "Open in admin"]
    post_signed(client, click_payload(slack, review, "nitro_answer_1"))
    decision = Decision.objects.get(review=review)
    assert decision.channel == "slack"
    assert decision.answer["answers"] == [{"questionId": "carrier", "optionIds": ["dhl"]}]


# -- refused, nothing applied ------------------------------------------------------------------


def test_a_forged_request_is_refused(slack: SlackServer, jane: Any, client: Client) -> None:
    review = make_tool_review()
    post_card(slack, review)
    payload = click_payload(slack, review, "nitro_approve")
    forged = post_signed(client, payload, secret="not-the-signing-secret")
    assert forged.status_code == 401
    assert "signature" in forged.content.decode()
    unsigned = post_signed(client, payload, headers={})
    assert unsigned.status_code == 401
    assert not Decision.objects.exists()


def test_a_stale_request_is_refused(slack: SlackServer, jane: Any, client: Client) -> None:
    review = make_tool_review()
    post_card(slack, review)
    payload = click_payload(slack, review, "nitro_approve")
    stale = post_signed(client, payload, timestamp=int(time.time()) - 301)
    assert stale.status_code == 403
    assert "too old" in stale.content.decode()
    garbled = post_signed(
        client, payload, headers={"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=0"}
    )
    assert garbled.status_code == 400
    assert not Decision.objects.exists()


def test_a_replayed_request_is_refused(slack: SlackServer, jane: Any, client: Client) -> None:
    """The same signed request sent again (a captured click, replayed within the window) is
    refused before anything is read: here the first was refused (its Slack user linked to
    nobody), and the replay, after the link was made, would otherwise have decided."""
    review = make_tool_review()
    post_card(slack, review)
    payload = click_payload(slack, review, "nitro_approve", slack_id="U0NOBODY")
    body = urlencode({"payload": json.dumps(payload)})
    captured = signed_headers(body, SECRET)
    assert post_signed(client, payload, headers=captured).status_code == 200
    assert not Decision.objects.exists()
    SlackUser.objects.create(slack_user_id="U0NOBODY", user=jane)
    again = post_signed(client, payload, headers=captured)
    assert again.status_code == 403
    assert "replay" in again.content.decode()
    assert not Decision.objects.exists()
    # A fresh click of the same person goes through: only the captured request is refused.
    assert post_signed(client, {**payload, "trigger_id": "1337.43.fedcba"}).status_code == 200
    assert Decision.objects.get(review=review).decided_by == jane


def test_a_slack_user_with_no_django_user_is_refused(
    slack: SlackServer, jane: Any, client: Client
) -> None:
    review = make_tool_review()
    post_card(slack, review)
    slack_user(slack, "U0STRANGER", "stranger@example.com")
    slack_user(slack, "U0UNVERIFIED", "jane@example.com", is_email_confirmed=False)
    for slack_id in ("U0STRANGER", "U0UNVERIFIED", "U0UNKNOWN"):
        post_signed(client, click_payload(slack, review, "nitro_approve", slack_id=slack_id))
    assert not Decision.objects.exists()
    said = ephemeral(slack)
    assert len(said) == 3
    assert all("not linked to a reviewer here" in text for text in said)


def test_another_workspace_is_refused(slack: SlackServer, jane: Any, client: Client) -> None:
    review = make_tool_review()
    post_card(slack, review)
    payload = click_payload(slack, review, "nitro_approve")
    payload["user"]["team_id"] = "T0OTHER"
    post_signed(client, payload)
    assert not Decision.objects.exists()
    assert "another Slack workspace" in ephemeral(slack)[0]


def test_a_user_without_the_permission_is_refused(
    slack: SlackServer, django_user_model: Any, client: Client
) -> None:
    make_reviewer(django_user_model, "looker", decide=False)
    slack_user(slack, "U0LOOKER", "looker@example.com")
    review = make_tool_review()
    post_card(slack, review)
    post_signed(client, click_payload(slack, review, "nitro_approve", slack_id="U0LOOKER"))
    assert not Decision.objects.exists()
    assert "needs the nitro_assistants.decide_review permission" in ephemeral(slack)[0]


def test_a_user_outside_the_rule_s_group_is_refused(
    slack: SlackServer, jane: Any, client: Client
) -> None:
    finance = Group.objects.create(name="Finance")
    Policy.objects.create(
        name="moves need finance",
        position=10,
        tool="reschedule_*",
        action=Policy.Action.REVIEW,
        group=finance,
    )
    review = make_tool_review()
    policies.review_mirrored(review)
    post_card(slack, review)
    post_signed(client, click_payload(slack, review, "nitro_approve"))
    assert not Decision.objects.exists()
    assert "Finance" in ephemeral(slack)[0]


def test_a_card_whose_review_changed_is_shown_anew_and_nothing_is_applied(
    slack: SlackServer, jane: Any, client: Client
) -> None:
    review = make_tool_review()
    post_card(slack, review)
    payload = click_payload(slack, review, "nitro_approve")
    # The assistant's held call changed since the card was posted (a new revision).
    payload_now = dict(review.payload)
    payload_now["tool_calls"] = [
        {**review.tool_calls[0], "args": {"appointment_id": 42, "day": "Friday", "time": "09:00"}}
    ]
    Review.objects.filter(pk=review.pk).update(
        payload=payload_now,
        revision=review.revision + 1,
        digest=rules.review_digest(review.kind, payload_now),
    )
    post_signed(client, payload)
    assert not Decision.objects.exists()
    (said,) = slack.calls("chat.postEphemeral")
    assert "changed since this card showed it" in said["text"]
    assert "Friday" in json.dumps(said["blocks"])
    # The card itself now shows the new version, its buttons bound to it.
    (update,) = slack.calls("chat.update")
    assert "Friday" in json.dumps(update["blocks"])
    value = slack_service.read_value(posted_buttons(slack, review)["nitro_approve"]["value"])
    assert value["v"] == review.revision + 1
    post_signed(client, click_payload(slack, review, "nitro_approve"))
    assert Decision.objects.get(review=review).channel == "slack"


def test_a_card_for_a_review_decided_elsewhere_says_so(
    slack: SlackServer, jane: Any, django_user_model: Any, client: Client
) -> None:
    bob = make_reviewer(django_user_model, "bob")
    review = make_tool_review()
    post_card(slack, review)
    payload = click_payload(slack, review, "nitro_approve")
    services.decide(review, bob, rules_approve(review), via="admin")
    post_signed(client, payload)
    assert Decision.objects.get(review=review).decided_by == bob
    assert "already ended: Approved by bob (admin)" in ephemeral(slack)[0]


def rules_approve(review: Review) -> dict[str, Any]:
    return {
        **rules.approve_everything(review.kind, review.tool_calls),
        "revision": review.revision,
        "digest": review.digest,
    }


def test_a_button_value_not_signed_by_the_app_is_refused(
    slack: SlackServer, jane: Any, client: Client
) -> None:
    review = make_tool_review()
    post_card(slack, review)
    payload = click_payload(slack, review, "nitro_approve")
    payload["actions"][0]["value"] = json.dumps({"r": review.pk, "a": "approve"})
    post_signed(client, payload)
    assert not Decision.objects.exists()
    assert "not one this app made" in ephemeral(slack)[0]


def test_a_body_that_is_not_a_payload_is_a_400(slack: SlackServer, client: Client) -> None:
    body = "payload=%7Bnot+json"
    response = client.generic(
        "POST",
        "/nitro/slack/interactions/",
        body,
        content_type="application/x-www-form-urlencoded",
        headers=signed_headers(body, SECRET),
    )
    assert response.status_code == 400


def test_without_slack_configured_the_endpoint_is_a_404(client: Client) -> None:
    body = "payload=%7B%7D"
    response = client.generic(
        "POST",
        "/nitro/slack/interactions/",
        body,
        content_type="application/x-www-form-urlencoded",
        headers=signed_headers(body, SECRET),
    )
    assert response.status_code == 404


# -- Slack failing -------------------------------------------------------------------------------


def test_slack_answering_429_is_a_transient_error_with_its_retry_after(
    slack: SlackServer, jane: Any, client: Client
) -> None:
    review = make_tool_review()
    post_card(slack, review)
    services.decide(review, jane, rules_approve(review), via="admin")
    slack.fail("chat.update", 429, retry_after=7)
    with pytest.raises(slack_service.SlackError) as raised:
        slack_service.close_cards(review.pk)
    assert (raised.value.transient, raised.value.retry_after) == (True, 7.0)
    assert SlackCard.objects.get(review=review).closed_at is None  # tried again later
    slack.fail("chat.update", 503)
    with pytest.raises(slack_service.SlackError) as raised:
        slack_service.close_cards(review.pk)
    assert raised.value.transient
    assert slack_service.close_cards(review.pk) == 1
    assert SlackCard.objects.get(review=review).closed_at is not None


def test_a_notification_slack_refused_is_retried_not_before_its_retry_after(
    slack: SlackServer,
) -> None:
    review = make_tool_review()
    notifications.notify(Notification.Kind.REQUESTED, review=review, users=[])
    slack.fail("chat.postMessage", 429, retry_after=30)
    with pytest.raises(notifications.NotificationError) as raised:
        notifications.send_batch("slack")
    assert raised.value.retry_after == 30.0
    assert not SlackCard.objects.exists()
    assert Review.objects.get(pk=review.pk).status == "pending"  # the review is not held up
    assert notifications.send_batch("slack") == 1
    assert SlackCard.objects.filter(review=review).count() == 1


def test_only_superusers_may_link_slack_users(
    django_user_model: Any, jane: Any, slack: SlackServer
) -> None:
    """A link lets a Slack account decide as its user: a reviewer who could add one could link
    their Slack account to an administrator."""
    root = django_user_model.objects.create_superuser("root", password="pw")
    staff = Client()
    staff.force_login(jane)
    assert staff.get("/admin/nitro_assistants/slackuser/").status_code == 403
    form = {"slack_user_id": "U0JANE", "user": root.pk}
    assert staff.post("/admin/nitro_assistants/slackuser/add/", form).status_code == 403
    assert not SlackUser.objects.exists()
    admin_client = Client()
    admin_client.force_login(root)
    assert admin_client.post("/admin/nitro_assistants/slackuser/add/", form).status_code == 302
    assert SlackUser.objects.get().user == root


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "block_actions", "user": "U0JANE", "actions": "approve"},
        {"type": "block_actions", "user": ["U0JANE"], "actions": [{"action_id": "nitro_approve"}]},
        {"type": "view_submission", "view": "nitro_reject_reason"},
        {"type": "view_submission", "view": {"callback_id": "nitro_reject_reason", "state": []}},
        {"type": "shortcut"},
    ],
)
def test_a_signed_payload_of_another_shape_applies_nothing_and_is_no_error(
    slack: SlackServer, jane: Any, client: Client, payload: dict[str, Any]
) -> None:
    make_tool_review()
    response = post_signed(client, payload)
    assert response.status_code == 200
    assert not Decision.objects.exists()


def test_cards_in_each_reviewer_s_direct_messages(
    settings: Any, slack: SlackServer, jane: Any, django_user_model: Any, client: Client
) -> None:
    """``to: reviewers``: a card in the direct messages of each reviewer Slack knows (by their
    link, else their e-mail address); clicked there, it decides as in a channel."""
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "NOTIFIERS": {
            "slack": {
                "BACKEND": "nitro_assistants.services.slack.SlackNotifier",
                "OPTIONS": {"to": "reviewers"},
            }
        },
    }
    bob = make_reviewer(django_user_model, "bob")
    SlackUser.objects.create(slack_user_id="U0BOB", user=bob)
    make_reviewer(django_user_model, "carol")  # Slack knows no carol: nothing sent to her
    review = make_tool_review()
    notifications.notify(Notification.Kind.REQUESTED, review=review)
    for user in django_user_model.objects.filter(username__in=["jane", "bob", "carol"]):
        notifications.send_batch("slack", user.pk)
    cards = dict(SlackCard.objects.values_list("target", "channel"))
    assert cards == {"U0JANE": "D0JANE", "U0BOB": "D0BOB"}
    # Told again (escalated): each card is updated in place, none posted twice.
    notifications.notify(Notification.Kind.ESCALATED, review=review)
    for user in (jane, bob):
        notifications.send_batch("slack", user.pk)
    assert len(slack.calls("chat.postMessage")) == 2
    assert len(slack.calls("chat.update")) == 2
    payload = click_payload(slack, review, "nitro_approve")
    assert payload["channel"]["id"].startswith("D")
    post_signed(client, payload)
    assert Decision.objects.get(review=review).channel == "slack"


def test_a_quorum_counts_slack_approvals_and_the_card_shows_them(
    slack: SlackServer, jane: Any, django_user_model: Any, client: Client
) -> None:
    make_reviewer(django_user_model, "bob")
    slack_user(slack, "U0BOB", "bob@example.com")
    Policy.objects.create(
        name="moves need two",
        position=10,
        tool="reschedule_*",
        action=Policy.Action.REVIEW,
        approvals=2,
    )
    review = make_tool_review()
    policies.review_mirrored(review)
    post_card(slack, review)
    assert "0 of 2 approvals" in json.dumps(slack.calls("chat.postMessage")[0]["blocks"])
    post_signed(client, click_payload(slack, review, "nitro_approve"))
    assert not Decision.objects.exists()
    assert "Your approval of review" in ephemeral(slack)[0]
    (update,) = slack.calls("chat.update")
    assert "1 of 2 approvals" in json.dumps(update["blocks"])
    # The same person clicking again does not count twice; another completes the quorum.
    post_signed(client, {**click_payload(slack, review, "nitro_approve"), "trigger_id": "2"})
    assert not Decision.objects.exists()
    post_signed(client, click_payload(slack, review, "nitro_approve", slack_id="U0BOB"))
    decision = Decision.objects.get(review=review)
    assert decision.channel == "slack"
    assert "Approved by bob, jane" in decision.note or "Approved by jane, bob" in decision.note


def test_a_card_for_a_review_that_failed_says_so(
    slack: SlackServer, jane: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """A review can end without a decision by failing (the graph stuck on its pause): the new
    ``review_failed`` signal reaches the receiver that updates its cards, and the card stops
    offering buttons for a review nobody can decide any more."""
    interrupt_id = uuid.uuid4().hex
    review = ReviewFactory(  # a plain interrupt() pause: the kind a stuck graph fails pending
        kind=Review.Kind.INTERRUPT,
        interrupt_ids=[interrupt_id],
        payload={"pauses": [{"interrupt_id": interrupt_id, "kind": "interrupt", "value": "Ok?"}]},
    )
    post_card(slack, review)
    seen: list[dict[str, Any]] = []

    def record(sender: Any, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signals.review_failed.connect(record)
    try:
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            fail_review(review, None, "the graph is stuck on this pause")
    finally:
        signals.review_failed.disconnect(record)
    assert [(s["sender"], s["review"].pk, s["error"]) for s in seen] == [
        (Review, review.pk, "the graph is stuck on this pause")
    ]
    assert signals.review_failed.has_listeners(Review)  # the app's: the cards' update
    assert slack_service.close_cards(review.pk) == 1
    (update,) = slack.calls("chat.update")
    assert "Failed" in json.dumps(update["blocks"])
    assert "nitro_approve" not in json.dumps(update["blocks"])
