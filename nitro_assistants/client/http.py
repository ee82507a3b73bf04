"""HTTP transport: one session, timeouts, retries for idempotent requests, no secrets in output."""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import requests

from nitro_assistants.exceptions import ConfigurationError
from nitro_assistants.exceptions import TransportError as TransportError

logger = logging.getLogger("nitro_assistants.client")

TRANSIENT_STATUSES = frozenset({502, 503, 504})
DEFAULT_POOL_SIZE = 10  # connections requests keeps per host
AUTH_SCHEMES = ("bearer", "x-api-key")
Timeout = float | tuple[float, float]


def detail_of(response: requests.Response) -> str:
    """The server's error text: ``detail`` of a JSON body, else the body, else the status line."""
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        return (
            text[:2000] if text else f"HTTP {response.status_code} {response.reason or ''}".strip()
        )
    if isinstance(body, dict) and "detail" in body:
        detail = body["detail"]
        return detail if isinstance(detail, str) else str(detail)
    return response.text.strip()[:2000]


def is_request_limit(value: Any) -> bool:
    """True for a valid ``max_concurrent_requests``: a positive integer, or None (no limit)."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0)


def _nothing() -> None:
    return None


def _release_on_close(response: requests.Response, release: Any) -> None:
    """Give the request slot back when a streamed response is closed, or, if nobody closes it,
    when it is garbage collected (so a dropped stream cannot hold a slot for good)."""
    give_back = weakref.finalize(response, release)  # runs once: on close, or when collected
    this = weakref.ref(response)  # not the bound method: no cycle keeps the response alive

    def close_and_release() -> None:
        try:
            found = this()
            if found is not None:
                type(found).close(found)
        finally:
            give_back()

    response.close = close_and_release  # type: ignore[method-assign]


class Transport:
    """Sends requests to one Assistants server with one ``requests.Session``.

    Idempotent requests are retried with exponential backoff and jitter on connection errors,
    timeouts and 502/503/504; others are sent once. With ``max_concurrent_requests`` at most that
    many requests are in flight at once (a streamed one until it is closed); other threads wait
    for a slot, up to the read timeout. The API key lives only in the session's
    headers: it never appears in an exception message, a log line or a ``repr``.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        auth: str = "bearer",
        timeout: Timeout = (5.0, 300.0),
        retries: int = 3,
        backoff: float = 0.25,
        session: requests.Session | None = None,
        max_concurrent_requests: int | None = None,
    ) -> None:
        if auth not in AUTH_SCHEMES:
            raise ConfigurationError(f"auth must be one of {', '.join(AUTH_SCHEMES)}; got {auth!r}")
        if not base_url or not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(f"base_url must be an http(s) URL; got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.auth = auth
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        if not is_request_limit(max_concurrent_requests):
            raise ConfigurationError(
                "max_concurrent_requests must be a positive integer or None; "
                f"got {max_concurrent_requests!r}"
            )
        self.max_concurrent_requests = max_concurrent_requests
        # Requests in flight at once from this transport (all threads): a thread that finished
        # its own work waits here, ready, instead of adding to the server's queue.
        self._slots = (
            threading.BoundedSemaphore(max_concurrent_requests) if max_concurrent_requests else None
        )
        if session is None:
            session = requests.Session()
            # requests reads the environment (proxies, CA bundle, .netrc) again for every request,
            # walking all of os.environ (a sixth of a resume's CPU in a worker). Every request
            # goes to this one server: read it once, now. (.netrc is not read: the key is ours.)
            found = session.merge_environment_settings(self.base_url, {}, None, None, None)
            session.proxies.update(found["proxies"])
            session.verify = found["verify"]
            session.trust_env = False
            if max_concurrent_requests and max_concurrent_requests > DEFAULT_POOL_SIZE:
                # Keep a connection for every slot: requests keeps 10 and drops the rest.
                adapter = requests.adapters.HTTPAdapter(pool_maxsize=max_concurrent_requests)
                session.mount("http://", adapter)
                session.mount("https://", adapter)
        self.session = session
        if auth == "bearer":
            self.session.headers["Authorization"] = f"Bearer {api_key}"
        else:
            self.session.headers["x-api-key"] = api_key
        self.session.headers["Accept"] = "application/json"
        self.requests_sent = 0

    def __repr__(self) -> str:
        return f"<Transport {self.base_url} auth={self.auth}>"

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        idempotent: bool | None = None,
        stream: bool = False,
    ) -> requests.Response:
        """Send one request; retry it only when it is idempotent and the failure transient.

        Raises :class:`TransportError` when no answer came back (after the retries).
        """
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "DELETE")
        attempts = 1 + (self.retries if idempotent else 0)
        url = f"{self.base_url}{path}"
        for attempt in range(1, attempts + 1):
            release = self._take_slot(method, path)
            started = time.monotonic()
            self.requests_sent += 1
            try:
                response = self.session.request(
                    method, url, json=json, params=params, timeout=self.timeout, stream=stream
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                release()
                reason = "timed out" if isinstance(exc, requests.Timeout) else "connection failed"
                logger.warning("%s %s %s (attempt %d/%d)", method, path, reason, attempt, attempts)
                if attempt < attempts:
                    self._sleep(attempt)
                    continue
                raise TransportError(f"{method} {path}: {reason} ({type(exc).__name__})") from None
            except BaseException:
                release()
                raise
            if stream:
                _release_on_close(response, release)
            else:
                release()  # the body has been read: the connection is back in the pool
            logger.debug(
                "%s %s -> %d in %.0f ms",
                method,
                path,
                response.status_code,
                (time.monotonic() - started) * 1000,
            )
            if response.status_code in TRANSIENT_STATUSES and attempt < attempts:
                response.close()
                self._sleep(attempt)
                continue
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _take_slot(self, method: str, path: str) -> Any:
        """Wait for one of the ``max_concurrent_requests`` slots; returns what gives it back
        (once: a streamed response gives it back through its close, see _release_on_close)."""
        if self._slots is None:
            return _nothing
        wait = self.timeout[1] if isinstance(self.timeout, tuple) else self.timeout
        if not self._slots.acquire(timeout=wait):
            raise TransportError(
                f"{method} {path}: no request slot came free within {wait:g} s "
                f"(max_concurrent_requests={self.max_concurrent_requests})"
            )
        return self._slots.release

    def _sleep(self, attempt: int) -> None:
        delay = self.backoff * 2 ** (attempt - 1)
        time.sleep(delay + random.uniform(0, delay / 2))

    @staticmethod
    def lines(response: requests.Response) -> Iterator[bytes]:
        yield from response.iter_content(chunk_size=None)
