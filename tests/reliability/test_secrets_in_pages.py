"""Secrets never reach a page: with every definition's ``api_key`` and the ``WEBHOOK_SECRET`` set to
recognisable strings, and API keys created the way staff create them (the admin's add page, which
shows the new key once), no admin page (every view of the permission matrix, as a superuser, and
the page each redirect leads to), no error answer of the decide API (400, 401, 403, 404, 405, 409,
413, 415, 429, 500) and not the OpenAPI document carries any of them, in its body or in a
header: neither the raw keys, nor their stored hashes, nor Django's ``SECRET_KEY``.

The one exception is the page that shows a key right after it is created, and only that key.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client

from nitro_assistants.models import ApiKey
from nitro_assistants.testing import FakeAssistant, fake_assistants
from tests.interactions.conftest import assert_error
from tests.reliability.test_permission_matrix import (
    CASES,
    LOGIN,
    Case,
    World,
    build_world,
    request,
)

pytestmark = pytest.mark.django_db

DEFINITION_KEY = f"sk-page-{uuid.uuid4().hex}"
WEBHOOK_SECRET = f"whsec-page-{uuid.uuid4().hex}"
CREATED = re.compile(r'<code class="nitro-api-key"[^>]*>(nak_[^<]+)</code>')


@pytest.fixture
def secret_settings(settings: Any) -> Any:
    config = settings.NITRO_ASSISTANTS
    settings.NITRO_ASSISTANTS = {
        **config,
        "DEFINITIONS": {
            key: {**d, "api_key": DEFINITION_KEY} for key, d in config["DEFINITIONS"].items()
        },
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
    }
    return settings


@pytest.fixture
def fake() -> Iterator[FakeAssistant]:
    with fake_assistants() as fake:
        yield fake


class Pages:
    """The world of the permission matrix, a superuser's client, and every secret to look for."""

    def __init__(self) -> None:
        self.world: World = build_world()
        self.admin = Client()
        self.admin.force_login(User.objects.create_superuser("root", password=None))
        created = self.admin.post(
            "/admin/nitro_assistants/apikey/add/", {"user": self.world.opener.pk, "name": "Pages"}
        )
        assert created.status_code == 200
        match = CREATED.search(created.content.decode())
        assert match is not None
        self.created_key = match.group(1)
        generated = self.world.key
        self.world.key = self.created_key  # the API is called with the key the admin made
        assert ApiKey.objects.get(name="Pages").matches(self.created_key)
        self.secrets = {
            "definition api_key": DEFINITION_KEY,
            "WEBHOOK_SECRET": WEBHOOK_SECRET,
            "SECRET_KEY": django_settings.SECRET_KEY,
            "API key (admin)": self.created_key,
            "API key (generated)": generated,
            **{f"hash of key {k.name}": k.hashed_key for k in ApiKey.objects.all()},
        }
        # The page that shows a key once shows that key, and no other secret.
        assert_clean(created, self.secrets, allowed={"API key (admin)"})
        with pytest.raises(AssertionError, match="API key"):
            assert_clean(created, self.secrets)  # the search does find a key that is there


def assert_clean(
    response: Any, secrets: dict[str, str], allowed: frozenset[str] | set[str] = frozenset()
) -> None:
    body = response.content.decode("utf-8", "replace")
    headers = "\n".join(f"{name}: {value}" for name, value in response.items())
    headers += "\n" + response.cookies.output()
    for name, secret in secrets.items():
        if name in allowed:
            continue
        assert secret not in body, f"{name} in the body of {response.status_code}"
        assert secret not in headers, f"{name} in the headers of {response.status_code}"


@pytest.fixture
def pages(secret_settings: Any, fake: FakeAssistant) -> Pages:
    return Pages()


ADMIN_CASES = [case for case in CASES if not case.api]


@pytest.mark.parametrize("case", ADMIN_CASES, ids=[case.name for case in ADMIN_CASES])
def test_no_admin_page_shows_a_secret(case: Case, pages: Pages) -> None:
    response = request(case, pages.admin, {}, pages.world)
    assert response.status_code != 500
    assert response.status_code == case.expect["superuser"]
    # The add page shows the key it just made: a key of its own, none of the others.
    assert_clean(response, pages.secrets)
    if response.status_code == 302 and not response["Location"].startswith(LOGIN):
        followed = pages.admin.get(response["Location"])
        assert followed.status_code in (200, 302), response["Location"]
        assert_clean(followed, pages.secrets)


def test_the_interaction_screens_show_no_secret(pages: Pages) -> None:
    world = pages.world
    for url in (
        f"/admin/nitro_assistants/review/{world.question.pk}/review/",
        f"/admin/nitro_assistants/thread/{world.thread.pk}/change/",
        "/admin/nitro_assistants/review/?status=all",
        "/admin/",
    ):
        response = pages.admin.get(url)
        assert response.status_code == 200, url
        assert_clean(response, pages.secrets)


# -- the decide API's answers -----------------------------------------------------------------

ApiCall = Callable[[Pages, Client, pytest.MonkeyPatch], Any]


def url(pages: Pages, rest: str = "") -> str:
    return f"/nitro/api/sessions/{pages.world.thread.thread_id}{rest}"


def bearer(key: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {key}"}


def decide(pages: Pages, client: Client, body: Any = None, **extra: Any) -> Any:
    question = pages.world.question
    if body is None:
        body = {
            "decision": "answer",
            "revision": question.revision,
            "digest": question.digest,
            "answers": [{"questionId": "day", "optionIds": ["fri"]}],
        }
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    extra.setdefault("content_type", "application/json")
    return client.post(
        url(pages, "/interactions/int-day/decide"),
        data,
        **{**bearer(pages.created_key), **extra},
    )


def revoked(pages: Pages, client: Client, monkeypatch: pytest.MonkeyPatch) -> Any:
    ApiKey.objects.filter(name="Pages").update(revoked_at="2026-01-01T00:00:00Z")
    return client.get(url(pages, "/interactions"), **bearer(pages.created_key))


def stranger(pages: Pages, client: Client, monkeypatch: pytest.MonkeyPatch) -> Any:
    other = ApiKey.generate(User.objects.create_user("sam"), "sam")[1]
    pages.secrets["API key (stranger)"] = other
    return decide(pages, client, HTTP_AUTHORIZATION=f"Bearer {other}")


def csrf(pages: Pages, client: Client, monkeypatch: pytest.MonkeyPatch) -> Any:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(pages.world.opener)
    return strict.post(url(pages, "/interactions/int-day/decide"), "{}", "application/json")


def rate_limited(pages: Pages, client: Client, monkeypatch: pytest.MonkeyPatch) -> Any:
    pages_settings = {**django_settings.NITRO_ASSISTANTS, "API_RATE_LIMIT": 1}
    monkeypatch.setattr(django_settings, "NITRO_ASSISTANTS", pages_settings)
    client.get(url(pages, "/events"), **bearer(pages.created_key))
    return client.get(url(pages, "/events"), **bearer(pages.created_key))


def crashed(pages: Pages, client: Client, monkeypatch: pytest.MonkeyPatch) -> Any:
    def boom(*args: Any) -> Any:
        raise RuntimeError(f"connecting with {DEFINITION_KEY} signed {WEBHOOK_SECRET}")

    monkeypatch.setattr("nitro_assistants.api.views.latest_revisions", boom)
    return client.get(url(pages, "/interactions"), **bearer(pages.created_key))


API_ERRORS: dict[str, tuple[int, str, ApiCall]] = {
    "401-no-credentials": (
        401, "unauthorized", lambda p, c, m: c.get(url(p, "/interactions"))
    ),
    "401-wrong-key": (
        401, "unauthorized",
        lambda p, c, m: c.get(url(p, "/interactions"), **bearer(p.created_key[:-4] + "xxxx")),
    ),
    "401-definition-key-as-bearer": (
        401, "unauthorized",
        lambda p, c, m: c.get(url(p, "/interactions"), **bearer(DEFINITION_KEY)),
    ),
    "401-revoked": (401, "unauthorized", revoked),
    "403-not-the-opener": (403, "forbidden", stranger),
    "403-csrf": (403, "forbidden", csrf),
    "404-session": (
        404, "not_found",
        lambda p, c, m: c.get(f"/nitro/api/sessions/{uuid.uuid4()}/events", **bearer(p.created_key)),
    ),
    "404-interaction": (
        404, "not_found",
        lambda p, c, m: c.get(url(p, "/interactions/nope"), **bearer(p.created_key)),
    ),
    "404-endpoint": (
        404, "not_found", lambda p, c, m: c.get("/nitro/api/nope", **bearer(p.created_key))
    ),
    "405-method": (
        405, "not_found", lambda p, c, m: c.delete(url(p, "/events"), **bearer(p.created_key))
    ),
    "409-revision": (
        409, "conflict",
        lambda p, c, m: decide(p, c, {"decision": "cancel", "revision": 9, "digest": p.world.question.digest}),
    ),
    "409-digest": (
        409, "conflict",
        lambda p, c, m: decide(p, c, {"decision": "cancel", "revision": p.world.question.revision, "digest": "0" * 64}),
    ),
    "400-not-json": (400, "invalid_json", lambda p, c, m: decide(p, c, '{"decision": ')),
    "400-field": (
        400, "invalid_json",
        lambda p, c, m: decide(p, c, {"decision": "answer", "revision": 1, "digest": "x", "answers": 3}),
    ),
    "400-query": (
        400, "invalid_query",
        lambda p, c, m: c.get(url(p, "/events"), {"limit": "x"}, **bearer(p.created_key)),
    ),
    "413-too-large": (
        413, "payload_too_large",
        lambda p, c, m: decide(p, c, {"decision": "cancel", "note": "x" * (65 * 1024)}),
    ),
    "415-not-json": (
        415, "unsupported_media_type",
        lambda p, c, m: decide(p, c, "decision=cancel", content_type="text/plain"),
    ),
    "429-rate-limit": (429, "rate_limit_exceeded", rate_limited),
    "500-unexpected": (500, "internal_error", crashed),
}  # fmt: skip


@pytest.mark.parametrize("name", list(API_ERRORS))
def test_no_api_error_shows_a_secret(
    name: str, pages: Pages, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, code, call = API_ERRORS[name]
    response = call(pages, Client(), monkeypatch)
    assert_error(response, status, code)
    assert_clean(response, pages.secrets)


def test_the_openapi_document_and_answers_show_no_secret(pages: Pages) -> None:
    client = Client()
    document = client.get("/nitro/api/openapi.json")
    assert document.status_code == 200
    assert_clean(document, pages.secrets)
    for rest in ("/interactions", "/interactions/int-day", "/events"):
        response = client.get(url(pages, rest), **bearer(pages.created_key))
        assert response.status_code == 200
        assert_clean(response, pages.secrets)
    answered = decide(pages, client)
    assert answered.status_code == 200
    assert_clean(answered, pages.secrets)
