from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from hypothesis import settings as hypothesis_settings

from nitro_assistants.testing.launchers import LangGraphServer

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = ROOT / "tests" / "graphs" / "agents.py"
GRAPH_NAMES = ("walkthrough", "tools", "per_call", "plain", "interactions", "refunds")
#: Graphs pausing in other dialects (docs/protocol.md §9): Agent Inbox, plain interrupt() values.
DIALECTS = ROOT / "tests" / "graphs" / "dialects.py"
DIALECT_GRAPHS = ("inbox", "plain_interrupt", "parallel", "schema", "slow", "expiring")

#: Every property-based test (hypothesis, schemathesis) draws the same examples on every run and
#: every machine, and keeps no example database between runs: a failure is the code's, never a
#: draw's. A test's own ``@settings`` adds to this profile; tests/test_determinism.py holds to it.
hypothesis_settings.register_profile("nitro", derandomize=True, database=None)
hypothesis_settings.load_profile("nitro")


@pytest.fixture(scope="session", autouse=True)
def the_test_celery_app() -> None:
    """The suite's Celery app is the current and default one in every thread, whatever other app
    a test module created when it was collected (importing the example site creates its app,
    which Celery then makes this thread's current app)."""
    from tests.celery_app import app

    app.set_current()
    app.set_default()


def _forget_workers_rules(**kwargs: object) -> None:
    from django.core.cache import caches
    from django.db import transaction

    from nitro_assistants.services import policy_enforcement

    if policy_enforcement._stamp_cache() is not None:
        return  # a test with a shared cache of its own: the app's receivers do it
    transaction.on_commit(
        lambda: caches["live"].delete(policy_enforcement.STAMP_KEY), using=str(kwargs["using"])
    )


@pytest.fixture(scope="session", autouse=True)
def workers_see_rule_changes() -> None:
    """The Celery workers the suite starts keep the policy rules' stamp in the ``live`` Redis
    cache (``NITRO_TEST_LIVE_CACHE=live``) while this process mostly runs without one: its rule
    (and group) writes delete the workers' stamp after commit all the same, as a deployment's
    processes, which share one setting, do (a test with a shared cache of its own leaves it to
    the app's receivers)."""
    from django.contrib.auth.models import Group
    from django.db.models.signals import post_delete, post_save

    from nitro_assistants.models import Grant, Policy

    post_save.connect(_forget_workers_rules, sender=Policy, dispatch_uid="tests.policy_saved")
    post_delete.connect(_forget_workers_rules, sender=Policy, dispatch_uid="tests.policy_deleted")
    post_save.connect(_forget_workers_rules, sender=Group, dispatch_uid="tests.group_saved")
    post_save.connect(_forget_workers_grants, sender=Grant, dispatch_uid="tests.grant_saved")


def _forget_workers_grants(sender: Any, **kwargs: Any) -> None:
    """A grant given or revoked here: the workers compile the grants again (see
    :func:`workers_see_rule_changes`)."""
    from django.core.cache import caches
    from django.db import transaction

    from nitro_assistants.services import grants

    if grants._stamp_cache() is not None:
        return
    transaction.on_commit(
        lambda: caches["live"].delete(grants.STAMP_KEY), using=str(kwargs["using"])
    )


@pytest.fixture(autouse=True)
def fresh_policy_rules() -> None:
    """Each test's rules are compiled afresh, here and in the workers: a transactional test's
    tables are flushed without signals, and a rolled-back test's rules were never committed."""
    from django.core.cache import caches

    from nitro_assistants.services import grants, policy_enforcement

    policy_enforcement.forget_rules()
    grants.forget_grants()
    with contextlib.suppress(Exception):  # no Redis: the tests that need it say so themselves
        caches["live"].delete(policy_enforcement.STAMP_KEY)
        caches["live"].delete(grants.STAMP_KEY)


@pytest.fixture(autouse=True)
def fresh_default_cache() -> None:
    """Each test starts with an empty per-process cache (the API's rate-limit counters live
    there). On SQLite a rolled-back test's API key id is given again to the next test's key, so
    without this the counters of every earlier test in the minute added up on "one" key, and a
    fast run failed the later API tests with 429."""
    from django.core.cache import caches

    caches["default"].clear()


@pytest.fixture(scope="session")
def langgraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LangGraphServer]:
    """The real LangGraph Agent Server running the graphs of tests/graphs/agents.py."""
    server = LangGraphServer(
        workdir=tmp_path_factory.mktemp("langgraph"),
        graphs={
            **{name: f"{GRAPHS}:{name}" for name in GRAPH_NAMES},
            **{name: f"{DIALECTS}:{name}" for name in DIALECT_GRAPHS},
        },
        dependencies=[str(ROOT)],
    ).start()
    try:
        yield server
    finally:
        server.stop()


#: Fixtures that start a Celery worker in another process: it cannot open the in-memory SQLite
#: test database this process holds, so their tests run on PostgreSQL only.
WORKER_FIXTURES = {"celery_worker", "start_worker"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database-tests-only",
        action="store_true",
        help="run only the tests that may open the test database: a django_db mark, or a "
        "fixture that needs one (db, transactional_db, and every fixture built on them); "
        "scripts/test.sh's prepared-statement pass",
    )


def uses_the_database(item: pytest.Item) -> bool:
    """Whether pytest-django lets ``item`` open the test database. Every other test is refused
    a connection (pytest-django blocks it), so what the database does cannot change its result."""
    return item.get_closest_marker("django_db") is not None or "_django_db_helper" in set(
        getattr(item, "fixturenames", ())
    )


#: Fixtures that start chromium (tests/admin/test_browser.py): a test using one is a browser test.
BROWSER_FIXTURES = {"browser", "page"}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: a marker added here counts there
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``browser`` every test that starts chromium through the browser fixtures, should its
    module forget to (``-m "not browser"``, make test-fast, must leave them all out). On SQLite
    (``NITRO_TEST_DB=sqlite``), skip, saying why, the tests that need PostgreSQL: those marked
    ``@pytest.mark.postgresql("why")`` and those that use a worker process."""
    for item in items:
        if BROWSER_FIXTURES & set(
            getattr(item, "fixturenames", ())
        ) and not item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.browser)
    if config.getoption("--database-tests-only"):
        kept = [item for item in items if uses_the_database(item)]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[i for i in items if not uses_the_database(i)])
            items[:] = kept
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        return
    for item in items:
        marker = item.get_closest_marker("postgresql")
        if marker is not None:
            why = marker.args[0] if marker.args else "PostgreSQL only"
        elif WORKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            why = "a Celery worker process cannot open the in-memory SQLite test database"
        else:
            continue
        item.add_marker(pytest.mark.skip(reason=f"needs PostgreSQL: {why}"))
