"""A local stand-in for the parts of Slack's Web API the app uses, and Slack's request signing.

Slack cannot be reached from a test (or from the demo without a workspace); this is a real HTTP
server on a local socket that answers ``chat.postMessage``, ``chat.update``,
``chat.postEphemeral``, ``views.open``, ``users.info`` and ``users.lookupByEmail`` as Slack
documents them (a message to a user ID lands in a ``D…`` direct-message channel), keeps the
messages posted (and their updates), and can be told to answer a method with an error status
(``429`` with ``Retry-After``, a ``5xx``) a number of times. Point the app at it with
``NITRO_ASSISTANTS["SLACK"]["API_URL"] = server.api_url``. Standard library only::

    with SlackServer(token="xoxb-test") as server:
        server.users["U1"] = {"id": "U1", "is_email_confirmed": True,
                              "profile": {"email": "jane@example.com"}}
        ...
        assert server.calls("chat.postMessage")[0]["channel"] == "C1"

:func:`signed_headers` signs a body as Slack does (``v0=`` + HMAC-SHA256 of
``v0:<timestamp>:<body>`` with the app's signing secret), so a test posts what Slack would.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl


def signed_headers(body: bytes | str, secret: str, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack sends with ``body``, signed with the app's signing ``secret``."""
    raw = body.encode() if isinstance(body, str) else body
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + stamp.encode() + b":" + raw
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


class SlackServer:
    """Slack's Web API, the parts the app uses, on ``127.0.0.1`` (a free port)."""

    def __init__(self, token: str) -> None:
        self.token = token
        #: ``users.info`` answers: Slack user id → the ``user`` object.
        self.users: dict[str, dict[str, Any]] = {}
        #: Posted messages by ``(channel, ts)``: the last ``text`` and ``blocks`` they were given.
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        #: Every call: ``{"method", "at", **arguments}``.
        self.log: list[dict[str, Any]] = []
        self._faults: dict[str, list[tuple[int, float | None]]] = {}
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    def __enter__(self) -> SlackServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(
        self, method: str, status: int, *, times: int = 1, retry_after: float | None = None
    ) -> None:
        """Answer the next ``times`` calls of ``method`` with ``status`` (and ``Retry-After``)."""
        with self._lock:
            self._faults.setdefault(method, []).extend([(status, retry_after)] * times)

    def calls(self, method: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(call) for call in self.log if call["method"] == method]

    def clear(self) -> None:
        with self._lock:
            self.log.clear()
            self.messages.clear()

    # -- answering --------------------------------------------------------------------------

    def _answer(self, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if method == "chat.postMessage" and str(arguments.get("channel", "")).startswith("U"):
            # A message to a user goes to their direct messages with the app: a D… channel.
            arguments = {**arguments, "channel": "D" + str(arguments["channel"])[1:]}
            return self._answer("chat.postMessage", arguments)
        if method == "chat.postMessage":
            channel = str(arguments.get("channel") or "")
            if not channel:
                return {"ok": False, "error": "channel_not_found"}
            ts = f"{1700000000 + next(self._ts)}.000100"
            self.messages[(channel, ts)] = {
                "text": arguments.get("text"),
                "blocks": arguments.get("blocks"),
            }
            return {"ok": True, "channel": channel, "ts": ts, "message": {"ts": ts}}
        if method == "chat.update":
            key = (str(arguments.get("channel")), str(arguments.get("ts")))
            if key not in self.messages:
                return {"ok": False, "error": "message_not_found"}
            self.messages[key] = {"text": arguments.get("text"), "blocks": arguments.get("blocks")}
            return {"ok": True, "channel": key[0], "ts": key[1]}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"{1700000000 + next(self._ts)}.000200"}
        if method == "views.open":
            if not arguments.get("trigger_id"):
                return {"ok": False, "error": "invalid_trigger_id"}
            return {"ok": True, "view": {**dict(arguments.get("view") or {}), "id": "V0001"}}
        if method == "users.lookupByEmail":
            email = str(arguments.get("email") or "").lower()
            for known in self.users.values():
                if str((known.get("profile") or {}).get("email") or "").lower() == email:
                    return {"ok": True, "user": known}
            return {"ok": False, "error": "users_not_found"}
        if method == "users.info":
            user = self.users.get(str(arguments.get("user")))
            if user is None:
                return {"ok": False, "error": "user_not_found"}
            return {"ok": True, "user": user}
        return {"ok": False, "error": "unknown_method"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                method = self.path.rstrip("/").rsplit("/", 1)[-1]
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode() if length else ""
                if "json" in (self.headers.get("Content-Type") or ""):
                    arguments = json.loads(raw or "{}")
                else:
                    arguments = dict(parse_qsl(raw))
                with server._lock:
                    server.log.append({"method": method, "at": time.monotonic(), **arguments})
                    faults = server._faults.get(method)
                    fault = faults.pop(0) if faults else None
                    authorized = self.headers.get("Authorization") == f"Bearer {server.token}"
                    answer = (
                        server._answer(method, arguments)
                        if authorized and fault is None
                        else {"ok": False, "error": "invalid_auth"}
                    )
                status, headers = 200, {}
                if fault is not None:
                    status = fault[0]
                    answer = {"ok": False, "error": "ratelimited" if status == 429 else "fatal"}
                    if fault[1] is not None:
                        headers["Retry-After"] = str(fault[1])
                body = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        return Handler


__all__ = ["SlackServer", "signed_headers"]
