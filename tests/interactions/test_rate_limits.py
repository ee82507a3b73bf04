"""The decide API's rate limits (docs/api.md "Rate limits"): one budget per user, whatever key
or session they come with, and a budget of refused keys per client address, past which every
key from that address, the right one too, is a 429 for the rest of the minute, and no other
address is affected. The clock is held still, so no minute turns mid-test."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

from nitro_assistants.api import auth
from nitro_assistants.models import ApiKey
from tests.interactions.conftest import assert_error

pytestmark = pytest.mark.django_db

REVIEWS = "/nitro/api/reviews"


@pytest.fixture
def minute(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Callable[[float], None]:
    """Hold the limiter's clock 15 s into a minute of its own (no other test counts in it);
    ``move(seconds)`` moves it on."""
    start = [60.0 * (10**8 + uuid.uuid4().int % 10**6) + 15]
    monkeypatch.setattr(auth, "clock", lambda: start[0])
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "API_RATE_LIMIT": 3,
        "API_AUTH_FAILURE_LIMIT": 3,
    }

    def move(seconds: float) -> None:
        start[0] += seconds

    yield move
    cache.clear()


def get(client: Client, key: str | None = None, address: str = "10.0.0.1") -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key is not None else {}
    return client.get(REVIEWS, REMOTE_ADDR=address, **headers)


def limited(response: Any, retry_after: int = 45) -> dict[str, Any]:
    body = assert_error(response, 429, "rate_limit_exceeded")
    assert body["details"]["retryable"] is True
    assert response["Retry-After"] == str(retry_after)
    return body


def test_a_users_keys_and_session_share_one_budget(client: Client, minute: Any) -> None:
    olivia, sam = User.objects.create_user("olivia"), User.objects.create_user("sam")
    first, second = ApiKey.generate(olivia, "CRM")[1], ApiKey.generate(olivia, "bot")[1]
    assert get(client, first).status_code == 200
    assert get(client, second).status_code == 200
    assert get(client, first, address="10.0.0.2").status_code == 200  # a budget per user
    body = limited(get(client, second))
    assert "a minute per user" in body["message"]
    limited(get(client, first))
    client.force_login(olivia)
    limited(get(client))  # her session: the same budget
    client.logout()
    assert get(client, ApiKey.generate(sam, "sam")[1]).status_code == 200  # his own budget
    minute(60)
    assert get(client, first).status_code == 200  # the next minute


def test_refused_keys_throttle_their_address_only(
    client: Client, minute: Any, caplog: pytest.LogCaptureFixture
) -> None:
    olivia = User.objects.create_user("olivia")
    right = ApiKey.generate(olivia, "CRM")[1]
    near = right[:-1] + ("x" if right[-1] != "x" else "y")  # its prefix, another secret
    wrong = [near, "nsk_nothing_like_it", "Basic abc"]
    for guess in wrong:
        header = guess if guess.startswith("Basic") else f"Bearer {guess}"
        response = client.get(REVIEWS, REMOTE_ADDR="10.0.0.1", HTTP_AUTHORIZATION=header)
        assert_error(response, 401, "unauthorized")
    (warning,) = [r for r in caplog.records if r.name == "nitro_assistants.api"]
    assert "3 API keys refused from 10.0.0.1" in warning.getMessage()
    body = limited(get(client, "nsk_another_guess"))
    assert "refused API keys from your address" in body["message"]
    # The right key too, from that address: else a guess that hits would answer 200, not 429.
    limited(get(client, right))
    assert ApiKey.objects.get(user=olivia).last_used_at is None  # not even looked up
    # From any other address the key works, and a wrong key there is a plain 401.
    assert get(client, right, address="10.0.0.2").status_code == 200
    assert_error(get(client, "nsk_guess", address="10.0.0.2"), 401, "unauthorized")
    # A signed-in session from the throttled address sends no key: not refused.
    client.force_login(User.objects.create_user("sam"))
    assert get(client).status_code == 200
    client.logout()
    minute(45)  # the minute is over: the address may try again
    assert get(client, right).status_code == 200


def test_a_revoked_key_counts_as_refused(client: Client, minute: Any) -> None:
    olivia = User.objects.create_user("olivia")
    key, secret = ApiKey.generate(olivia, "old")
    ApiKey.objects.filter(pk=key.pk).update(revoked_at="2026-01-01T00:00:00Z")
    for _ in range(3):
        assert_error(get(client, secret), 401, "unauthorized")
    limited(get(client, secret))


def test_zero_turns_the_failure_limit_off(client: Client, minute: Any, settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "API_AUTH_FAILURE_LIMIT": 0}
    for _ in range(10):
        assert_error(get(client, "nsk_guess"), 401, "unauthorized")


def _closed_port() -> int:
    """A local port nothing listens on (bound, then let go): a connection to it is refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("with_key", [True, False], ids=["api-key", "session"])
def test_an_unreachable_cache_is_a_retryable_503_not_a_500(
    client: Client, settings: Any, with_key: bool
) -> None:
    """Redis restarting under the limits (found by the many-hosts run, docs/scale.md): the
    budgets cannot be counted, so the request is refused in the envelope, retryable, with a
    Retry-After; the limits fail closed (no key is looked at uncounted) and nothing is a 500."""
    olivia = User.objects.create_user("olivia")
    key = ApiKey.generate(olivia, "CRM")[1]
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "API_RATE_LIMIT": 100}
    settings.CACHES = {
        **settings.CACHES,
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{_closed_port()}/0",
        },
    }
    if with_key:
        response = get(client, key)
    else:
        client.force_login(olivia)
        response = client.get(REVIEWS)
    body = assert_error(response, 503, "rate_limit_unavailable")
    assert body["details"]["retryable"] is True
    assert response["Retry-After"] == str(auth.CACHE_DOWN_RETRY_AFTER)
    assert "retry in" in body["message"]
