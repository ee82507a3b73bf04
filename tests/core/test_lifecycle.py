"""The one state machine of a review (services.transition over rules.TRANSITIONS)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from nitro_assistants import rules, signals
from nitro_assistants.exceptions import ReviewStateError
from nitro_assistants.models import Event, Review
from nitro_assistants.services import transition
from tests.factories import ReviewFactory

PACKAGE = Path(__file__).resolve().parents[2] / "nitro_assistants"


def test_the_model_knows_exactly_the_statuses_and_kinds_the_rules_define() -> None:
    assert set(Review.Status.values) == set(rules.statuses_for())
    assert list(Review.Kind.values) == list(rules.KINDS)
    for kind in rules.KINDS:
        lifecycle = rules.TRANSITIONS[kind]
        assert rules.PENDING in lifecycle
        for targets in lifecycle.values():
            assert set(targets) <= set(lifecycle), kind  # every target has a row of its own


def test_each_kind_lists_only_its_own_statuses() -> None:
    assert "decided" in rules.statuses_for("tool_calls")
    assert "answered" not in rules.statuses_for("reply")
    assert "decided" not in rules.statuses_for("plan")
    assert "executing" in rules.statuses_for("plan")


@pytest.mark.django_db
def test_a_move_the_lifecycle_has_no_room_for_is_refused_and_changes_nothing() -> None:
    review = ReviewFactory()  # tool calls, pending
    with pytest.raises(ReviewStateError, match="cannot go from pending to applied"):
        transition(review, rules.APPLIED)
    with pytest.raises(ReviewStateError, match="cannot go from pending to answered"):
        transition(review, rules.ANSWERED)
    review.refresh_from_db()
    assert review.status == "pending" and review.closed_at is None
    assert not Event.objects.filter(review=review).exists()


@pytest.mark.django_db
def test_a_transition_writes_the_status_the_event_and_the_signal_after_commit(
    django_capture_on_commit_callbacks: Any,
) -> None:
    review = ReviewFactory()
    received: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        received.append(kwargs)

    signals.review_superseded.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            transition(review, rules.SUPERSEDED, reason="stale", signal_kwargs={"reason": "stale"})
            assert received == []  # not before the commit
        assert len(callbacks) == 1
    finally:
        signals.review_superseded.disconnect(receiver)
    review.refresh_from_db()
    assert review.status == "superseded" and review.closed_at is not None
    event = Event.objects.get(review=review)
    assert (event.verb, event.data) == ("review_superseded", {"reason": "stale"})
    assert [r["reason"] for r in received] == ["stale"]
    with pytest.raises(ReviewStateError):  # closed: nothing moves it again
        transition(review, rules.DECIDED)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("outcome", "verb"), [("completed", "plan_completed"), ("failed", "plan_failed")]
)
def test_a_finished_plan_sends_plan_finished_once(
    outcome: str, verb: str, django_capture_on_commit_callbacks: Any
) -> None:
    review = ReviewFactory(kind="plan", status="executing", interaction_id="p-1")
    received: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        received.append(kwargs)

    signals.plan_finished.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            transition(review, outcome)
    finally:
        signals.plan_finished.disconnect(receiver)
    assert [(r["sender"], r["review"].pk, r["status"]) for r in received] == [
        (Review, review.pk, outcome)
    ]
    assert Event.objects.get(review=review).verb == verb


def _status_writes(path: Path) -> list[int]:
    """Lines of ``path`` that assign a ``status`` attribute of something named review/locked."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and target.attr == "status"
                and isinstance(target.value, ast.Name)
                and "review" in target.value.id.lower()
            ):
                lines.append(node.lineno)
    return lines


def test_nothing_but_transition_writes_a_review_status() -> None:
    writes = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts and (lines := _status_writes(path))
    }
    assert writes == {"services/lifecycle.py": writes.get("services/lifecycle.py", [])}
    assert writes["services/lifecycle.py"], "transition() itself writes it"
