"""Notifications: one batched message per reviewer per channel (Django's locmem mail, a real
local HTTP receiver for the webhook), signed links that work and expire, muted reviewers,
escalations, and failing channels retried and never lost silently."""

from __future__ import annotations

import datetime
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote

import pytest
from celery import current_app
from django.contrib.auth.models import Group, User
from django.core import mail, signing
from django.test import Client
from django.utils import timezone

from nitro_assistants import tasks
from nitro_assistants.models import Decision, Notification, NotificationPreference, Policy
from nitro_assistants.services import governance, notifications
from tests.governance.conftest import mirrored, reviewer

pytestmark = pytest.mark.django_db


class Receiver:
    """A real HTTP endpoint on localhost recording what is POSTed; ``status`` is its answer."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        self.status = 200
        self.fail_next = 0  # answer 503 to this many requests first
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                status = receiver.status
                if receiver.fail_next > 0:
                    receiver.fail_next -= 1
                    status = 503
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.stop()


@pytest.fixture
def channels(settings: Any, receiver: Receiver) -> Receiver:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "NOTIFY_BASE_URL": "http://testserver",
        "NOTIFY_DELAY": 0,
        "NOTIFY_INTERVAL": 300,
        "NOTIFY_MAX_ATTEMPTS": 3,
        "NOTIFIERS": {
            "email": {"BACKEND": "nitro_assistants.services.notifiers.EmailNotifier"},
            "team": {
                "BACKEND": "nitro_assistants.services.notifiers.WebhookNotifier",
                "OPTIONS": {"url": receiver.url, "format": "slack", "timeout": 5},
            },
        },
    }
    return receiver


def committed(capture: Any, amount: float) -> Any:
    with capture(execute=True):
        return mirrored(amount)


def sends(queued: list[Any]) -> set[tuple[Any, ...]]:
    return {args for name, args in queued if name == "nitro_assistants.send_notifications"}


def test_one_batched_message_per_reviewer_and_channel_with_working_links(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
) -> None:
    alice = reviewer("alice", finance)
    alice.email = "alice@example.com"
    alice.save()
    reviewer("eve")  # may decide, but not in Finance: not told of Finance's reviews
    first = committed(django_capture_on_commit_callbacks, 300)
    second = committed(django_capture_on_commit_callbacks, 400)
    committed(django_capture_on_commit_callbacks, 20)  # the policy approves it: nobody is told
    # Sent by tasks after commit: one per reviewer and channel (the webhook: the channel's).
    assert sends(queued) == {("email", alice.pk), ("team", None)}

    assert tasks.send_notifications.apply(args=("email", alice.pk)).get() == 2
    assert tasks.send_notifications.apply(args=("team", None)).get() == 2
    assert tasks.send_notifications.apply(args=("email", alice.pk)).get() == 0  # nothing new

    (message,) = mail.outbox
    assert message.to == ["alice@example.com"]
    assert message.subject == "[Reviews] 2 reviews need your attention"
    html = message.alternatives[0][0]
    for review in (first, second):
        assert f"Review #{review.pk}: refund_customer" in message.body
        assert f"Review #{review.pk}: refund_customer" in html
    assert "1 of 2" not in message.body and "0 of 2 approvals" in message.body

    (posted,) = channels.bodies
    assert posted["text"] == "2 reviews need your attention"
    assert f"Review #{first.pk}" in posted["blocks"][1]["text"]["text"]

    links = re.findall(r"http://testserver(/nitro/review/[^/\s]+/)", message.body)
    assert len(links) == 2
    client = Client()
    anonymous = client.get(links[0])
    assert anonymous.status_code == 302  # a login first, then back through the link
    assert anonymous["Location"] == f"/admin/login/?next={quote(links[0])}"
    client.force_login(alice)
    screen = client.get(links[0], follow=True)
    assert screen.status_code == 200
    assert screen.context["review"].pk == first.pk


def test_reviews_requested_while_a_send_is_pending_join_it_instead_of_adding_tasks(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
) -> None:
    # The cluster (docs/scale.md) found one send task per review and reviewer: 40 reviewers
    # turned 700 conversations into 13,000 tasks that crowded out the runs and resumes.
    alice = reviewer("alice", finance)
    for amount in (300, 400, 500):
        committed(django_capture_on_commit_callbacks, amount)
    sent = [args for name, args in queued if name == "nitro_assistants.send_notifications"]
    assert sent == [("email", alice.pk), ("team", None)]
    assert tasks.send_notifications.apply(args=("email", alice.pk)).get() == 3
    assert tasks.send_notifications.apply(args=("team", None)).get() == 3

    # Nothing queued any more: the next review starts a batch, and enqueues its send.
    queued.clear()
    committed(django_capture_on_commit_callbacks, 600)
    assert sorted(args for _, args in queued) == [("email", alice.pk), ("team", None)]


def test_the_flush_enqueues_one_send_per_reviewer_and_channel_not_per_row(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
) -> None:
    # The cluster (docs/scale.md): the outbox's default ordering made every queued row distinct,
    # and each flush enqueued a send per row, 9,000 of them every five minutes.
    alice = reviewer("alice", finance)
    for amount in (300, 400, 500):
        committed(django_capture_on_commit_callbacks, amount)
    lost(Notification.objects.all())
    queued.clear()
    assert notifications.flush() == 2
    assert sorted(args for _, args in queued) == [("email", alice.pk), ("team", None)]


def lost(rows: Any) -> None:
    """Make ``rows`` older than any send still on its way could leave them."""
    rows.update(
        created_at=timezone.now() - notifications.lost_after() - datetime.timedelta(seconds=1)
    )


def test_the_flush_leaves_a_batch_whose_send_is_waiting_out_the_interval_to_it(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
) -> None:
    # The cluster (docs/scale.md): every five minutes the flush enqueued a send for each
    # reviewer whose send was waiting out NOTIFY_INTERVAL; that send found the interval not
    # over and enqueued itself again, so each flush added a send per reviewer and channel for
    # good (80 more every five minutes with 40 reviewers), and the bursts made resumes wait.
    alice = reviewer("alice", finance)
    alice.email = "alice@example.com"
    alice.save()
    committed(django_capture_on_commit_callbacks, 300)
    assert notifications.send_batch("email", alice.pk) == 1  # the interval starts
    committed(django_capture_on_commit_callbacks, 400)  # waits for the send due after it
    queued.clear()
    assert notifications.flush() == 0
    assert queued == []
    # Queued longer than a waiting send could leave it: its send was lost, the flush sends it.
    lost(Notification.objects.filter(status=Notification.Status.QUEUED, user=alice))
    assert notifications.flush() == 1
    assert sends(queued) == {("email", alice.pk)}


def test_with_tasks_run_in_place_the_flush_sends_everything_queued(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
) -> None:
    # No broker (the embedded demo): no countdown send is on its way, the flush is the only one.
    alice = reviewer("alice", finance)
    committed(django_capture_on_commit_callbacks, 300)
    before = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = True
    try:
        assert notifications.lost_after() == datetime.timedelta(0)
        queued.clear()
        assert notifications.flush() == 2
    finally:
        current_app.conf.task_always_eager = before
    assert sends(queued) == {("email", alice.pk), ("team", None)}


def test_what_arrives_within_the_interval_waits_for_the_next_message(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
    settings: Any,
) -> None:
    alice = reviewer("alice", finance)
    alice.email = "alice@example.com"
    alice.save()
    committed(django_capture_on_commit_callbacks, 300)
    assert notifications.send_batch("email", alice.pk) == 1
    committed(django_capture_on_commit_callbacks, 400)
    queued.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert notifications.send_batch("email", alice.pk) == 0  # too soon: enqueued for later
    assert sends(queued) == {("email", alice.pk)}
    assert len(mail.outbox) == 1
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "NOTIFY_INTERVAL": 0}
    assert notifications.send_batch("email", alice.pk) == 1
    assert len(mail.outbox) == 2


def test_a_reviewer_who_turned_them_off_is_not_told(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
) -> None:
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    client = Client()
    client.force_login(alice)
    response = client.post("/admin/nitro_assistants/notificationpreference/add/", {})
    assert response.status_code == 302  # "send me notifications" unticked
    assert NotificationPreference.objects.get(user=alice).enabled is False
    # Nobody else's preference is hers to see or change.
    other = NotificationPreference.objects.create(user=bob)
    assert client.get(
        f"/admin/nitro_assistants/notificationpreference/{other.pk}/change/"
    ).status_code in (302, 403, 404)
    committed(django_capture_on_commit_callbacks, 300)
    assert set(Notification.objects.filter(channel="email").values_list("user", flat=True)) == {
        bob.pk
    }


def links_in(message: Any) -> list[str]:
    return re.findall(r"http://testserver(/nitro/review/[^/\s]+/)", message.body)


def test_a_mailed_link_opens_the_review_for_its_recipient_only(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
) -> None:
    """Each reviewer's mail holds links bound to them: forwarded to (or leaked to) another
    reviewer, who may decide the same review on their own, the link opens nothing for them."""
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    for user in (alice, bob):
        user.email = f"{user.username}@example.com"
        user.save()
    review = committed(django_capture_on_commit_callbacks, 300)
    for user in (alice, bob):
        tasks.send_notifications.apply(args=("email", user.pk)).get()
    mails = {message.to[0]: links_in(message) for message in mail.outbox}
    (to_alice,), (to_bob,) = mails["alice@example.com"], mails["bob@example.com"]
    assert to_alice != to_bob
    screen = f"/admin/nitro_assistants/review/{review.pk}/review/"

    as_alice, as_bob = Client(), Client()
    as_alice.force_login(alice)
    as_bob.force_login(bob)
    opened = as_alice.get(to_alice)
    assert (opened.status_code, opened["Location"]) == (302, screen)
    assert as_alice.get(screen).status_code == 200
    assert as_bob.get(to_bob)["Location"] == screen

    for client, link in ((as_bob, to_alice), (as_alice, to_bob)):
        refused = client.get(link)
        assert refused.status_code == 403
        assert "sent to somebody else" in refused.content.decode()
        assert "Location" not in refused
    review.refresh_from_db()
    assert review.status == "pending"
    assert not Decision.objects.exists()


def test_a_link_grants_nothing_its_follower_does_not_hold(
    channels: Receiver, queued: list[Any]
) -> None:
    """The recipient's own link, once they may no longer look at reviews, leads to the review
    screen's 403; a shared channel's link (bound to nobody) opens the screen for whoever signs
    in, with their permissions."""
    review = mirrored(80)
    staff = User.objects.create_user("staff", password="pw", is_staff=True)  # no permission
    client = Client()
    client.force_login(staff)
    own = notifications.review_link(review.pk, staff.pk).removeprefix("http://testserver")
    assert client.get(own, follow=True).status_code == 403
    shared = notifications.review_link(review.pk).removeprefix("http://testserver")
    assert client.get(shared, follow=True).status_code == 403
    alice = reviewer("alice")
    client.force_login(alice)
    assert client.get(shared, follow=True).status_code == 200
    assert client.get(own).status_code == 403  # staff's link, followed by alice


def test_a_tampered_or_rebound_link_is_refused(channels: Receiver, queued: list[Any]) -> None:
    review = mirrored(80)
    alice, bob = reviewer("alice"), reviewer("bob")
    client = Client()
    client.force_login(bob)
    token = notifications.link_token(review.pk, alice.pk)
    payload, _, signature = token.rpartition(":")
    # The payload rewritten to name bob, with alice's signature: the signature no longer holds.
    rebound = signing.dumps({"r": review.pk, "u": str(bob.pk)}, salt=notifications.SALT)
    forged = f"{rebound.rpartition(':')[0]}:{signature}"
    for bad in (forged, f"{payload}:{signature[:-2]}xx", token[:-1]):
        assert client.get(f"/nitro/review/{bad}/").status_code == 400
    not_a_user = signing.dumps({"r": review.pk, "u": [alice.pk]}, salt=notifications.SALT)
    assert client.get(f"/nitro/review/{not_a_user}/").status_code == 400
    assert client.get(f"/nitro/review/{token}/").status_code == 403  # whole, but alice's


def test_signed_links_expire_and_refuse_tampering(
    channels: Receiver, settings: Any, queued: list[Any]
) -> None:
    review = mirrored(80)
    path = notifications.review_link(review.pk).removeprefix("http://testserver")
    client = Client()
    assert client.get(path).status_code == 302
    assert client.get(path[:-3] + "xx/").status_code == 400
    forged = signing.dumps({"r": review.pk}, salt="another salt")
    assert client.get(f"/nitro/review/{forged}/").status_code == 400
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "NOTIFY_LINK_MAX_AGE": -1}
    assert client.get(path).status_code == 410


def test_escalation_and_overdue_tell_the_group(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    finance: Group,
    managers: Group,
) -> None:
    Policy.objects.create(
        name="large refunds",
        tool="refund_*",
        group=finance,
        deadline=datetime.timedelta(hours=1),
        on_deadline=Policy.OnDeadline.ESCALATE,
        escalate_to=managers,
    )
    boss = reviewer("boss", managers)
    review = committed(django_capture_on_commit_callbacks, 300)
    with django_capture_on_commit_callbacks(execute=True):
        governance.sweep_deadlines(now=timezone.now() + datetime.timedelta(hours=2))
    kinds = set(
        Notification.objects.filter(review=review, user=boss).values_list("kind", flat=True)
    )
    assert kinds == {"escalated"}


def test_a_failing_channel_is_retried_then_marked_failed_and_logged(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
    caplog: pytest.LogCaptureFixture,
) -> None:
    reviewer("alice", finance)
    channels.status = 500
    review = committed(django_capture_on_commit_callbacks, 300)
    assert review.status == "pending"  # the review is untouched by whatever the channel does
    for attempt in (1, 2):
        with pytest.raises(notifications.NotificationError):
            notifications.send_batch("team", None)
        row = Notification.objects.get(channel="team")
        assert (row.status, row.attempts) == ("queued", attempt)
        assert "500 Server Error" in row.error
    assert notifications.send_batch("team", None) == 0
    row = Notification.objects.get(channel="team")
    assert (row.status, row.attempts) == ("failed", 3)
    assert "gave up on 1 notifications" in caplog.text
    assert len(channels.bodies) == 3


def test_the_task_retries_a_failing_channel(
    channels: Receiver,
    queued: list[Any],
    refund_rules: dict[str, Policy],
    finance: Group,
    django_capture_on_commit_callbacks: Any,
) -> None:
    reviewer("alice", finance)
    channels.fail_next = 1
    committed(django_capture_on_commit_callbacks, 300)
    # The task retries (run in place here: Celery's eager retry) and the second try gets through.
    assert tasks.send_notifications.apply(args=("team", None)).get() == 1
    assert len(channels.bodies) == 2
    row = Notification.objects.get(channel="team")
    assert (row.status, row.attempts, row.error) == ("sent", 1, "")


@pytest.fixture
def eager() -> Iterator[None]:
    """Celery runs tasks in place (CELERY_TASK_ALWAYS_EAGER), as the demo without a broker."""
    before = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = True
    try:
        yield
    finally:
        current_app.conf.task_always_eager = before


def test_tasks_run_in_place_do_not_loop_on_the_interval(
    django_capture_on_commit_callbacks: Any,
    channels: Receiver,
    refund_rules: dict[str, Policy],
    finance: Group,
    eager: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No broker (the embedded demo): tasks run in place and ignore countdowns, so a message the
    interval holds back must not be enqueued again at once, over and over."""
    calls: list[Any] = []
    send_batch = notifications.send_batch

    def counted(*args: Any) -> int:
        calls.append(args)
        if len(calls) > 10:  # sending again and again: stop the loop, fail the test
            raise AssertionError("send_notifications keeps enqueueing itself")
        return send_batch(*args)

    monkeypatch.setattr(notifications, "send_batch", counted)
    alice = reviewer("alice", finance)
    alice.email = "alice@example.com"
    alice.save()
    committed(django_capture_on_commit_callbacks, 300)
    assert len(mail.outbox) == 1  # sent in place, after commit
    committed(django_capture_on_commit_callbacks, 400)
    assert len(mail.outbox) == 1  # held back by the interval, for the next message or a flush
    assert Notification.objects.filter(channel="email", status="queued").count() == 1
    assert [args[0] for args in calls].count("email") == 2
