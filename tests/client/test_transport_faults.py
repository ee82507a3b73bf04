"""The transport against a real local server that misbehaves byte by byte: a trickle bounded by
the timeout in all (not per read), a body cut mid-way retried as transient, and an error page
that echoes the request's headers never carrying the API key out."""

from __future__ import annotations

import json
import logging
import socket
import time
import uuid

import pytest

from nitro_assistants.client import Assistants, RunError, ThreadStateError
from nitro_assistants.client.http import Transport, TransportError, redact
from tests.rawserver import RawServer, answer

KEY = f"sk-live-{uuid.uuid4().hex}"
THREAD = str(uuid.uuid4())
STATE = {"values": {"messages": []}, "interrupts": [], "next": []}


@pytest.fixture
def serve():
    servers: list[RawServer] = []

    def start(handler):
        servers.append(RawServer(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def trickle(conn: socket.socket, head: bytes, seconds: float = 60) -> None:
    """Send ``head``, then a byte a second: every read gets something well within its timeout."""
    conn.sendall(head)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        conn.sendall(b" ")
        time.sleep(1)


# -- 22: the timeout bounds the whole request ---------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
            id="body",
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\nX-Slow: ", id="headers"),
    ],
)
def test_a_trickling_server_is_cut_at_the_timeout(serve, head):
    server = serve(lambda conn, _: trickle(conn, head))
    client = Assistants(server.url, KEY, timeout=3.0, retries=2, backoff=0)
    started = time.monotonic()
    with pytest.raises(ThreadStateError, match="longer than 3 s in all") as caught:
        client.thread_state(THREAD)
    took = time.monotonic() - started
    # Each read got a byte within a second, so a per-read timeout of 3 s never fires; the
    # whole request (retries included) is cut at 3 s.
    assert 2.9 < took < 4.5, took
    assert caught.value.transient


def test_a_trickling_event_stream_is_cut_at_the_timeout(serve):
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )

    def events(conn, _):
        conn.sendall(head)
        for _ in range(60):
            conn.sendall(b"3\r\n: \n\r\n")  # an SSE comment a second: the stream never stalls
            time.sleep(1)

    server = serve(events)
    client = Assistants(server.url, KEY, timeout=(2.0, 3.0))
    started = time.monotonic()
    with pytest.raises(RunError, match=r"event stream broke off.*deadline") as caught:
        list(client.stream(THREAD, "agent", [{"role": "user", "content": "hi"}], known_thread=True))
    assert 2.9 < time.monotonic() - started < 4.5
    assert caught.value.transient


def test_a_request_within_its_timeout_is_not_cut_and_frees_its_watch(serve):
    def slow_but_whole(conn, _):
        time.sleep(0.5)
        conn.sendall(answer("200 OK", json.dumps(STATE).encode()))

    server = serve(slow_but_whole)
    client = Assistants(server.url, KEY, timeout=2.0)
    for _ in range(3):  # a reused connection is not cut by an earlier request's deadline
        assert client.thread_state(THREAD) == STATE
    time.sleep(2.2)
    assert client.thread_state(THREAD) == STATE


# -- 17: a body cut mid-way is transient ----------------------------------------------------------


def cut_once_then_whole(body: bytes):
    calls = []

    def handler(conn, _):
        calls.append(1)
        if len(calls) == 1:  # promise 2 chunks, send half of one, hang up
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(body):x}\r\n".encode() + body[:5]
            )
            conn.shutdown(socket.SHUT_RDWR)
            return
        conn.sendall(answer("200 OK", body))

    return handler


def test_a_body_cut_mid_way_is_retried_when_idempotent(serve):
    server = serve(cut_once_then_whole(json.dumps(STATE).encode()))
    client = Assistants(server.url, KEY, backoff=0)
    assert client.thread_state(THREAD) == STATE
    assert len(server.requests) == 2


def test_a_run_whose_answer_is_cut_mid_way_is_a_transient_error(serve):
    server = serve(cut_once_then_whole(b'{"messages": []}'))
    client = Assistants(server.url, KEY, backoff=0)
    with pytest.raises(RunError, match="broke off") as caught:
        client.run(THREAD, "agent", [{"role": "user", "content": "hi"}], known_thread=True)
    assert caught.value.transient  # the task retries (it finds the run by its metadata)
    assert len(server.requests) == 1  # not idempotent: never sent twice by the transport


# -- 23: echoed credentials are redacted ---------------------------------------------------------


def echo_headers(status: str):
    def handler(conn, request):
        headers = request.split(b"\r\n\r\n")[0].decode()
        body = f"<html><pre>Upstream error. Your request was:\n{headers}</pre></html>"
        conn.sendall(answer(status, body.encode(), "text/html"))

    return handler


@pytest.mark.parametrize("auth", ["bearer", "x-api-key"])
@pytest.mark.parametrize("status", ["500 Internal Server Error", "502 Bad Gateway", "400 Bad"])
def test_an_error_page_echoing_the_headers_does_not_carry_the_key(serve, caplog, auth, status):
    caplog.set_level(logging.DEBUG)
    server = serve(echo_headers(status))
    client = Assistants(server.url, KEY, auth=auth, backoff=0, retries=1)
    with pytest.raises(ThreadStateError) as caught:
        client.thread_state(THREAD)
    text = str(caught.value)
    assert "Upstream error" in text  # the page still says what went wrong
    assert "[redacted]" in text
    assert KEY not in text
    assert KEY not in repr(caught.value.args)
    assert all(KEY not in r.getMessage() for r in caplog.records)
    assert KEY.encode() in server.requests[0]  # the key was sent, and echoed back


def test_a_graph_error_echoing_the_key_is_redacted(serve):
    body = json.dumps({"__error__": {"error": "AuthError", "message": f"bad key {KEY}"}})
    server = serve(lambda conn, _: conn.sendall(answer("200 OK", body.encode())))
    client = Assistants(server.url, KEY)
    with pytest.raises(RunError) as caught:
        client.run(THREAD, "agent", [{"role": "user", "content": "hi"}], known_thread=True)
    assert str(caught.value) == "AuthError: bad key [redacted]"


def echo_key_as(shape):
    """An error page that echoes the key the request carried, mangled as some servers do."""

    def handler(conn, request):
        for line in request.split(b"\r\n\r\n")[0].decode().split("\r\n")[1:]:
            name, _, value = line.partition(":")
            if name.lower() in ("authorization", "x-api-key"):
                key = value.split()[-1]
        body = json.dumps({"detail": f"Unknown API key {shape(key)}; see the docs"})
        conn.sendall(answer("401 Unauthorized", body.encode()))

    return handler


@pytest.mark.parametrize("auth", ["bearer", "x-api-key"])
@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(lambda key: key[:12] + "...", id="truncated-prefix"),
        pytest.param(lambda key: "..." + key[-12:], id="truncated-suffix"),
        pytest.param(str.upper, id="upper-cased"),
        pytest.param(
            lambda key: "https://auth.test/keys?k=" + "".join(f"%{b:02x}" for b in key.encode()),
            id="url-encoded",
        ),
    ],
)
def test_a_key_echoed_mangled_is_redacted(serve, auth, shape):
    server = serve(echo_key_as(shape))
    client = Assistants(server.url, KEY, auth=auth)
    with pytest.raises(ThreadStateError) as caught:
        client.thread_state(THREAD)
    text = str(caught.value)
    assert text.startswith("Unknown API key ") and text.endswith("; see the docs")
    assert "[redacted]" in text
    fragments = {KEY[i : i + 8].lower() for i in range(len(KEY) - 7)}
    assert not any(text.lower()[i : i + 8] in fragments for i in range(len(text)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def-123", "Authorization: [redacted]"),
        ('{"x-api-key": "k-1234567"}', '{"x-api-key": "[redacted]"}'),
        ("'authorization': 'Token zzz9'", "'authorization': '[redacted]'"),
        ("api_key=abcd1234&x=1", "api_key=[redacted]&x=1"),
        ("sent bearer qwerty123 upstream", "sent bearer [redacted] upstream"),
        ("nothing secret here", "nothing secret here"),
    ],
)
def test_redact_takes_credential_values_out(text, expected):
    assert redact(text) == expected


def test_redact_takes_the_given_secrets_out_anywhere():
    assert redact(f"a{KEY}b {KEY}", [KEY]) == "a[redacted]b [redacted]"
    assert Transport("http://x.test", KEY).redact(f"the key {KEY}.") == "the key [redacted]."


# -- issue 34: the deadline holds for every shape of answer ---------------------------------------
#
# A response that ends the connection ("Connection: close", HTTP/1.0, a body delimited by the
# close) hands its socket from the connection to the response: the deadline must still reach it.

_JSON = b"Content-Type: application/json\r\n"
_SSE = b"Content-Type: text/event-stream\r\n"
BODY_SHAPES = {
    "content-length": b"HTTP/1.1 200 OK\r\n" + _JSON + b"Content-Length: 100000\r\n\r\n",
    "content-length-close": (
        b"HTTP/1.1 200 OK\r\n" + _JSON + b"Content-Length: 100000\r\nConnection: close\r\n\r\n"
    ),
    "chunked": b"HTTP/1.1 200 OK\r\n" + _JSON + b"Transfer-Encoding: chunked\r\n\r\n",
    "chunked-close": (
        b"HTTP/1.1 200 OK\r\n" + _JSON + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ),
    "until-close": b"HTTP/1.1 200 OK\r\n" + _JSON + b"Connection: close\r\n\r\n",
    "http-1.0": b"HTTP/1.0 200 OK\r\n" + _JSON + b"\r\n",
    "http-1.0-length": b"HTTP/1.0 200 OK\r\n" + _JSON + b"Content-Length: 100000\r\n\r\n",
}
STREAM_SHAPES = {
    "sse-chunked": b"HTTP/1.1 200 OK\r\n" + _SSE + b"Transfer-Encoding: chunked\r\n\r\n",
    "sse-chunked-close": (
        b"HTTP/1.1 200 OK\r\n" + _SSE + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ),
    "sse-until-close": b"HTTP/1.1 200 OK\r\n" + _SSE + b"Connection: close\r\n\r\n",
    "sse-http-1.0": b"HTTP/1.0 200 OK\r\n" + _SSE + b"\r\n",
}
TRICKLE_FOR = 30.0  # what the server would take; the deadline is 1 s
EVERY = 0.25  # seconds between pieces: well within the 1 s read timeout, so it never fires
BOUND = 10.0  # generous: the call must end well before the trickle would


def trickle_shaped(head: bytes, piece: bytes, seconds: float = TRICKLE_FOR):
    """Send ``head``, then ``piece`` every EVERY seconds (as one chunk when chunked)."""
    if b"chunked" in head:
        piece = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"

    def handler(conn, _):
        conn.sendall(head)
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            conn.sendall(piece)
            time.sleep(EVERY)

    return handler


@pytest.mark.parametrize("head", BODY_SHAPES.values(), ids=BODY_SHAPES.keys())
def test_the_deadline_cuts_a_trickled_body_of_every_shape(serve, head):
    server = serve(trickle_shaped(head, b" "))
    client = Assistants(server.url, KEY, timeout=1.0, retries=0)
    started = time.monotonic()
    with pytest.raises(ThreadStateError, match="longer than 1 s in all") as caught:
        client.thread_state(THREAD)
    assert time.monotonic() - started < BOUND
    assert caught.value.transient


@pytest.mark.parametrize("head", STREAM_SHAPES.values(), ids=STREAM_SHAPES.keys())
def test_the_deadline_cuts_a_trickled_event_stream_of_every_shape(serve, head):
    server = serve(trickle_shaped(head, b": \n"))  # SSE comments
    client = Assistants(server.url, KEY, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(RunError, match=r"event stream broke off.*deadline") as caught:
        list(client.stream(THREAD, "agent", [{"role": "user", "content": "hi"}], known_thread=True))
    assert time.monotonic() - started < BOUND
    assert caught.value.transient


def test_the_deadline_cuts_a_trickled_body_read_through_the_transport(serve):
    """The transport on its own (a streamed request read by its caller), on a close-delimited
    HTTP/1.0 answer: its chunks end with a TransportError at the deadline."""
    server = serve(trickle_shaped(BODY_SHAPES["http-1.0"], b"x"))
    transport = Transport(server.url, KEY, timeout=1.0, retries=0)
    started = time.monotonic()
    response = transport.request("GET", "/slow", stream=True)
    try:
        with pytest.raises(TransportError, match="deadline"):
            for _ in transport.chunks(response):
                pass
    finally:
        response.close()
    assert time.monotonic() - started < BOUND
