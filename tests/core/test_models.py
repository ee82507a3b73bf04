from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction

from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import Event, Review
from tests.factories import ReviewFactory, ThreadFactory

pytestmark = pytest.mark.django_db


def test_migrations_match_the_models() -> None:
    out = StringIO()
    call_command("makemigrations", "nitro_assistants", check=True, dry_run=True, stdout=out)
    assert "No changes detected" in out.getvalue()


def test_one_pending_review_per_thread() -> None:
    thread = ThreadFactory()
    ReviewFactory(thread=thread)
    ReviewFactory(thread=thread, status=Review.Status.APPLIED)  # closed ones do not count
    with (
        # PostgreSQL names the constraint; SQLite names the columns of its partial index.
        pytest.raises(
            IntegrityError,
            match=r"nitro_assistants_one_pending_review|UNIQUE constraint failed: "
            r"nitro_assistants_review\.thread_id",
        ),
        transaction.atomic(),
    ):
        ReviewFactory(thread=thread)
    ReviewFactory()  # another thread may have its own


def test_events_are_append_only() -> None:
    event = Event.objects.create(thread=ThreadFactory(), verb="note")
    event.verb = "changed"
    with pytest.raises(NitroAssistantsError, match="append-only"):
        event.save()
    with pytest.raises(NitroAssistantsError, match="append-only"):
        event.delete()
    assert Event.objects.get(pk=event.pk).verb == "note"


def test_batched_events_are_written_together_in_order_and_roll_back_with_the_block() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from nitro_assistants.services.audit import events_batched, record_event

    thread = ThreadFactory()
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), events_batched():
        record_event(thread, "first")
        with events_batched():  # nested: the outer block writes them
            record_event(thread, "second", note="x")
        assert not Event.objects.filter(thread=thread).exists()  # not written yet
        record_event(thread, "third")
    # (On PostgreSQL the statement starts with the chain head's update: WITH ... INSERT.)
    inserts = [q["sql"] for q in queries if 'INSERT INTO "nitro_assistants_event"' in q["sql"]]
    assert len(inserts) == 1
    assert list(Event.objects.filter(thread=thread).values_list("verb", flat=True)) == [
        "first",
        "second",
        "third",
    ]

    def fail() -> None:
        with transaction.atomic(), events_batched():
            record_event(thread, "lost")
            raise RuntimeError("the block failed")

    with pytest.raises(RuntimeError):
        fail()
    assert not Event.objects.filter(thread=thread, verb="lost").exists()
    record_event(thread, "unbatched")  # outside a block: written at once
    assert Event.objects.filter(thread=thread, verb="unbatched").exists()
