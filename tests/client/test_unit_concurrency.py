"""``max_concurrent_requests``: at most that many requests in flight from one client, across
threads; a streamed response holds its slot until it is closed (or dropped); waiting is bounded."""

from __future__ import annotations

import gc
import io
import threading
import time
from typing import Any

import pytest
import requests
import responses

from nitro_assistants.client import Assistants
from nitro_assistants.client.http import Transport, TransportError
from nitro_assistants.exceptions import ConfigurationError, RunError

BASE = "http://assistants.test"
THREAD = "5f0c6a2e-8a53-4d38-9c55-0b8c2f6f6a11"
KEY = "secret-key-never-shown"


class SlowServer:
    """Stands in for ``session.request``: each call takes ``seconds``; counts calls in flight."""

    def __init__(self, seconds: float = 0.05) -> None:
        self.seconds = seconds
        self.in_flight = 0
        self.most = 0
        self.lock = threading.Lock()

    def __call__(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        time.sleep(self.seconds)
        with self.lock:
            self.in_flight -= 1
        response = requests.Response()
        response.status_code = 200
        response._content = b"{}"
        return response


def send_from_threads(transport: Transport, count: int) -> None:
    errors: list[BaseException] = []

    def send() -> None:
        try:
            transport.request("GET", "/ok")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=send) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not errors, errors


@pytest.mark.parametrize("limit", [1, 3])
def test_no_more_requests_in_flight_than_the_limit(
    limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = Transport(BASE, KEY, max_concurrent_requests=limit)
    server = SlowServer()
    monkeypatch.setattr(transport.session, "request", server)
    send_from_threads(transport, 8)
    assert server.most == limit
    assert transport.requests_sent == 8


def test_without_a_limit_every_thread_sends_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = Transport(BASE, KEY)
    server = SlowServer(seconds=0.2)
    monkeypatch.setattr(transport.session, "request", server)
    send_from_threads(transport, 8)
    assert server.most == 8


def stream_response() -> requests.Response:
    response = requests.Response()
    response.status_code = 200
    response.raw = io.BytesIO(b"event: end\n\n")
    return response


def test_a_streamed_response_holds_its_slot_until_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = Transport(BASE, KEY, timeout=(1.0, 0.3), max_concurrent_requests=1)
    monkeypatch.setattr(transport.session, "request", lambda *a, **k: stream_response())
    held = transport.request("POST", "/runs/stream", stream=True, idempotent=False)
    with pytest.raises(TransportError) as refused:
        transport.request("GET", "/state")
    assert "no request slot came free within 0.3 s" in str(refused.value)
    assert "max_concurrent_requests=1" in str(refused.value)
    assert KEY not in str(refused.value)
    held.close()
    assert transport.request("GET", "/state").status_code == 200
    held.close()  # closing twice gives the slot back once
    again = transport.request("POST", "/runs/stream", stream=True, idempotent=False)
    with pytest.raises(TransportError):
        transport.request("GET", "/state")
    again.close()


def test_a_dropped_stream_gives_its_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = Transport(BASE, KEY, timeout=(1.0, 0.3), max_concurrent_requests=1)
    monkeypatch.setattr(transport.session, "request", lambda *a, **k: stream_response())
    transport.request("POST", "/runs/stream", stream=True, idempotent=False)  # never closed
    gc.collect()
    assert transport.request("GET", "/state").status_code == 200


def test_a_waiting_thread_sends_as_soon_as_a_stream_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport = Transport(BASE, KEY, max_concurrent_requests=1)
    monkeypatch.setattr(transport.session, "request", lambda *a, **k: stream_response())
    held = transport.request("POST", "/runs/stream", stream=True, idempotent=False)
    sent = threading.Event()
    waiter = threading.Thread(target=lambda: (transport.request("GET", "/state"), sent.set()))
    waiter.start()
    assert not sent.wait(0.2)  # waits for the slot
    held.close()
    assert sent.wait(2)
    waiter.join()


def test_a_failed_request_gives_its_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = Transport(
        BASE, KEY, timeout=(1.0, 0.3), retries=2, backoff=0, max_concurrent_requests=1
    )

    def refuse(*args: Any, **kwargs: Any) -> requests.Response:
        raise requests.ConnectionError("refused")

    monkeypatch.setattr(transport.session, "request", refuse)
    for _ in range(3):
        with pytest.raises(TransportError, match="connection failed"):
            transport.request("GET", "/state")
    assert transport.requests_sent == 9  # 3 calls x (1 + 2 retries), none refused a slot


def test_a_retried_stream_gives_the_slot_of_each_attempt_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport = Transport(BASE, KEY, retries=2, backoff=0, max_concurrent_requests=1)
    answers = iter([503, 503, 200])

    def answer(*args: Any, **kwargs: Any) -> requests.Response:
        response = stream_response()
        response.status_code = next(answers)
        return response

    monkeypatch.setattr(transport.session, "request", answer)
    response = transport.request("GET", "/runs/stream", stream=True)
    assert response.status_code == 200


def test_an_error_answer_to_a_stream_gives_its_slot_back() -> None:
    client = Assistants(BASE, KEY, timeout=(1.0, 0.3), max_concurrent_requests=1)
    with responses.RequestsMock() as mock:
        mock.post(
            f"{BASE}/threads/{THREAD}/runs/stream", status=409, json={"detail": "thread is busy"}
        )
        for _ in range(3):  # a slot kept by the first would time out the second
            with pytest.raises(RunError, match="thread is busy"):
                list(client.stream(THREAD, "tools", command={"resume": "x"}))


@pytest.mark.parametrize("limit", [0, -1, True, 2.5, "4"])
def test_a_limit_that_is_not_a_positive_integer_is_refused(limit: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_concurrent_requests must be a positive"):
        Transport(BASE, KEY, max_concurrent_requests=limit)


def test_the_registry_builds_clients_with_the_limit() -> None:
    from nitro_assistants.client.registry import Registry

    registry = Registry(
        {
            "base_url": BASE,
            "max_concurrent_requests": 4,
            "definitions": {"a": {"api_key": "k-a", "assistant_id": "a"}},
        }
    )
    assert registry["a"].client.transport.max_concurrent_requests == 4
    unlimited = Registry(
        {"base_url": BASE, "definitions": {"a": {"api_key": "k-a", "assistant_id": "a"}}}
    )
    assert unlimited["a"].client.transport.max_concurrent_requests is None


def test_every_slot_keeps_its_connection() -> None:
    wide = Transport(BASE, KEY, max_concurrent_requests=32)
    assert wide.session.get_adapter(BASE)._pool_maxsize == 32  # type: ignore[attr-defined]
    narrow = Transport(BASE, KEY, max_concurrent_requests=4)
    assert narrow.session.get_adapter(BASE)._pool_maxsize == 10  # type: ignore[attr-defined]
