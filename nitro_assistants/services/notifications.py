"""Telling reviewers that something waits for them, where they are (the ``NOTIFIERS`` channels).

What is to be told goes into an outbox (:class:`~nitro_assistants.models.Notification`) after the
state change commits; a Celery task (``nitro_assistants.send_notifications``, one per channel and
reviewer) sends everything queued as one message, at most once per ``NOTIFY_INTERVAL``: what
arrives within ``NOTIFY_DELAY`` of the first item, or while the interval runs, joins the next
message. A channel that raises or times out is logged and retried with backoff up to
``NOTIFY_MAX_ATTEMPTS``; the rows it could not send end ``failed`` with the error, logged as an
error: never lost silently. Nothing here ever fails or holds up a review: queueing happens after
the review's transaction committed, and any error in it is logged, not raised.

Every item carries a signed link (:mod:`django.core.signing`, expiring after
``NOTIFY_LINK_MAX_AGE``) to the review screen; following it still goes through the admin's
login and permission checks. A link sent to a person (e-mail) is bound to them: their user's pk
is in the signed payload, and the link opens nothing for anybody else (a forwarded or leaked
mail is no way in). A link sent to a shared channel (a team's webhook) is bound to no user: it
only opens the review screen, which asks whoever follows it to sign in, with the permissions
they hold. Either way a link grants nothing the person following it does not already hold.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable
from typing import Any

from celery import current_app
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core import signing
from django.db import transaction
from django.db.models import Max, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from nitro_assistants import redacting
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import Decision, Notification, Review, ReviewHandling, Thread
from nitro_assistants.services.enqueue import send
from nitro_assistants.services.notifiers import Item, Message, Notifier, load
from nitro_assistants.services.policy_enforcement import waiting_for

logger = logging.getLogger("nitro_assistants")
SALT = "nitro_assistants.review_link"
TASK = "nitro_assistants.send_notifications"


class NotificationError(NitroAssistantsError):
    """A channel failed to send a batch; the task retries it, not before ``retry_after``
    seconds when the channel said (Slack's ``Retry-After``)."""

    retry_after: float | None = None


# -- signed links ---------------------------------------------------------------------------------


def link_token(review_pk: int, user_pk: Any = None) -> str:
    """The signed token of a link to review ``review_pk`` for the user ``user_pk`` (None: a
    link for a shared channel, bound to nobody). The pk is signed as text, so a host's user model
    with UUID keys signs as well as one with integers."""
    recipient = None if user_pk is None else str(user_pk)
    return signing.dumps({"r": review_pk, "u": recipient}, salt=SALT, compress=True)


def read_link(token: str) -> tuple[int, str | None]:
    """``(review pk, recipient's user pk as text or None)`` of a link. Raises
    ``signing.SignatureExpired`` (older than ``NOTIFY_LINK_MAX_AGE``) or ``signing.BadSignature``
    (tampered, or not ours)."""
    data = signing.loads(token, salt=SALT, max_age=app_settings.NOTIFY_LINK_MAX_AGE)
    if not isinstance(data, dict) or not isinstance(data.get("r"), int):
        raise signing.BadSignature("not a review link")
    recipient = data.get("u")
    if recipient is not None and not isinstance(recipient, int | str):
        raise signing.BadSignature("not a review link")
    return int(data["r"]), None if recipient is None else str(recipient)


def may_follow_link(user: Any, recipient: str | None) -> bool:
    """Whether ``user`` (signed in) may follow a link sent to ``recipient``: anybody for a link
    bound to nobody (the review screen checks their permissions), else only the recipient."""
    return recipient is None or str(user.pk) == recipient


def review_from_token(token: str) -> int:
    """The review pk a link names (see :func:`read_link`)."""
    return read_link(token)[0]


def review_link(review_pk: int, user_pk: Any = None) -> str:
    """The absolute URL of a link to review ``review_pk``, bound to the user ``user_pk`` (None:
    to nobody, for a shared channel)."""
    path = reverse("nitro_assistants:review_link", args=[link_token(review_pk, user_pk)])
    return f"{app_settings.NOTIFY_BASE_URL}{path}"


# -- channels and recipients -----------------------------------------------------------------------


def channels() -> dict[str, Notifier]:
    """The configured channels (``NOTIFIERS``); one that is configured wrongly is logged and
    left out (the system check reports it at start-up)."""
    found: dict[str, Notifier] = {}
    for name, definition in app_settings.NOTIFIERS.items():
        try:
            found[name] = load(name, definition)
        except NitroAssistantsError:
            logger.exception("Notifier %r is configured wrongly; nothing is sent through it", name)
    return found


def _deciders() -> Q:
    perm = Permission.objects.filter(
        content_type__app_label="nitro_assistants", codename="decide_review"
    )
    return Q(is_superuser=True) | Q(user_permissions__in=perm) | Q(groups__permissions__in=perm)


def reviewers_for(review: Review) -> QuerySet[Any]:
    """Who is told a review waits: the members of its rule's group (after an escalation, the new
    group's), or everyone who may decide reviews; active, and not muted."""
    users = (
        get_user_model().objects.filter(is_active=True).exclude(nitro_notifications__enabled=False)
    )
    try:
        group_id = review.handling.group_id
    except ReviewHandling.DoesNotExist:
        group_id = None
    if group_id is not None:
        users = users.filter(groups=group_id)
    return users.filter(_deciders()).distinct()


def _title(review: Review) -> str:
    if review.kind == "tool_calls":
        names = ", ".join(str(c.get("name")) for c in review.tool_calls) or "tool calls"
        return f"Review #{review.pk}: {names}"
    return f"Review #{review.pk}: {review.get_kind_display()}"


TEXTS: dict[str, str] = {
    Notification.Kind.REQUESTED: "waits for a review",
    Notification.Kind.ESCALATED: "was escalated to you",
    Notification.Kind.OVERDUE: "is overdue",
    Notification.Kind.EXPIRING: "expires soon unanswered",
    Notification.Kind.DELIVERY_FAILED: "a reply could not be delivered",
}


def notify(
    kind: str,
    *,
    review: Review | None = None,
    thread: Thread | None = None,
    users: Iterable[Any] | None = None,
) -> int:
    """Queue ``kind`` for every configured channel: one row per recipient on a per-person
    channel (``users``, or the review's reviewers), one row on a shared channel; their sending
    is enqueued after commit. Never raises: a failure is logged. Returns the rows queued."""
    if not app_settings.NOTIFIERS:
        return 0
    try:
        with transaction.atomic():
            return _queue(kind, review, thread, users)
    except Exception:  # a notification never fails the change it reports
        logger.exception("Could not queue %s notifications (review %s)", kind, review and review.pk)
        return 0


def _queue(
    kind: str, review: Review | None, thread: Thread | None, users: Iterable[Any] | None
) -> int:
    found = channels()
    if not found:
        return 0
    thread = thread or (review.thread if review is not None else None)
    text = TEXTS.get(kind, kind)
    if review is not None and kind != Notification.Kind.DELIVERY_FAILED:
        progress = waiting_for(review)
        text = f"{text} ({progress})" if progress else text
    recipients = list(users if users is not None else reviewers_for(review) if review else [])
    rows: list[Notification] = []
    for name, notifier in found.items():
        targets = recipients if notifier.per_user else [None]
        for user in targets:
            rows.append(
                Notification(
                    channel=name, user=user, kind=kind, review=review, thread=thread, text=text
                )
            )
    batches = {(row.channel, row.user.pk if row.user else None) for row in rows}
    # A batch that already has rows queued has its send enqueued (or waiting out the interval):
    # the new rows join it. One task per review and reviewer instead would grow as reviews ×
    # reviewers, and crowd the runs and resumes out of the workers' queue (docs/scale.md).
    # Rows a send misses (it ran before this commit) go with the next one or the flush.
    waiting = _waiting(batches)
    Notification.objects.bulk_create(rows)
    delay = app_settings.NOTIFY_DELAY
    for channel, user_pk in sorted(batches - waiting, key=str):
        transaction.on_commit(_enqueuer(channel, user_pk, delay), robust=True)
    return len(rows)


def _waiting(batches: set[tuple[str, int | None]]) -> set[tuple[str, int | None]]:
    """The (channel, user pk) batches among ``batches`` with notifications already queued."""
    users = {user_pk for _, user_pk in batches if user_pk is not None}
    found = (
        Notification.objects.filter(status=Notification.Status.QUEUED)
        .filter(channel__in={channel for channel, _ in batches})
        .filter(Q(user__isnull=True) | Q(user_id__in=users))
        .values_list("channel", "user_id")
        .order_by()
        .distinct()
    )
    queued: set[tuple[str, int | None]] = set(found)
    return queued & batches


def _enqueuer(channel: str, user_pk: int | None, countdown: float) -> Any:
    return lambda: _enqueue(channel, user_pk, countdown)


def _enqueue(channel: str, user_pk: int | None, countdown: float) -> None:
    try:
        send(TASK, channel, user_pk, countdown=countdown or None)
    except Exception:  # the broker is down: the beat flush sends it later
        logger.exception("Could not enqueue notifications for %s on %s", user_pk, channel)


#: The attribute a review mirrored with a grant covering it carries (:mod:`.grants`): the grant's
#: task decides it, and tells people only if it does not.
GRANT_EXPECTED = "grant_expected"


def review_needs_people(review: Review) -> bool:
    """Whether anyone is to be told of ``review``: a pending tool-call/reply review no rule
    decides at once, nor a grant about to."""
    if getattr(review, GRANT_EXPECTED, False):
        return False
    try:
        action = review.handling.action
    except ReviewHandling.DoesNotExist:
        action = "review"
    return review.status == "pending" and action == "review"


def delivery_failed(thread: Thread) -> int:
    """Tell whoever approved the thread's latest reply (else every reviewer) it failed."""
    decided = (
        Decision.objects.filter(review__thread=thread, decided_by__isnull=False)
        .select_related("decided_by")
        .order_by("-decided_at")
        .first()
    )
    users: list[Any]
    if decided is not None and decided.decided_by is not None:
        users = [decided.decided_by]
    else:
        users = list(
            get_user_model()
            .objects.filter(is_active=True)
            .exclude(nitro_notifications__enabled=False)
            .filter(_deciders())
            .distinct()
        )
    users = [u for u in users if getattr(getattr(u, "nitro_notifications", None), "enabled", True)]
    return notify(Notification.Kind.DELIVERY_FAILED, thread=thread, users=users)


# -- sending ------------------------------------------------------------------------------------


def _message(channel: str, user: Any, rows: list[Notification]) -> Message:
    items = []
    for row in rows:
        review = None
        if row.review_id is not None and row.review is not None:
            # Every channel (e-mail, webhook, Slack, a host's) is sent the review redacted.
            review = redacting.shown_review(row.review)
            title = redacting.shown_text(_title(review))
            url = review_link(row.review_id, row.user_id)
        else:
            title = f"Thread {str(row.thread.thread_id)[:8]}" if row.thread else "Nitro"
            url = ""
        items.append(Item(kind=row.kind, title=title, text=row.text, url=url, review=review))
    count = len(items)
    subject = (
        f"{items[0].title} {items[0].text}"
        if count == 1
        else f"{count} reviews need your attention"
    )
    return Message(channel=channel, items=items, recipient=user, subject=subject[:200])


def send_batch(channel: str, user_pk: int | None = None) -> int:
    """Send everything queued for ``user_pk`` (None: the shared channel) on ``channel`` as one
    message, unless one went out less than ``NOTIFY_INTERVAL`` ago (then the send is enqueued
    again for when the interval ends). Returns how many items were sent. Raises
    :class:`NotificationError` when the channel failed and attempts remain (the task retries)."""
    notifier = channels().get(channel)
    mine = Q(user__isnull=True) if user_pk is None else Q(user_id=user_pk)
    queued = Notification.objects.filter(mine, channel=channel, status=Notification.Status.QUEUED)
    if notifier is None:
        failed = queued.update(status=Notification.Status.FAILED, error="no such channel")
        if failed:
            logger.error("%d notifications for channel %r: no such channel", failed, channel)
        return 0
    now = timezone.now()
    failure: Exception | None = None
    with transaction.atomic():
        rows = list(
            queued.select_for_update(skip_locked=True, of=("self",))
            .select_related("review", "thread", "user")
            .order_by("created_at", "pk")
        )
        if not rows:
            return 0
        last = Notification.objects.filter(
            mine, channel=channel, status=Notification.Status.SENT
        ).aggregate(at=Max("sent_at"))["at"]
        interval = datetime.timedelta(seconds=app_settings.NOTIFY_INTERVAL)
        if last is not None and now - last < interval:
            wait = (last + interval - now).total_seconds()
            # Tasks run in place (no broker, the embedded demo) ignore countdowns: sending
            # again now would loop. The next notification or flush_notifications sends them.
            if not current_app.conf.task_always_eager:
                transaction.on_commit(_enqueuer(channel, user_pk, wait), robust=True)
            return 0
        message = _message(channel, rows[0].user, rows)
        try:
            notifier.send(message)
        except Exception as exc:  # any channel error: recorded, retried, never raised to a review
            failure = exc
        pks = [row.pk for row in rows]
        if failure is None:
            Notification.objects.filter(pk__in=pks).update(
                status=Notification.Status.SENT, sent_at=now, error=""
            )
            return len(rows)
        attempts = max(row.attempts for row in rows) + 1
        exhausted = attempts >= app_settings.NOTIFY_MAX_ATTEMPTS
        Notification.objects.filter(pk__in=pks).update(
            attempts=attempts,
            error=f"{failure.__class__.__name__}: {failure}"[:2000],
            status=Notification.Status.FAILED if exhausted else Notification.Status.QUEUED,
        )
    if exhausted:
        logger.error(
            "Channel %r gave up on %d notifications for user %s after %d attempts: %s",
            channel,
            len(pks),
            user_pk,
            attempts,
            failure,
        )
        return 0
    logger.warning(
        "Channel %r failed (attempt %d of %d), retrying: %s",
        channel,
        attempts,
        app_settings.NOTIFY_MAX_ATTEMPTS,
        failure,
    )
    error = NotificationError(f"channel {channel!r} failed: {failure}", transient=True)
    error.retry_after = getattr(failure, "retry_after", None)
    raise error


def lost_after() -> datetime.timedelta:
    """How long a queued notification waits, at most, while its send is still coming: the
    first send's ``NOTIFY_DELAY``, the ``NOTIFY_INTERVAL`` a later one waits out, and a failed
    send's retry backoff (``TASK_RETRY_BACKOFF_MAX``). Older, its send was lost. With tasks run
    in place (no broker) nothing is ever on its way: every queued row waits for the flush."""
    if current_app.conf.task_always_eager:
        return datetime.timedelta(0)
    return datetime.timedelta(
        seconds=app_settings.NOTIFY_DELAY
        + app_settings.NOTIFY_INTERVAL
        + app_settings.TASK_RETRY_BACKOFF_MAX
    )


def flush() -> int:
    """Periodic safety net: enqueue a send for every (channel, reviewer) with a notification
    queued longer than :func:`lost_after` (its task lost with a broker outage, or the row
    committed while a send was reading its batch). A batch whose send is waiting out the
    interval is left to it: a second send there would find the interval not over and enqueue
    itself again, one more send for that batch every interval for good (docs/scale.md).
    Returns how many sends were enqueued."""
    pairs = (
        Notification.objects.filter(
            status=Notification.Status.QUEUED, created_at__lte=timezone.now() - lost_after()
        )
        .values_list("channel", "user_id")
        .order_by()  # Meta.ordering's columns would make every row distinct: a send per row
        .distinct()
    )
    count = 0
    for channel, user_pk in pairs:
        _enqueue(channel, user_pk, 0)
        count += 1
    return count


__all__ = [
    "NotificationError",
    "delivery_failed",
    "flush",
    "link_token",
    "may_follow_link",
    "notify",
    "read_link",
    "review_from_token",
    "review_link",
    "review_needs_people",
    "reviewers_for",
    "send_batch",
]
