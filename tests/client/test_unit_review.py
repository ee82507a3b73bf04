"""``review()`` validation: every invalid decision is refused with a precise message and no POST.

docs/protocol.md §4: a resume the graph refuses is stored and replayed forever, so nothing invalid
may be sent. Each case reads the pause (one GET of the state at most) and never POSTs.
"""

from __future__ import annotations

import re

import pytest
import responses

from nitro_assistants.client import Assistants, ThreadResumptionError

BASE = "http://assistants.test"
THREAD = "0b7e2a55-7c1e-4a8e-9a57-1d2f3b4c5d6e"
ASSISTANT = "3f2c1b0a-9e8d-4c7b-a6f5-e4d3c2b1a090"
TOOL_IID = "0123456789abcdef0123456789abcdef"
REPLY_IID = "fedcba9876543210fedcba9876543210"
STATE_URL = f"{BASE}/threads/{THREAD}/state"

RESCHEDULE = {"id": "call-1", "name": "reschedule", "args": {"appointment_id": 42, "day": "Tue"}}
CANCEL = {"id": "call-2", "name": "cancel", "args": {"appointment_id": 7}}
LOOKUP = {"id": "call-3", "name": "lookup", "args": {"appointment_id": 7}}

TOOL_PAUSE = {
    "values": {
        "messages": [
            {"type": "human", "id": "h-1", "content": "move and cancel"},
            {"type": "ai", "id": "a-1", "content": "", "tool_calls": [RESCHEDULE, CANCEL, LOOKUP]},
        ]
    },
    "interrupts": [
        {
            "id": TOOL_IID,
            "value": {
                "action_requests": [
                    {"name": "reschedule", "args": RESCHEDULE["args"]},
                    {"name": "cancel", "args": CANCEL["args"]},
                ],
                "review_configs": [
                    {
                        "action_name": "reschedule",
                        "allowed_decisions": ["approve", "edit", "reject", "respond"],
                    },
                    {"action_name": "cancel", "allowed_decisions": ["approve", "reject"]},
                ],
            },
        }
    ],
}
REPLY_PAUSE = {
    "values": {
        "messages": [
            {"type": "human", "id": "h-1", "content": "Tuesday?"},
            {
                "type": "ai",
                "id": "a-2",
                "content": "See you Tuesday.",
                "response_metadata": {"review": {"type": "pending"}},
            },
        ]
    },
    "interrupts": [
        {
            "id": REPLY_IID,
            "value": {
                "action_requests": [{"name": "__reply__", "args": {"content": "See you Tuesday."}}],
                "review_configs": [
                    {"action_name": "__reply__", "allowed_decisions": ["approve", "edit", "reject"]}
                ],
            },
        }
    ],
}


@pytest.fixture
def mock():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


@pytest.fixture
def client():
    return Assistants(BASE, "k", backoff=0)


def refused(mock, client, message, state=TOOL_PAUSE, **kwargs):
    mock.get(STATE_URL, json=state)
    kwargs.setdefault("reviewer_id", "jane")
    with pytest.raises(ThreadResumptionError, match=re.escape(message)) as caught:
        client.review(THREAD, ASSISTANT, **kwargs)
    assert [c.request.method for c in mock.calls if c.request.method != "GET"] == []
    assert client.transport.requests_sent <= 1
    return caught.value


APPROVE_BOTH = [{"id": "call-1", "action": "approve"}, {"id": "call-2", "action": "approve"}]


@pytest.mark.parametrize(
    ("tool_calls", "message"),
    [
        (
            [*APPROVE_BOTH, {"id": "nope", "action": "approve"}],
            "Tool call `nope` is not under review; under review: `call-1`, `call-2`",
        ),
        (
            [*APPROVE_BOTH, {"id": "call-3", "action": "approve"}],
            "Tool call `call-3` is not under review",
        ),
        (
            [*APPROVE_BOTH, {"id": "call-1", "action": "reject"}],
            "Tool call `call-1` is reviewed more than once",
        ),
        (
            [{"id": "call-1", "action": "approve"}],
            "Every tool call under review needs a decision; missing: `call-2`",
        ),
        ([], "Every tool call under review needs a decision; missing: `call-1`, `call-2`"),
        (
            [
                {"id": "call-1", "action": "approve"},
                {"id": "call-2", "action": "edit", "args": {"appointment_id": 8}},
            ],
            "Invalid review action `edit` for tool call `call-2` (cancel); allowed: approve, reject",
        ),
        (
            [{"id": "call-1", "action": "maybe"}, {"id": "call-2", "action": "approve"}],
            "Invalid review action `maybe` for tool call `call-1` (reschedule); allowed: approve, edit, reject, respond",
        ),
        (
            [{"id": "call-1"}, {"id": "call-2", "action": "approve"}],
            "The review of tool call `call-1` needs an `action`: one of approve, edit, reject, respond",
        ),
        (
            [
                {"id": "call-1", "action": "edit", "args": {"colour": "red", "day": "Wed"}},
                APPROVE_BOTH[1],
            ],
            "Tool call `call-1` (reschedule) has no argument `colour`; it has `appointment_id`, `day`",
        ),
        (
            [{"id": "call-1", "action": "edit"}, APPROVE_BOTH[1]],
            "An edit of tool call `call-1` needs `args`",
        ),
        (
            [{"id": "call-1", "action": "respond"}, APPROVE_BOTH[1]],
            "`respond` to tool call `call-1` needs a `message`",
        ),
        (
            [{"id": "call-1", "action": "respond", "message": "  "}, APPROVE_BOTH[1]],
            "`respond` to tool call `call-1` needs a `message`",
        ),
        (
            [{"id": "call-1", "action": "reject", "message": 5}, APPROVE_BOTH[1]],
            "The reject message for tool call `call-1` must be text",
        ),
        (["approve", "approve"], "Each tool-call review must be an object"),
    ],
)
def test_invalid_tool_call_reviews(mock, client, tool_calls, message):
    refused(mock, client, message, tool_calls=tool_calls, interrupt_id=TOOL_IID)


def test_invalid_tool_call_review_given_as_mapping(mock, client):
    refused(
        mock,
        client,
        "The review of tool call `call-1` must be an object",
        tool_calls={"call-1": "approve", "call-2": {"action": "approve"}},
    )


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ({"action": "edit"}, "A reply `edit` needs `content`: the whole new text"),
        ({"action": "edit", "content": " \n"}, "A reply `edit` needs `content`"),
        (
            {"action": "respond", "message": "hi"},
            "Invalid review action `respond` for the reply; allowed: approve, edit, reject",
        ),
        ({"action": "reject", "message": ["x"]}, "The reject message for the reply must be text"),
    ],
)
def test_invalid_reply_reviews(mock, client, reply, message):
    refused(mock, client, message, state=REPLY_PAUSE, reply=reply, interrupt_id=REPLY_IID)


def test_reply_review_sent_to_a_tool_call_pause(mock, client):
    refused(
        mock,
        client,
        "A reply review was sent, but the thread is paused on tool calls",
        reply={"action": "approve"},
        interrupt_id=TOOL_IID,
    )


def test_tool_call_review_sent_to_a_reply_pause(mock, client):
    refused(
        mock,
        client,
        "A tool-call review was sent, but the thread is paused on its reply",
        state=REPLY_PAUSE,
        tool_calls=[{"id": "call-1", "action": "approve"}],
        interrupt_id=REPLY_IID,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reply": {"action": "approve"}}, "interrupt_id is required to review a reply"),
        ({}, "Pass exactly one of reply or tool_calls"),
        (
            {"reply": {"action": "approve"}, "tool_calls": [], "interrupt_id": REPLY_IID},
            "Pass exactly one of reply or tool_calls; got reply and tool_calls",
        ),
        (
            {"reviewer_id": "", "reply": {"action": "approve"}, "interrupt_id": REPLY_IID},
            "reviewer_id is required",
        ),
        ({"reviewer_id": "  ", "tool_calls": APPROVE_BOTH}, "reviewer_id is required"),
        ({"reviewer_id": None, "tool_calls": APPROVE_BOTH}, "reviewer_id is required"),
    ],
)
def test_refused_before_any_request(mock, client, kwargs, message):
    kwargs.setdefault("reviewer_id", "jane")
    with pytest.raises(ThreadResumptionError, match=re.escape(message)):
        client.review(THREAD, ASSISTANT, **kwargs)
    assert len(mock.calls) == 0
    assert client.transport.requests_sent == 0


def test_a_valid_review_after_refusals_is_sent(mock, client):
    # The refusals above leave nothing behind: the same client then sends a correct review.
    refused(mock, client, "missing: `call-2`", tool_calls=[{"id": "call-1", "action": "approve"}])
    mock.post(
        f"{BASE}/threads/{THREAD}/runs/stream",
        body='event: updates\ndata: {"tools": {}}\n\n'
        'event: checkpoints\ndata: {"values": {"messages": []}, "next": []}\n\n',
    )
    result = client.review(THREAD, ASSISTANT, reviewer_id="jane", tool_calls=APPROVE_BOTH)
    assert result.reply is None
    assert [c.request.method for c in mock.calls] == ["GET", "GET", "POST"]
