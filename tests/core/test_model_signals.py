"""What a host's ``pre_save``/``post_save`` receivers see of the rows the app writes (issue 35).

A receiver connected to every model of the app sees the same saves, with the same ``created``
and ``update_fields``, on SQLite, on PostgreSQL and with prepared statements: the governed flow
of tests/core/test_statement_budget.py (a new thread's run pauses on a held call, a review rule
handles it, a reviewer claims and approves it, the resume is applied)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db.models import Model
from django.db.models.signals import post_save, pre_save

from nitro_assistants import services
from nitro_assistants.models import Claim, Decision, Event, Policy, Review
from nitro_assistants.services import chain_verify, claims
from nitro_assistants.services.policy_enforcement import ruleset
from nitro_assistants.testing import FakeAssistant, run_result
from tests.core.conftest import tool_review
from tests.factories import ReviewFactory

pytestmark = pytest.mark.django_db(transaction=True)

#: What a receiver sees of one save: (model, created, update_fields).
Seen = tuple[str, bool, frozenset[str] | None]

THREAD_MIRRORED = frozenset({"values", "status", "synced_at", "updated_at", "subject"})
RUN_MIRRORED = frozenset({"status", "reply", "finished_at", "remote_run_id"})

#: The saves of the governed flow, per service call, in order: the same on every database. Rows
#: written by one UPDATE, as ``QuerySet.update()`` writes them, send nothing on any (the attempt
#: counted: the run running; docs/django.md), nor do the chain's heads.
EXPECTED: dict[str, list[Seen]] = {
    "start_run": [
        ("Thread", True, None),
        ("Run", True, None),
        ("Event", True, None),  # thread_opened
        ("Event", True, None),  # run_requested
    ],
    "execute_run": [
        # The attempt counted by an UPDATE (no save), then run_started.
        ("Event", True, None),  # run_started
        ("Review", True, None),
        ("ReviewHandling", True, None),
        ("Thread", False, THREAD_MIRRORED),
        ("Run", False, RUN_MIRRORED),
        ("Event", True, None),  # run_finished
        ("Event", True, None),  # review_requested
        ("Event", True, None),  # policy_matched
    ],
    "claim_review": [
        ("Claim", True, None),
        ("Event", True, None),  # review_claimed
    ],
    "decide": [
        ("Decision", True, None),
        ("Run", True, None),  # the resume
        ("Review", False, frozenset({"status"})),
        ("Event", True, None),  # review_decided
    ],
    "execute_resume": [
        ("Decision", False, frozenset({"outcome", "applied_at"})),
        ("Review", False, frozenset({"status", "closed_at"})),
        ("Thread", False, THREAD_MIRRORED),
        ("Run", False, RUN_MIRRORED),
        ("Event", True, None),
        ("Event", True, None),
        ("Event", True, None),
    ],
}


@dataclass
class Saves:
    """What receivers connected to every model of the app saw: ``pre_save`` as (model,
    update_fields) and ``post_save`` as (model, created, update_fields), in order."""

    pre: list[tuple[str, frozenset[str] | None]] = field(default_factory=list)
    post: list[Seen] = field(default_factory=list)

    def take(self) -> list[Seen]:
        """The saves since the last take, each ``pre_save`` matched by its ``post_save``."""
        post, pre = list(self.post), list(self.pre)
        self.post.clear()
        self.pre.clear()
        assert pre == [(model, fields) for model, _, fields in post]
        return post


@pytest.fixture
def saves() -> Iterator[Saves]:
    """Receivers connected to every model of the app, as a host's history or search index
    connects them."""
    seen = Saves()
    models = list(apps.get_app_config("nitro_assistants").get_models())

    def before(sender: type[Model], instance: Model, **kwargs: Any) -> None:
        fields = kwargs["update_fields"]
        seen.pre.append((sender.__name__, frozenset(fields) if fields else None))

    def after(sender: type[Model], instance: Model, created: bool, **kwargs: Any) -> None:
        assert instance.pk is not None
        assert sender._default_manager.filter(pk=instance.pk).exists()  # written when sent
        fields = kwargs["update_fields"]
        seen.post.append((sender.__name__, created, frozenset(fields) if fields else None))

    for model in models:
        pre_save.connect(before, sender=model, weak=False, dispatch_uid=f"test-pre-{model}")
        post_save.connect(after, sender=model, weak=False, dispatch_uid=f"test-post-{model}")
    try:
        yield seen
    finally:
        for model in models:
            pre_save.disconnect(sender=model, dispatch_uid=f"test-pre-{model}")
            post_save.disconnect(sender=model, dispatch_uid=f"test-post-{model}")


def test_a_host_receiver_sees_every_row_of_the_governed_flow(
    fake_assistant: FakeAssistant, enqueued: list[Any], saves: Saves
) -> None:
    staff = Group.objects.create(name="Staff")
    staff.permissions.add(Permission.objects.get(codename="decide_review"))
    reviewer = get_user_model().objects.create_user("reviewer", is_staff=True)
    reviewer.groups.add(staff)
    Policy.objects.create(
        name="Rescheduling is for staff", tool="reschedule_appointment", group=staff
    )
    ruleset()
    fake_assistant.results = [run_result(tool_review()), run_result(reply="Moved to Tuesday")]
    saves.take()
    seen: dict[str, list[Seen]] = {}

    run = services.start_run("walkthrough", "Move me to Tuesday")
    seen["start_run"] = saves.take()
    services.execute_run(run.pk)
    seen["execute_run"] = saves.take()
    review = Review.objects.select_related("thread", "decision").get(run=run)
    assert review.handling.policy_id is not None  # the rule matched
    claims.claim_review(review, reviewer)
    seen["claim_review"] = saves.take()
    decision = {
        "tool_calls": [{"id": call["id"], "action": "approve"} for call in review.tool_calls],
        "note": "",
        "revision": review.revision,
        "digest": review.digest,
        "interrupt_id": review.interrupt_id,
    }
    record = services.decide(review.pk, reviewer, decision, via="admin")
    seen["decide"] = saves.take()
    services.execute_resume(record.pk)
    seen["execute_resume"] = saves.take()

    assert seen == EXPECTED
    assert Decision.objects.get(pk=record.pk).outcome == Decision.Outcome.APPLIED
    assert Event.objects.count() == sum(
        model == "Event" for saved in EXPECTED.values() for model, _, _ in saved
    )
    assert chain_verify.verify().ok


def test_a_claimed_review_is_claimed_again_taken_over_and_released_with_its_saves(
    saves: Saves,
) -> None:
    """A second reviewer gets the first one's live claim (nothing saved), takes it over (one
    update), and a release is an ``update()`` (nothing sent, docs/django.md): the same on every
    database, the insert's race handled by ``save()`` in a savepoint while claims are watched."""
    review = ReviewFactory()
    first = get_user_model().objects.create_user("first")
    second = get_user_model().objects.create_user("second")
    saves.take()

    assert claims.claim_review(review, first).user_id == first.pk
    assert saves.take() == [("Claim", True, None), ("Event", True, None)]
    assert claims.claim_review(review, second).user_id == first.pk
    assert saves.take() == []
    assert claims.claim_review(review, second, take_over=True).user_id == second.pk
    assert saves.take() == [
        ("Claim", False, frozenset({"user", "claimed_at", "expires_at", "changed_at"})),
        ("Event", True, None),
    ]
    assert claims.release_claim(review, second)
    assert saves.take() == []
    assert Claim.objects.count() == 1
    assert list(Event.objects.order_by("seq").values_list("verb", flat=True)) == [
        "review_claimed",
        "review_taken_over",
    ]
