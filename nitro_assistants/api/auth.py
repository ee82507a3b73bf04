"""Who is calling the decide API: an API key (``Authorization: Bearer <key>``) or the Django
session (CSRF-protected, as any form post is); and how often they may call it.

Two budgets, each counted per minute in Django's cache:

- ``API_RATE_LIMIT`` requests per **user**: all of a user's keys and their session share one
  budget, so creating more keys adds no capacity.
- ``API_AUTH_FAILURE_LIMIT`` refused API keys per **client address** (``REMOTE_ADDR``): once an
  address has had that many in the minute, every request from it that sends a key is answered
  429 before the key is even looked at, the right key too. Letting a right key through would let
  a guesser tell it from the wrong ones (200 against 429), and the limit would stop nothing. Only
  that address waits (at most the rest of the minute): a key used from any other address works.
  Behind a reverse proxy ``REMOTE_ADDR`` is the proxy's unless the host sets it from the
  forwarded header it trusts (its proxy middleware); otherwise all clients share one budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone

from nitro_assistants.api.errors import ApiError
from nitro_assistants.conf import app_settings
from nitro_assistants.models import ApiKey
from nitro_assistants.models.interactions import API_KEY_PREFIX
from nitro_assistants.validators import unstorable_reason

logger = logging.getLogger("nitro_assistants.api")

#: A key's ``last_used_at`` is written at most this often (seconds): not one UPDATE per call.
LAST_USED_RESOLUTION = 60
#: Both budgets are per minute: a window is ``int(clock() // WINDOW)``.
WINDOW = 60
#: The time the windows are counted in (the tests hold it still: no window turns mid-test).
clock: Callable[[], float] = time.time


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def key_from_header(header: str) -> ApiKey:
    """The live key an ``Authorization`` header names; raises 401 otherwise."""
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise _unauthorized("Send an API key as `Authorization: Bearer <key>`")
    prefix = secret.removeprefix(API_KEY_PREFIX).partition("_")[0]
    key = (
        ApiKey.objects.select_related("user").filter(prefix=prefix).first()
        # A NUL cannot even be looked up (PostgreSQL refuses it), nor a lone surrogate hashed:
        # no key holds either.
        if secret.startswith(API_KEY_PREFIX) and prefix and unstorable_reason(secret) is None
        else None
    )
    if key is None or not key.matches(secret):
        raise _unauthorized("The API key is not valid")
    if key.revoked:
        raise _unauthorized("The API key was revoked")
    if not key.user.is_active:
        raise _unauthorized("The API key's user is inactive")
    now = timezone.now()
    if key.last_used_at is None or (now - key.last_used_at).total_seconds() > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key


def _enforce_csrf(request: HttpRequest) -> None:
    def no_view(request: HttpRequest) -> HttpResponse:  # pragma: no cover - never called
        return HttpResponse()

    check = CsrfViewMiddleware(no_view)
    check.process_request(request)
    refused = check.process_view(request, no_view, (), {})
    if refused is not None:
        raise ApiError(
            403,
            "forbidden",
            "CSRF check failed: a request signed in by session needs the CSRF token "
            "(X-CSRFToken header), or use an API key",
            field="X-CSRFToken",
        )


def client_address(request: HttpRequest) -> str:
    """The address failed authentications are counted by: ``REMOTE_ADDR``, as the host's
    middleware leaves it (see the module's docstring about proxies)."""
    return str(request.META.get("REMOTE_ADDR") or "unknown")


def authenticate(request: HttpRequest) -> tuple[Any, str]:
    """``(user, rate-limit identity)`` for the request; raises 401 (or 403 on a CSRF failure,
    429 when the client's address has had too many keys refused this minute). The identity is
    the user's, whether they came with a key or their session: one budget per user."""
    header = request.headers.get("Authorization", "")
    if header:
        address = client_address(request)
        refuse_failing_address(address)
        try:
            key = key_from_header(header)
        except ApiError as error:
            limit = app_settings.API_AUTH_FAILURE_LIMIT
            if error.status == 401 and limit > 0:
                failures = _count("api-auth-failures", address)
                if failures == limit:
                    logger.warning(
                        "Decide API: %d API keys refused from %s this minute; its key requests "
                        "are answered 429 until the minute ends",
                        failures,
                        address,
                    )
            raise
        return key.user, f"user:{key.user_id}"
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        _enforce_csrf(request)
        return user, f"user:{user.pk}"
    raise _unauthorized("Sign in, or send an API key as `Authorization: Bearer <key>`")


def _cache_key(budget: str, who: str, now: float) -> str:
    return f"nitro_assistants:{budget}:{who}:{int(now // WINDOW)}"


#: Seconds a client is asked to wait when the cache that counts the budgets cannot be reached.
CACHE_DOWN_RETRY_AFTER = 5


def _counter_unavailable(exc: Exception) -> ApiError:
    """503 (retryable) when the budgets cannot be counted: the limits fail closed, so a cache
    restart never lets a key guesser through, and the client is told to come back shortly
    instead of getting a 500."""
    logger.warning("API rate limits unavailable, the cache failed: %s", type(exc).__name__)
    return ApiError(
        503,
        "rate_limit_unavailable",
        "The rate limits cannot be counted just now (the cache is unreachable); "
        f"retry in {CACHE_DOWN_RETRY_AFTER}s",
        retryable=True,
        headers={"Retry-After": str(CACHE_DOWN_RETRY_AFTER)},
    )


def _count(budget: str, who: str) -> int:
    """Count one more against ``who``'s ``budget`` this minute; the count so far."""
    cache_key = _cache_key(budget, who, clock())
    try:
        if cache.add(cache_key, 1, timeout=WINDOW + 30):
            return 1
        try:
            return int(cache.incr(cache_key))
        except ValueError:  # expired between add and incr
            cache.add(cache_key, 1, timeout=WINDOW + 30)
            return 1
    except Exception as exc:  # the cache backend's own errors (Redis, memcached) differ
        raise _counter_unavailable(exc) from exc


def _too_many(message: str) -> ApiError:
    retry_after = max(1, int(WINDOW - clock() % WINDOW))
    return ApiError(
        429,
        "rate_limit_exceeded",
        f"{message}; retry in {retry_after}s",
        retryable=True,
        headers={"Retry-After": str(retry_after)},
    )


def refuse_failing_address(address: str) -> None:
    """429 when ``address`` has had ``API_AUTH_FAILURE_LIMIT`` keys refused this minute.
    Requests in flight at once are all checked before any of them is counted, so a burst may
    pass the limit by as many as run at the same time; the next request is refused."""
    limit = app_settings.API_AUTH_FAILURE_LIMIT
    if limit <= 0:
        return
    try:
        failures = cache.get(_cache_key("api-auth-failures", address, clock())) or 0
    except Exception as exc:  # the cache backend's own errors (Redis, memcached) differ
        raise _counter_unavailable(exc) from exc
    if int(failures) >= limit:
        raise _too_many(f"Too many refused API keys from your address: at most {limit} a minute")


def throttle(identity: str) -> None:
    """At most ``API_RATE_LIMIT`` requests per minute per identity (per user: all their keys and
    their session); 429 beyond (retryable)."""
    limit = app_settings.API_RATE_LIMIT
    if limit <= 0:
        return
    if _count("api-rate", identity) > limit:
        raise _too_many(f"Too many requests: at most {limit} a minute per user")
