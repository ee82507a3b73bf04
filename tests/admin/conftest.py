"""Fixtures of the admin tests: users for each row of the permission matrix, logged-in clients,
and reviews whose mirrored conversation matches what they hold."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from nitro_assistants.models import Review, Thread
from tests.factories import ReviewFactory, ThreadFactory

VIEW_PERMISSIONS = [
    "view_thread",
    "view_run",
    "view_review",
    "view_decision",
    "view_delivery",
    "view_event",
]

MOVE_ARGS = {"appointment_id": 42, "day": "Tuesday", "time": "10:00"}


def tool_conversation(
    calls: list[dict[str, Any]], ask: str = "Can I move my appointment to Tuesday?"
) -> list[dict[str, Any]]:
    return [
        {"type": "human", "id": "h1", "content": ask},
        {
            "type": "ai",
            "id": "a1",
            "content": "Let me do that for you.",
            "tool_calls": [{"id": c["id"], "name": c["name"], "args": c["args"]} for c in calls],
        },
    ]


def make_tool_review(
    calls: list[dict[str, Any]] | None = None,
    *,
    assistant_key: str = "walkthrough",
    ask: str = "Can I move my appointment to Tuesday?",
    **fields: Any,
) -> Review:
    """A pending tool-call review whose thread's snapshot ends on the AI message holding
    ``calls`` (default: one reschedule_appointment allowing every decision)."""
    calls = calls or [
        {
            "id": "call_1",
            "name": "reschedule_appointment",
            "args": dict(MOVE_ARGS),
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
        }
    ]
    held = [{"previous_message_id": "h1", **call} for call in calls]
    thread = ThreadFactory(
        assistant_key=assistant_key,
        status=Thread.Status.INTERRUPTED,
        values={"messages": tool_conversation(calls, ask)},
    )
    return ReviewFactory(thread=thread, payload={"tool_calls": held, "reply": None}, **fields)


def make_reply_review(content: str = "Done! See you Tuesday at 10.", **fields: Any) -> Review:
    interrupt_id = uuid.uuid4().hex
    thread = ThreadFactory(
        status=Thread.Status.INTERRUPTED,
        values={
            "messages": [
                {"type": "human", "id": "h1", "content": "Can I move my appointment to Tuesday?"},
                {
                    "type": "ai",
                    "id": "ai-2",
                    "content": content,
                    "response_metadata": {"review": {"type": "pending"}},
                },
            ]
        },
    )
    return ReviewFactory(
        thread=thread,
        kind=Review.Kind.REPLY,
        interrupt_ids=[interrupt_id],
        payload={
            "tool_calls": [],
            "reply": {
                "content": content,
                "allowed_decisions": ["approve", "edit", "reject"],
                "description": "Review this SMS before it is sent",
                "interrupt_id": interrupt_id,
                "message_id": "ai-2",
            },
        },
        **fields,
    )


def review_url(review: Review) -> str:
    return reverse("admin:nitro_assistants_review_review", args=[review.pk])


def stamp(review: Review) -> dict[str, Any]:
    """The hidden fields a review screen renders for ``review``."""

    return {
        "interrupt_id": review.interrupt_id or "",
        "revision": review.revision,
        "digest": review.digest,
    }


def _staff(django_user_model: Any, username: str, codenames: list[str]) -> Any:
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="nitro_assistants", codename__in=codenames
        )
    )
    return user


@pytest.fixture
def looker(django_user_model: Any) -> Any:
    """Staff who may look at everything but decide nothing."""
    return _staff(django_user_model, "looker", VIEW_PERMISSIONS)


@pytest.fixture
def reviewer(django_user_model: Any) -> Any:
    return _staff(django_user_model, "reviewer", [*VIEW_PERMISSIONS, "decide_review"])


@pytest.fixture
def superuser(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("root", password="pw")


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def reviewer_client(reviewer: Any) -> Client:
    return _client(reviewer)


@pytest.fixture
def looker_client(looker: Any) -> Client:
    return _client(looker)


@pytest.fixture
def superuser_client(superuser: Any) -> Client:
    return _client(superuser)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """PBKDF2 costs most of a second per user on this machine; the tests log in many users."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
