"""The transport's own session (``LeanSession``) against a real local HTTP/1.1 server: it sends
what ``requests.Session`` would send (headers, auth, JSON, query parameters, the cookies the
server set), and every request of a transport rides the one pooled keep-alive connection."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests

from nitro_assistants.client.http import LeanSession, Transport


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        #: (client port, method, path, headers, body) of every request, in order.
        self.seen: list[tuple[int, str, str, dict[str, str], bytes]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client may reuse the connection
    server: Recorder

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.server.seen.append((self.client_address[1], self.command, self.path, headers, body))
        out = json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        if self.path.startswith("/login"):
            self.send_header("Set-Cookie", "route=b7; Path=/")
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Recorder]:
    recorder = Recorder()
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    yield recorder
    recorder.shutdown()
    recorder.server_close()


def calls(transport: Transport) -> None:
    """The kinds of request the client sends: JSON posts, reads with parameters, a stream."""
    transport.request("GET", "/login")
    transport.request("POST", "/threads/t/runs/wait", json={"input": {"n": 1}}, idempotent=False)
    transport.request("GET", "/threads/t/runs", params={"limit": 100, "offset": 0})
    with transport.request("POST", "/threads/t/runs/stream", json={}, stream=True) as response:
        assert b"".join(Transport.chunks(response)) == b'{"ok": true}'
    transport.request("DELETE", "/threads/t")


def test_the_transport_makes_its_own_session_lean() -> None:
    assert type(Transport("http://assistants.test", "secret").session) is LeanSession


def test_every_request_rides_one_pooled_connection(server: Recorder) -> None:
    transport = Transport(server.url, "secret")
    calls(transport)
    calls(transport)
    ports = {port for port, *_ in server.seen}
    assert len(server.seen) == 10
    assert len(ports) == 1, f"{len(ports)} connections for 10 requests"


def test_it_sends_what_requests_would_send(server: Recorder) -> None:
    lean = Transport(server.url, "secret")
    plain = Transport(server.url, "secret")
    plain.session.__class__ = requests.Session  # the same settings, requests' own request()
    calls(lean)
    calls(plain)
    sent = [(method, path, headers, body) for _, method, path, headers, body in server.seen]
    assert sent[:5] == sent[5:]
    by_path = {path: headers for _, path, headers, _ in sent[:5]}
    assert by_path["/login"]["authorization"] == "Bearer secret"
    assert "cookie" not in by_path["/login"]
    # The cookie the server set comes back, as requests' own session sends it.
    assert by_path["/threads/t/runs/wait"]["cookie"] == "route=b7"
    assert "/threads/t/runs?limit=100&offset=0" in by_path
    assert json.loads(sent[1][3]) == {"input": {"n": 1}}


def test_other_arguments_go_through_requests(server: Recorder) -> None:
    session = LeanSession()
    session.trust_env = False
    session.headers["x-api-key"] = "secret"
    session.request("GET", f"{server.url}/x", headers={"X-Extra": "1"}, timeout=5)
    session.params = {"tenant": "t1"}  # a setting the lean path does not merge
    session.request("GET", f"{server.url}/y", timeout=5)
    (_, _, _, first, _), (_, _, path, second, _) = server.seen
    assert first["x-extra"] == "1" and first["x-api-key"] == "secret"
    assert path == "/y?tenant=t1" and second["x-api-key"] == "secret"
