"""Notification channels: pluggable, named in the ``NOTIFIERS`` setting.

A channel is a class with ``send(message)``; it raises on failure (the task retries it). Built
in: :class:`EmailNotifier` (Django's mail framework, a text and an HTML part, one message per
reviewer) and :class:`WebhookNotifier` (a JSON POST to one URL: a Slack-compatible "incoming
webhook" body, or a plain one; one message per channel, a shared room).

``NOTIFIERS`` maps a channel name to its class and options, like ``CACHES``::

    "NOTIFIERS": {
        "email": {"BACKEND": "nitro_assistants.services.notifiers.EmailNotifier"},
        "slack": {
            "BACKEND": "nitro_assistants.services.notifiers.WebhookNotifier",
            "OPTIONS": {"url": "https://hooks.slack.com/services/...", "format": "slack"},
        },
    }
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import requests
from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.utils.module_loading import import_string

from nitro_assistants import redacting
from nitro_assistants.exceptions import ConfigurationError
from nitro_assistants.services import previews
from nitro_assistants.services.reply_tokens import reply_address


@dataclasses.dataclass(frozen=True)
class Item:
    """One line of a message: what happened, on which review, and the signed link to it."""

    kind: str
    title: str
    text: str
    url: str
    #: The review it is about (None: a thread's or the app's news), for channels that show it.
    review: Any = None


@dataclasses.dataclass(frozen=True)
class Message:
    """What one channel sends at once: every item new for ``recipient`` since the last one."""

    channel: str
    items: Sequence[Item]
    recipient: Any = None  # the user (per-person channels), None for a shared channel
    subject: str = ""


class Notifier:
    """Base of a channel. ``per_user``: one message per reviewer (e-mail); otherwise one per
    channel (a team's room). Subclasses take their options as keyword arguments."""

    per_user: bool = True

    def __init__(self, name: str, **options: Any) -> None:
        self.name = name
        self.options = options

    def send(self, message: Message) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class EmailNotifier(Notifier):
    """E-mail through Django's mail framework (``EMAIL_BACKEND``: the console backend in the
    demo, locmem in tests). Options: ``from_email`` (default ``DEFAULT_FROM_EMAIL``),
    ``subject_prefix``. A reviewer without an e-mail address is skipped."""

    per_user = True

    def send(self, message: Message) -> None:
        address = getattr(message.recipient, "email", "")
        if not address:
            return
        reply_to = self.reply_to(message)
        context = {
            "message": message,
            "items": message.items,
            "user": message.recipient,
            "replies": bool(reply_to),
            # What a reply decides, shown whole: approving approves all of it.
            "held": held_text(message.items[0].review) if reply_to else "",
            # A part a rule says must be shown, folded or redacted: an e-mail cannot show it.
            "approvable": not reply_to or approvable_here(message.items[0].review),
        }
        text = render_to_string("nitro_assistants/notifications/message.txt", context)
        html = render_to_string("nitro_assistants/notifications/message.html", context)
        prefix = str(self.options.get("subject_prefix", "[Reviews] "))
        mail = EmailMultiAlternatives(
            subject=f"{prefix}{message.subject}",
            body=text,
            from_email=self.options.get("from_email") or settings.DEFAULT_FROM_EMAIL,
            to=[address],
            reply_to=reply_to,
        )
        mail.attach_alternative(html, "text/html")
        mail.send(fail_silently=False)

    def reply_to(self, message: Message) -> list[str]:
        """The Reply-To of a message about one pending tool-call or reply review, when replies
        are read (``INBOUND_EMAIL``): its signed token, bound to the review as shown and to the
        recipient. A message listing several reviews takes no reply (which would it answer?)."""
        reviews = [item.review for item in message.items if item.review is not None]
        if len(message.items) != 1 or len(reviews) != 1 or message.recipient is None:
            return []
        review = reviews[0]
        if review.status != "pending":
            return []
        address = reply_address(review, message.recipient.pk)
        return [address] if address else []


def approvable_here(review: Any) -> bool:
    """Whether a message showing ``review`` may offer to approve it: no part its rule says
    must be shown is collapsed or redacted (docs/redaction.md, "Complete previews")."""
    return not any(part.collapsed or part.redacted for part in previews.required_parts(review))


def held_text(review: Any) -> str:
    """What a tool-call or reply review holds, as plain text: each call with its arguments, or
    the reply draft; redacted (``REDACT``)."""
    payload = redacting.shown(review.payload or {})
    if review.kind == "reply":
        reply = payload.get("reply")
        return str((reply if isinstance(reply, dict) else {}).get("content") or "")
    return "\n\n".join(
        f"{call.get('name')}\n{json.dumps(call.get('args') or {}, ensure_ascii=False, indent=2)}"
        for call in payload.get("tool_calls") or []
        if isinstance(call, dict)
    )


class WebhookNotifier(Notifier):
    """A JSON POST to ``url``. ``format``: ``"slack"`` (``{"text", "blocks"}``, what Slack's and
    Mattermost's incoming webhooks take) or ``"plain"`` (``{"channel", "subject", "items"}``).
    ``timeout`` in seconds (default 10); a non-2xx answer is a failure (retried)."""

    per_user = False

    def __init__(self, name: str, **options: Any) -> None:
        super().__init__(name, **options)
        if not options.get("url"):
            raise ConfigurationError(f"Notifier {name!r}: a WebhookNotifier needs a `url`")
        if options.get("format", "slack") not in ("slack", "plain"):
            raise ConfigurationError(f"Notifier {name!r}: `format` is 'slack' or 'plain'")

    def body(self, message: Message) -> dict[str, Any]:
        if self.options.get("format", "slack") == "plain":
            return {
                "channel": message.channel,
                "subject": message.subject,
                "items": [
                    {"kind": item.kind, "title": item.title, "text": item.text, "url": item.url}
                    for item in message.items
                ],
            }
        lines = [f"• <{item.url}|{item.title}>: {item.text}" for item in message.items]
        return {
            "text": message.subject,
            "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": f"*{message.subject}*"}},
                {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}},
            ],
        }

    def send(self, message: Message) -> None:
        response = requests.post(
            str(self.options["url"]),
            data=json.dumps(self.body(message)),
            headers={"Content-Type": "application/json"},
            timeout=float(self.options.get("timeout", 10)),
        )
        response.raise_for_status()


def load(name: str, definition: Mapping[str, Any]) -> Notifier:
    """The channel ``name`` of the ``NOTIFIERS`` setting; ``ConfigurationError`` if it is wrong."""
    backend = definition.get("BACKEND") if isinstance(definition, Mapping) else None
    if not backend:
        raise ConfigurationError(f"Notifier {name!r} needs a BACKEND (a dotted class path)")
    try:
        cls = import_string(str(backend))
    except ImportError as exc:
        raise ConfigurationError(f"Notifier {name!r}: cannot import {backend!r} ({exc})") from exc
    if not (isinstance(cls, type) and issubclass(cls, Notifier)):
        raise ConfigurationError(f"Notifier {name!r}: {backend!r} is not a Notifier class")
    return cls(name, **dict(definition.get("OPTIONS") or {}))


__all__ = [
    "EmailNotifier",
    "Item",
    "Message",
    "Notifier",
    "WebhookNotifier",
    "held_text",
    "load",
]
