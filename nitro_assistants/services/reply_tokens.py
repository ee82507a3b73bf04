"""The signed token in the Reply-To address of a notification e-mail (``INBOUND_EMAIL``).

A token names one review, the revision it showed (and the start of its digest), the user the
e-mail went to and when it was made; an HMAC (:func:`django.utils.crypto.salted_hmac`, keyed by
``SECRET_KEY`` and salted with ``SALT``: what :mod:`django.core.signing` signs with) covers them
all, so a reply decides only what that person was shown, and only if it comes from them.

The token sits in an e-mail address's local part (``reviews+<token>@reply.example.com``), which
mail systems may fold to lower case and which holds 64 characters: it is lower-case letters,
digits and dots only (hex, base 36), never :mod:`django.core.signing`'s case-sensitive base64.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Any

from django.utils.crypto import constant_time_compare, salted_hmac

from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import InvalidArgumentError

SALT = "nitro_assistants.reply_token"
#: Characters of the review's digest the token carries, and of the HMAC.
DIGEST_CHARS = 12
MAC_CHARS = 20
_TOKEN = re.compile(r"^(\d+)\.([0-9a-z_-]+)\.(\d+)\.([0-9a-f]+)\.([0-9a-z]+)\.([0-9a-f]+)$")


class BadReplyToken(InvalidArgumentError):
    """Not a token of ours (tampered, or made with another key)."""


class ExpiredReplyToken(BadReplyToken):
    """A token older than ``NOTIFY_LINK_MAX_AGE``."""


@dataclasses.dataclass(frozen=True)
class ReplyToken:
    review: int
    user: str
    revision: int
    digest_start: str
    made_at: int


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    text = ""
    while True:
        number, rest = divmod(number, 36)
        text = digits[rest] + text
        if not number:
            return text


def _mac(body: str) -> str:
    return salted_hmac(SALT, body, algorithm="sha256").hexdigest()[:MAC_CHARS]


def make_token(review: Any, user_pk: Any, now: float | None = None) -> str:
    """The token of a notification about ``review`` (as it is now) sent to user ``user_pk``."""
    made = _base36(int(time.time() if now is None else now))
    body = ".".join(
        [
            str(review.pk),
            str(user_pk).lower(),
            str(review.revision),
            str(review.digest)[:DIGEST_CHARS].lower(),
            made,
        ]
    )
    return f"{body}.{_mac(body)}"


def read_token(token: str, now: float | None = None) -> ReplyToken:
    """The token's content once its HMAC holds. Raises :class:`BadReplyToken` or
    :class:`ExpiredReplyToken`."""
    found = _TOKEN.match(token.strip().lower())
    if found is None:
        raise BadReplyToken("not a reply token")
    body, mac = token.strip().lower().rsplit(".", 1)
    if not constant_time_compare(mac, _mac(body)):
        raise BadReplyToken("the token's signature does not hold")
    made_at = int(found.group(5), 36)
    age = (time.time() if now is None else now) - made_at
    if age > app_settings.NOTIFY_LINK_MAX_AGE or age < -300:
        raise ExpiredReplyToken("the token has expired")
    return ReplyToken(
        review=int(found.group(1)),
        user=found.group(2),
        revision=int(found.group(3)),
        digest_start=found.group(4),
        made_at=made_at,
    )


def _parts() -> tuple[str, str]:
    address = str(app_settings.INBOUND_EMAIL["REPLY_ADDRESS"])
    prefix, _, suffix = address.partition("{token}")
    return prefix, suffix


def reply_address(review: Any, user_pk: Any) -> str:
    """The Reply-To address of a notification about ``review`` to user ``user_pk``; blank when
    replies are not read (``INBOUND_EMAIL`` unset)."""
    if not app_settings.INBOUND_EMAIL_ENABLED:
        return ""
    prefix, suffix = _parts()
    return f"{prefix}{make_token(review, user_pk)}{suffix}"


def token_in(address: str) -> str | None:
    """The token of a reply address (``REPLY_ADDRESS`` with a token in it), None for another."""
    prefix, suffix = (part.lower() for part in _parts())
    address = address.strip().lower()
    if not (address.startswith(prefix) and address.endswith(suffix)):
        return None
    token = address[len(prefix) : len(address) - len(suffix)]
    return token or None


__all__ = [
    "BadReplyToken",
    "ExpiredReplyToken",
    "ReplyToken",
    "make_token",
    "read_token",
    "reply_address",
    "token_in",
]
