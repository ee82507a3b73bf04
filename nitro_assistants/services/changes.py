"""The live pages' change token: a random value in a cache every process shares, replaced after
each commit that changes what the queue and the review screens show.

Every audit event goes through :func:`nitro_assistants.services.chain_append.append`, which calls
:func:`changed` for an event about a review (a review's status change, a decision's outcome, a
new review, an assignment, a claim taken or taken over; a thread's and a run's own events show
on neither page), and the claims service calls it for the rest (renewals, releases). The live
endpoint reads the token before anything else; a poll whose ETag was made from the current token
is answered 304 without a statement of its own, and only a new token makes it read the database.

The token lives ``LIVE_CACHE_SECONDS`` after it was set: what changes without a write through the
services (a user's permissions or groups, a claim running out) shows within that time.

It needs a cache shared by the web processes and the Celery workers (Redis, memcached):
:func:`token_cache` finds none in a per-process cache, and the endpoint then asks the database on
every poll, as it does when the cache cannot be reached.

The same cache holds the policy rules' stamp (:data:`.policy_enforcement.STAMP_KEY`), which tells each
process whether the rules it compiled are still current (:func:`.policy_enforcement.ruleset`).
"""

from __future__ import annotations

import logging
import secrets
import weakref
from typing import Any

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.core.cache.backends.redis import RedisCache
from django.db import DEFAULT_DB_ALIAS

from nitro_assistants.conf import app_settings
from nitro_assistants.services import commit_hooks

logger = logging.getLogger("nitro_assistants")

KEY = "nitro_assistants:live-token"

#: Cache backends every process of a site reaches alike: the default cache is used for the token
#: only when it is one of these (a host names any other alias in ``LIVE_CACHE`` explicitly).
SHARED_BACKENDS = frozenset(
    {
        "django.core.cache.backends.redis.RedisCache",
        "django.core.cache.backends.memcached.PyMemcacheCache",
        "django.core.cache.backends.memcached.PyLibMCCache",
        "django_redis.cache.RedisCache",
    }
)

#: Backends that keep their entries in each process (or nowhere): the system check warns of them.
PER_PROCESS_BACKENDS = frozenset(
    {
        "django.core.cache.backends.locmem.LocMemCache",
        "django.core.cache.backends.dummy.DummyCache",
    }
)


def backend_of(alias: str) -> str:
    return str((getattr(settings, "CACHES", None) or {}).get(alias, {}).get("BACKEND", ""))


def cache_alias() -> str | None:
    """The alias of the cache holding the token (``LIVE_CACHE``), or None: no token, the live
    endpoint asks the database. Unset, the default cache if it is shared (:data:`SHARED_BACKENDS`)."""
    configured = app_settings.LIVE_CACHE
    if configured is None:
        return "default" if backend_of("default") in SHARED_BACKENDS else None
    return str(configured) or None


def token_cache() -> BaseCache | None:
    alias = cache_alias()
    return caches[alias] if alias else None


def current_token(cache: BaseCache, key: str = KEY) -> str:
    """The token now (the live pages', or the one kept under ``key``), created if there is none
    (expired, or a cache that restarted). Raises what the cache raises when it cannot be
    reached."""
    token = _get(cache, key)
    if token is None:
        fresh = secrets.token_hex(16)
        # Two processes creating it at once: the first one's stands, and both answer with it.
        token = fresh if cache.add(key, fresh, timeout=timeout()) else cache.get(key, fresh)
    return str(token)


#: Django's ``RedisCache`` makes a new ``redis.Redis`` for every call (about 0.2 ms of CPU, the
#: most of a GET or SET): the token's reads and writes, a few per service call, reuse one per
#: cache object and direction (it is thread-safe, and its pool reconnects after a fork).
_redis_clients: weakref.WeakKeyDictionary[Any, dict[bool, Any]] = weakref.WeakKeyDictionary()


def _redis(cache: BaseCache, *, write: bool) -> tuple[Any, Any] | None:
    """``(client, serializer)`` of Django's own ``RedisCache``, or None for any other cache."""
    if type(cache) is not RedisCache:
        return None
    backend = cache._cache
    clients = _redis_clients.setdefault(backend, {})
    client = clients.get(write)
    if client is None:
        client = clients[write] = backend.get_client(write=write)
    return client, backend._serializer  # type: ignore[attr-defined]


def _get(cache: BaseCache, key: str) -> Any:
    fast = _redis(cache, write=False)
    if fast is None:
        return cache.get(key)
    client, serializer = fast
    raw = client.get(cache.make_and_validate_key(key))
    return None if raw is None else serializer.loads(raw)


def _set(cache: BaseCache, key: str, value: Any) -> None:
    fast = _redis(cache, write=True)
    if fast is None:
        cache.set(key, value, timeout=timeout())
        return
    client, serializer = fast
    ttl = cache.get_backend_timeout(timeout())
    client.set(cache.make_and_validate_key(key), serializer.dumps(value), ex=ttl)


def timeout() -> float:
    return float(app_settings.LIVE_CACHE_SECONDS)


def changed(using: str = DEFAULT_DB_ALIAS) -> None:
    """Something the live pages show changed in the current transaction: replace the token once
    it commits (at once outside one), so that a poll that read the old data before the commit
    answers with the old token and the next one sees the new. Nothing when there is no token."""
    if cache_alias() is None:
        return
    commit_hooks.once(bump, using=using)  # one new token per commit is enough


def bump() -> None:
    """A new token now. A cache that cannot be reached is logged, not raised: the change is
    committed, and the live pages show it when the token expires."""
    cache = token_cache()
    if cache is None:
        return
    try:
        _set(cache, KEY, secrets.token_hex(16))
    except Exception:  # the cache's client raises its own errors (redis, pymemcache, ...)
        logger.warning("Could not replace the live pages' change token", exc_info=True)
