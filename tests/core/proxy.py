"""A TCP proxy the tests can stop and start: a server that is really down, then back. It can also
play a misbehaving proxy for chosen requests (see :class:`Fault`): end a response early while the
server carries on, or answer in the server's place."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from dataclasses import dataclass, field

from nitro_assistants.testing.launchers import free_port


@dataclass
class Fault:
    """What the proxy does to requests whose first bytes match ``request``.

    ``answer``: send these bytes back (a whole HTTP response) instead of asking the server.
    ``cut_after``: ask the server, pass its response's headers on, wait that many seconds, then end
    the response cleanly (the last chunk, as a proxy timing out or a server closing its streams
    sends it) and close; the server is never told and carries on. ``times``: how many requests it
    applies to (None: all).
    """

    request: re.Pattern[bytes]
    answer: bytes | None = None
    cut_after: float | None = None
    times: int | None = None
    hits: list[float] = field(default_factory=list)

    def takes(self, data: bytes) -> bool:
        if self.times is not None and len(self.hits) >= self.times:
            return False
        if not self.request.search(data[:2048]):
            return False
        self.hits.append(time.monotonic())
        return True


class _Connection:
    """One client connection and its upstream: the fault its current response is under."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.cut: Fault | None = None


class Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.faults: list[Fault] = []
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._listener is not None

    def start(self) -> Proxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Refuse new connections and cut the open ones (what a crashed server looks like)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @contextlib.contextmanager
    def fault(self, fault: Fault):  # type: ignore[no-untyped-def]
        """Apply ``fault`` inside the ``with`` block."""
        self.faults.append(fault)
        try:
            yield fault
        finally:
            self.faults.remove(fault)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._connections += [client, upstream]
            connection = _Connection(client, upstream)
            threading.Thread(target=self._requests, args=(connection,), daemon=True).start()
            threading.Thread(target=self._responses, args=(connection,), daemon=True).start()

    def _requests(self, connection: _Connection) -> None:
        src, dst = connection.client, connection.upstream
        try:
            while data := src.recv(65536):
                fault = next((f for f in list(self.faults) if f.takes(data)), None)
                if fault is not None and fault.answer is not None:
                    src.sendall(fault.answer)
                    break  # the answer says "Connection: close"
                if fault is not None and fault.cut_after is not None:
                    connection.cut = fault
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # A cut response's server streams on: only the drain below ends its connection.
            _shut(src) if connection.cut else _shut(src, dst)

    def _responses(self, connection: _Connection) -> None:
        src, dst = connection.upstream, connection.client
        head = b""
        try:
            while data := src.recv(65536):
                fault = connection.cut
                if fault is None:
                    dst.sendall(data)
                    continue
                head += data
                if b"\r\n\r\n" not in head:
                    continue
                headers = head.split(b"\r\n\r\n", 1)[0]
                dst.sendall(headers.replace(b"\r\n", b"\r\nConnection: close\r\n", 1) + b"\r\n\r\n")
                time.sleep(fault.cut_after or 0)
                if b"chunked" in headers.lower():
                    dst.sendall(b"0\r\n\r\n")
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_RDWR)
                rest = head
                while not rest.endswith(b"0\r\n\r\n"):  # the server streams on to nobody
                    if not (more := src.recv(65536)):
                        break
                    rest = rest[-16:] + more
                break
        except OSError:
            pass
        finally:
            _shut(src, dst)


def _shut(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
