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
        pytest.raises(IntegrityError, match="nitro_assistants_one_pending_review"),
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
