"""Error paths a real server cannot be made to produce, and the API key never leaking."""

from __future__ import annotations

import json
import logging

import pytest
import requests
import responses

from nitro_assistants.client import (
    Assistants,
    ConfigurationError,
    Registry,
    ReviewSupersededError,
    RunError,
    ThreadInitializationError,
    ThreadResumptionError,
    ThreadStateError,
)

BASE = "http://assistants.test"
KEY = "sk-live-SECRET-0123456789"
THREAD = "0b7e2a55-7c1e-4a8e-9a57-1d2f3b4c5d6e"
ASSISTANT = "3f2c1b0a-9e8d-4c7b-a6f5-e4d3c2b1a090"
INTERRUPT = "0123456789abcdef0123456789abcdef"
USER = {"role": "user", "content": "Hi"}
HISTORY = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
STATE_URL = f"{BASE}/threads/{THREAD}/state"
WAIT_URL = f"{BASE}/threads/{THREAD}/runs/wait"
STREAM_URL = f"{BASE}/threads/{THREAD}/runs/stream"


@pytest.fixture
def mock():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


@pytest.fixture
def client():
    return Assistants(BASE, KEY, user_id="u1", backoff=0)


@pytest.fixture(autouse=True)
def _debug_logs(caplog):
    # tests/settings.py sets the package logger to WARNING: open it (and the root) to DEBUG.
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="nitro_assistants")
    yield
    # Whatever the test did, no log record carries the key.
    for record in caplog.records:
        assert KEY not in record.getMessage()
        assert KEY not in str(record.args)


def assert_no_key(*texts):
    for text in texts:
        assert KEY not in text


def assert_error_hides_key(exc, caplog):
    assert_no_key(str(exc), repr(exc), *map(str, exc.args))
    assert_no_key(*(r.getMessage() for r in caplog.records))


# -- transport failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (requests.exceptions.ReadTimeout(f"read timed out, {KEY}"), "timed out"),
        (requests.exceptions.ConnectTimeout("connect timed out"), "timed out"),
        (requests.exceptions.ConnectionError(f"refused, {KEY}"), "connection failed"),
    ],
)
def test_run_transport_failure_is_transient_and_never_retried(
    mock, client, caplog, failure, reason
):
    mock.post(WAIT_URL, body=failure)
    with pytest.raises(RunError, match=reason) as caught:
        client.run(THREAD, ASSISTANT, [USER], known_thread=True)
    assert caught.value.transient is True
    assert caught.value.status_code is None
    assert len(mock.calls) == 1
    assert client.transport.requests_sent == 1
    assert caught.value.__cause__ is None
    assert_error_hides_key(caught.value, caplog)


@pytest.mark.parametrize("status", [502, 503, 504])
def test_run_5xx_is_not_retried(mock, client, caplog, status):
    mock.post(WAIT_URL, status=status, body="upstream gone")
    with pytest.raises(RunError, match="upstream gone") as caught:
        client.run(THREAD, ASSISTANT, [USER], known_thread=True)
    assert len(mock.calls) == 1
    assert caught.value.transient is True
    assert caught.value.status_code == status


def test_get_retried_on_connection_errors_then_succeeds(mock, client, caplog):
    mock.get(STATE_URL, body=requests.exceptions.ConnectionError("refused"))
    mock.get(STATE_URL, body=requests.exceptions.ReadTimeout("slow"))
    mock.get(STATE_URL, json={"values": {"messages": []}})
    assert client.thread_state(THREAD) == {"values": {"messages": []}}
    assert len(mock.calls) == 3
    assert client.transport.requests_sent == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert_no_key(*(r.getMessage() for r in caplog.records))


@pytest.mark.parametrize("status", [502, 503, 504])
def test_get_retried_on_transient_status(mock, client, status):
    mock.get(STATE_URL, status=status, body="busy")
    mock.get(STATE_URL, json={"values": {}})
    assert client.thread_state(THREAD) == {"values": {}}
    assert len(mock.calls) == 2


def test_get_gives_up_after_retries_with_a_transient_error(mock, client, caplog):
    mock.get(STATE_URL, body=requests.exceptions.ConnectionError(f"refused {KEY}"))
    with pytest.raises(ThreadStateError, match="connection failed") as caught:
        client.thread_state(THREAD)
    assert len(mock.calls) == 4  # 1 + retries=3
    assert caught.value.transient is True
    assert_error_hides_key(caught.value, caplog)


def test_get_gives_up_on_persistent_503_with_its_detail(mock, client):
    mock.get(STATE_URL, status=503, json={"detail": "overloaded"})
    with pytest.raises(ThreadStateError, match="overloaded") as caught:
        client.thread_state(THREAD)
    assert len(mock.calls) == 4
    assert caught.value.transient is True
    assert caught.value.status_code == 503


def test_backoff_doubles_between_attempts(mock, monkeypatch):
    slept = []
    monkeypatch.setattr("nitro_assistants.client.http.time.sleep", slept.append)
    mock.get(STATE_URL, status=503)
    client = Assistants(BASE, KEY, retries=3, backoff=0.5)
    with pytest.raises(ThreadStateError):
        client.thread_state(THREAD)
    assert len(mock.calls) == 4
    assert len(slept) == 3
    # Exponential with up to 50 % jitter: 0.5, 1, 2 seconds (plus jitter).
    for delay, base in zip(slept, (0.5, 1.0, 2.0), strict=True):
        assert base <= delay <= base * 1.5


def test_post_runs_wait_never_slept_or_retried(mock, monkeypatch):
    slept = []
    monkeypatch.setattr("nitro_assistants.client.http.time.sleep", slept.append)
    mock.post(WAIT_URL, body=requests.exceptions.ConnectionError("reset"))
    with pytest.raises(RunError) as caught:
        Assistants(BASE, KEY, backoff=1.0).run(THREAD, ASSISTANT, [USER], known_thread=True)
    assert caught.value.transient is True
    assert len(mock.calls) == 1
    assert slept == []


def test_retries_zero_sends_once(mock):
    mock.get(STATE_URL, status=502)
    client = Assistants(BASE, KEY, retries=0, backoff=0)
    with pytest.raises(ThreadStateError):
        client.thread_state(THREAD)
    assert len(mock.calls) == 1


def test_get_not_retried_on_4xx_or_500(mock, client):
    mock.get(STATE_URL, status=500, body="Internal Server Error: boom")
    with pytest.raises(ThreadStateError, match="Internal Server Error: boom") as caught:
        client.thread_state(THREAD)
    assert len(mock.calls) == 1
    assert caught.value.transient is False
    assert caught.value.status_code == 500


# -- server errors and bodies ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "payload", "message"),
    [
        (404, {"detail": "Thread not found"}, "Thread not found"),
        (422, {"detail": [{"loc": ["body"], "msg": "bad"}]}, "bad"),
        (409, {"detail": "Thread is busy"}, "Thread is busy"),
        (401, {"detail": "Invalid API key"}, "Invalid API key"),
    ],
)
def test_run_4xx_carries_the_detail_and_status(mock, client, caplog, status, payload, message):
    mock.post(WAIT_URL, status=status, json=payload)
    with pytest.raises(RunError, match=message) as caught:
        client.run(THREAD, ASSISTANT, [USER], known_thread=True)
    assert caught.value.status_code == status
    assert caught.value.transient is False
    assert_error_hides_key(caught.value, caplog)


def test_run_200_with_html_is_a_clear_error(mock, client):
    mock.post(WAIT_URL, body="<html><body>Login</body></html>", content_type="text/html")
    with pytest.raises(RunError, match="non-JSON body: '<html><body>Login") as caught:
        client.run(THREAD, ASSISTANT, [USER], known_thread=True)
    assert caught.value.status_code == 200


def test_run_200_with_a_json_list_is_a_clear_error(mock, client):
    mock.post(WAIT_URL, json=[1, 2])
    with pytest.raises(RunError, match="list, not an object"):
        client.run(THREAD, ASSISTANT, [USER], known_thread=True)


@pytest.mark.parametrize("blank", ["\n\n", "", " \r\n\n"])
def test_run_200_closed_before_the_result_is_transient(mock, client, blank):
    # runs/wait sends blank lines while the run goes on: a stopping server cuts it there.
    mock.post(WAIT_URL, body=blank, content_type="application/json")
    with pytest.raises(RunError, match="closed the response before the run's result") as caught:
        client.run(THREAD, ASSISTANT, [USER], known_thread=True)
    assert caught.value.transient is True
    assert caught.value.status_code == 200
    assert [c.request.url for c in mock.calls] == [WAIT_URL]


@pytest.mark.parametrize("blank", ["\n\n", ""])
def test_join_run_200_closed_before_the_result_is_transient(mock, client, blank):
    join_url = f"{BASE}/threads/{THREAD}/runs/r-7/join"
    mock.get(join_url, body=blank, content_type="application/json")
    with pytest.raises(RunError, match="closed the response before the run's result") as caught:
        client.join_run(THREAD, "r-7")
    assert caught.value.transient is True
    assert caught.value.status_code == 200
    assert [c.request.url for c in mock.calls] == [join_url]


def test_run_500_with_text_reports_the_text(mock, client):
    mock.post(WAIT_URL, status=500, body="  Internal Server Error  ", content_type="text/plain")
    with pytest.raises(RunError) as caught:
        client.run(THREAD, ASSISTANT, [USER], known_thread=True)
    assert str(caught.value) == "Internal Server Error"
    assert caught.value.status_code == 500


def test_run_500_with_empty_body_reports_the_status_line(mock, client):
    mock.post(WAIT_URL, status=500, body="")
    with pytest.raises(RunError, match="HTTP 500"):
        client.run(THREAD, ASSISTANT, [USER], known_thread=True)


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        ({"error": "ValueError", "message": "x"}, "ValueError: x"),
        ({"error": "KeyError"}, "KeyError"),
        ({"message": "only the message"}, "only the message"),
        ({"error": "", "message": "x"}, "x"),
        ({}, "the run failed"),
        ("plain text", "plain text"),
    ],
)
def test_graph_failure_reported_in_a_200(mock, client, failure, message):
    mock.post(WAIT_URL, json={"__error__": failure})
    with pytest.raises(RunError) as caught:
        client.run(THREAD, ASSISTANT, [USER], known_thread=True)
    assert str(caught.value) == message
    assert caught.value.status_code == 200
    assert caught.value.transient is False


def test_empty_messages_fail_before_any_request(mock, client):
    with pytest.raises(RunError, match="at least one message"):
        client.run(THREAD, ASSISTANT, [])
    assert len(mock.calls) == 0


@pytest.mark.parametrize("thread_id", ["conv-123", "", "0b7e2a55-7c1e-4a8e-9a57"])
def test_thread_id_must_be_a_uuid_before_any_request(mock, client, thread_id):
    with pytest.raises(RunError, match="thread_id must be a UUID"):
        client.run(thread_id, ASSISTANT, [USER])
    with pytest.raises(ThreadStateError, match="thread_id must be a UUID"):
        client.thread_state(thread_id)
    with pytest.raises(ThreadStateError, match="thread_id must be a UUID"):
        client.under_review(thread_id)
    with pytest.raises(ThreadResumptionError, match="thread_id must be a UUID"):
        client.review(thread_id, ASSISTANT, "jane", tool_calls=[])
    assert len(mock.calls) == 0


def test_thread_initialization_transport_failure_is_transient(mock, client, caplog):
    mock.get(f"{BASE}/assistants/{ASSISTANT}", json={"graph_id": "agent"})
    mock.post(f"{BASE}/threads", body=requests.exceptions.ConnectionError(KEY))
    mock.delete(f"{BASE}/threads/{THREAD}", status=204)
    with pytest.raises(ThreadInitializationError) as caught:
        client.run(THREAD, ASSISTANT, [*HISTORY, USER])
    assert caught.value.transient is True
    assert not any(c.request.url == WAIT_URL for c in mock.calls)
    assert_error_hides_key(caught.value, caplog)


def test_thread_state_non_json(mock, client):
    mock.get(STATE_URL, body="<html>", content_type="text/html")
    with pytest.raises(ThreadStateError, match="thread state as a non-JSON body"):
        client.thread_state(THREAD)


# -- the resume -----------------------------------------------------------------------------

CALL = {"id": "call-1", "name": "cancel_appointment", "args": {"appointment_id": 1}}
MESSAGES = [
    {"type": "human", "id": "h-1", "content": "cancel"},
    {"type": "ai", "id": "a-1", "content": "", "tool_calls": [CALL]},
]
PAUSED = {
    "values": {"messages": MESSAGES},
    "interrupts": [
        {
            "id": INTERRUPT,
            "value": {
                "action_requests": [{"name": CALL["name"], "args": CALL["args"]}],
                "review_configs": [
                    {"action_name": CALL["name"], "allowed_decisions": ["approve", "reject"]}
                ],
            },
        }
    ],
}


def sse(*events):
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


def checkpoint(values, next_nodes=()):
    # A "checkpoints" stream event as the server sends it: the state and what runs next.
    return {
        "config": {"configurable": {"thread_id": THREAD, "checkpoint_id": "cp-2"}},
        "parent_config": {"configurable": {"thread_id": THREAD, "checkpoint_id": "cp-1"}},
        "values": values,
        "metadata": {"source": "loop", "step": 2},
        "next": list(next_nodes),
        "tasks": [{"id": f"task-{node}", "name": node, "interrupts": []} for node in next_nodes],
    }


def approve(client, interrupt_id=INTERRUPT):
    return client.review(
        THREAD,
        ASSISTANT,
        reviewer_id="jane",
        interrupt_id=interrupt_id,
        tool_calls=[{"id": "call-1", "action": "approve"}],
    )


def test_resume_refused_with_409_is_superseded(mock, client, caplog):
    mock.get(STATE_URL, json=PAUSED)
    mock.post(STREAM_URL, status=409, json={"detail": "Thread is busy"})
    with pytest.raises(ReviewSupersededError, match=f"no longer paused on {INTERRUPT}") as caught:
        approve(client)
    assert caught.value.thread_id == THREAD
    assert caught.value.interrupt_id == INTERRUPT
    assert isinstance(caught.value, ThreadResumptionError)
    assert_error_hides_key(caught.value, caplog)


def test_resume_refused_with_other_4xx_is_a_resumption_error(mock, client):
    mock.get(STATE_URL, json=PAUSED)
    mock.post(STREAM_URL, status=422, json={"detail": "bad command"})
    with pytest.raises(ThreadResumptionError, match="bad command") as caught:
        approve(client)
    assert not isinstance(caught.value, ReviewSupersededError)
    assert caught.value.status_code == 422


def test_error_event_in_the_resume_stream(mock, client):
    mock.get(STATE_URL, json=PAUSED)
    mock.post(
        STREAM_URL,
        body=sse(
            ("metadata", {"run_id": "r"}),
            ("checkpoints", checkpoint({"messages": MESSAGES}, ["tools"])),
            ("error", {"error": "ValueError", "message": "boom"}),
        ),
    )
    with pytest.raises(ThreadResumptionError) as caught:
        approve(client)
    assert str(caught.value) == "ValueError: boom"
    assert not isinstance(caught.value, ReviewSupersededError)


def test_error_event_with_text_data(mock, client):
    mock.get(STATE_URL, json=PAUSED)
    mock.post(STREAM_URL, body="event: error\ndata: gateway fell over\n\n")
    with pytest.raises(ThreadResumptionError, match="gateway fell over"):
        approve(client)


def test_stale_resume_only_reraising_the_interrupt_is_superseded(mock, client):
    mock.get(STATE_URL, json=PAUSED)
    mock.post(
        STREAM_URL,
        body=sse(
            ("metadata", {"run_id": "r"}),
            ("checkpoints", checkpoint({"messages": MESSAGES}, ["tools"])),
            ("updates", {"__interrupt__": PAUSED["interrupts"]}),
        ),
    )
    with pytest.raises(ReviewSupersededError):
        approve(client)


def test_resume_stream_transport_failure_is_transient(mock, client, caplog):
    mock.get(STATE_URL, json=PAUSED)
    mock.post(STREAM_URL, body=requests.exceptions.ReadTimeout(KEY))
    with pytest.raises(ThreadResumptionError, match="timed out") as caught:
        approve(client)
    assert caught.value.transient is True
    assert len([c for c in mock.calls if c.request.method == "POST"]) == 1
    assert_error_hides_key(caught.value, caplog)


def test_interrupt_no_longer_pending_is_superseded_without_a_post(mock, client):
    mock.get(STATE_URL, json=PAUSED)
    with pytest.raises(ReviewSupersededError, match="no longer paused on " + "f" * 32):
        approve(client, interrupt_id="f" * 32)
    assert [c.request.method for c in mock.calls] == ["GET"]


def test_thread_not_paused_is_superseded_without_a_post(mock, client):
    mock.get(STATE_URL, json={"values": {"messages": MESSAGES}, "interrupts": []})
    with pytest.raises(ReviewSupersededError, match="no longer paused"):
        approve(client)
    assert [c.request.method for c in mock.calls] == ["GET"]


def test_state_read_failure_before_a_review_is_a_resumption_error(mock, client):
    mock.get(STATE_URL, status=404, json={"detail": "Thread not found"})
    with pytest.raises(ThreadResumptionError, match="Thread not found"):
        approve(client)


# -- configuration --------------------------------------------------------------------------


@pytest.mark.parametrize("api_key", ["", "   ", None])
def test_blank_api_key(api_key):
    with pytest.raises(ConfigurationError, match="api_key"):
        Assistants(BASE, api_key)


@pytest.mark.parametrize("user_id", ["", " \t", None])
def test_blank_user_id(user_id):
    with pytest.raises(ConfigurationError, match="user_id"):
        Assistants(BASE, KEY, user_id=user_id)


def test_bad_auth_scheme(caplog):
    with pytest.raises(ConfigurationError, match="auth must be one of bearer, x-api-key") as caught:
        Assistants(BASE, KEY, auth="basic")
    assert_error_hides_key(caught.value, caplog)


@pytest.mark.parametrize("base_url", ["", "assistants.test", "ftp://assistants.test", None])
def test_bad_base_url(base_url, caplog):
    with pytest.raises(ConfigurationError, match="base_url must be an http") as caught:
        Assistants(base_url, KEY)
    assert_error_hides_key(caught.value, caplog)


# -- the key never shows --------------------------------------------------------------------


def test_key_absent_from_every_repr():
    client = Assistants(BASE, KEY, auth="x-api-key")
    registry = Registry(
        {"base_url": BASE, "definitions": {"vc": {"api_key": KEY, "assistant_id": ASSISTANT}}}
    )
    assistant = registry["vc"]
    for obj in (client, client.transport, registry, assistant, assistant.client):
        assert_no_key(repr(obj), str(obj))


def test_key_absent_from_debug_logs_of_a_full_review(mock, client, caplog):
    mock.get(STATE_URL, json=PAUSED)
    done = [*MESSAGES, {"type": "ai", "id": "a-2", "content": "Cancelled"}]
    mock.post(
        STREAM_URL,
        body=sse(
            ("metadata", {"run_id": "r"}),
            ("updates", {"tools": {"messages": []}}),
            ("checkpoints", checkpoint({"messages": done})),
        ),
    )
    mock.post(WAIT_URL, json={"messages": done})
    client.run(THREAD, ASSISTANT, [USER], known_thread=True)
    result = approve(client)
    assert result.reply == "Cancelled"
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert debug, "the transport logs each request at DEBUG"
    assert_no_key(*(r.getMessage() for r in caplog.records))
    assert_no_key(*(str(r.args) for r in caplog.records))
