"""HTTP transport: one session, timeouts, retries for idempotent requests, no secrets in output."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import random
import re
import socket
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.cookies import RequestsCookieJar, merge_cookies
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from nitro_assistants.exceptions import ConfigurationError
from nitro_assistants.exceptions import TransportError as TransportError

logger = logging.getLogger("nitro_assistants.client")

TRANSIENT_STATUSES = frozenset({502, 503, 504})
DEFAULT_POOL_SIZE = 10  # connections requests keeps per host
AUTH_SCHEMES = ("bearer", "x-api-key")
DETAIL_LIMIT = 2000  # characters of a server's error text kept in an exception
Timeout = float | tuple[float, float]
REDACTED = "[redacted]"

# A header (or a JSON/form field) that carries a credential, echoed back by a server or a proxy
# ("Authorization: Bearer sk-...", {"x-api-key": "sk-..."}, api_key=sk-...): its value goes.
_CREDENTIAL = re.compile(
    r"""(?ix)
    (["']?\b(?:authorization|proxy-authorization|x-api-key|api[-_]?key|cookie|set-cookie)\b["']?
     \s*[:=]\s*["']?)                                  # the name and what separates it
    (?:(?:bearer|basic|token|digest)\s+)?               # a scheme, dropped with the value
    [^\s"',;&}\]]+                                      # the value
    """
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s\"',;}\]]+")


#: A secret's fragment this long (or longer) is redacted wherever it shows, in any case: a key
#: echoed back cut short ("sk-live-4f9a2c…"), only its end, or upper-cased. Eight characters of
#: a random key are 2^32 (hex) to 2^47 (base62) values, so ordinary text matches one by chance
#: next to never, and fewer than eight of a long key give away too little to matter. A secret
#: shorter than this is redacted whole (in any case), never by its pieces.
SECRET_FRAGMENT = 8
#: Shorter secrets are not redacted at all: three characters would cut words up into nonsense.
SECRET_MIN = 4
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")


def _decoded(text: str) -> tuple[str, list[int]]:
    """``text`` lower-cased with its %XX escapes decoded (a secret in a URL's query string),
    and where each of its characters starts in ``text`` (one more: the end)."""
    chars: list[str] = []
    starts: list[int] = []
    position = 0
    for escape in _PERCENT.finditer(text):
        for index in range(position, escape.start()):
            chars.append(text[index])
            starts.append(index)
        chars.append(chr(int(escape.group(1), 16)))
        starts.append(escape.start())
        position = escape.end()
    for index in range(position, len(text)):
        chars.append(text[index])
        starts.append(index)
    starts.append(len(text))
    return _lower("".join(chars)), starts


def _lower(text: str) -> str:
    """``text`` lower-cased character for character (``"İ".lower()`` is two characters: such a
    character is kept as it is, so that positions in the result are positions in ``text``)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


def _secret_spans(text: str, secrets: Iterable[str]) -> list[tuple[int, int]]:
    """The spans of ``text`` (merged, in order) that hold a secret or a long enough piece of
    one, matched case-insensitively in the text as it is and with its %XX escapes decoded."""
    whole: set[str] = set()
    pieces: set[str] = set()
    for secret in secrets:
        if not secret or len(secret) < SECRET_MIN:
            continue
        low = _lower(secret)
        if len(low) < SECRET_FRAGMENT:
            whole.add(low)
        else:
            pieces.update(
                low[i : i + SECRET_FRAGMENT] for i in range(len(low) - SECRET_FRAGMENT + 1)
            )
    if not whole and not pieces:
        return []
    found: list[tuple[int, int]] = []
    views: list[tuple[str, list[int] | None]] = [(_lower(text), None)]
    if "%" in text:
        views.append(_decoded(text))
    for view, starts in views:
        spans: list[tuple[int, int]] = []
        if pieces:
            size = SECRET_FRAGMENT
            spans.extend(
                (i, i + size) for i in range(len(view) - size + 1) if view[i : i + size] in pieces
            )
        for secret in whole:
            at = view.find(secret)
            while at != -1:
                spans.append((at, at + len(secret)))
                at = view.find(secret, at + 1)
        if starts is not None:  # back to the text's own positions
            spans = [(starts[a], starts[b]) for a, b in spans]
        found.extend(spans)
    merged: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every one of ``secrets`` and every credential header value replaced.

    A server or proxy error page that echoes the request's headers would otherwise carry the
    API key into exception messages, and from there into the database, logs and signals. An
    echo is not always exact: a secret is found in any case, percent-escaped (in a URL), and by
    any ``SECRET_FRAGMENT`` characters of it in a row (a key cut short, or only its end); a
    secret shorter than that only whole, and one shorter than ``SECRET_MIN`` not at all.
    """
    spans = _secret_spans(text, secrets)
    if spans:
        kept, position = [], 0
        for start, end in spans:
            kept += [text[position:start], REDACTED]
            position = end
        text = "".join(kept) + text[position:]
    text = _CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def _sent_secrets(response: requests.Response) -> list[str]:
    """The credentials the request of ``response`` carried (what an echo would give back): the
    token of an ``Authorization`` value, not its scheme (pieces of "Bearer " are no secret)."""
    headers = getattr(response.request, "headers", None) or {}
    found = []
    for name in ("Authorization", "x-api-key", "Proxy-Authorization"):
        value = headers.get(name)
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if value:
            parts = str(value).split()
            found.extend(parts[1:] if len(parts) > 1 else parts)  # the token after "Bearer"
    return found


def body_excerpt(response: requests.Response, limit: int = 200) -> str:
    """The start of a response's body, for an error message, with its credentials redacted."""
    return redact(response.text[:limit], _sent_secrets(response))


def detail_of(response: requests.Response) -> str:
    """The server's error text: ``detail`` of a JSON body, else the body, else the status line,
    with every credential the request carried redacted (a proxy may echo the headers)."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        text = response.text.strip()
        detail = (
            text[:DETAIL_LIMIT]
            if text
            else f"HTTP {response.status_code} {response.reason or ''}".strip()
        )
    else:
        if isinstance(body, dict) and "detail" in body:
            found = body["detail"]
            detail = (found if isinstance(found, str) else str(found))[:DETAIL_LIMIT]
        else:
            detail = response.text.strip()[:DETAIL_LIMIT]
    return redact(detail, _sent_secrets(response))


def is_request_limit(value: Any) -> bool:
    """True for a valid ``max_concurrent_requests``: a positive integer, or None (no limit)."""
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0)


def _nothing() -> None:
    return None


# -- a deadline for the whole request ----------------------------------------------------------
#
# requests' read timeout bounds each wait for a byte, not the request: a server that trickles a
# byte a second holds the caller (a worker, and the row lock it holds) for as long as it likes.
# A watchdog thread shuts the socket of a request past its deadline down, which ends whatever
# read is blocked on it (headers, body or event stream) at once.
#
# The socket is taken from the connection as the response is read: an answer that ends the
# connection ("Connection: close", HTTP/1.0, a body that runs until the close) takes the socket
# away from its connection (``connection.sock`` is None from then on) and keeps reading it.


class Watch:
    """The deadline of one request; ``expired`` once the watchdog cut its connection."""

    __slots__ = ("connection", "deadline", "done", "expired", "sock")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.connection: Any = None
        self.sock: Any = None  # the socket the response is read from, once its headers come
        self.done = False
        self.expired = False

    def cancel(self) -> None:
        self.done = True

    def expire(self) -> None:
        if self.done:
            return
        self.expired = True
        # Both: the connection's socket while the request is sent (it may connect again first),
        # the response's once an answer that ends the connection took it from the connection.
        for sock in (getattr(self.connection, "sock", None), self.sock):
            if sock is not None:
                with contextlib.suppress(OSError):  # closed already
                    sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread per process that expires the watches whose deadline has passed."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._heap: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float) -> Watch:
        watch = Watch(deadline)
        with self._lock:
            if len(self._heap) > 256:  # cancelled watches wait for their deadline: drop them now
                self._heap = [item for item in self._heap if not item[2].done]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (deadline, next(self._order), watch))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="nitro-assistants-deadlines", daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is watch:
                self._lock.notify()
        return watch

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._heap:
                    self._lock.wait()
                deadline, _, watch = self._heap[0]
                if watch.done:
                    heapq.heappop(self._heap)
                    continue
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                heapq.heappop(self._heap)
            watch.expire()

    def forget_thread(self) -> None:
        """In a forked child the thread is gone: start another when next needed."""
        self._lock = threading.Condition()
        self._thread = None


_watchdog = _Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_watchdog.forget_thread)
_current = threading.local()  # the Watch of the request this thread is sending


def _watched_connection(connection_class: type[Any]) -> type[Any]:
    class WatchedConnection(connection_class):  # type: ignore[misc]
        """Hands the socket a response is read from to that request's watch, before reading it
        (an answer that ends the connection takes the socket from the connection)."""

        def getresponse(self, *args: Any, **kwargs: Any) -> Any:
            watch = getattr(_current, "watch", None)
            if watch is not None:
                watch.sock = self.sock
                if watch.expired:  # expired while the request was sent on another socket
                    watch.expire()
            return super().getresponse(*args, **kwargs)

    WatchedConnection.__name__ = f"Watched{connection_class.__name__}"
    return WatchedConnection


def _watched(pool_class: type[HTTPConnectionPool]) -> type[HTTPConnectionPool]:
    class Watched(pool_class):  # type: ignore[valid-type,misc]
        """Hands the connection a request is sent on to that request's watch."""

        ConnectionCls = _watched_connection(pool_class.ConnectionCls)

        def _get_conn(self, timeout: float | None = None) -> Any:
            connection = super()._get_conn(timeout)
            watch = getattr(_current, "watch", None)
            if watch is not None:
                watch.connection = connection
            return connection

    Watched.__name__ = f"Watched{pool_class.__name__}"
    return Watched


_POOLS = {"http": _watched(HTTPConnectionPool), "https": _watched(HTTPSConnectionPool)}


class WatchedAdapter(HTTPAdapter):
    """An ``HTTPAdapter`` whose connections the transport's deadline can cut."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOLS)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if hasattr(manager, "pool_classes_by_scheme"):
            manager.pool_classes_by_scheme = dict(_POOLS)
        return manager


class LeanSession(requests.Session):
    """The transport's own session: ``request`` prepares a request from the session's settings
    without merging them with a request's own each time (requests builds and merges seven
    settings, two cookie jars and the environment per call: a fifth of a call's CPU).

    Only for what the transport sends (a method, a URL, JSON, query parameters, a timeout,
    streamed or not) on a session that does not read the environment: any other argument, or a
    session that reads the environment or carries default query parameters, goes through
    ``requests.Session.request`` as usual. Headers, auth, hooks and the cookies the server set
    apply as they would there; the connection pool is the session's, reused across calls.
    """

    def request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        params: dict[str, Any] | None = None,
        data: Any = None,
        headers: Any = None,
        cookies: Any = None,
        files: Any = None,
        auth: Any = None,
        timeout: Any = None,
        allow_redirects: bool = True,
        proxies: Any = None,
        hooks: Any = None,
        stream: bool | None = None,
        verify: Any = None,
        cert: Any = None,
        json: Any = None,
    ) -> requests.Response:
        given = (data, headers, cookies, files, auth, proxies, hooks, verify, cert)
        if self.trust_env or self.params or any(value is not None for value in given):
            return super().request(
                method,
                url,
                params=params,
                data=data,
                headers=headers,
                cookies=cookies,
                files=files,
                auth=auth,
                timeout=timeout,
                allow_redirects=allow_redirects,
                proxies=proxies,
                hooks=hooks,
                stream=stream,
                verify=verify,
                cert=cert,
                json=json,
            )
        prepared = requests.PreparedRequest()
        prepared.prepare(
            method=method.upper(),
            url=url,
            headers=self.headers,
            json=json,
            params=params,
            auth=self.auth,
            cookies=self._cookies_to_send(),
            hooks=self.hooks,
        )
        return self.send(
            prepared,
            timeout=timeout,
            allow_redirects=allow_redirects,
            stream=self.stream if stream is None else stream,
        )

    def _cookies_to_send(self) -> Any:
        """A copy of the session's cookies, as requests sends (a redirect's cookies reach the
        session once, through ``send``); None when the server set none."""
        if not self.cookies:
            return None
        return merge_cookies(RequestsCookieJar(), self.cookies)  # type: ignore[no-untyped-call]


def _release_on_close(response: requests.Response, release: Any, watch: Watch | None) -> None:
    """Give the request slot back (and stop watching its deadline) when a streamed response is
    closed, or, if nobody closes it, when it is garbage collected (so a dropped stream cannot
    hold a slot for good)."""
    give_back = weakref.finalize(response, release)  # runs once: on close, or when collected
    this = weakref.ref(response)  # not the bound method: no cycle keeps the response alive

    def close_and_release() -> None:
        try:
            if watch is not None:
                watch.cancel()
            found = this()
            if found is not None:
                type(found).close(found)
        finally:
            give_back()

    response.close = close_and_release  # type: ignore[method-assign]


class Transport:
    """Sends requests to one Assistants server with one ``requests.Session``.

    Idempotent requests are retried with exponential backoff and jitter on connection errors,
    timeouts, bodies cut short and 502/503/504; others are sent once. ``timeout`` is
    ``(connect, read)`` or one number for both; the read timeout also bounds the whole request,
    retries included (a streamed one until it is closed), however slowly the server sends.
    With ``max_concurrent_requests`` at most that many requests are in flight at once (a
    streamed one until it is closed); other threads wait for a slot, up to the read timeout.
    The API key lives only in the session's headers: it never appears in an exception message,
    a log line or a ``repr``, even when the server echoes it back.
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
            session = LeanSession()
            # requests reads the environment (proxies, CA bundle, .netrc) again for every request,
            # walking all of os.environ (a sixth of a resume's CPU in a worker). Every request
            # goes to this one server: read it once, now. (.netrc is not read: the key is ours.)
            found = session.merge_environment_settings(self.base_url, {}, None, None, None)
            session.proxies.update(found["proxies"])
            session.verify = found["verify"]
            session.trust_env = False
            # Keep a connection for every slot (requests keeps 10 and drops the rest), on
            # connections the deadline can cut.
            adapter = WatchedAdapter(
                pool_maxsize=max(DEFAULT_POOL_SIZE, max_concurrent_requests or 0)
            )
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        self.session = session
        self._secrets = (api_key,)
        if auth == "bearer":
            self.session.headers["Authorization"] = f"Bearer {api_key}"
        else:
            self.session.headers["x-api-key"] = api_key
        self.session.headers["Accept"] = "application/json"
        self.requests_sent = 0

    def __repr__(self) -> str:
        return f"<Transport {self.base_url} auth={self.auth}>"

    @property
    def total_timeout(self) -> float:
        """Seconds a request may take in all, retries included: the read timeout."""
        return float(self.timeout[1] if isinstance(self.timeout, tuple) else self.timeout)

    def redact(self, text: str) -> str:
        """``text`` without this transport's API key or any credential header value."""
        return redact(text, self._secrets)

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

        Raises :class:`TransportError` when no whole answer came back (after the retries), or
        when the request took longer than :attr:`total_timeout` in all.
        """
        if idempotent is None:
            idempotent = method in ("GET", "HEAD", "DELETE")
        attempts = 1 + (self.retries if idempotent else 0)
        url = f"{self.base_url}{path}"
        total = self.total_timeout
        deadline = time.monotonic() + total
        for attempt in range(1, attempts + 1):
            release = self._take_slot(method, path, deadline)
            started = time.monotonic()
            self.requests_sent += 1
            watch = _watchdog.watch(deadline)
            _current.watch = watch
            try:
                response = self.session.request(
                    method, url, json=json, params=params, timeout=self.timeout, stream=stream
                )
                if watch.expired:  # the cut may have ended a body that carries no length
                    response.close()
                    raise requests.Timeout("the deadline cut the answer short")
            except (
                requests.ConnectionError,
                requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
            ) as exc:
                watch.cancel()
                release()
                if watch.expired:
                    reason = f"took longer than {total:g} s in all"
                elif isinstance(exc, requests.Timeout):
                    reason = "timed out"
                elif isinstance(exc, requests.exceptions.ChunkedEncodingError):
                    reason = "the answer broke off"
                else:
                    reason = "connection failed"
                logger.warning("%s %s %s (attempt %d/%d)", method, path, reason, attempt, attempts)
                if attempt < attempts and not watch.expired:
                    self._sleep(attempt, deadline)
                    continue
                raise TransportError(f"{method} {path}: {reason} ({type(exc).__name__})") from None
            except BaseException:
                watch.cancel()
                release()
                raise
            finally:
                _current.watch = None
            if stream:
                _release_on_close(response, release, watch)
            else:
                watch.cancel()
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
                self._sleep(attempt, deadline)
                continue
            if stream:
                response.watch = watch  # type: ignore[attr-defined]
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _take_slot(self, method: str, path: str, deadline: float) -> Any:
        """Wait for one of the ``max_concurrent_requests`` slots, within the request's deadline
        (the wait is part of its time); returns what gives it back (once: a streamed response
        gives it back through its close, see _release_on_close)."""
        if self._slots is None:
            return _nothing
        if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise TransportError(
                f"{method} {path}: no request slot came free within {self.total_timeout:g} s "
                f"(max_concurrent_requests={self.max_concurrent_requests})"
            )
        return self._slots.release

    def _sleep(self, attempt: int, deadline: float | None = None) -> None:
        delay = self.backoff * 2 ** (attempt - 1)
        delay += random.uniform(0, delay / 2)
        if deadline is not None:
            delay = min(delay, max(0.0, deadline - time.monotonic()))
        time.sleep(delay)

    @staticmethod
    def chunks(response: requests.Response) -> Iterator[bytes]:
        """A streamed response's body as it comes. Raises :class:`TransportError` when it broke
        off, or when the request's deadline cut it (which can look like a clean end)."""
        watch: Watch | None = getattr(response, "watch", None)
        try:
            yield from response.iter_content(chunk_size=None)
        except requests.RequestException as exc:
            if watch is not None and watch.expired:
                raise TransportError("the answer took longer than its deadline") from None
            raise TransportError(f"the answer broke off ({type(exc).__name__})") from None
        if watch is not None and watch.expired:
            raise TransportError("the answer took longer than its deadline")
