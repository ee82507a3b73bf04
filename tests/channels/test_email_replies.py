"""Deciding by replying to a notification e-mail: real RFC 822 replies posted to django-anymail's
Mailgun inbound webhook (signed as Mailgun signs), each check refusing with an answer saying why
and nothing applied."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.test import Client

from nitro_assistants.models import Decision, Event, Notification, Policy, Review
from nitro_assistants.services import notifications, reply_tokens
from nitro_assistants.services import policy_enforcement as policies
from tests.admin.conftest import make_reply_review, make_tool_review
from tests.channels.conftest import make_reviewer
from tests.factories import ReviewFactory

pytestmark = pytest.mark.django_db

SIGNING_KEY = "mailgun-signing-key-of-the-tests"
WEBHOOK = "/anymail/mailgun/inbound_mime/"


@pytest.fixture
def replies(settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "NOTIFIERS": {"email": {"BACKEND": "nitro_assistants.services.notifiers.EmailNotifier"}},
        "NOTIFY_BASE_URL": "https://reviews.example.com",
        "NOTIFY_DELAY": 0,
        "NOTIFY_INTERVAL": 0,
        "INBOUND_EMAIL": {
            "REPLY_ADDRESS": "reviews+{token}@reply.example.com",
            "FROM_EMAIL": "reviews@example.com",
        },
    }
    settings.DEFAULT_FROM_EMAIL = "reviews@example.com"


@pytest.fixture
def jane(django_user_model: Any, replies: None) -> Any:
    return make_reviewer(django_user_model, "jane")


def notified(review: Review, user: Any) -> str:
    """Send ``user`` the notification of ``review``; its Reply-To address."""
    mail.outbox.clear()
    notifications.notify(Notification.Kind.REQUESTED, review=review, users=[user])
    assert notifications.send_batch("email", user.pk) == 1
    (sent,) = mail.outbox
    assert 'reply with one line: "approve"' in sent.body
    # What a reply decides is in the e-mail, whole.
    held = '"day": "Tuesday"' if review.tool_calls else review.reply["content"]
    assert held in sent.body
    assert held.replace('"', "&quot;") in sent.alternatives[0][0]
    (address,) = sent.reply_to
    mail.outbox.clear()
    return str(address)


def reply(
    to: str,
    body: str,
    *,
    sender: str = "jane@example.com",
    headers: str = "",
    authentication: str = "mx.mailgun.org; dkim=pass header.d=example.com; spf=pass; dmarc=pass",
) -> str:
    """A reply as a mail program writes it, with the receiving server's verdict on top."""
    return (
        f"Authentication-Results: {authentication}\r\n"
        f"From: Jane Doe <{sender}>\r\n"
        f"To: Reviews <{to}>\r\n"
        "Subject: Re: [Reviews] Review waits\r\n"
        f"Message-ID: <{uuid.uuid4().hex}@mail.example.com>\r\n"
        f"{headers}"
        "MIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "\r\n"
        f"{body}"
    )


def post(client: Client, raw: str, recipient: str, **fields: str) -> Any:
    """POST ``raw`` to anymail's Mailgun inbound webhook (raw MIME), signed as Mailgun signs."""
    timestamp, token = str(int(time.time())), uuid.uuid4().hex
    signature = hmac.new(
        SIGNING_KEY.encode(), f"{timestamp}{token}".encode(), hashlib.sha256
    ).hexdigest()
    data = {
        "body-mime": raw,
        "recipient": recipient,
        "sender": "jane@example.com",
        "timestamp": timestamp,
        "token": token,
        "signature": signature,
        **fields,
    }
    response = client.post(WEBHOOK, data)
    assert response.status_code == 200, response.content
    return response


QUOTED = (
    "\r\n\r\nOn Fri, Dec 4, 2026 at 10:00 AM Reviews <reviews@example.com> wrote:\r\n"
    "> Review #1: reschedule_appointment waits for a review\r\n"
    "> approve\r\n"
)
SIGNATURE = "\r\n-- \r\nJane Doe\r\nHead of Scheduling\r\napprove\r\n"


def answers() -> list[str]:
    return [message.body for message in mail.outbox]


def test_a_reply_rejects_with_its_reason_quotes_and_signature_left_out(
    jane: Any, client: Client
) -> None:
    review = make_tool_review()
    address = notified(review, jane)
    raw = reply(address, "Reject: Tuesday is full, offer Wednesday" + SIGNATURE + QUOTED)
    post(client, raw, address)
    decision = Decision.objects.get(review=review)
    assert decision.tool_calls == [
        {"id": "call_1", "action": "reject", "message": "Tuesday is full, offer Wednesday"}
    ]
    assert (decision.decided_by, decision.channel) == (jane, "email")
    assert Event.objects.get(review=review, verb="review_decided").data["channel"] == "email"
    (answer,) = mail.outbox
    assert answer.to == ["jane@example.com"]
    assert answer.body == f"Recorded: review #{review.pk} rejected."
    assert answer.extra_headers["Auto-Submitted"] == "auto-replied"


def test_a_reply_approves_a_held_reply(jane: Any, client: Client) -> None:
    review = make_reply_review()
    address = notified(review, jane)
    post(client, reply(address, "Approve!\r\n" + QUOTED), address)
    assert Decision.objects.get(review=review).reply == {"action": "approve"}


def test_a_question_is_answered_by_an_option_s_name(jane: Any, client: Client) -> None:
    question = {
        "questionId": "carrier",
        "prompt": "Which carrier?",
        "options": [{"optionId": "ups", "label": "UPS"}, {"optionId": "dhl", "label": "DHL"}],
    }
    payload = {"interaction": {"interactionId": "i1", "kind": "question", "questions": [question]}}
    review = ReviewFactory(kind="question", payload=payload, interaction_id="i1")
    address = reply_tokens.reply_address(review, jane.pk)
    post(client, reply(address, "dhl\r\n" + QUOTED), address)
    decision = Decision.objects.get(review=review)
    assert decision.answer["answers"] == [{"questionId": "carrier", "optionIds": ["dhl"]}]
    assert decision.channel == "email"


# -- refused, nothing applied ------------------------------------------------------------------


def test_a_reply_from_another_sender_is_refused(
    jane: Any, client: Client, django_user_model: Any
) -> None:
    make_reviewer(django_user_model, "bob")
    review = make_tool_review()
    address = notified(review, jane)
    post(client, reply(address, "approve", sender="bob@example.com"), address)
    assert not Decision.objects.exists()
    (answer,) = mail.outbox
    assert answer.to == ["bob@example.com"]
    assert "sent to somebody else" in answer.body


def test_a_reply_without_the_token_is_refused(jane: Any, client: Client) -> None:
    make_tool_review()
    post(client, reply("reviews@reply.example.com", "approve"), "reviews@reply.example.com")
    assert not Decision.objects.exists()
    assert "does not answer one" in answers()[0]


def test_a_token_made_up_or_changed_is_refused(jane: Any, client: Client) -> None:
    review = make_tool_review()
    address = notified(review, jane)
    other = make_tool_review()
    # The token of jane's notification, pointed at another review: its HMAC no longer holds.
    token = reply_tokens.token_in(address)
    assert token is not None
    forged = address.replace(f"+{review.pk}.", f"+{other.pk}.", 1)
    post(client, reply(forged, "approve"), forged)
    assert not Decision.objects.exists()
    assert "not one of our notifications'" in answers()[0]


def test_a_token_for_another_review_decides_only_that_one(jane: Any, client: Client) -> None:
    """A reply quoting the notification of one review, with the subject of another, decides the
    review its token names; the token, not the text, says which."""
    first, second = make_tool_review(), make_tool_review()
    address = notified(first, jane)
    post(client, reply(address, f"approve review #{second.pk}"), address)
    assert not Decision.objects.exists()  # "approve review #2" is not a command
    post(client, reply(address, "approve"), address)
    assert list(Decision.objects.values_list("review_id", flat=True)) == [first.pk]


def test_an_expired_token_is_refused(jane: Any, client: Client) -> None:
    review = make_tool_review()
    old = reply_tokens.make_token(review, jane.pk, now=time.time() - 8 * 24 * 3600)
    address = f"reviews+{old}@reply.example.com"
    post(client, reply(address, "approve"), address)
    assert not Decision.objects.exists()
    assert "too old" in answers()[0]


def test_spam_and_failed_authentication_are_refused_without_an_answer(
    jane: Any, client: Client
) -> None:
    review = make_tool_review()
    address = notified(review, jane)
    post(client, reply(address, "approve", headers="X-Mailgun-Sflag: Yes\r\n"), address)
    post(client, reply(address, "approve", headers="X-Mailgun-Sscore: 9.5\r\n"), address)
    post(
        client,
        reply(address, "approve", authentication="mx.mailgun.org; spf=fail; dmarc=fail"),
        address,
    )
    assert not Decision.objects.exists()
    assert mail.outbox == []  # no answer to a sender who may be forged (backscatter)


def test_an_automatic_reply_is_ignored(jane: Any, client: Client) -> None:
    review = make_tool_review()
    address = notified(review, jane)
    post(
        client,
        reply(address, "I am out of office", headers="Auto-Submitted: auto-replied\r\n"),
        address,
    )
    assert not Decision.objects.exists()
    assert mail.outbox == []


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("Sure, go ahead\r\n" + QUOTED, "is not a command this address understands"),
        ("reject\r\n" + QUOTED, "Say why you reject it"),
        (QUOTED, "no command above the quoted e-mail"),
        (SIGNATURE, "no command above the quoted e-mail"),
    ],
)
def test_anything_but_a_command_is_refused_with_what_to_write(
    jane: Any, client: Client, body: str, said: str
) -> None:
    review = make_tool_review()
    address = notified(review, jane)
    post(client, reply(address, body), address)
    assert not Decision.objects.exists()
    (answer,) = answers()
    assert said in answer
    assert '"approve", or "reject: <why>"' in answer


def test_a_reply_to_a_changed_review_gets_the_new_version_and_applies_nothing(
    jane: Any, client: Client
) -> None:
    review = make_tool_review()
    address = notified(review, jane)
    Review.objects.filter(pk=review.pk).update(revision=review.revision + 1, digest="f" * 64)
    post(client, reply(address, "approve"), address)
    assert not Decision.objects.exists()
    (answer,) = mail.outbox
    assert "changed since the notification you answered" in answer.body
    assert "reschedule_appointment" in answer.body
    (fresh,) = answer.reply_to
    # The answer's own reply address decides the new version.
    mail.outbox.clear()
    post(client, reply(fresh, "approve"), fresh)
    assert Decision.objects.get(review=review).channel == "email"


def test_a_reviewer_without_the_permission_is_refused(
    replies: None, client: Client, django_user_model: Any
) -> None:
    looker = make_reviewer(django_user_model, "looker", decide=False)
    review = make_tool_review()
    address = reply_tokens.reply_address(review, looker.pk)
    post(client, reply(address, "approve", sender="looker@example.com"), address)
    assert not Decision.objects.exists()
    assert "decide_review permission" in answers()[0]


def test_the_token_survives_a_mail_system_folding_the_address_to_lower_case(
    jane: Any, client: Client
) -> None:
    review = make_tool_review()
    address = notified(review, jane).upper()
    post(client, reply(address, "approve"), address)
    assert Decision.objects.get(review=review).decided_by == jane


def test_a_reviewer_outside_the_rule_s_group_is_refused(jane: Any, client: Client) -> None:
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
    address = reply_tokens.reply_address(review, jane.pk)
    post(client, reply(address, "approve"), address)
    assert not Decision.objects.exists()
    assert "Finance" in answers()[0]


def html_reply(to: str, html: str) -> str:
    return (
        "Authentication-Results: mx.mailgun.org; dkim=pass; spf=pass; dmarc=pass\r\n"
        "From: Jane Doe <jane@example.com>\r\n"
        f"To: <{to}>\r\n"
        "Subject: Re: [Reviews] Review waits\r\n"
        "MIME-Version: 1.0\r\n"
        "Content-Type: text/html; charset=utf-8\r\n"
        "\r\n"
        f"{html}"
    )


def test_an_html_only_reply_is_read_without_its_quote(jane: Any, client: Client) -> None:
    review = make_tool_review()
    address = notified(review, jane)
    quoted = (
        '<div dir="ltr">reject: not on a Tuesday<br>Jane</div>'
        '<div class="gmail_quote"><div>On Fri, Jane wrote:</div>'
        "<blockquote>approve</blockquote></div>"
    )
    post(client, html_reply(address, quoted), address)
    decision = Decision.objects.get(review=review)
    assert decision.note == "not on a Tuesday"


def test_a_huge_html_reply_is_read_quickly_and_refused(jane: Any, client: Client) -> None:
    review = make_tool_review()
    address = notified(review, jane)
    started = time.monotonic()
    post(client, html_reply(address, "<blockquote>" * 200_000), address)
    assert time.monotonic() - started < 10
    assert not Decision.objects.exists()
    assert "Nothing was applied" in answers()[0]
