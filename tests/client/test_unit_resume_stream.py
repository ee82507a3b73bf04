"""The resume (``review``): a pause the caller holds, and reading the end of its event stream."""

from __future__ import annotations

import dataclasses
import json

import pytest
import responses

from nitro_assistants.client import (
    Assistants,
    ReviewSupersededError,
    ThreadResumptionError,
)
from nitro_assistants.client.results import pending_review
from nitro_assistants.client.review import build_resume

BASE = "http://assistants.test"
THREAD = "0b7e2a55-7c1e-4a8e-9a57-1d2f3b4c5d6e"
ASSISTANT = "3f2c1b0a-9e8d-4c7b-a6f5-e4d3c2b1a090"
INTERRUPT = "0123456789abcdef0123456789abcdef"
WHEN = "2026-10-18T14:03:00Z"
STATE_URL = f"{BASE}/threads/{THREAD}/state"
STREAM_URL = f"{BASE}/threads/{THREAD}/runs/stream"
RUNS_URL = f"{BASE}/threads/{THREAD}/runs"
RUN_URL = f"{BASE}/threads/{THREAD}/runs/run-2"

CALL = {"id": "call-1", "name": "cancel_appointment", "args": {"appointment_id": 1}}
MESSAGES = [
    {"type": "human", "id": "h-1", "content": "cancel it"},
    {"type": "ai", "id": "a-1", "content": "", "tool_calls": [CALL]},
]
INTERRUPTS = [
    {
        "id": INTERRUPT,
        "value": {
            "action_requests": [{"name": CALL["name"], "args": CALL["args"]}],
            "review_configs": [
                {"action_name": CALL["name"], "allowed_decisions": ["approve", "reject"]}
            ],
        },
    }
]
PAUSED = {
    "values": {"messages": MESSAGES},
    "next": ["HumanInTheLoopMiddleware.after_model"],
    "interrupts": INTERRUPTS,
}
SHOWN = pending_review(INTERRUPTS, MESSAGES)
TOOLED = [*MESSAGES, {"type": "tool", "id": "t-1", "tool_call_id": "call-1", "content": "done"}]
DONE = [*TOOLED, {"type": "ai", "id": "a-2", "content": "Cancelled."}]
APPROVE = [{"id": "call-1", "action": "approve"}]
WHO = {"reviewer_id": "jane", "reviewed_at": WHEN}


@pytest.fixture
def mock():
    with responses.RequestsMock(assert_all_requests_are_fired=True) as rsps:
        yield rsps


@pytest.fixture
def client():
    return Assistants(BASE, "k", user_id="u1", backoff=0)


def sse(*events):
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


def checkpoint(messages, next_nodes, step):
    configurable = {"thread_id": THREAD, "checkpoint_ns": ""}
    return {
        "config": {"configurable": {**configurable, "checkpoint_id": f"cp-{step}"}},
        "parent_config": {"configurable": {**configurable, "checkpoint_id": f"cp-{step - 1}"}},
        "values": {"messages": messages},
        "metadata": {"source": "loop", "step": step},
        "next": list(next_nodes),
        "tasks": [{"id": f"task-{node}", "name": node, "interrupts": []} for node in next_nodes],
    }


METADATA = ("metadata", {"run_id": "run-2", "attempt": 1})
HITL = ("updates", {"HumanInTheLoopMiddleware.after_model": None})
TOOLS = ("updates", {"tools": {"messages": [TOOLED[-1]]}})
MODEL = ("updates", {"model": {"messages": [DONE[-1]]}})
FINISHED_EVENTS = [
    METADATA,
    HITL,
    ("checkpoints", checkpoint(MESSAGES, ["tools"], step=3)),
    TOOLS,
    ("checkpoints", checkpoint(TOOLED, ["model"], step=4)),
    MODEL,
    ("checkpoints", checkpoint(DONE, [], step=5)),
]
FINISHED_STREAM = sse(*FINISHED_EVENTS)
CUT_SHORT_STREAM = sse(*FINISHED_EVENTS[:-2])  # the server stopped before the model answered
VALUES_ONLY_STREAM = sse(
    METADATA,
    TOOLS,
    ("values", {"messages": TOOLED}),
    MODEL,
    ("values", {"messages": DONE}),
)
STALE_STREAM = sse(METADATA, ("updates", {"__interrupt__": INTERRUPTS}))


def approve(client, **kwargs):
    return client.review(
        THREAD,
        ASSISTANT,
        reviewer_id="jane",
        interrupt_id=INTERRUPT,
        tool_calls=APPROVE,
        reviewed_at=WHEN,
        **kwargs,
    )


def requested(mock):
    return [(c.request.method, c.request.url) for c in mock.calls]


def sent_body(call):
    return json.loads(call.request.body)


# -- a pause the caller holds ---------------------------------------------------------------


def test_review_with_a_keyed_pending_sends_only_the_resume(mock, client):
    mock.post(STREAM_URL, body=FINISHED_STREAM, content_type="text/event-stream")
    result = approve(client, pending=SHOWN)
    assert requested(mock) == [("POST", STREAM_URL)]
    assert client.transport.requests_sent == 1
    sent = sent_body(mock.calls[0])
    expected = build_resume(
        SHOWN, reply=None, tool_calls=APPROVE, answer=None, reviewer_id="jane", reviewed_at=WHEN
    )
    assert sent["command"] == {"resume": expected}
    assert expected == {INTERRUPT: {"decisions": [{"type": "approve", **WHO}]}}
    assert sent["stream_mode"] == ["checkpoints", "updates"]
    assert sent["multitask_strategy"] == "reject"
    assert result.reply == "Cancelled."
    assert result.run_id == "run-2"


def test_start_review_with_a_keyed_pending_sends_only_the_run(mock, client):
    mock.post(RUNS_URL, json={"run_id": "run-2", "status": "pending"})
    run = client.start_review(
        THREAD, ASSISTANT, reviewer_id="jane", tool_calls=APPROVE, reviewed_at=WHEN, pending=SHOWN
    )
    assert run == {"run_id": "run-2", "status": "pending"}
    assert requested(mock) == [("POST", RUNS_URL)]
    assert sent_body(mock.calls[0])["command"] == {
        "resume": {INTERRUPT: {"decisions": [{"type": "approve", **WHO}]}}
    }


def test_pending_is_validated_before_anything_is_sent(mock, client):
    with pytest.raises(ThreadResumptionError, match="not under review"):
        client.review(
            THREAD,
            ASSISTANT,
            reviewer_id="jane",
            tool_calls=[{"id": "call-9", "action": "approve"}],
            pending=SHOWN,
        )
    assert len(mock.calls) == 0
    assert client.transport.requests_sent == 0


@pytest.mark.parametrize(
    "interrupt_ids",
    [["abc"], [], [INTERRUPT, "abc"], [INTERRUPT.upper()]],
    ids=["not-hex", "none", "one-not-hex", "upper-case"],
)
def test_pending_without_keyed_ids_reads_the_state_first(mock, client, interrupt_ids):
    shown = dataclasses.replace(
        SHOWN, interrupt_id=(interrupt_ids or [None])[0], interrupt_ids=interrupt_ids
    )
    mock.get(STATE_URL, json=PAUSED)
    mock.post(STREAM_URL, body=FINISHED_STREAM)
    result = client.review(
        THREAD, ASSISTANT, reviewer_id="jane", tool_calls=APPROVE, reviewed_at=WHEN, pending=shown
    )
    assert requested(mock) == [("GET", STATE_URL), ("POST", STREAM_URL)]
    # The resume answers the pause read from the state, not the one passed in.
    assert sent_body(mock.calls[1])["command"] == {
        "resume": {INTERRUPT: {"decisions": [{"type": "approve", **WHO}]}}
    }
    assert result.reply == "Cancelled."


def test_stale_keyed_resume_with_pending_is_superseded_and_nothing_else_is_sent(mock, client):
    mock.post(STREAM_URL, body=STALE_STREAM)
    with pytest.raises(ReviewSupersededError, match=f"no longer paused on {INTERRUPT}") as caught:
        approve(client, pending=SHOWN)
    assert caught.value.interrupt_id == INTERRUPT
    assert requested(mock) == [("POST", STREAM_URL)]


def test_resume_refused_as_busy_with_pending_is_superseded(mock, client):
    mock.post(STREAM_URL, status=409, json={"detail": "Thread is busy"})
    with pytest.raises(ReviewSupersededError):
        approve(client, pending=SHOWN)
    assert requested(mock) == [("POST", STREAM_URL)]


# -- the end of the stream ------------------------------------------------------------------


def test_stream_ending_on_a_final_checkpoint_returns_the_result(mock, client):
    mock.get(STATE_URL, json=PAUSED)
    mock.post(STREAM_URL, body=FINISHED_STREAM)
    result = approve(client)
    assert requested(mock) == [("GET", STATE_URL), ("POST", STREAM_URL)]
    assert result.reply == "Cancelled."
    assert result.messages == DONE
    assert result.interrupted is False
    assert result.run_id == "run-2"


def test_stream_cut_short_before_the_run_ended_is_transient(mock, client):
    mock.post(STREAM_URL, body=CUT_SHORT_STREAM)
    with pytest.raises(ThreadResumptionError, match="ended before its run did") as caught:
        approve(client, pending=SHOWN)
    assert caught.value.transient is True
    assert not isinstance(caught.value, ReviewSupersededError)
    # The last checkpoint tells: the run is not asked about.
    assert requested(mock) == [("POST", STREAM_URL)]


def test_stream_cut_short_right_after_an_update_is_transient(mock, client):
    mock.post(
        STREAM_URL,
        body=sse(METADATA, HITL, ("checkpoints", checkpoint(MESSAGES, ["tools"], step=3)), TOOLS),
    )
    with pytest.raises(ThreadResumptionError, match="ended before its run did") as caught:
        approve(client, pending=SHOWN)
    assert caught.value.transient is True


def test_stream_pausing_again_returns_the_new_pause(mock, client):
    again = "f" * 32
    interrupts = [{**INTERRUPTS[0], "id": again}]
    mock.post(
        STREAM_URL,
        body=sse(
            METADATA,
            HITL,
            ("checkpoints", checkpoint(MESSAGES, ["HumanInTheLoopMiddleware.after_model"], 3)),
            ("updates", {"__interrupt__": interrupts}),
        ),
    )
    result = approve(client, pending=SHOWN)
    assert result.interrupted is True
    assert result.review.interrupt_id == again
    assert requested(mock) == [("POST", STREAM_URL)]


@pytest.mark.parametrize("status", ["running", "pending"])
def test_stream_without_checkpoints_of_a_run_still_going_is_transient(mock, client, status):
    mock.post(STREAM_URL, body=VALUES_ONLY_STREAM)
    mock.get(RUN_URL, json={"run_id": "run-2", "status": status})
    with pytest.raises(ThreadResumptionError, match="ended before its run did") as caught:
        approve(client, pending=SHOWN)
    assert caught.value.transient is True
    assert requested(mock) == [("POST", STREAM_URL), ("GET", RUN_URL)]


def test_stream_without_checkpoints_of_a_run_that_ended_returns_the_result(mock, client):
    mock.post(STREAM_URL, body=VALUES_ONLY_STREAM)
    mock.get(RUN_URL, json={"run_id": "run-2", "status": "success"})
    result = approve(client, pending=SHOWN)
    assert requested(mock) == [("POST", STREAM_URL), ("GET", RUN_URL)]
    assert result.reply == "Cancelled."
    assert result.messages == DONE
    assert result.run_id == "run-2"
