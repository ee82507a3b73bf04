"""Pauses of graphs of their own (docs/protocol.md §9), against the real LangGraph server running
tests/graphs/dialects.py: Agent Inbox requests, plain interrupt() values, parallel branches
pausing at once, a declared response_schema, dismissing a pause and a thread the graph is stuck
on."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import requests

from nitro_assistants.client import (
    Assistants,
    PendingReview,
    ReviewSupersededError,
    RunResult,
    ThreadResumptionError,
)

pytestmark = pytest.mark.server

HI = [{"role": "user", "content": "Hi"}]


def start(client: Assistants, graph: str) -> tuple[str, RunResult]:
    thread_id = str(uuid.uuid4())
    return thread_id, client.run(thread_id=thread_id, assistant_id=graph, messages=HI)


def shown(review: PendingReview | None) -> Any:
    """What a reviewer is shown of a pause (``raw_interrupts`` differ between a run's answer
    and the state: the state leaves out a null ``response_schema``)."""
    assert review is not None
    return (review.kind, review.interrupt_ids, review.pauses, review.error)


def answer(
    client: Assistants, thread_id: str, graph: str, interrupt_id: str | None, value: Any
) -> RunResult:
    return client.review(thread_id, graph, "alice", interrupt_id=interrupt_id, answer=value)


# -- Agent Inbox -------------------------------------------------------------------------------


def test_an_agent_inbox_pause_is_read_as_its_request_and_config(client: Assistants) -> None:
    thread_id, result = start(client, "inbox")
    review = result.review
    assert result.interrupted and review is not None and review.kind == "inbox"
    (pause,) = review.pauses
    assert pause.interrupt_id == review.interrupt_id and review.interrupt_ids == [
        pause.interrupt_id
    ]
    assert pause.action_request == {
        "action": "send_refund",
        "args": {"order_id": 1234, "amount": 50.0},
    }
    assert pause.allowed == ["edit", "response", "ignore"]  # allow_accept is false
    assert pause.description and pause.description.startswith("### Refund request")
    assert shown(client.under_review(thread_id)) == shown(review)


@pytest.mark.parametrize(
    ("response", "reply"),
    [
        pytest.param(
            {
                "type": "edit",
                "args": {"action": "send_refund", "args": {"order_id": 1234, "amount": 40.0}},
            },
            "refund sent: order 1234 amount 40.0",
            id="edit",
        ),
        pytest.param(
            {"type": "response", "args": "Ask for the receipt first"},
            "noted: Ask for the receipt first",
            id="response",
        ),
        pytest.param({"type": "ignore", "args": None}, "refund ignored", id="ignore"),
    ],
)
def test_each_allowed_agent_inbox_response_resumes_the_graph(
    client: Assistants, response: dict[str, Any], reply: str
) -> None:
    thread_id, result = start(client, "inbox")
    assert result.review is not None
    resumed = answer(client, thread_id, "inbox", result.review.interrupt_id, response)
    assert resumed.reply == reply and not resumed.interrupted
    assert client.under_review(thread_id) is None


@pytest.mark.parametrize(
    ("response", "says"),
    [
        pytest.param({"type": "accept", "args": None}, "does not allow `accept`", id="forbidden"),
        pytest.param(
            {"type": "edit", "args": {"action": "send_refund", "args": {"amount": 1.0}}},
            "missing: order_id",
            id="edit-partial",
        ),
        pytest.param(
            {"type": "edit", "args": {"action": "wire_money", "args": {}}},
            "not `wire_money`",
            id="edit-other-action",
        ),
        pytest.param({"decisions": [{"type": "approve"}]}, "no field 'decisions'", id="hitl"),
        pytest.param({"type": "response", "args": "  "}, "the text", id="blank"),
        pytest.param("yes", "is one response", id="a-string"),
    ],
)
def test_an_agent_inbox_answer_that_does_not_fit_is_refused_before_sending(
    client: Assistants, response: Any, says: str
) -> None:
    """A wrong shape or a type the config forbids wedges an Agent Inbox thread for good: the
    client refuses it, and the thread is still answerable."""
    thread_id, result = start(client, "inbox")
    assert result.review is not None
    with pytest.raises(ThreadResumptionError, match=says):
        answer(client, thread_id, "inbox", result.review.interrupt_id, response)
    still = client.under_review(thread_id)
    assert still is not None and still.error is None
    assert still.interrupt_ids == result.review.interrupt_ids
    resumed = answer(
        client, thread_id, "inbox", still.interrupt_id, {"type": "ignore", "args": None}
    )
    assert resumed.reply == "refund ignored"


# -- plain interrupt() values ------------------------------------------------------------------


def test_a_bare_string_then_an_object_with_options_are_two_reviews_in_turn(
    client: Assistants,
) -> None:
    thread_id, result = start(client, "plain_interrupt")
    first = result.review
    assert first is not None and first.kind == "interrupt"
    assert first.pauses[0].value == "Approve a refund of $50?"
    assert first.pauses[0].question is None and first.pauses[0].options is None

    second = answer(client, thread_id, "plain_interrupt", first.interrupt_id, True)
    assert second.interrupted and second.review is not None
    assert second.review.kind == "interrupt"
    assert second.review.interrupt_id != first.interrupt_id  # the next pause, a new id
    (pause,) = second.review.pauses
    assert (pause.question, pause.options) == ("Which carrier?", ["UPS", "DHL"])

    # The first pause answered again (a stale tab, a retry): superseded, nothing applied.
    with pytest.raises(ReviewSupersededError):
        client.review(
            thread_id, "plain_interrupt", "bob", interrupt_id=first.interrupt_id, answer=False
        )
    with pytest.raises(ReviewSupersededError):
        client.review(
            thread_id,
            "plain_interrupt",
            "bob",
            interrupt_id=first.interrupt_id,
            answer=False,
            pending=first,  # as shown: the server itself refuses it, keyed by id
        )
    assert shown(client.under_review(thread_id)) == shown(second.review)

    done = answer(client, thread_id, "plain_interrupt", pause.interrupt_id, "DHL")
    assert done.reply == "approved=True carrier='DHL'"


def test_a_double_submit_is_applied_once(client: Assistants) -> None:
    """The same keyed answer sent twice: the second finds nothing pending under that id and
    does not answer the next question with the same value (the server would: this graph pauses
    twice in one node, and a resume keyed by the first pause's id answers the second)."""
    thread_id, result = start(client, "plain_interrupt")
    assert result.review is not None
    first = result.review
    once = client.review(
        thread_id,
        "plain_interrupt",
        "alice",
        interrupt_id=first.interrupt_id,
        answer="yes",
        pending=first,
    )
    with pytest.raises(ReviewSupersededError):
        client.review(
            thread_id,
            "plain_interrupt",
            "alice",
            interrupt_id=first.interrupt_id,
            answer="yes",
            pending=first,
        )
    assert shown(client.under_review(thread_id)) == shown(
        once.review
    )  # the carrier question, unanswered


def test_null_and_non_json_answers_are_refused_before_sending(client: Assistants) -> None:
    thread_id, result = start(client, "plain_interrupt")
    assert result.review is not None
    with pytest.raises(ThreadResumptionError, match="exactly one"):
        answer(client, thread_id, "plain_interrupt", result.review.interrupt_id, None)
    with pytest.raises(ThreadResumptionError, match="not JSON"):
        answer(client, thread_id, "plain_interrupt", result.review.interrupt_id, {1, 2})
    assert shown(client.under_review(thread_id)) == shown(result.review)


def test_an_answer_outside_the_options_is_refused_before_sending(client: Assistants) -> None:
    """interrupt({"question": "Which carrier?", "options": ["UPS", "DHL"]}) answered "FedEx"
    (issue 34): refused with the options named, the graph never sees it; an option then works."""
    thread_id, result = start(client, "plain_interrupt")
    assert result.review is not None
    second = answer(client, thread_id, "plain_interrupt", result.review.interrupt_id, True).review
    assert second is not None
    for pending in (None, second):  # read from the state, or the pause as shown
        with pytest.raises(ThreadResumptionError, match="allowed: UPS, DHL"):
            client.review(
                thread_id,
                "plain_interrupt",
                "alice",
                interrupt_id=second.interrupt_id,
                answer="FedEx",
                pending=pending,
            )
    assert shown(client.under_review(thread_id)) == shown(second)  # still pending, unanswered
    done = answer(client, thread_id, "plain_interrupt", second.interrupt_id, "UPS")
    assert done.reply == "approved=True carrier='UPS'"


# -- parallel branches -------------------------------------------------------------------------


def test_parallel_pauses_are_listed_and_answered_one_at_a_time(client: Assistants) -> None:
    thread_id, result = start(client, "parallel")
    review = result.review
    assert review is not None and len(review.interrupt_ids) == 2
    left, right = review.pauses
    assert left.value == "Left branch: proceed?"
    assert right.question == "Right branch: which size?"

    with pytest.raises(ThreadResumptionError, match="name the interrupt_id"):
        client.review(thread_id, "parallel", "alice", answer="yes")

    partial = answer(client, thread_id, "parallel", left.interrupt_id, "yes")
    assert partial.interrupted and partial.review is not None
    assert partial.review.interrupt_ids == [right.interrupt_id]  # the other, still pending
    assert shown(client.under_review(thread_id)) == shown(partial.review)

    # The answered one again: nothing happens, the other is not answered by it.
    with pytest.raises(ReviewSupersededError):
        answer(client, thread_id, "parallel", left.interrupt_id, "again")
    assert shown(client.under_review(thread_id)) == shown(partial.review)

    done = answer(client, thread_id, "parallel", right.interrupt_id, {"size": "M"})
    assert done.reply == "left='yes' right={'size': 'M'}"


def test_parallel_pauses_answered_together(client: Assistants) -> None:
    thread_id, result = start(client, "parallel")
    assert result.review is not None
    left, right = result.review.interrupt_ids
    with pytest.raises(ReviewSupersededError, match=r"f{32}"):
        client.review(thread_id, "parallel", "alice", answers={left: "ok", "f" * 32: "x"})
    done = client.review(thread_id, "parallel", "alice", answers={left: "ok", right: "L"})
    assert done.reply == "left='ok' right='L'"


# -- response_schema ---------------------------------------------------------------------------


def test_an_answer_is_checked_against_the_declared_response_schema(client: Assistants) -> None:
    thread_id, result = start(client, "schema")
    review = result.review
    assert review is not None and review.kind == "interrupt"
    schema = review.pauses[0].response_schema
    assert schema is not None and schema["required"] == ["size", "quantity"]
    with pytest.raises(ThreadResumptionError, match="'quantity' is a required property"):
        answer(client, thread_id, "schema", review.interrupt_id, {"size": "M"})
    with pytest.raises(ThreadResumptionError, match=r"at size: 'XL' is not one of"):
        answer(client, thread_id, "schema", review.interrupt_id, {"size": "XL", "quantity": 1})
    assert shown(client.under_review(thread_id)) == shown(review)
    done = answer(client, thread_id, "schema", review.interrupt_id, {"size": "M", "quantity": 2})
    assert done.reply == "ordered 2 x M"


# -- dismiss, and a thread the graph is stuck on -------------------------------------------------


def test_dismiss_ends_the_pause_without_answering(client: Assistants) -> None:
    thread_id, result = start(client, "plain_interrupt")
    assert result.review is not None
    client.dismiss(thread_id, result.review.interrupt_ids)
    assert client.under_review(thread_id) is None
    messages = client.thread_messages(thread_id)
    assert [m["type"] for m in messages] == ["human"]  # the graph read no answer
    with pytest.raises(ReviewSupersededError):
        answer(client, thread_id, "plain_interrupt", result.review.interrupt_id, True)
    with pytest.raises(ReviewSupersededError):
        client.dismiss(thread_id, result.review.interrupt_ids)


def test_a_thread_the_graph_refused_an_answer_on_is_stuck_not_decidable(
    client: Assistants,
) -> None:
    thread_id, result = start(client, "inbox")
    assert result.review is not None
    iid = result.review.interrupt_id
    # Another tool (not this client) sends a type the config forbids: the graph raises.
    body = {"assistant_id": "inbox", "command": {"resume": {iid: [{"type": "accept"}]}}}
    sent = requests.post(f"{client.base_url}/threads/{thread_id}/runs/wait", json=body, timeout=30)
    assert sent.json()["__error__"]["error"] == "ValueError"

    stuck = client.under_review(thread_id)
    assert stuck is not None and stuck.interrupt_ids == [iid]
    assert stuck.error == "ValueError('accept is not allowed')"
    with pytest.raises(ThreadResumptionError, match=r"refused an answer.*accept is not allowed"):
        answer(client, thread_id, "inbox", iid, {"type": "ignore", "args": None})
    client.dismiss(thread_id, [iid])  # the way out
    assert client.under_review(thread_id) is None
