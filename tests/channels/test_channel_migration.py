"""Upgrading: decisions recorded before the channel was get the one their reviewer_id names."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("nitro_assistants", "0012_thread_metadata")
AFTER = ("nitro_assistants", "0013_decision_channel")


def test_policy_and_deadline_decisions_get_their_channel_on_upgrade() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    old = executor.loader.project_state([BEFORE]).apps
    Thread = old.get_model("nitro_assistants", "Thread")
    Review = old.get_model("nitro_assistants", "Review")
    Decision = old.get_model("nitro_assistants", "Decision")
    for reviewer_id in ("policy:small refunds", "deadline:large refunds", "jane"):
        thread = Thread.objects.create(thread_id=uuid.uuid4(), assistant_key="walkthrough")
        review = Review.objects.create(thread=thread, kind="tool_calls", status="decided")
        Decision.objects.create(review=review, reviewer_id=reviewer_id, decided_at=timezone.now())
    try:
        executor = MigrationExecutor(connection)
        executor.migrate([AFTER])
        new = executor.loader.project_state([AFTER]).apps
        upgraded = new.get_model("nitro_assistants", "Decision")
        assert dict(upgraded.objects.values_list("reviewer_id", "channel")) == {
            "policy:small refunds": "policy",
            "deadline:large refunds": "deadline",
            "jane": "",  # the admin and the API were not told apart
        }
    finally:
        MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
