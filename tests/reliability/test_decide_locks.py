"""``services.decide`` under the review's lock (PostgreSQL): a decision made inside the host's own
transaction keeps the review locked until that commit, and its resume and ``review_decided``
wait for it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import OperationalError, connection, transaction

from nitro_assistants import services, signals, tasks
from nitro_assistants.models import Decision, Review
from tests.factories import ReviewFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("the lock held across threads needs PostgreSQL's row locks"),
]

APPROVE = {"tool_calls": [{"id": "call_1", "action": "approve"}]}


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Decision pks whose resume was enqueued, each checked to be committed when it was sent
    (read from another connection: a resume sent before its decision commits finds none)."""
    sent: list[int] = []

    def delay(decision_pk: int) -> None:
        committed = elsewhere(lambda: Decision.objects.filter(pk=decision_pk).exists())
        assert committed is True, f"decision {decision_pk} was enqueued before it committed"
        sent.append(decision_pk)

    monkeypatch.setattr(tasks.resume_thread, "delay", delay)
    return sent


@pytest.fixture
def decided_signals() -> Iterator[list[int]]:
    """The review pks ``review_decided`` was sent for."""
    sent: list[int] = []

    def receiver(sender: Any, review: Review, **kwargs: Any) -> None:
        sent.append(review.pk)

    signals.review_decided.connect(receiver, weak=False)
    yield sent
    signals.review_decided.disconnect(receiver)


def reviewer(name: str, group: Group | None = None) -> Any:
    user = get_user_model().objects.create_user(name, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="decide_review"))
    if group is not None:
        user.groups.add(group)
    return get_user_model().objects.get(pk=user.pk)  # its permissions read afresh


def elsewhere(job: Callable[[], Any]) -> Any:
    """Run ``job`` to the end in a thread with its own connection (committed when it returns);
    its value, or the exception it raised."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(job())
        except Exception as exc:
            result.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    assert not worker.is_alive()
    return result[0]


def test_inside_the_callers_transaction_the_resume_waits_for_its_commit(
    enqueued: list[int], decided_signals: list[int]
) -> None:
    """A host deciding inside its own transaction: the statement is part of it (the review's
    row stays locked until it commits), and the resume and the signal wait for that commit."""
    review = ReviewFactory()
    jane = reviewer("jane")
    with transaction.atomic():
        decision = services.decide(review, jane, APPROVE, via="admin")
        assert enqueued == [] and decided_signals == []
        blocked = elsewhere(lambda: _decided_meanwhile(review.pk))
        assert blocked == "locked"  # another decider waits for this transaction
    assert enqueued == [decision.pk]
    assert decided_signals == [review.pk]


def _decided_meanwhile(pk: int) -> str:
    """Whether the review's row is locked by another transaction (not waiting for it)."""
    try:
        with transaction.atomic():
            Review.objects.select_for_update(nowait=True).get(pk=pk)
    except OperationalError:
        return "locked"
    return "free"
