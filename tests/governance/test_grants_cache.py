"""The live grants' stamp (issue 36): a mirrored review reads no grant while the grants are
unchanged, and a grant given, used or revoked is seen from the very next review on, in every
process; with a shared cache (Redis) the stamp lives there, without one it rides on the thread's
lock. "Another process" is this one with the grants it compiled before the change put back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from nitro_assistants.models import Grant, Policy, Run, Thread
from nitro_assistants.services import grants
from nitro_assistants.services.mirror import lock_thread, mirror_pending
from tests.governance.conftest import approve, mirrored, refund_pause, reviewer

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = f'FROM "{Grant._meta.db_table}"'


@contextmanager
def grant_reads() -> Iterator[list[str]]:
    read: list[str] = []
    with CaptureQueriesContext(connection) as queries:
        yield read
    read.extend(q["sql"] for q in queries.captured_queries if TABLE in q["sql"])


def give(amount: float = 30, **spec: Any) -> Grant:
    gina = User.objects.filter(username="gina").first() or reviewer("gina")
    gina.user_permissions.add(Permission.objects.get(codename="grant_approval"))
    gina = User.objects.get(pk=gina.pk)
    review = mirrored(amount)
    grants.decide_with_grant(
        review.pk, gina, approve(review), {"scope": "assistant", "uses": 3, **spec}, via="admin"
    )
    return Grant.objects.latest("pk")


@pytest.fixture
def rule(db: None) -> Policy:
    return Policy.objects.create(name="refunds", tool="refund_*")


def next_review(queued: list[Any]) -> tuple[list[str], int | None]:
    """A review mirrored as a run's mirror does it: the statements that read grants, and the
    review's pk when a grant was found to cover it (None: not)."""
    thread = Thread.objects.create(assistant_key="walkthrough")
    run = Run.objects.create(thread=thread, input={})
    with grant_reads() as read, transaction.atomic():
        lock_thread(thread, paused=True)
        review = mirror_pending(thread, run, refund_pause(30))
    assert review is not None
    covered = ("nitro_assistants.apply_grant", (review.pk,)) in queued
    return read, review.pk if covered else None


@pytest.mark.parametrize("cache", ["shared", "database"])
def test_a_use_that_leaves_uses_recompiles_nothing_and_the_last_one_is_seen_next(
    queued: list[Any], rule: Policy, settings: Any, cache: str
) -> None:
    if cache == "shared":
        settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": "live"}
    give(uses=2)
    next_review(queued)  # compiled
    _, first = next_review(queued)
    assert first is not None and grants.apply_grant(first) is not None  # one use of two
    read, second = next_review(queued)
    assert [sql for sql in read if "COUNT(" not in sql] == []  # not compiled again
    assert second is not None and grants.apply_grant(second) is not None  # the last use
    read, third = next_review(queued)
    assert third is None  # used up: seen by the next review
    assert [sql for sql in read if "COUNT(" not in sql]  # compiled again


@pytest.mark.parametrize("cache", ["shared", "database"])
def test_grants_are_read_once_per_change_and_every_change_is_seen_next(
    queued: list[Any], rule: Policy, settings: Any, cache: str
) -> None:
    if cache == "shared":
        settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": "live"}
    grants.live_grants()
    before = grants._compiled
    grant = give()
    assert len(grants.live_grants()) == 1

    def next_review() -> tuple[list[str], bool]:
        thread = Thread.objects.create(assistant_key="walkthrough")
        run = Run.objects.create(thread=thread, input={})
        with grant_reads() as read, transaction.atomic():
            lock_thread(thread, paused=True)
            review = mirror_pending(thread, run, refund_pause(30))
        assert review is not None
        covered = ("nitro_assistants.apply_grant", (review.pk,)) in queued
        return read, covered

    next_review()  # compiled once
    read, covered = next_review()
    assert covered
    assert [sql for sql in read if "COUNT(" not in sql] == []  # nothing read but the stamp
    if cache == "shared":
        assert read == []  # the stamp is in Redis: no statement at all
    # Another process that compiled the grants before this one was given: the stamp tells it.
    grants._compiled = before
    read, covered = next_review()
    assert covered
    grants.revoke(grant, None, "enough")
    read, covered = next_review()
    assert not covered and read  # read again after the revocation
