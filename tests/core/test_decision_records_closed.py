"""A decision that never took effect (superseded, failed) still gets its record."""

from __future__ import annotations

from typing import Any

import pytest

from nitro_assistants import services
from nitro_assistants.exceptions import ReviewSupersededError, RunError
from nitro_assistants.models import Event
from nitro_assistants.services import chain_verify
from tests.core.conftest import FakeAssistant
from tests.factories import ReviewFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (ReviewSupersededError("no longer paused"), "superseded"),
        (RunError("422: the graph refused the resume", transient=False), "failed"),  # type: ignore[call-arg]
    ],
)
def test_a_decision_that_never_ran_is_recorded_with_why(
    error: Exception,
    outcome: str,
    fake_assistant: FakeAssistant,
    enqueued: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    review = ReviewFactory()
    decision = services.decide(
        review, None, {"tool_calls": [{"id": "call_1", "action": "approve"}]}
    )
    fake_assistant.fail_next("review", error)
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(decision.pk)
    record = Event.objects.get(verb="decision_recorded", review=review).data
    assert record["outcome"] == outcome
    assert record["error"] == str(error)
    assert record["executed"] is None and record["mismatches"] == []
    assert record["proposed"]["tool_calls"][0]["name"] == review.tool_calls[0]["name"]
    assert record["decided"]["actions"] == ["approve"]
    assert chain_verify.verify().ok
