"""What "open" means for a review, defined once in :mod:`nitro_assistants.rules`, and each
caller held to it: ``OPEN_STATUSES`` (not closed yet: ``closed_at`` unset, and a pruned thread
keeps its events) and ``is_unapplied`` (still the pause the server shows: a mirror of that pause
is this review, not a new one)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from nitro_assistants import rules
from nitro_assistants.models import Decision, Review
from nitro_assistants.services import transition
from nitro_assistants.services.mirror import lock_thread, mirror_pending
from nitro_assistants.testing import tool_calls_review
from tests.factories import DecisionFactory, ReviewFactory

STATUSES = rules.statuses_for()
MOVES = [
    (kind, current, target)
    for kind, lifecycle in rules.TRANSITIONS.items()
    for current, targets in lifecycle.items()
    for target in targets
]


def kind_with(status: str) -> str:
    """A kind whose lifecycle has ``status``."""
    return next(kind for kind in rules.KINDS if status in rules.TRANSITIONS[kind])


def test_the_two_meanings_meet_where_they_must() -> None:
    # Unapplied by its status alone (pending, or a decision waiting to be applied): open.
    assert rules.UNAPPLIED_STATUSES <= rules.OPEN_STATUSES
    # An open review still has somewhere to go.
    for kind, lifecycle in rules.TRANSITIONS.items():
        for status, targets in lifecycle.items():
            assert status not in rules.OPEN_STATUSES or targets, (kind, status)
    # Where they differ: an answered interaction is closed but unapplied while its decision
    # waits; an executing plan is open but no longer the server's pause once it is applied.
    assert rules.ANSWERED not in rules.OPEN_STATUSES and rules.is_unapplied(rules.ANSWERED, True)
    assert rules.EXECUTING in rules.OPEN_STATUSES
    assert not rules.is_unapplied(rules.EXECUTING, False)


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "current", "target"), MOVES)
def test_a_review_is_closed_exactly_when_it_leaves_the_open_statuses(
    kind: str, current: str, target: str
) -> None:
    review = ReviewFactory(kind=kind, status=current)
    transition(review, target)
    review.refresh_from_db()
    assert (review.closed_at is None) is (target in rules.OPEN_STATUSES)


@pytest.mark.django_db
@pytest.mark.parametrize("outcome", [None, *Decision.Outcome.values])
@pytest.mark.parametrize("status", STATUSES)
def test_a_mirror_of_the_same_pause_is_the_same_review_exactly_while_it_is_unapplied(
    status: str, outcome: str | None, django_capture_on_commit_callbacks: Any
) -> None:
    review = ReviewFactory(kind=kind_with(status), status=status, interrupt_ids=["int-1"])
    if outcome is not None:
        DecisionFactory(review=review, outcome=outcome)
    with django_capture_on_commit_callbacks(), transaction.atomic():
        lock_thread(review.thread)
        mirrored = mirror_pending(review.thread, None, tool_calls_review({}, interrupt_id="int-1"))
    assert mirrored is not None
    unapplied = rules.is_unapplied(status, outcome == Decision.Outcome.PENDING)
    assert (mirrored.pk == review.pk) is unapplied
    assert Review.objects.filter(thread=review.thread).count() == (1 if unapplied else 2)
