"""Fixtures of the Slack and e-mail reply tests: the local Slack server, settings pointing at
it, reviewers known to Slack by their verified address, and clicks signed as Slack signs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from nitro_assistants.models import Review
from nitro_assistants.testing.slack import SlackServer, signed_headers
from tests.admin.conftest import VIEW_PERMISSIONS
from tests.channels.channel_settings import CHANNEL, SECRET, TEAM, TOKEN, slack_settings

__all__ = ["CHANNEL", "SECRET", "TEAM", "TOKEN", "slack_settings"]

URL = "/nitro/slack/interactions/"


@pytest.fixture
def slack_server() -> Iterator[SlackServer]:
    with SlackServer(token=TOKEN) as server:
        yield server


@pytest.fixture
def slack(settings: Any, slack_server: SlackServer) -> SlackServer:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        **slack_settings(slack_server.api_url),
    }
    return slack_server


def make_reviewer(django_user_model: Any, username: str, *, decide: bool = True) -> Any:
    user = django_user_model.objects.create_user(
        username, password="pw", email=f"{username}@example.com", is_staff=True
    )
    codenames = [*VIEW_PERMISSIONS, "decide_review"] if decide else VIEW_PERMISSIONS
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="nitro_assistants", codename__in=codenames
        )
    )
    return django_user_model.objects.get(pk=user.pk)


def slack_user(server: SlackServer, slack_id: str, email: str, **fields: Any) -> dict[str, Any]:
    """A Slack user ``users.info`` knows, with a verified ``email``."""
    user = {
        "id": slack_id,
        "team_id": TEAM,
        "name": email.split("@")[0],
        "deleted": False,
        "is_bot": False,
        "is_email_confirmed": True,
        "profile": {"email": email},
        **fields,
    }
    server.users[slack_id] = user
    return user


def posted_buttons(server: SlackServer, review: Review) -> dict[str, dict[str, Any]]:
    """The buttons of the card posted last for ``review``, by action id, as Slack keeps them."""
    for (_channel, _ts), message in reversed(list(server.messages.items())):
        for block in message.get("blocks") or []:
            if block.get("block_id") == f"nitro_review_{review.pk}":
                return {element["action_id"]: element for element in block["elements"]}
    raise AssertionError(f"no card for review #{review.pk}")


def card_of(server: SlackServer, review: Review) -> tuple[str, str]:
    for (channel, ts), message in server.messages.items():
        for block in message.get("blocks") or []:
            if block.get("block_id") == f"nitro_review_{review.pk}":
                return channel, ts
    raise AssertionError(f"no card for review #{review.pk}")


def click_payload(
    server: SlackServer, review: Review, action_id: str, slack_id: str = "U0JANE"
) -> dict[str, Any]:
    """What Slack posts when ``slack_id`` clicks the button ``action_id`` of the card."""
    button = posted_buttons(server, review)[action_id]
    channel, ts = card_of(server, review)
    return {
        "type": "block_actions",
        "team": {"id": TEAM},
        "user": {"id": slack_id, "team_id": TEAM},
        "trigger_id": "1337.42.abcdef",
        "channel": {"id": channel},
        "container": {"type": "message", "channel_id": channel, "message_ts": ts},
        "actions": [
            {
                "type": "button",
                "action_id": button["action_id"],
                "block_id": f"nitro_review_{review.pk}",
                "value": button.get("value"),
            }
        ],
    }


def post_signed(
    client: Client,
    payload: dict[str, Any],
    *,
    secret: str = SECRET,
    timestamp: int | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    """POST ``payload`` to the interaction endpoint as Slack does: form-encoded, signed."""
    body = urlencode({"payload": json.dumps(payload)})
    signed = headers if headers is not None else signed_headers(body, secret, timestamp)
    return client.generic(
        "POST",
        URL,
        body,
        content_type="application/x-www-form-urlencoded",
        headers=signed,
    )
