"""Exact requests the client sends (``responses``): runs, thread initialization, the resume, auth."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import responses

from nitro_assistants.client import Assistants, Registry, Resume, ThreadInitializationError

BASE = "http://assistants.test"
KEY = "k"
THREAD = "0b7e2a55-7c1e-4a8e-9a57-1d2f3b4c5d6e"
THREAD_2 = "9c0f1e2d-3b4a-4c5d-8e6f-7a8b9c0d1e2f"
ASSISTANT = "3f2c1b0a-9e8d-4c7b-a6f5-e4d3c2b1a090"
INTERRUPT = "0123456789abcdef0123456789abcdef"
WHEN = "2026-10-18T14:03:00Z"

USER = {"role": "user", "content": "How are you?"}
HISTORY = [
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there!"},
    {"role": "user", "content": "Can I move my appointment?"},
]
FINAL = {"messages": [{"type": "ai", "id": "ai-1", "content": "Fine, thanks!"}]}


@pytest.fixture
def mock():
    with responses.RequestsMock(assert_all_requests_are_fired=True) as rsps:
        yield rsps


@pytest.fixture
def client():
    return Assistants(BASE, KEY, user_id="u1", backoff=0)


def body(call):
    return json.loads(call.request.body)


def wait_url(thread=THREAD):
    return f"{BASE}/threads/{thread}/runs/wait"


def run_body(message, context=None, **extra):
    meta = {"user_id": "u1"}
    return {
        "assistant_id": ASSISTANT,
        "input": {"messages": [message]},
        "context": context or {},
        "metadata": meta,
        "config": {"metadata": meta},
        **extra,
    }


# -- run ------------------------------------------------------------------------------------


def test_run_on_known_thread_is_one_request(mock, client):
    mock.post(
        wait_url(),
        json=FINAL,
        headers={"Content-Location": f"/threads/{THREAD}/runs/run-1"},
    )
    result = client.run(THREAD, ASSISTANT, [*HISTORY, USER], known_thread=True)
    assert len(mock.calls) == 1
    assert body(mock.calls[0]) == run_body(USER)
    assert result.reply == "Fine, thanks!"
    assert result.run_id == "run-1"
    assert client.transport.requests_sent == 1


def test_run_sends_context_and_merges_metadata(mock, client):
    mock.post(wait_url(), json=FINAL)
    client.run(
        THREAD,
        ASSISTANT,
        [USER],
        context={"first_name": "Ann"},
        known_thread=True,
        metadata={"run_key": "r-9"},
    )
    sent = body(mock.calls[0])
    assert sent["context"] == {"first_name": "Ann"}
    assert sent["metadata"] == {"user_id": "u1", "run_key": "r-9"}
    assert sent["config"] == {"metadata": {"user_id": "u1", "run_key": "r-9"}}


def test_context_none_is_sent_as_empty_object(mock, client):
    mock.post(wait_url(), json=FINAL)
    client.run(THREAD, ASSISTANT, [USER], context=None, known_thread=True)
    assert body(mock.calls[0])["context"] == {}


def test_json_content_type_and_accept(mock, client):
    mock.post(wait_url(), json=FINAL)
    client.run(THREAD, ASSISTANT, [USER], known_thread=True)
    headers = mock.calls[0].request.headers
    assert headers["Content-Type"] == "application/json"
    assert headers["Accept"] == "application/json"


def test_first_run_with_history_creates_and_seeds_in_one_request(mock, client):
    mock.get(f"{BASE}/assistants/{ASSISTANT}", json={"graph_id": "confirmation-agent"})
    mock.post(f"{BASE}/threads", json={"thread_id": THREAD})
    mock.post(wait_url(), json=FINAL)
    client.run(THREAD, ASSISTANT, [*HISTORY, USER])
    assert [(c.request.method, c.request.url) for c in mock.calls] == [
        ("GET", f"{BASE}/assistants/{ASSISTANT}"),
        ("POST", f"{BASE}/threads"),
        ("POST", wait_url()),
    ]
    assert body(mock.calls[1]) == {
        "thread_id": THREAD,
        "if_exists": "raise",
        "metadata": {"graph_id": "confirmation-agent", "user_id": "u1"},
        "supersteps": [{"updates": [{"values": {"messages": HISTORY}, "as_node": "model"}]}],
    }
    # The thread exists now: the run does not ask to create it.
    assert body(mock.calls[2]) == run_body(USER)


def test_graph_id_is_cached_per_client(mock, client):
    mock.get(f"{BASE}/assistants/{ASSISTANT}", json={"graph_id": "agent"})
    mock.post(f"{BASE}/threads", json={})
    mock.post(wait_url(), json=FINAL)
    mock.post(wait_url(THREAD_2), json=FINAL)
    client.run(THREAD, ASSISTANT, [*HISTORY, USER])
    client.run(THREAD_2, ASSISTANT, [*HISTORY, USER])
    gets = [c for c in mock.calls if c.request.method == "GET"]
    assert len(gets) == 1
    assert len(mock.calls) == 5


def test_existing_thread_409_skips_seeding(mock, client):
    mock.get(f"{BASE}/assistants/{ASSISTANT}", json={"graph_id": "agent"})
    mock.post(
        f"{BASE}/threads",
        status=409,
        json={"detail": f"Thread with ID {THREAD} already exists"},
    )
    mock.post(wait_url(), json=FINAL)
    result = client.run(THREAD, ASSISTANT, [*HISTORY, USER])
    assert [c.request.url for c in mock.calls][-1] == wait_url()
    assert len(mock.calls) == 3
    assert result.reply == "Fine, thanks!"


def test_single_message_on_unknown_thread_creates_it_with_the_run(mock, client):
    mock.post(wait_url(), json=FINAL)
    client.run(THREAD, ASSISTANT, [USER])
    assert len(mock.calls) == 1
    assert body(mock.calls[0]) == run_body(USER, if_not_exists="create")


CUSTOMER = {"customer_name": "Jane Doe", "phone": "+1 555 0100", "user_id": "spoofed"}


def test_thread_metadata_goes_on_the_thread_the_run_creates(mock, client):
    mock.post(wait_url(), json=FINAL)
    mock.post(f"{BASE}/threads/{THREAD}/runs", json={"run_id": "r1", "status": "pending"})
    client.run(THREAD, ASSISTANT, [USER], metadata={"nitro_run_id": "n1"}, thread_metadata=CUSTOMER)
    client.start_run(THREAD, ASSISTANT, [USER], thread_metadata=CUSTOMER)
    # No request of its own: the run that creates the thread carries it (the server copies a
    # creating run's metadata onto the thread). The client's own keys win over the host's.
    meta = {"customer_name": "Jane Doe", "phone": "+1 555 0100", "user_id": "u1"}
    assert len(mock.calls) == 2
    assert body(mock.calls[0]) == {
        **run_body(USER, if_not_exists="create"),
        "metadata": {**meta, "nitro_run_id": "n1"},
        "config": {"metadata": {**meta, "nitro_run_id": "n1"}},
    }
    assert body(mock.calls[1])["metadata"] == body(mock.calls[1])["config"]["metadata"] == meta


def test_thread_metadata_goes_in_the_request_creating_a_seeded_thread(mock, client):
    mock.get(f"{BASE}/assistants/{ASSISTANT}", json={"graph_id": "agent"})
    mock.post(f"{BASE}/threads", json={"thread_id": THREAD})
    mock.post(wait_url(), json=FINAL)
    mock.post(wait_url(), json=FINAL)
    client.run(THREAD, ASSISTANT, [*HISTORY, USER], thread_metadata=CUSTOMER)
    assert body(mock.calls[1])["metadata"] == {
        "customer_name": "Jane Doe",
        "phone": "+1 555 0100",
        "graph_id": "agent",
        "user_id": "u1",
    }
    assert body(mock.calls[2]) == run_body(USER)  # the run on the created thread: as before
    # A thread the caller knows is there is not created: its metadata is not sent again.
    client.run(THREAD, ASSISTANT, [USER], known_thread=True, thread_metadata=CUSTOMER)
    assert body(mock.calls[3]) == run_body(USER)


def test_update_thread_merges_its_metadata_and_a_missing_thread_says_so(mock, client):
    mock.patch(f"{BASE}/threads/{THREAD}", json={"thread_id": THREAD})
    mock.patch(f"{BASE}/threads/{THREAD_2}", status=404, json={"detail": "Thread not found"})
    assert client.update_thread(THREAD, {"order_id": 1234}) is True
    assert body(mock.calls[0]) == {"metadata": {"order_id": 1234}}
    assert client.update_thread(THREAD_2, {"order_id": 1234}) is False


def test_graph_id_given_as_assistant_is_used_without_lookup(mock):
    client = Assistants(BASE, KEY, user_id="u1", backoff=0)
    mock.post(f"{BASE}/threads", json={})
    mock.post(wait_url(), json=FINAL)
    client.run(THREAD, "agent", [*HISTORY, USER])
    assert [c.request.method for c in mock.calls] == ["POST", "POST"]
    assert body(mock.calls[0])["metadata"]["graph_id"] == "agent"
    assert body(mock.calls[1])["assistant_id"] == "agent"


def test_seed_without_as_node_posts_the_state_separately(mock):
    client = Assistants(BASE, KEY, user_id="u1", backoff=0, seed_as_node=None)
    mock.get(f"{BASE}/assistants/{ASSISTANT}", json={"graph_id": "agent"})
    mock.post(f"{BASE}/threads", json={})
    mock.post(f"{BASE}/threads/{THREAD}/state", json={"checkpoint": {}})
    mock.post(wait_url(), json=FINAL)
    client.run(THREAD, ASSISTANT, [*HISTORY, USER])
    assert [c.request.url for c in mock.calls] == [
        f"{BASE}/assistants/{ASSISTANT}",
        f"{BASE}/threads",
        f"{BASE}/threads/{THREAD}/state",
        wait_url(),
    ]
    assert body(mock.calls[1]) == {
        "thread_id": THREAD,
        "if_exists": "raise",
        "metadata": {"graph_id": "agent", "user_id": "u1"},
    }
    assert body(mock.calls[2]) == {"values": {"messages": HISTORY}}


def test_failed_seed_deletes_the_thread_and_reports_the_detail(mock):
    client = Assistants(BASE, KEY, user_id="u1", backoff=0, seed_as_node=None)
    mock.get(f"{BASE}/assistants/{ASSISTANT}", json={"graph_id": "agent"})
    mock.post(f"{BASE}/threads", json={})
    mock.post(f"{BASE}/threads/{THREAD}/state", status=400, json={"detail": "Graph not found: x"})
    mock.delete(f"{BASE}/threads/{THREAD}", status=204)
    with pytest.raises(ThreadInitializationError, match="Graph not found: x") as caught:
        client.run(THREAD, ASSISTANT, [*HISTORY, USER])
    assert caught.value.status_code == 400
    assert caught.value.transient is False
    assert [c.request.method for c in mock.calls] == ["GET", "POST", "POST", "DELETE"]
    assert not any(c.request.url == wait_url() for c in mock.calls)


def test_failed_create_and_seed_reports_the_detail_and_runs_nothing(mock, client):
    mock.get(f"{BASE}/assistants/{ASSISTANT}", json={"graph_id": "agent"})
    mock.post(f"{BASE}/threads", status=422, json={"detail": "bad superstep"})
    mock.delete(f"{BASE}/threads/{THREAD}", status=404)
    with pytest.raises(ThreadInitializationError, match="bad superstep"):
        client.run(THREAD, ASSISTANT, [*HISTORY, USER])
    assert not any(c.request.url == wait_url() for c in mock.calls)


def test_assistant_without_graph_is_an_initialization_error(mock, client):
    mock.get(f"{BASE}/assistants/{ASSISTANT}", json={"assistant_id": ASSISTANT})
    with pytest.raises(ThreadInitializationError, match="has no graph"):
        client.run(THREAD, ASSISTANT, [*HISTORY, USER])
    assert len(mock.calls) == 1


def test_unknown_assistant_404_is_an_initialization_error(mock, client):
    mock.get(f"{BASE}/assistants/{ASSISTANT}", status=404, json={"detail": "Assistant not found"})
    with pytest.raises(ThreadInitializationError, match="Assistant not found") as caught:
        client.run(THREAD, ASSISTANT, [*HISTORY, USER])
    assert caught.value.status_code == 404


# -- auth -----------------------------------------------------------------------------------


def test_bearer_auth_header(mock):
    mock.post(wait_url(), json=FINAL)
    Assistants(BASE, KEY, auth="bearer").run(THREAD, ASSISTANT, [USER], known_thread=True)
    headers = mock.calls[0].request.headers
    assert headers["Authorization"] == "Bearer k"
    assert "x-api-key" not in headers


def test_x_api_key_auth_header(mock):
    mock.post(wait_url(), json=FINAL)
    Assistants(BASE, KEY, auth="x-api-key").run(THREAD, ASSISTANT, [USER], known_thread=True)
    headers = mock.calls[0].request.headers
    assert headers["x-api-key"] == "k"
    assert "Authorization" not in headers


def test_trailing_slash_of_base_url_is_dropped(mock):
    mock.post(wait_url(), json=FINAL)
    Assistants(BASE + "/", KEY).run(THREAD, ASSISTANT, [USER], known_thread=True)
    assert mock.calls[0].request.url == wait_url()


# -- the review resume ----------------------------------------------------------------------

CALL = {
    "id": "call-1",
    "name": "reschedule_appointment",
    "args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"},
}
TOOL_PAUSE_STATE = {
    "values": {
        "messages": [
            {"type": "human", "id": "human-1", "content": "Can I move it to Tuesday?"},
            {"type": "ai", "id": "ai-1", "content": "Let me do that.", "tool_calls": [CALL]},
        ]
    },
    "next": ["HumanInTheLoopMiddleware.after_model"],
    "interrupts": [
        {
            "id": INTERRUPT,
            "value": {
                "action_requests": [
                    {"name": CALL["name"], "args": CALL["args"], "description": "Move it?"}
                ],
                "review_configs": [
                    {
                        "action_name": CALL["name"],
                        "allowed_decisions": ["approve", "edit", "reject", "respond"],
                    }
                ],
            },
        }
    ],
}


def sse(*events):
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


def checkpoint(values, next_nodes=(), step=1):
    # A "checkpoints" stream event as the server sends it: the state and what runs next.
    configurable = {"thread_id": THREAD, "checkpoint_ns": ""}
    return {
        "config": {"configurable": {**configurable, "checkpoint_id": f"cp-{step}"}},
        "parent_config": {"configurable": {**configurable, "checkpoint_id": f"cp-{step - 1}"}},
        "values": values,
        "metadata": {"source": "loop", "step": step},
        "next": list(next_nodes),
        "tasks": [{"id": f"task-{node}", "name": node, "interrupts": []} for node in next_nodes],
    }


RESUMED = [
    {"type": "human", "id": "human-1", "content": "Can I move it to Tuesday?"},
    {"type": "ai", "id": "ai-1", "content": "Let me do that.", "tool_calls": [CALL]},
    {"type": "tool", "id": "tool-1", "tool_call_id": "call-1", "content": "moved"},
    {"type": "ai", "id": "ai-2", "content": "Done! moved"},
]
RESUME_STREAM = sse(
    ("metadata", {"run_id": "run-2", "attempt": 1}),
    ("checkpoints", checkpoint({"messages": RESUMED[:2]}, ["tools"], step=3)),
    ("updates", {"tools": {"messages": [RESUMED[2]]}}),
    ("checkpoints", checkpoint({"messages": RESUMED[:3]}, ["model"], step=4)),
    ("updates", {"model": {"messages": [RESUMED[3]]}}),
    ("checkpoints", checkpoint({"messages": RESUMED}, [], step=5)),
)


def test_review_resume_body(mock, client):
    mock.get(f"{BASE}/threads/{THREAD}/state", json=TOOL_PAUSE_STATE)
    mock.post(
        f"{BASE}/threads/{THREAD}/runs/stream",
        body=RESUME_STREAM,
        content_type="text/event-stream",
    )
    result = client.review(
        THREAD,
        ASSISTANT,
        reviewer_id="jane@example.com",
        interrupt_id=INTERRUPT,
        tool_calls=[{"id": "call-1", "action": "edit", "args": {"time": "11:00"}}],
        reviewed_at=datetime(2026, 10, 18, 14, 3, tzinfo=UTC),
        context={"first_name": "Ann"},
    )
    assert [c.request.method for c in mock.calls] == ["GET", "POST"]
    meta = {"user_id": "u1", "reviewer_id": "jane@example.com", "reviewed_at": WHEN}
    assert body(mock.calls[1]) == {
        "assistant_id": ASSISTANT,
        "command": {
            "resume": {
                INTERRUPT: {
                    "decisions": [
                        {
                            "type": "edit",
                            "edited_action": {
                                "name": "reschedule_appointment",
                                "args": {"appointment_id": 42, "day": "Tuesday", "time": "11:00"},
                            },
                            "reviewer_id": "jane@example.com",
                            "reviewed_at": WHEN,
                        }
                    ]
                }
            }
        },
        "context": {"first_name": "Ann"},
        "metadata": meta,
        "config": {"metadata": meta},
        "multitask_strategy": "reject",
        "stream_mode": ["checkpoints", "updates"],
    }
    assert "input" not in body(mock.calls[1])
    assert result.reply == "Done! moved"
    assert result.interrupted is False
    assert result.run_id == "run-2"


EDIT_CALL = {
    "reviewer_id": "jane@example.com",
    "interrupt_id": INTERRUPT,
    "tool_calls": [{"id": "call-1", "action": "edit", "args": {"time": "11:00"}}],
    "reviewed_at": WHEN,
    "context": {"first_name": "Ann"},
}


def test_review_takes_a_resume_or_the_keywords_it_took_before(mock, client):
    """A review's arguments are one :class:`Resume`; the keywords (and the reviewer's id as the
    third argument) documented before it build the same one, so each call sends the same run,
    from the client and from a registry's assistant alike."""
    mock.get(f"{BASE}/threads/{THREAD}/state", json=TOOL_PAUSE_STATE)
    mock.post(f"{BASE}/threads/{THREAD}/runs/stream", body=RESUME_STREAM)
    fields = {k: v for k, v in EDIT_CALL.items() if k != "reviewer_id"}
    assistant = Registry(
        {
            "base_url": BASE,
            "user_id": "u1",
            "definitions": {"vc": {"api_key": KEY, "assistant_id": ASSISTANT}},
        }
    )["vc"]
    calls = [
        lambda: client.review(THREAD, ASSISTANT, Resume(**EDIT_CALL)),
        lambda: client.review(thread_id=THREAD, assistant_id=ASSISTANT, resume=Resume(**EDIT_CALL)),
        lambda: client.review(thread_id=THREAD, assistant_id=ASSISTANT, **EDIT_CALL),
        lambda: client.review(THREAD, ASSISTANT, "jane@example.com", **fields),
        lambda: assistant.review(THREAD, Resume(**EDIT_CALL)),
        lambda: assistant.review(thread_id=THREAD, **EDIT_CALL),
    ]
    for call in calls:
        assert call().reply == "Done! moved"
    resumes = [body(c) for c in mock.calls if c.request.method == "POST"]
    assert len(resumes) == len(calls)
    assert all(sent == resumes[0] for sent in resumes)
    assert resumes[0]["command"]["resume"][INTERRUPT]["decisions"][0]["edited_action"]["args"] == {
        "appointment_id": 42,
        "day": "Tuesday",
        "time": "11:00",
    }
    assert resumes[0]["context"] == {"first_name": "Ann"}
    assert resumes[0]["metadata"]["reviewer_id"] == "jane@example.com"


@pytest.mark.parametrize(
    ("resume", "keywords", "problem"),
    [
        (Resume(reviewer_id="jane", answer=1), {"interrupt_id": INTERRUPT}, "not both"),
        (None, {"reviewer_id": "jane", "tool_call": []}, "Unexpected arguments: tool_call"),
        ("jane", {"reviewer_id": "jane", "answer": 1}, "reviewer_id is given twice"),
        (None, {"answer": 1}, "needs a Resume, or reviewer_id"),
    ],
)
def test_a_review_called_wrongly_is_refused_before_any_request(
    mock, client, resume, keywords, problem
):
    for method in (client.review, client.start_review):
        with pytest.raises(TypeError, match=problem):
            method(THREAD, ASSISTANT, resume, **keywords)
    assert len(mock.calls) == 0


@pytest.mark.parametrize(
    ("review", "decision"),
    [
        ({"action": "approve"}, {"type": "approve"}),
        ({"action": "reject"}, {"type": "reject"}),
        # The reason goes to the resume's metadata, never to the model (Ruby 4.1 #review).
        ({"action": "reject", "message": "wrong day"}, {"type": "reject"}),
        ({"action": "respond", "message": "Use Wed"}, {"type": "respond", "message": "Use Wed"}),
    ],
)
def test_review_decision_types(mock, client, review, decision):
    mock.get(f"{BASE}/threads/{THREAD}/state", json=TOOL_PAUSE_STATE)
    mock.post(f"{BASE}/threads/{THREAD}/runs/stream", body=RESUME_STREAM)
    client.review(
        THREAD,
        ASSISTANT,
        reviewer_id="jane",
        tool_calls={"call-1": review},
        reviewed_at=WHEN,
    )
    sent = body(mock.calls[1])["command"]["resume"][INTERRUPT]["decisions"]
    assert sent == [{**decision, "reviewer_id": "jane", "reviewed_at": WHEN}]
    assert body(mock.calls[1])["context"] == {}
    metadata = body(mock.calls[1])["config"]["metadata"]
    if review.get("message") and review["action"] == "reject":
        assert metadata["review_messages"] == {"call-1": "wrong day"}
    else:
        assert "review_messages" not in metadata


def test_review_reviewed_at_defaults_to_now_in_utc(mock, client):
    mock.get(f"{BASE}/threads/{THREAD}/state", json=TOOL_PAUSE_STATE)
    mock.post(f"{BASE}/threads/{THREAD}/runs/stream", body=RESUME_STREAM)
    before = datetime.now(UTC).replace(microsecond=0)
    client.review(
        THREAD, ASSISTANT, reviewer_id="jane", tool_calls=[{"id": "call-1", "action": "approve"}]
    )
    stamp = body(mock.calls[1])["config"]["metadata"]["reviewed_at"]
    assert stamp.endswith("Z")
    assert datetime.fromisoformat(stamp.replace("Z", "+00:00")) >= before


REPLY_ID = "fedcba9876543210fedcba9876543210"
REPLY_PAUSE_STATE = {
    "values": {
        "messages": [
            {"type": "human", "id": "human-1", "content": "Tuesday?"},
            {
                "type": "ai",
                "id": "ai-3",
                "content": "Done! See you Tuesday at 10.",
                "response_metadata": {"review": {"type": "pending"}},
            },
        ]
    },
    "interrupts": [
        {
            "id": REPLY_ID,
            "value": {
                "action_requests": [
                    {
                        "name": "__reply__",
                        "args": {"content": "Done! See you Tuesday at 10."},
                        "description": "Review this SMS before it is sent",
                    }
                ],
                "review_configs": [
                    {"action_name": "__reply__", "allowed_decisions": ["approve", "edit", "reject"]}
                ],
            },
        }
    ],
}


def test_reply_edit_resume_body(mock, client):
    mock.get(f"{BASE}/threads/{THREAD}/state", json=REPLY_PAUSE_STATE)
    edited = {
        "type": "ai",
        "id": "ai-3",
        "content": "Booked for Tuesday at 10am.",
        "response_metadata": {
            "review": {"type": "edited", "reviewer_id": "jane", "reviewed_at": WHEN},
            "delivery": {"status": "delivered", "tool": "send_sms", "attempts": 1},
        },
    }
    mock.post(
        f"{BASE}/threads/{THREAD}/runs/stream",
        body=sse(
            ("metadata", {"run_id": "run-3"}),
            ("updates", {"ReviewMiddleware.after_agent": {"messages": [edited]}}),
            (
                "checkpoints",
                checkpoint({"messages": [REPLY_PAUSE_STATE["values"]["messages"][0], edited]}),
            ),
        ),
    )
    result = client.review(
        THREAD,
        ASSISTANT,
        reviewer_id="jane",
        interrupt_id=REPLY_ID,
        reply={"action": "edit", "content": "Booked for Tuesday at 10am."},
        reviewed_at=WHEN,
    )
    assert body(mock.calls[1])["command"] == {
        "resume": {
            REPLY_ID: {
                "decisions": [
                    {
                        "type": "edit",
                        "edited_action": {
                            "name": "__reply__",
                            "args": {"content": "Booked for Tuesday at 10am."},
                        },
                        "reviewer_id": "jane",
                        "reviewed_at": WHEN,
                    }
                ]
            }
        }
    }
    assert result.reply == "Booked for Tuesday at 10am."
    assert result.delivery is not None
    assert result.delivery.delivered


PER_CALL_IDS = ["1" * 32, "2" * 32]


def per_call_interrupt(interrupt_id, call):
    return {
        "id": interrupt_id,
        "value": {
            "type": "tool_approval",
            "tool_call_id": call["id"],
            "name": call["name"],
            "args": call["args"],
            "description": "hold",
        },
    }


def test_per_call_resume_answers_every_interrupt_without_wrapper(mock, client):
    calls = [
        {"id": "c-1", "name": "cancel_appointment", "args": {"appointment_id": 1}},
        {"id": "c-2", "name": "cancel_appointment", "args": {"appointment_id": 2}},
    ]
    state = {
        "values": {
            "messages": [
                {"type": "human", "id": "h", "content": "cancel both"},
                {"type": "ai", "id": "a", "content": "", "tool_calls": calls},
            ]
        },
        "interrupts": [per_call_interrupt(i, c) for i, c in zip(PER_CALL_IDS, calls, strict=True)],
    }
    mock.get(f"{BASE}/threads/{THREAD}/state", json=state)
    mock.post(f"{BASE}/threads/{THREAD}/runs/stream", body=RESUME_STREAM)
    client.review(
        THREAD,
        ASSISTANT,
        reviewer_id="jane",
        tool_calls=[{"id": "c-2", "action": "reject"}, {"id": "c-1", "action": "approve"}],
        reviewed_at=WHEN,
    )
    assert body(mock.calls[1])["command"]["resume"] == {
        PER_CALL_IDS[0]: {"type": "approve", "reviewer_id": "jane", "reviewed_at": WHEN},
        PER_CALL_IDS[1]: {"type": "reject", "reviewer_id": "jane", "reviewed_at": WHEN},
    }


# -- streams and background runs ------------------------------------------------------------


def test_stream_body_and_events(mock, client):
    mock.post(
        f"{BASE}/threads/{THREAD}/runs/stream",
        body=sse(("metadata", {"run_id": "r-1"}), ("values", FINAL)) + ": done\n\n",
        content_type="text/event-stream",
    )
    events = list(client.stream(THREAD, ASSISTANT, [USER], stream_mode=["values", "updates"]))
    assert body(mock.calls[0]) == run_body(
        USER, if_not_exists="create", stream_mode=["values", "updates"]
    )
    assert [(e.event, e.data) for e in events] == [
        ("metadata", {"run_id": "r-1"}),
        ("values", FINAL),
    ]


def test_stream_with_a_command_does_not_create_the_thread(mock, client):
    mock.post(f"{BASE}/threads/{THREAD}/runs/stream", body="")
    command = {"resume": {INTERRUPT: {"decisions": [{"type": "approve"}]}}}
    assert list(client.stream(THREAD, ASSISTANT, command=command, stream_mode="updates")) == []
    sent = body(mock.calls[0])
    assert sent["command"] == command
    assert sent["input"] is None
    assert sent["stream_mode"] == ["updates"]
    assert "if_not_exists" not in sent


def test_start_run_body(mock, client):
    mock.post(
        f"{BASE}/threads/{THREAD}/runs",
        json={"run_id": "r-7", "status": "pending"},
    )
    run = client.start_run(
        THREAD, ASSISTANT, [USER], metadata={"run_key": "k-1"}, webhook="https://site/hook"
    )
    assert run == {"run_id": "r-7", "status": "pending"}
    meta = {"user_id": "u1", "run_key": "k-1"}
    assert body(mock.calls[0]) == {
        "assistant_id": ASSISTANT,
        "input": {"messages": [USER]},
        "context": {},
        "metadata": meta,
        "config": {"metadata": meta},
        "webhook": "https://site/hook",
        "if_not_exists": "create",
    }


def test_join_run_reads_the_pause_from_the_state(mock, client):
    held = {"id": "call-1", "name": "cancel", "args": {"appointment_id": 1}}
    messages = [
        {"type": "human", "id": "h-1", "content": "cancel"},
        {"type": "ai", "id": "a-1", "content": "", "tool_calls": [held]},
    ]
    interrupt = {
        "id": INTERRUPT,
        "value": {
            "action_requests": [{"name": "cancel", "args": held["args"]}],
            "review_configs": [{"action_name": "cancel", "allowed_decisions": ["approve"]}],
        },
    }
    mock.get(f"{BASE}/threads/{THREAD}/runs/r-7/join", json={"messages": messages})
    mock.get(
        f"{BASE}/threads/{THREAD}/state",
        json={"values": {"messages": messages}, "interrupts": [interrupt]},
    )
    result = client.join_run(THREAD, "r-7")
    assert result.interrupted is True
    assert result.review.tool_calls[0]["id"] == "call-1"
    assert result.run_id == "r-7"
