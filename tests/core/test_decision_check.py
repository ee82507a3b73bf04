"""The one check a tool-call or reply decision passes before anything is stored
(:func:`nitro_assistants.rules.check_decision`, which ``services.decide`` calls once): pure, so
each case is a plain call. The services' suites hold decide to the same behaviour end to end."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nitro_assistants import rules
from nitro_assistants.client import PendingReview
from nitro_assistants.exceptions import (
    InteractionConflictError,
    InteractionDecisionError,
    ReviewNotPendingError,
    ThreadResumptionError,
)

CALL = {
    "id": "call_1",
    "name": "refund",
    "args": {"order": "A-1", "amount": 20},
    "allowed_decisions": ["approve", "edit", "reject", "respond"],
}
PENDING = rules.ReviewState(
    pk=7,
    pending=PendingReview(
        kind="tool_calls", interrupt_id="int-1", interrupt_ids=["int-1"], tool_calls=[CALL]
    ),
    status=rules.PENDING,
    status_label="pending",
    revision=1,
    digest="d1",
)
DECIDED = dataclasses.replace(PENDING, status=rules.DECIDED, status_label="decided")
STAMP = {"revision": 1, "digest": "d1"}


def approve(**extra: Any) -> dict[str, Any]:
    return {**STAMP, "tool_calls": [{"id": "call_1", "action": "approve"}], **extra}


def test_an_edit_is_merged_into_the_held_call_and_checked_by_type() -> None:
    edit = {**STAMP, "tool_calls": [{"id": "call_1", "action": "edit", "args": {"amount": 25}}]}
    checked = rules.check_decision(PENDING, edit)
    assert checked.cleaned["tool_calls"] == [
        {"id": "call_1", "action": "edit", "args": {"order": "A-1", "amount": 25}}
    ]
    assert (checked.stamp, checked.replay) == ((1, "d1"), False)
    wrong = {**STAMP, "tool_calls": [{"id": "call_1", "action": "edit", "args": {"amount": "25"}}]}
    with pytest.raises(InteractionDecisionError) as caught:
        rules.check_decision(PENDING, wrong)
    assert caught.value.field == "tool_calls[0].args.amount"


def test_the_stamp_is_named_in_the_decision_or_taken_from_the_review_shown() -> None:
    with pytest.raises(InteractionDecisionError) as caught:
        rules.check_decision(PENDING, {"tool_calls": [{"id": "call_1", "action": "approve"}]})
    assert caught.value.field == "revision"
    shown = rules.check_decision(
        PENDING, {"tool_calls": [{"id": "call_1", "action": "approve"}]}, shown=(1, "d1")
    )
    assert shown.stamp == (1, "d1")


@pytest.mark.parametrize(
    ("decision", "field"),
    [
        (approve(revision=2), "revision"),
        (approve(digest="other"), "digest"),
        (approve(interrupt_id="int-0"), "interrupt_id"),
    ],
)
def test_a_decision_on_anything_but_the_review_as_it_is_now_is_stale(
    decision: dict[str, Any], field: str
) -> None:
    with pytest.raises(InteractionConflictError) as caught:
        rules.check_decision(PENDING, decision)
    assert caught.value.field == field


def test_the_same_persons_same_decision_again_is_a_replay_even_once_decided() -> None:
    recorded = {"reply": None, "tool_calls": [{"id": "call_1", "action": "approve"}]}
    again = rules.check_decision(DECIDED, approve(), recorded=recorded)
    assert again.replay
    other = {"reply": None, "tool_calls": [{"id": "call_1", "action": "reject"}]}
    with pytest.raises(ReviewNotPendingError, match=r"Review #7 was already decided\."):
        rules.check_decision(DECIDED, approve(), recorded=other)
    with pytest.raises(ReviewNotPendingError):  # someone else's decision: nothing recorded
        rules.check_decision(DECIDED, approve())


def test_a_closed_review_says_so_before_what_is_wrong_with_the_decision() -> None:
    bad = {**STAMP, "tool_calls": [{"id": "call_9", "action": "approve"}]}
    with pytest.raises(ReviewNotPendingError):
        rules.check_decision(DECIDED, bad)
    with pytest.raises(ThreadResumptionError, match="Tool call `call_9` is not under review"):
        rules.check_decision(PENDING, bad)


QUESTION = rules.InteractionState(
    interaction_id="int-q",
    kind=rules.QUESTION,
    status=rules.PENDING,
    revision=2,
    digest="dq",
    interrupt_id="int-1",
    interaction={
        "kind": "question",
        "questions": [{"questionId": "q1", "options": [{"optionId": "yes"}, {"optionId": "no"}]}],
    },
)
ANSWER = {
    "decision": "answer",
    "revision": 2,
    "digest": "dq",
    "answers": [{"questionId": "q1", "optionIds": ["yes"]}],
}


def never() -> Any:
    raise AssertionError("asked although its answer cannot matter")


def test_an_interaction_answer_is_checked_against_its_content_in_the_same_call() -> None:
    checked = rules.check_interaction_decision(QUESTION, ANSWER)
    assert (checked.cleaned["answers"], checked.stamp, checked.replay) == (
        [{"questionId": "q1", "optionIds": ["yes"]}],
        (2, "dq"),
        False,
    )
    with pytest.raises(InteractionDecisionError) as caught:
        rules.check_interaction_decision(
            QUESTION, {**ANSWER, "answers": [{"questionId": "q1", "optionIds": ["maybe"]}]}
        )
    assert caught.value.field == "answers[0].optionIds"


def test_an_interaction_decision_sent_again_is_a_replay_before_anything_else_is_asked() -> None:
    earlier = {"decision": "answer", "revisions": {2}}
    closed = dataclasses.replace(QUESTION, status=rules.ANSWERED)
    again = rules.check_interaction_decision(
        closed, ANSWER, recorded=lambda: earlier, replaced=never
    )
    assert again.replay
    with pytest.raises(InteractionConflictError, match="only a pending review can be decided"):
        rules.check_interaction_decision(closed, ANSWER, recorded=lambda: None)


def test_an_interaction_decision_on_a_replaced_revision_or_another_interrupt_is_stale() -> None:
    with pytest.raises(InteractionConflictError, match="Revision 2 of interaction int-q has been"):
        rules.check_interaction_decision(QUESTION, ANSWER, replaced=lambda: True)
    with pytest.raises(InteractionConflictError) as caught:
        rules.check_interaction_decision(QUESTION, {**ANSWER, "interrupt_id": "int-0"})
    assert caught.value.field == "interrupt_id"
    shown = rules.check_interaction_decision(
        QUESTION,
        {k: v for k, v in ANSWER.items() if k not in ("revision", "digest")},
        shown=(2, "dq"),
    )
    assert shown.stamp == (2, "dq")
