"""The policy rules' stamp in the shared cache (issue 21): a mirrored review reads no rule while
the rules are unchanged, and every change of a rule (through the ORM or the admin, or of a group
a rule names) is applied from the very next review on, in every process; a change rolled back
changes nothing; a cache that cannot be reached, or none, leaves the database to tell.

Transactional tests against the real Redis ``live`` cache of tests/settings.py (its keys carry
this test process's own prefix): the stamp is deleted after commit, as in production. "Another
process" is this one with the rules it compiled before the change put back: only the shared
stamp can tell it they are stale."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.core.cache import caches
from django.db import connection, transaction
from django.db.models import Count, Max
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from nitro_assistants.models import Policy, Review, ReviewHandling, Run, Thread
from nitro_assistants.services import policy_enforcement
from nitro_assistants.services.mirror import RULES_STAMP, lock_thread, mirror_pending
from nitro_assistants.testing.launchers import free_port
from tests.governance.conftest import mirrored, refund_pause
from tests.governance.test_admin import rule_form

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = f'FROM "{Policy._meta.db_table}"'


@pytest.fixture
def shared(settings: Any) -> None:
    """The rules' stamp in Redis, as a deployment with a shared cache keeps it."""
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": "live"}


@pytest.fixture
def large(finance: Group) -> Policy:
    """Refunds above 100 need two people in Finance."""
    return Policy.objects.create(
        name="large refunds",
        tool="refund_*",
        conditions=[{"path": "amount", "op": "gt", "value": 100}],
        approvals=2,
        group=finance,
    )


@contextmanager
def rule_reads() -> Iterator[list[str]]:
    """The statements that read the policy table, sent inside the block."""
    read: list[str] = []
    with CaptureQueriesContext(connection) as queries:
        yield read
    read.extend(q["sql"] for q in queries.captured_queries if TABLE in q["sql"])


def aggregates(read: list[str]) -> list[str]:
    return [sql for sql in read if "COUNT(" in sql]


def handled(review: Review) -> tuple[str, int, str] | None:
    """(rule, approvals, group) of the rule that handles ``review``; None: the default."""
    row = ReviewHandling.objects.filter(review=review).first()
    if row is None:
        return None
    handling = row.handling
    return handling.rule_name, handling.approvals, handling.group


def stamp() -> Any:
    return caches["live"].get(policy_enforcement.STAMP_KEY)


def test_the_second_mirrored_review_reads_no_rule(shared: None, large: Policy) -> None:
    with rule_reads() as first:
        assert handled(mirrored(300)) == ("large refunds", 2, "Finance")
    assert len(first) == 1 and not aggregates(first)  # compiled: no aggregate first
    assert stamp() is not None
    with rule_reads() as second:
        assert handled(mirrored(400)) == ("large refunds", 2, "Finance")
        assert handled(mirrored(50)) is None
    assert second == []


def _create(large: Policy, finance: Group) -> None:
    Policy.objects.create(name="all refunds", position=99, tool="refund_*")


def _edit(large: Policy, finance: Group) -> None:
    large.approvals = 3
    large.save()


def _disable(large: Policy, finance: Group) -> None:
    large.enabled = False
    large.save(update_fields=["enabled"])


def _delete(large: Policy, finance: Group) -> None:
    large.delete()


def _rename_group(large: Policy, finance: Group) -> None:
    finance.name = "Accounts"  # the rule's handling names its group
    finance.save()


@pytest.mark.parametrize(
    ("change", "then"),
    [
        (_create, ("large refunds", 2, "Finance")),  # a rule after it: the first still matches
        (_edit, ("large refunds", 3, "Finance")),
        (_disable, None),
        (_delete, None),
        (_rename_group, ("large refunds", 2, "Accounts")),
    ],
)
def test_a_change_through_the_orm_is_applied_to_the_next_review_in_every_process(
    shared: None,
    large: Policy,
    finance: Group,
    monkeypatch: pytest.MonkeyPatch,
    change: Any,
    then: Any,
) -> None:
    assert handled(mirrored(300)) == ("large refunds", 2, "Finance")
    before = policy_enforcement._compiled  # what another process compiled, and holds
    assert before.token == stamp() is not None
    with transaction.atomic():
        change(large, finance)
        assert stamp() == before.token  # not before the commit
    assert stamp() is None  # after it
    monkeypatch.setattr(policy_enforcement, "_compiled", before)
    with rule_reads() as read:
        assert handled(mirrored(300)) == then
    assert len(read) == 1
    with rule_reads() as again:
        mirrored(300)
    assert again == []


def test_changes_in_the_admin_are_applied_to_the_next_review_in_every_process(
    shared: None, editor: Client, finance: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert handled(mirrored(300)) is None  # no rule yet
    steps: list[tuple[str, dict[str, Any], Any]] = [
        ("add", {}, ("large refunds", 2, "")),
        ("change", {"approvals": "3", "group": str(finance.pk)}, ("large refunds", 3, "Finance")),
        ("change", {"enabled": ""}, None),
        ("change", {"enabled": "on"}, ("large refunds", 2, "")),
        ("delete", {}, None),
    ]
    for step, fields, then in steps:
        before = policy_enforcement._compiled
        assert before.token == stamp() is not None
        if step == "add":
            response = editor.post(reverse("admin:nitro_assistants_policy_add"), rule_form())
        else:
            rule = Policy.objects.get()
            url = reverse(f"admin:nitro_assistants_policy_{step}", args=[rule.pk])
            body = {"post": "yes"} if step == "delete" else rule_form(**fields)
            if fields.get("enabled") == "":
                body.pop("enabled")  # an unticked box is not posted
            response = editor.post(url, body)
        assert response.status_code == 302, (step, response.content.decode()[:2000])
        assert stamp() is None, step
        monkeypatch.setattr(policy_enforcement, "_compiled", before)
        assert handled(mirrored(300)) == then, step


def test_rules_deleted_by_the_admins_bulk_action_are_no_longer_applied(
    shared: None, editor: Client, large: Policy
) -> None:
    assert handled(mirrored(300)) == ("large refunds", 2, "Finance")
    before = policy_enforcement._compiled
    response = editor.post(
        reverse("admin:nitro_assistants_policy_changelist"),
        {"action": "delete_selected", "_selected_action": [large.pk], "post": "yes"},
    )
    assert response.status_code == 302 and not Policy.objects.exists()
    assert stamp() is None
    policy_enforcement._keep(before)
    assert handled(mirrored(300)) is None


def test_a_change_rolled_back_changes_nothing(shared: None, large: Policy) -> None:
    assert handled(mirrored(300)) == ("large refunds", 2, "Finance")
    token = stamp()
    with transaction.atomic():
        Policy.objects.create(name="first", position=0, tool="refund_*")
        large.delete()
        # The transaction sees its own rules (the database tells, as without a shared cache)...
        assert handled(mirrored(300)) == ("first", 1, "")
        transaction.set_rollback(True)
    assert stamp() == token  # ... but they were never committed: the stamp stands
    with rule_reads() as read:
        assert handled(mirrored(300)) == ("large refunds", 2, "Finance")
    assert len(read) == 1  # what that transaction read is not kept under the stamp
    with rule_reads() as again:
        mirrored(300)
    assert again == []


def test_a_savepoint_rolled_back_is_forgotten_with_its_change(shared: None, large: Policy) -> None:
    assert handled(mirrored(300)) == ("large refunds", 2, "Finance")
    with transaction.atomic():
        with transaction.atomic():
            large.delete()
            transaction.set_rollback(True)
        with rule_reads() as read:
            assert handled(mirrored(300)) == ("large refunds", 2, "Finance")
        assert read == []  # nothing left to commit: the stamp tells
    assert stamp() is not None


def test_a_write_without_signals_is_seen_once_the_stamp_expires_or_is_forgotten(
    shared: None, settings: Any, large: Policy
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE_SECONDS": 1}
    assert handled(mirrored(300)) == ("large refunds", 2, "Finance")
    Policy.objects.filter(pk=large.pk).update(approvals=3)  # no signal, no new updated_at
    assert handled(mirrored(300)) == ("large refunds", 2, "Finance")  # until it expires
    time.sleep(1.2)
    assert handled(mirrored(300)) == ("large refunds", 3, "Finance")
    Policy.objects.filter(pk=large.pk).update(approvals=4)
    with transaction.atomic():
        Policy.objects.filter(pk=large.pk).update(approvals=5)
        policy_enforcement.rules_changed()
    assert handled(mirrored(300)) == ("large refunds", 5, "Finance")


@pytest.fixture
def unreachable(settings: Any) -> None:
    """The shared cache is a Redis nobody listens to."""
    settings.CACHES = {
        **settings.CACHES,
        "gone": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port()}/0",
        },
    }
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": "gone"}


def test_a_cache_that_cannot_be_reached_leaves_the_database_to_tell(
    unreachable: None, finance: Group, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="nitro_assistants"):
        rule = Policy.objects.create(name="large refunds", tool="refund_*", approvals=2)
        assert "Could not delete the policy rules' stamp" in caplog.text
        for approvals in (2, 3):
            with rule_reads() as read:
                assert handled(mirrored(300)) == ("large refunds", approvals, "")
            assert len(aggregates(read)) == 1  # the probe, every time
            rule.approvals = 3
            rule.save()
    assert "Could not read the policy rules' stamp" in caplog.text


@pytest.mark.parametrize("alias", [None, "default"])
def test_without_a_shared_cache_the_database_tells_every_time(
    settings: Any, large: Policy, alias: str | None
) -> None:
    """None: no shared cache (the suite's default is a LocMemCache); ``"default"``: a
    per-process cache named explicitly, which one process's write would not reach."""
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": alias}
    for amount in (300, 400):
        with rule_reads() as read:
            assert handled(mirrored(amount)) == ("large refunds", 2, "Finance")
        assert len(aggregates(read)) == 1
    large.approvals = 3
    large.save()
    with rule_reads() as read:
        assert handled(mirrored(300)) == ("large refunds", 3, "Finance")
    assert len(aggregates(read)) == 1 and len(read) == 2  # the probe, then the rules again
    assert stamp() is None


def mirrored_after_the_lock(amount: float) -> Review:
    """A refund pause mirrored as a paused run's mirror does it: after the thread's lock, which
    takes the rules' stamp where no shared cache holds it."""
    thread = Thread.objects.create(assistant_key="walkthrough")
    run = Run.objects.create(thread=thread, input={})
    with transaction.atomic():
        lock_thread(thread, paused=True)
        review = mirror_pending(thread, run, refund_pause(amount))
    assert review is not None
    return Review.objects.select_related("thread").get(pk=review.pk)


def locks(read: list[str]) -> list[bool]:
    """For each statement that read the rules: whether it was the thread's lock."""
    return [sql.startswith(f'SELECT "{Thread._meta.db_table}"') for sql in read]


@pytest.mark.parametrize("alias", [None, "default"])
def test_without_a_shared_cache_a_mirror_reads_the_stamp_with_the_threads_lock(
    settings: Any, large: Policy, alias: str | None
) -> None:
    """No aggregate of its own: the stamp rides on the thread's lock, and the rules are read
    again only when it changed."""
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": alias}
    with rule_reads() as read:
        assert handled(mirrored_after_the_lock(300)) == ("large refunds", 2, "Finance")
    assert locks(read) == [True, False]  # the stamp with the lock, then the rules compiled
    with rule_reads() as read:
        assert handled(mirrored_after_the_lock(400)) == ("large refunds", 2, "Finance")
    assert locks(read) == [True]
    large.approvals = 3
    large.save()
    with rule_reads() as read:
        assert handled(mirrored_after_the_lock(300)) == ("large refunds", 3, "Finance")
    assert locks(read) == [True, False]


def test_with_a_shared_cache_the_threads_lock_reads_no_rule(shared: None, large: Policy) -> None:
    mirrored_after_the_lock(300)
    with rule_reads() as read:
        assert handled(mirrored_after_the_lock(400)) == ("large refunds", 2, "Finance")
    assert read == []


def test_the_stamp_the_threads_lock_takes_is_the_rules_aggregate(
    settings: Any, large: Policy
) -> None:
    """Held equal to the aggregate :func:`policy_enforcement.ruleset` reads otherwise, with
    enabled rules, a disabled one, and none enabled (0 and NULLs, not an empty read)."""
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": None}
    Policy.objects.create(name="off", tool="refund_*", enabled=False, version=7)
    for change in (lambda: None, lambda: Policy.objects.update(enabled=False)):
        change()
        thread = Thread.objects.create(assistant_key="walkthrough")
        with transaction.atomic():
            lock_thread(thread, paused=True)
            taken = getattr(thread, RULES_STAMP)
        enabled = Policy.objects.filter(enabled=True)
        aggregate = enabled.aggregate(n=Count("pk"), at=Max("updated_at"), v=Max("version"))
        assert taken == tuple(aggregate.values())
    assert taken == (0, None, None)
