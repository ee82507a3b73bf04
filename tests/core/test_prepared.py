"""The services' statements under server-side binding with prepared statements (what
docs/django.md advises a host to turn on, ``NITRO_TEST_DB_PREPARED=1`` in the test settings):
every one of them takes its parameters separately (each with a type PostgreSQL can tell), and the
ones a flow repeats are prepared on the connection, so PostgreSQL parses and plans them once.
The test command runs the whole suite both ways; this test checks that each way is the one in
effect."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from nitro_assistants import services
from nitro_assistants.models import Decision, Review
from nitro_assistants.testing import FakeAssistant, run_result
from tests.core.conftest import tool_review

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("prepared statements are PostgreSQL's"),
]

PREPARED = os.environ.get("NITRO_TEST_DB_PREPARED") == "1"
#: What the flow's heaviest statements say, as PostgreSQL keeps them prepared: a new thread with
#: its run, events and chain head; an append locking its chain's head; the mirror's read of the
#: open reviews (with their decisions' outcome) after the thread's lock.
REPEATED = (
    "thread_row AS (INSERT",
    "head_row AS MATERIALIZED",
    'LEFT OUTER JOIN "nitro_assistants_decision"',
)


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_a_flows_repeated_statements_are_prepared_when_the_host_asks(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    user = get_user_model().objects.create_superuser("boss")
    for n in range(6):  # prepared from a statement's 5th run on the connection
        fake_assistant.results = [run_result(tool_review()), run_result(reply="Moved")]
        run = services.start_run("walkthrough", f"Move me to Tuesday ({n})")
        services.execute_run(run.pk)
        review = Review.objects.get(run=run)
        decision = {
            "tool_calls": [{"id": c["id"], "action": "approve"} for c in review.tool_calls],
            "revision": review.revision,  # the stamp of the review as the admin showed it
            "digest": review.digest,
        }
        record = services.decide(review.pk, user, decision, via="admin")
        services.execute_resume(record.pk)
        assert Decision.objects.get(pk=record.pk).outcome == Decision.Outcome.APPLIED
    found = prepared_statements()
    if not PREPARED:  # Django's default: client-side binding, nothing prepared
        assert found == []
        return
    missing = [text for text in REPEATED if not any(text in statement for statement in found)]
    assert not missing, f"not prepared: {missing}; prepared: {[s[:120] for s in found]}"
