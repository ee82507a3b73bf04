"""Fixtures of the governance tests: refund rules, a Finance group, and refund pauses mirrored
through the real mirror path."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from nitro_assistants import tasks
from nitro_assistants.client import PendingReview
from nitro_assistants.models import Policy, Review, Run, Thread
from nitro_assistants.services.mirror import mirror_pending
from tests.core.conftest import celery_worker, proxy, server_settings

__all__ = ["celery_worker", "proxy", "server_settings"]

TASKS = (
    "apply_policy",
    "apply_grant",
    "resume_thread",
    "run_thread",
    "sweep_deadlines",
    "send_notifications",
)


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Tasks enqueued (instead of sent to a broker), as (task name, args)."""
    sent: list[tuple[str, tuple[Any, ...]]] = []
    for name in TASKS:
        task = getattr(tasks, name)

        def delay(*args: Any, _name: str = task.name, **kwargs: Any) -> None:
            sent.append((_name, args))

        monkeypatch.setattr(task, "delay", delay)
        monkeypatch.setattr(
            task, "apply_async", lambda args=(), kwargs=None, _d=delay, **o: _d(*args)
        )
    return sent


def reviewer(username: str, *groups: Group) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="decide_review"),
        Permission.objects.get(codename="view_review"),
    )
    user.groups.add(*groups)
    return User.objects.get(pk=user.pk)  # no cached permissions


@pytest.fixture
def finance(db: None) -> Group:
    return Group.objects.create(name="Finance")


@pytest.fixture
def managers(db: None) -> Group:
    return Group.objects.create(name="Managers")


@pytest.fixture
def refund_rules(finance: Group) -> dict[str, Policy]:
    """Refunds up to 50 go through; above 100, two people in Finance; above 5000, refused."""
    return {
        "small": Policy.objects.create(
            name="small refunds",
            position=10,
            tool="refund_*",
            conditions=[{"path": "amount", "op": "lte", "value": 50}],
            action=Policy.Action.AUTO_APPROVE,
        ),
        "huge": Policy.objects.create(
            name="huge refunds",
            position=20,
            tool="refund_*",
            conditions=[{"path": "amount", "op": "gt", "value": 5000}],
            action=Policy.Action.AUTO_REJECT,
            reason="Refunds above 5000 go through the bank, not the assistant",
        ),
        "large": Policy.objects.create(
            name="large refunds",
            position=30,
            tool="refund_*",
            conditions=[{"path": "amount", "op": "gt", "value": 100}],
            approvals=2,
            group=finance,
            priority=5,
            deadline=datetime.timedelta(hours=4),
        ),
    }


def refund_pause(amount: float, *, calls: int = 1) -> PendingReview:
    interrupt_id = uuid.uuid4().hex
    return PendingReview(
        kind="tool_calls",
        interrupt_id=interrupt_id,
        interrupt_ids=[interrupt_id],
        tool_calls=[
            {
                "previous_message_id": "h1",
                "id": f"call_{i}",
                "name": "refund_customer",
                "args": {"order_id": 7, "amount": amount},
                "allowed_decisions": ["approve", "edit", "reject", "respond"],
            }
            for i in range(calls)
        ],
    )


def mirrored(amount: float, *, opened_by: User | None = None, **kwargs: Any) -> Review:
    """A refund pause mirrored the way a finished run mirrors it."""
    thread = Thread.objects.create(assistant_key="walkthrough", opened_by=opened_by)
    run = Run.objects.create(thread=thread, requested_by=opened_by, input={})
    review = mirror_pending(thread, run, refund_pause(amount, **kwargs))
    assert review is not None
    return Review.objects.select_related("thread").get(pk=review.pk)


def approve(review: Review) -> dict[str, Any]:
    review.refresh_from_db()
    return {
        "tool_calls": [{"id": c["id"], "action": "approve"} for c in review.tool_calls],
        "revision": review.revision,
        "digest": review.digest,
    }


@pytest.fixture
def editor() -> Client:
    """A staff user who may add, change, view and delete policy rules, logged in."""
    user = User.objects.create_user("editor", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["add_policy", "change_policy", "view_policy", "delete_policy"]
        )
    )
    client = Client()
    client.force_login(user)
    return client
