"""An ordinary ORM call in the middle of a service's batch (issue 35: "no ordinary ORM call
anywhere in a service raises only on PostgreSQL").

On PostgreSQL a service's row writes wait in a queue to ride on the audit statement
(nitro_assistants.services.sql.writes); on SQLite each is sent at once. A read or a write a
contributor (or a host's hook) adds between two of them must see and leave the same rows on
both: the queue is sent first, and the call goes on."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from nitro_assistants import services
from nitro_assistants.models import Decision, Event, Review, Run, Thread
from nitro_assistants.services import chain_verify
from nitro_assistants.services.sql import writes
from nitro_assistants.testing import FakeAssistant, run_result
from tests.core.conftest import tool_review

pytestmark = pytest.mark.django_db(transaction=True)


def test_orm_reads_and_writes_between_queued_writes_of_the_governed_flow(
    fake_assistant: FakeAssistant, enqueued: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After every row write of the services (queued on PostgreSQL, made at once on SQLite) a
    hook reads the row back, counts the reviews and writes a row of its own by the ORM: the same
    results, the same rows and no error on both databases."""
    fake_assistant.results = [run_result(tool_review()), run_result(reply="Moved to Tuesday")]
    seen: list[tuple[str, str, bool, int]] = []
    insert, save = writes.insert, writes.save

    def orm_calls(how: str, instance: Any) -> None:
        written = type(instance).objects.filter(pk=instance.pk)
        seen.append((how, type(instance).__name__, written.exists(), Review.objects.count()))
        Thread.objects.update(subject=f"hooked {len(seen)}")  # the test's one thread

    def insert_then_orm(instance: Any) -> Any:
        inserted = insert(instance)
        orm_calls("insert", instance)
        return inserted

    def save_then_orm(instance: Any, fields: list[str]) -> None:
        save(instance, fields)
        orm_calls("save", instance)

    monkeypatch.setattr(writes, "insert", insert_then_orm)
    monkeypatch.setattr(writes, "save", save_then_orm)
    run = services.start_run("walkthrough", "Move me to Tuesday")
    services.execute_run(run.pk)
    review = Review.objects.get(run=run)
    reviewer = get_user_model().objects.create_superuser("reviewer")
    decision = {
        "tool_calls": [{"id": call["id"], "action": "approve"} for call in review.tool_calls],
        "note": "",
        "revision": review.revision,
        "digest": review.digest,
        "interrupt_id": review.interrupt_id,
    }
    record = services.decide(review.pk, reviewer, decision, via="admin")
    services.execute_resume(record.pk)

    # Which writes a call makes through the queue differs (PostgreSQL inserts a new thread and
    # its run in one statement; SQLite inserts a decision at once), what the hook saw does not:
    # every row written, and the review counted, before the call went on.
    assert all(found for _, _, found, _ in seen), seen
    decided = seen[-6:]
    assert decided == [
        ("insert", "Run", True, 1),  # decide: the resume run, queued after the decision
        ("save", "Review", True, 1),  # its status
        ("save", "Decision", True, 1),  # execute_resume: the outcome
        ("save", "Review", True, 1),  # applied
        ("save", "Thread", True, 1),  # mirrored
        ("save", "Run", True, 1),
    ]
    # The hook's last write is the thread's subject: no queued write sent later undid it.
    assert Thread.objects.get(pk=review.thread_id).subject == f"hooked {len(seen)}"
    assert Decision.objects.get(pk=record.pk).outcome == Decision.Outcome.APPLIED
    assert Run.objects.filter(pk=record.run_id, kind=Run.Kind.RESUME).exists()
    assert Review.objects.get(pk=review.pk).status == Review.Status.APPLIED
    assert Event.objects.filter(verb="review_decided").count() == 1
    assert chain_verify.verify().ok
