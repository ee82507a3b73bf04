"""Upgrading: the migration that adds the chain chains the events already there."""

from __future__ import annotations

import datetime
import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from nitro_assistants.services import chain_verify

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("nitro_assistants", "0007_claims_and_assignments")
AFTER = ("nitro_assistants", "0008_audit_chain")


def test_events_written_before_the_chain_are_chained_on_upgrade() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    old = executor.loader.project_state([BEFORE]).apps
    Thread, Event = old.get_model(*BEFORE[:1], "Thread"), old.get_model(*BEFORE[:1], "Event")
    thread = Thread.objects.create(thread_id=uuid.uuid4(), assistant_key="walkthrough")
    now = timezone.now()
    for n, verb in enumerate(["thread_opened", "run_requested", "run_succeeded"]):
        Event.objects.create(
            thread=thread,
            verb=verb,
            data={"n": n, "ratio": 1.0},
            at=now - datetime.timedelta(minutes=3 - n),
        )
    Event.objects.create(thread=None, verb="api_key_created", data={"prefix": "abc"}, at=now)
    try:
        executor = MigrationExecutor(connection)
        executor.migrate([AFTER])
        new = executor.loader.project_state([AFTER]).apps
        Chained = new.get_model("nitro_assistants", "Event")
        rows = list(
            Chained.objects.filter(thread_id=thread.pk).order_by("seq").values_list("verb", "seq")
        )
        assert rows == [("thread_opened", 1), ("run_requested", 2), ("run_succeeded", 3)]
        result = chain_verify.verify()
        assert result.ok, result.broken
        assert (result.events, result.chains) == (4, 2)
    finally:
        MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
