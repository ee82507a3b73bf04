"""Who is calling the decide API: an API key (``Authorization: Bearer <key>``) or the Django
session (CSRF-protected, as any form post is); and how often they may call it."""

from __future__ import annotations

import time
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

#: A key's ``last_used_at`` is written at most this often (seconds): not one UPDATE per call.
LAST_USED_RESOLUTION = 60


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


def authenticate(request: HttpRequest) -> tuple[Any, str]:
    """``(user, rate-limit identity)`` for the request; raises 401 (or 403 on a CSRF failure)."""
    header = request.headers.get("Authorization", "")
    if header:
        key = key_from_header(header)
        return key.user, f"key:{key.pk}"
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        _enforce_csrf(request)
        return user, f"user:{user.pk}"
    raise _unauthorized("Sign in, or send an API key as `Authorization: Bearer <key>`")


def throttle(identity: str) -> None:
    """At most ``API_RATE_LIMIT`` requests per minute per identity; 429 beyond (retryable)."""
    limit = app_settings.API_RATE_LIMIT
    if limit <= 0:
        return
    now = time.time()
    window = int(now // 60)
    cache_key = f"nitro_assistants:api-rate:{identity}:{window}"
    if cache.add(cache_key, 1, timeout=90):
        count = 1
    else:
        try:
            count = cache.incr(cache_key)
        except ValueError:  # expired between add and incr
            cache.add(cache_key, 1, timeout=90)
            count = 1
    if count > limit:
        retry_after = max(1, int(60 - now % 60))
        raise ApiError(
            429,
            "rate_limit_exceeded",
            f"Too many requests: at most {limit} a minute per key; retry in {retry_after}s",
            retryable=True,
            headers={"Retry-After": str(retry_after)},
        )
