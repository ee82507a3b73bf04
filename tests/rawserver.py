"""A real HTTP server on a local socket whose every byte a test scripts: what a misbehaving
server or proxy really sends (a trickle, a body cut mid-way, headers echoed in an error page)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from nitro_assistants.testing.launchers import free_port

#: Called with the connection and the request's raw bytes (request line, headers and body).
Handler = Callable[[socket.socket, bytes], None]


class RawServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.port = free_port()
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = _read_request(conn)
                self.requests.append(request)
                self.handler(conn, request)
            except OSError:
                pass


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def answer(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
