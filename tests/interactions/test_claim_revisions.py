"""A claim follows the interaction, not the row: when the assistant revises an interaction (the
same ``interactionId``, a new Review row), the reviewer who held the old revision holds the new
one, moved in the transaction that creates the revision, and racing take-overs are kept."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nitro_assistants.models import Claim, Review
from nitro_assistants.services import claims
from nitro_assistants.services.mirror import mirror_pending
from nitro_assistants.testing import reply_review
from tests.interactions.conftest import BLUEPRINT, QUESTIONS, REVISED, InteractionMaker


@pytest.mark.django_db
def test_the_claim_on_a_revised_interaction_moves_to_the_new_revision(
    interaction: InteractionMaker, jane: User, sam: User
) -> None:
    first = interaction("blueprint", BLUEPRINT)
    held = claims.claim_review(first, jane)
    second = interaction("blueprint", REVISED)
    assert second.revision == 2
    moved = Claim.objects.get(review=second)
    assert (moved.user, moved.claimed_at, moved.expires_at) == (
        jane,
        held.claimed_at,
        held.expires_at,
    )  # the same lease, not a new one
    assert moved.changed_at > held.changed_at  # the live view sees the change
    assert not Claim.objects.filter(review=first).exists()
    # Jane holds it: Sam opening it sees her claim; her open screen renews it.
    assert claims.claim_review(second, sam).user == jane
    assert claims.claim_review(second, jane).expires_at > held.expires_at


@pytest.mark.django_db
def test_a_lapsed_claim_or_another_interaction_carries_nothing(
    interaction: InteractionMaker, jane: User
) -> None:
    first = interaction("blueprint", BLUEPRINT)
    claims.claim_review(first, jane)
    Claim.objects.filter(review=first).update(expires_at=timezone.now())  # her tab closed
    second = interaction("blueprint", REVISED)
    assert not Claim.objects.filter(review=second).exists()
    claims.claim_review(second, jane)
    # Another interaction replacing this one on the thread is not a revision of it.
    other = interaction("question", QUESTIONS, interaction_id="int-2")
    assert other.revision == 1
    assert not Claim.objects.filter(review=other).exists()


@pytest.mark.django_db
def test_a_review_that_is_not_an_interaction_costs_no_claim_statement(
    interaction: InteractionMaker, jane: User
) -> None:
    first = interaction("blueprint", BLUEPRINT)
    thread = first.thread
    claims.claim_review(first, jane)
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        replaced = mirror_pending(
            type(thread).objects.select_for_update().get(pk=thread.pk), None, reply_review()
        )
    assert replaced is not None and replaced.kind == Review.Kind.REPLY
    assert not [q for q in queries if Claim._meta.db_table in q["sql"]]
    assert not Claim.objects.filter(review=replaced).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("a take-over holding the claim's row lock; SQLite has no row locks")
def test_a_take_over_racing_the_revision_is_the_claim_that_moves(
    interaction: InteractionMaker, jane: User, sam: User
) -> None:
    first = interaction("blueprint", BLUEPRINT)
    claims.claim_review(first, jane)
    taken = threading.Event()

    def take_over() -> None:
        # The real take-over, its audit event included, committed a moment later.
        try:
            with transaction.atomic():
                claims.claim_review(first, sam, take_over=True)
                taken.set()
                time.sleep(1)  # the revision arrives meanwhile, and waits for this commit
        finally:
            connection.close()

    worker = threading.Thread(target=take_over)
    worker.start()
    assert taken.wait(10)
    second = interaction("blueprint", REVISED)
    worker.join()
    # Read as the take-over committed it, not as it was before: Sam's claim, not Jane's.
    assert Claim.objects.get(review=second).user == sam
    assert Claim.objects.filter(review=first).count() == 0
