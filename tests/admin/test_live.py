"""The live endpoint's answer to "has anything changed", both ways: from the change token in a
shared cache (real Redis: ``LIVE_CACHE="live"``), and from the database (the per-process default
cache, the fallback). Transactional tests: the token is replaced after commit, as in production."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, Permission
from django.core.cache import caches
from django.db import connection
from django.test import Client
from django.urls import reverse

from nitro_assistants import services
from nitro_assistants.checks import check_settings
from nitro_assistants.models import Review
from nitro_assistants.services import changes, claims
from nitro_assistants.services.mirror import mirror_pending
from tests.admin.conftest import VIEW_PERMISSIONS, _client, _staff, make_tool_review
from tests.admin.test_claims import pause
from tests.factories import ThreadFactory

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
LIVE = reverse("admin:nitro_assistants_review_live")
#: What Django costs every admin request before the view: the session and the user.
DJANGO_LOOKUPS = 2


@pytest.fixture(params=["shared", "fallback"])
def mode(request: Any, settings: Any) -> str:
    """``shared``: the token in Redis; ``fallback``: the default (per-process) cache, unused."""
    shared = request.param == "shared"
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "LIVE_CACHE": "live" if shared else None,
    }
    caches["live"].delete(changes.KEY)
    return str(request.param)


@pytest.fixture
def shared(settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": "live"}
    caches["live"].delete(changes.KEY)


@pytest.fixture
def jane(django_user_model: Any) -> Any:
    return _staff(django_user_model, "jane", [*VIEW_PERMISSIONS, "decide_review"])


@pytest.fixture
def group_reviewer(django_user_model: Any) -> Any:
    """Staff whose permissions all come from a group: Django reads them per request (two
    statements), which a 304 from the token does not need."""
    group = Group.objects.create(name="Reviewers")
    group.permissions.set(
        Permission.objects.filter(
            content_type__app_label="nitro_assistants",
            codename__in=[*VIEW_PERMISSIONS, "decide_review"],
        )
    )
    user = django_user_model.objects.create_user("sam", password="pw", is_staff=True)
    user.groups.add(group)
    return user


def poll(client: Client, tag: str = "", **query: Any) -> Any:
    headers = {"HTTP_IF_NONE_MATCH": tag} if tag else {}
    return client.get(LIVE, query, **headers)


@pytest.mark.parametrize("who", ["superuser", "group_reviewer"])
def test_an_unchanged_poll_is_a_304_in_two_statements_with_the_shared_cache(
    request: Any, shared: None, who: str, django_assert_max_num_queries: Any
) -> None:
    client = _client(request.getfixturevalue(who))
    review = make_tool_review()
    first = poll(client, ids=review.pk)
    assert first.status_code == 200 and str(review.pk) in first.json()["rows"]
    with django_assert_max_num_queries(DJANGO_LOOKUPS):
        again = poll(client, first["ETag"], ids=review.pk)
    assert again.status_code == 304 and again["ETag"] == first["ETag"]


def test_without_a_shared_cache_an_unchanged_poll_costs_one_statement_more(
    superuser: Any, django_assert_num_queries: Any
) -> None:
    assert changes.cache_alias() is None  # the suite's default cache is a LocMemCache
    client = _client(superuser)
    review = make_tool_review()
    first = poll(client, ids=review.pk)
    with django_assert_num_queries(DJANGO_LOOKUPS + 1):  # live.marker()
        again = poll(client, first["ETag"], ids=review.pk)
    assert again.status_code == 304


def test_the_default_cache_is_used_when_it_is_shared(settings: Any) -> None:
    settings.CACHES = {**settings.CACHES, "default": settings.CACHES["live"]}
    assert changes.cache_alias() == "default"
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": ""}
    assert changes.cache_alias() is None  # "": never


def test_each_change_answers_200_with_a_new_etag(mode: str, group_reviewer: Any, jane: Any) -> None:
    client = _client(group_reviewer)
    review = make_tool_review()
    seen: list[str] = []

    def answer() -> dict[str, Any]:
        response = poll(client, seen[-1] if seen else "", ids=review.pk)
        assert response.status_code == 200, "the change was not seen"
        assert response["ETag"] not in seen
        seen.append(response["ETag"])
        assert poll(client, seen[-1], ids=review.pk).status_code == 304
        return dict(response.json())

    assert answer()["rows"][str(review.pk)]["claim"] is None
    claims.claim_review(review, jane)  # a claim by another reviewer
    assert answer()["rows"][str(review.pk)]["claim"]["user"] == jane.pk
    claims.claim_review(review, jane)  # its renewal (no event)
    answer()
    claims.release_claim(review, jane)  # its release (no event either)
    assert answer()["rows"][str(review.pk)]["claim"] is None
    services.decide(
        Review.objects.get(pk=review.pk),
        jane,
        {"tool_calls": [{"id": "call_1", "action": "approve"}]},
    )
    body = answer()
    assert body["rows"][str(review.pk)]["status"] == "decided" and body["pending"] == 0
    new = mirror_pending(ThreadFactory(), None, pause("reply"))  # a new review
    assert new is not None
    body = answer()
    assert body["newest"] == new.pk and body["pending"] == 1


@pytest.mark.postgresql("the other process opens the test database")
def test_a_claim_taken_in_another_process_changes_the_answer(
    shared: None, group_reviewer: Any, jane: Any
) -> None:
    client = _client(group_reviewer)
    review = make_tool_review()
    tag = poll(client, ids=review.pk)["ETag"]
    assert poll(client, tag, ids=review.pk).status_code == 304
    script = (
        "import django, sys; django.setup()\n"
        "from django.contrib.auth import get_user_model\n"
        "from nitro_assistants.models import Review\n"
        "from nitro_assistants.services import claims\n"
        "claims.claim_review(Review.objects.get(pk=int(sys.argv[1])),"
        " get_user_model().objects.get(pk=int(sys.argv[2])))\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(review.pk), str(jane.pk)],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "NITRO_TEST_DB_NAME": connection.settings_dict["NAME"],
            "NITRO_TEST_CACHE_PREFIX": django_settings.CACHES["live"]["KEY_PREFIX"],
            "NITRO_TEST_LIVE_CACHE": "live",
        },
        check=True,
        timeout=60,
    )
    changed = poll(client, tag, ids=review.pk)
    assert changed.status_code == 200 and changed["ETag"] != tag
    assert changed.json()["rows"][str(review.pk)]["claim"]["user"] == jane.pk


def test_another_users_forged_or_old_etag_gets_no_304(
    mode: str, group_reviewer: Any, jane: Any, superuser: Any
) -> None:
    review = make_tool_review()
    sam, root = _client(group_reviewer), _client(superuser)
    sams = poll(sam, ids=review.pk)["ETag"]
    assert poll(root, sams, ids=review.pk).status_code == 200  # someone else's
    if mode == "shared":  # one made without the site's key, from a token guessed right
        token = changes.current_token(caches["live"])
        forged = '"t' + hashlib.sha256(f"{superuser.pk}{token}".encode()).hexdigest()
        assert poll(root, forged[:35] + '"', ids=review.pk).status_code == 200
    assert poll(sam, sams, ids=f"{review.pk},1").status_code == 200  # about other rows
    claims.claim_review(review, jane)
    assert poll(sam, sams, ids=review.pk).status_code == 200  # from before a change


def test_a_lost_permission_shows_within_the_tokens_lifetime(
    settings: Any, shared: None, group_reviewer: Any
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE_SECONDS": 1}
    client = _client(group_reviewer)
    tag = poll(client)["ETag"]
    group_reviewer.groups.clear()  # writes nothing the live pages show
    assert poll(client, tag).status_code == 304  # the token still stands: a 304 tells nothing
    time.sleep(1.2)
    assert poll(client, tag).status_code == 403


def test_an_unreachable_cache_falls_back_to_the_database(
    settings: Any, superuser: Any, jane: Any, caplog: Any
) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "gone": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
        },
    }
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": "gone"}
    client = _client(superuser)
    review = make_tool_review()
    tag = poll(client, ids=review.pk)["ETag"]
    assert poll(client, tag, ids=review.pk).status_code == 304
    claims.claim_review(review, jane)  # the writer does not fail on it
    assert poll(client, tag, ids=review.pk).status_code == 200
    assert "Could not replace the live pages' change token" in caplog.text
    assert "Could not read the live pages' change token" in caplog.text


@pytest.mark.parametrize(
    ("alias", "eager", "expected"),
    [
        ("local", False, "nitro_assistants.W001"),
        ("local", True, None),  # one process: eager tasks run where the page polls
        ("nothing", False, "nitro_assistants.E017"),
        ("live", False, None),
        ("", False, None),
    ],
)
def test_the_live_cache_is_checked(
    settings: Any, alias: str, eager: bool, expected: str | None
) -> None:
    from tests.celery_app import app

    settings.CACHES = {
        **settings.CACHES,
        "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": alias}
    was = app.conf.task_always_eager
    app.conf.task_always_eager = eager
    try:
        found = [
            m.id
            for m in check_settings()
            if m.id in {"nitro_assistants.W001", "nitro_assistants.E017"}
        ]
    finally:
        app.conf.task_always_eager = was
    assert found == ([expected] if expected else [])


def test_a_transaction_replaces_the_token_once_however_many_changes_it_makes(
    shared: None,
) -> None:
    """Each append about a review (and a claim's renewal) asks for a new token after commit; one
    commit replaces it once, with the redis client reused (Django's cache makes one per call)."""
    from django.db import transaction

    from nitro_assistants.services.audit import record_event

    review = make_tool_review()
    cache = changes.token_cache()
    assert cache is not None
    before = changes.current_token(cache)
    with transaction.atomic():
        record_event(review.thread, "review_edited", review=review)
        record_event(review.thread, "review_assigned", review=review)
        changes.changed()
        # Registered through services.commit_hooks: each hook holds the function it runs.
        hooks = [e for e in connection.run_on_commit if getattr(e[1], "func", None) is changes.bump]
        assert len(hooks) == 1
        assert changes.current_token(cache) == before  # not before the commit
    after = changes.current_token(cache)
    assert after != before
    fast = changes._redis(cache, write=True)
    assert fast is not None and fast[0] is changes._redis(cache, write=True)[0]  # type: ignore[index]


def test_a_threads_and_a_runs_own_events_keep_the_token(
    shared: None, jane: Any, monkeypatch: Any
) -> None:
    """A new thread, its run starting and finishing write events about no review: nothing the
    queue or the review screen shows changed, so the token stands (no Redis write, and every
    open page keeps its 304). The review the run asks for, its claim and its decision replace it."""
    from nitro_assistants import tasks
    from nitro_assistants.services.audit import record_event
    from nitro_assistants.services.runs import claim_run

    for task in (tasks.run_thread, tasks.resume_thread):  # no worker here: nothing is sent
        monkeypatch.setattr(task, "delay", lambda *args, **kwargs: None)
    cache = changes.token_cache()
    assert cache is not None
    client = _client(jane)
    tag = poll(client)["ETag"]
    token = changes.current_token(cache)

    run = services.start_run("walkthrough", "Refund my order")  # the new thread and its first run
    run = claim_run(run.pk)  # run_started, with the thread marked running
    record_event(run.thread, "run_interrupted", run=run)
    assert changes.current_token(cache) == token
    assert poll(client, tag).status_code == 304

    review = mirror_pending(run.thread, run, pause("tool_calls"))  # review_requested
    assert review is not None
    assert changes.current_token(cache) != token
    response = poll(client, tag)
    assert response.status_code == 200 and response.json()["newest"] == review.pk
    for change in (
        lambda: claims.claim_review(review, jane),
        lambda: services.decide(
            Review.objects.get(pk=review.pk),
            jane,
            {"tool_calls": [{"id": "c1", "action": "approve"}]},
        ),
    ):
        token = changes.current_token(cache)
        change()
        assert changes.current_token(cache) != token
