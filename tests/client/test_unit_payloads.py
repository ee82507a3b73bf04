"""Odd payloads a broken server or proxy may send (PROTOCOL.md §4 shapes gone wrong): each is a
clear error of the package's own, never an AttributeError or RecursionError, and never a pause
with nothing to decide. Garbage bodies are what a real server cannot be made to send: mocked."""

from __future__ import annotations

import contextlib
import json
import re

import pytest
import responses

from nitro_assistants.client import (
    Assistants,
    NitroAssistantsError,
    RunError,
    RunResult,
    ThreadResumptionError,
    ThreadStateError,
)
from nitro_assistants.client.results import ResultShapeError, ReviewShapeError, pending_review
from nitro_assistants.client.sse import parse_sse

BASE = "http://assistants.test"
THREAD = "0b7e2a55-7c1e-4a8e-9a57-1d2f3b4c5d6e"
IID = "0123456789abcdef0123456789abcdef"
HUMAN = {"type": "human", "id": "h-1", "content": "hi"}
CALL = {"id": "c-1", "name": "cancel", "args": {"id": 1}}
AI = {"type": "ai", "id": "a-1", "content": "", "tool_calls": [CALL]}
WAIT = f"{BASE}/threads/{THREAD}/runs/wait"
USER = [{"role": "user", "content": "Hi"}]


def held(**value):
    return [
        {"id": IID, "value": {"action_requests": [{"name": "cancel", "args": {"id": 1}}], **value}}
    ]


@pytest.fixture
def mock():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


@pytest.fixture
def client():
    return Assistants(BASE, "sk-test-key", backoff=0, retries=0)


# -- 18 (issue 19): a pause of no known shape is a plain interrupt a person can read and answer --


@pytest.mark.parametrize(
    ("interrupts", "values", "ids"),
    [
        pytest.param(["Approve a refund of $50?"], ["Approve a refund of $50?"], [], id="strings"),
        pytest.param(
            {"id": IID, "value": {"question": "?"}}, [{"question": "?"}], [IID], id="object"
        ),
        pytest.param([{"id": IID}], [{"id": IID}], [IID], id="no-value"),
        pytest.param([None], [None], [], id="null"),
        pytest.param("pause", ["pause"], [], id="a-string"),
    ],
)
def test_odd_interrupts_are_plain_interrupt_reviews_not_errors(interrupts, values, ids):
    result = RunResult.build({"messages": [HUMAN], "__interrupt__": interrupts})
    assert result.interrupted and result.review is not None
    assert result.review.kind == "interrupt"
    assert [p.value for p in result.review.pauses] == values
    assert result.review.interrupt_ids == ids


def test_a_run_paused_on_strings_is_an_interrupt_review(mock, client):
    """Before issue 19 this failed the run as "unreadable": nobody could answer it."""
    mock.post(WAIT, json={"messages": [HUMAN], "__interrupt__": ["Approve?", "Really?"]})
    mock.get(f"{BASE}/threads/{THREAD}/state", json={"interrupts": ["Approve?", "Really?"]})
    result = client.run(THREAD, "agent", USER, known_thread=True)
    assert [p.value for p in result.review.pauses] == ["Approve?", "Really?"]
    # Two pauses without ids cannot be told apart in an answer: refused, nothing sent.
    with pytest.raises(ThreadResumptionError, match="name the interrupt_id"):
        client.review(THREAD, "agent", "alice", answer="yes", pending=result.review)


# -- 16: odd shapes inside a pause or a result --------------------------------------------------


@pytest.mark.parametrize(
    ("interrupts", "messages", "says"),
    [
        pytest.param(
            [{"id": IID, "value": {"action_requests": ["cancel"]}}],
            [HUMAN, AI],
            r"action_requests\[0\] is a string",
            id="action-request-string",
        ),
        pytest.param(
            [{"id": IID, "value": {"action_requests": {"name": "cancel"}}}],
            [HUMAN, AI],
            "action_requests is an object, not a list",
            id="action-requests-object",
        ),
        pytest.param(
            held(review_configs=[7]), [HUMAN, AI], r"review_configs\[0\] is a number", id="config"
        ),
        pytest.param(
            held(), [HUMAN, "ai said"], r"the messages\[1\] is a string", id="message-string"
        ),
        pytest.param(
            held(),
            [HUMAN, {**AI, "tool_calls": ["cancel"]}],
            r"tool calls of message 'a-1'\[0\] is a string",
            id="tool-call-string",
        ),
        pytest.param(
            held(review_configs=[{"action_name": "cancel", "allowed_decisions": "approve"}]),
            [HUMAN, AI],
            "allowed_decisions is a string",
            id="allowed-string",
        ),
        pytest.param(
            [{"id": IID, "value": {"type": "interaction", "interaction": ["plan"]}}],
            [HUMAN],
            "the interaction is a list",
            id="interaction-list",
        ),
        pytest.param(
            [{"id": IID, "value": {"type": "tool_approval"}}, {"id": "b" * 32, "value": "x"}],
            [HUMAN, AI],
            None,
            id="per-call-mixed",
        ),
        pytest.param(
            [
                {
                    "id": IID,
                    "value": {"type": "tool_approval", "tool_call_id": "c-1"},
                    "response_schema": {"oneOf": [{"properties": []}]},
                }
            ],
            [HUMAN, AI],
            None,
            id="schema-odd",
        ),
    ],
)
def test_odd_shapes_in_a_pause_are_read_as_plain_interrupts(interrupts, messages, says):
    """A pause that does not read as its dialect is still one a person can read and answer: a
    plain interrupt of the raw value, saying why (messages that are not objects stay an error:
    they are not the pause)."""
    if says is None:  # readable after all: it must not crash either
        review = pending_review(interrupts, messages)
        assert review is not None
        return
    if "messages" in says:
        with pytest.raises(ReviewShapeError, match=says):
            pending_review(interrupts, messages)
        return
    review = pending_review(interrupts, messages)
    assert review is not None and review.kind == "interrupt"
    assert re.search(says, review.problem or "")
    assert [p.value for p in review.pauses] == [i["value"] for i in interrupts]


@pytest.mark.parametrize(
    "messages", [pytest.param("hello", id="string"), pytest.param([HUMAN, 3], id="number-item")]
)
def test_unreadable_messages_of_a_finished_run_are_an_error(messages):
    with pytest.raises(ResultShapeError, match="the messages"):
        RunResult.build({"messages": messages})


def test_a_run_answering_unreadable_messages_raises_a_run_error(mock, client):
    mock.post(WAIT, json={"messages": [HUMAN, ["not", "a", "message"]]})
    with pytest.raises(RunError, match=r"unreadable: the messages\[1\] is a list"):
        client.run(THREAD, "agent", USER, known_thread=True)


# -- 19: ids too long to be answered ------------------------------------------------------------


def test_an_interrupt_id_over_64_characters_is_unreadable():
    with pytest.raises(ReviewShapeError, match="65 characters long; at most 64"):
        pending_review([{**held()[0], "id": "a" * 65}], [HUMAN, AI])
    assert pending_review([{**held()[0], "id": "a" * 64}], [HUMAN, AI]) is not None


@pytest.mark.parametrize("bad", ["r" * 65, "a\x00b", "", 42], ids=["long", "nul", "blank", "int"])
def test_a_run_id_that_cannot_be_stored_is_a_run_error(mock, client, bad):
    mock.post(f"{BASE}/threads/{THREAD}/runs", json={"run_id": bad, "status": "pending"})
    with pytest.raises(RunError, match="run id"):
        client.start_run(THREAD, "agent", USER, known_thread=True)
    mock.get(f"{BASE}/threads/{THREAD}/runs", json=[{"run_id": bad, "metadata": {}}])
    with pytest.raises(RunError, match="run id"):
        client.list_runs(THREAD)


def test_a_long_run_id_in_content_location_is_a_run_error(mock, client):
    mock.post(
        WAIT,
        json={"messages": [HUMAN]},
        headers={"Content-Location": f"/threads/{THREAD}/runs/{'r' * 80}"},
    )
    with pytest.raises(RunError, match="80 characters long"):
        client.run(THREAD, "agent", USER, known_thread=True)


# -- 16: bodies that are not what they should be ------------------------------------------------

DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    ("body", "says"),
    [
        pytest.param("<html><body>Sign in</body></html>", "non-JSON body: '<html>", id="html"),
        pytest.param(DEEP, "nested too deeply", id="deep"),
        pytest.param('{"runs": []}', "not a list of runs", id="object"),
        pytest.param('["a", "b"]', "not a list of runs", id="strings"),
    ],
)
def test_a_run_list_that_is_not_one_is_a_run_error(mock, client, body, says):
    mock.get(f"{BASE}/threads/{THREAD}/runs", body=body, content_type="text/html")
    with pytest.raises(RunError, match=says):
        client.list_runs(THREAD)


@pytest.mark.parametrize("call", ["state", "run", "get_run", "join", "graph"])
def test_json_nested_5000_deep_is_a_clear_error_everywhere(mock, client, call):
    for method, url in [
        ("GET", f"{BASE}/threads/{THREAD}/state"),
        ("POST", WAIT),
        ("GET", f"{BASE}/threads/{THREAD}/runs/r-1"),
        ("GET", f"{BASE}/threads/{THREAD}/runs/r-1/join"),
        ("GET", f"{BASE}/assistants/3f2c1b0a-9e8d-4c7b-a6f5-e4d3c2b1a090"),
    ]:
        mock.add(method, url, body=DEEP, content_type="application/json")
    actions = {
        "state": lambda: client.thread_state(THREAD),
        "run": lambda: client.run(THREAD, "agent", USER, known_thread=True),
        "get_run": lambda: client.get_run(THREAD, "r-1"),
        "join": lambda: client.join_run(THREAD, "r-1"),
        "graph": lambda: client.graph_id("3f2c1b0a-9e8d-4c7b-a6f5-e4d3c2b1a090"),
    }
    with pytest.raises(NitroAssistantsError, match="nested too deeply"):
        actions[call]()


@pytest.mark.parametrize("body", ["[1, 2]", '"text"', "null"])
def test_a_run_or_assistant_that_is_not_an_object_is_a_clear_error(mock, client, body):
    mock.get(f"{BASE}/threads/{THREAD}/runs/r-1", body=body, content_type="application/json")
    with pytest.raises(RunError, match="not an object"):
        client.get_run(THREAD, "r-1")


def test_thread_messages_that_are_not_objects_are_a_state_error(mock, client):
    mock.get(f"{BASE}/threads/{THREAD}/state", json={"values": {"messages": ["a", "b"]}})
    with pytest.raises(ThreadStateError, match="not a list of objects"):
        client.thread_messages(THREAD)


def test_a_state_whose_tasks_are_not_objects_is_a_state_error(mock, client):
    mock.get(f"{BASE}/threads/{THREAD}/state", json={"values": {}, "tasks": ["t"]})
    with pytest.raises(ThreadStateError, match="unreadable"):
        client.under_review(THREAD)


def test_an_event_nested_5000_deep_is_kept_as_text():
    (event,) = parse_sse([f"event: values\ndata: {DEEP}\n\n".encode()])
    assert event.data == DEEP


def test_a_resume_stream_with_odd_interrupt_updates_is_a_clear_error(mock, client):
    review = pending_review(held(), [HUMAN, AI])
    assert review is not None
    events = 'event: metadata\ndata: {"run_id": "r-1"}\n\n' + (
        'event: updates\ndata: {"__interrupt__": ["stop"]}\n\n'
    )
    mock.post(f"{BASE}/threads/{THREAD}/runs/stream", body=events, content_type="text/event-stream")
    with pytest.raises(ThreadResumptionError, match="__interrupt__ is not a list of objects"):
        client.review(
            THREAD,
            "agent",
            "rev",
            interrupt_id=IID,
            tool_calls=[{"id": "c-1", "action": "approve"}],
            pending=review,
        )


def test_nothing_here_raises_anything_but_the_packages_errors(mock, client):
    """A sweep of junk at every read: only NitroAssistantsError comes out."""
    junk = [DEEP, "<html>", "[]", '"s"', "null", json.dumps({"messages": "x", "__interrupt__": 5})]
    for body in junk:
        with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
            rsps.add("POST", WAIT, body=body, content_type="application/json")
            rsps.add(
                "GET", f"{BASE}/threads/{THREAD}/state", body=body, content_type="application/json"
            )
            rsps.add(
                "GET", f"{BASE}/threads/{THREAD}/runs", body=body, content_type="application/json"
            )
            for action in (
                lambda: client.run(THREAD, "agent", USER, known_thread=True),
                lambda: client.thread_state(THREAD),
                lambda: client.under_review(THREAD),
                lambda: client.thread_messages(THREAD),
                lambda: client.list_runs(THREAD),
            ):
                with contextlib.suppress(NitroAssistantsError):
                    action()
