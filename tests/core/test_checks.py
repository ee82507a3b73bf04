from __future__ import annotations

import datetime
import sys
from pathlib import Path
from typing import Any

import pytest

from nitro_assistants.checks import check_settings
from tests.fresh_project import Project, start_project

ROOT = Path(__file__).resolve().parents[2]


def ids(settings: Any, **config: Any) -> list[str]:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, **config}
    return [message.id for message in check_settings()]


def test_test_settings_pass(settings: Any) -> None:
    assert ids(settings) == []


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"BASE_URL": "assistants.example.com"}, "nitro_assistants.E001"),
        ({"DEFINITIONS": {}}, "nitro_assistants.E002"),
        ({"DEFINITIONS": {"vc": {"api_key": "k"}}}, "nitro_assistants.E003"),
        ({"AUTH": "basic"}, "nitro_assistants.E004"),
        ({"RUN_MODE": "later"}, "nitro_assistants.E005"),
        ({"WEBHOOK_URL": "ftp://x"}, "nitro_assistants.E006"),
        ({"WEBHOOK_URL": "https://x/h/", "WEBHOOK_SECRET": ""}, "nitro_assistants.E007"),
        ({"MAX_CONCURRENT_REQUESTS": 0}, "nitro_assistants.E009"),
        ({"MAX_CONCURRENT_REQUESTS": "10"}, "nitro_assistants.E009"),
    ],
)
def test_each_misconfiguration_has_its_id(settings: Any, config: dict[str, Any], expected: str):
    assert ids(settings, **config) == [expected]


@pytest.mark.parametrize(
    "placeholder",
    [
        "...",
        "…",
        "<assistant id>",
        "{{ assistant_id }}",
        "your-assistant-id",
        "YOUR_ASSISTANT_ID",
        "changeme",
        "change-me",
        "xxxx",
        "TODO",
        "assistant-id",
        " ... ",
    ],
)
def test_a_placeholder_assistant_id_fails_with_a_hint(settings: Any, placeholder: str) -> None:
    """A definition pasted from a docs snippet ("assistant_id": "...") must fail the check, not
    the first run in a worker."""
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "DEFINITIONS": {"vc": {"api_key": "k", "assistant_id": placeholder}},
    }
    [message] = check_settings()
    assert message.id == "nitro_assistants.E010"
    assert repr(placeholder) in message.msg
    assert "UUID" in message.hint and "graph id" in message.hint


@pytest.mark.parametrize(
    "assistant_id",
    [
        "agent",
        "virtual-confirmation",
        "walkthrough",
        "0b3c9b8e-5a8e-4c1e-9a4e-2f0d6f7d9b11",
        "my_graph",
        "todo-list",
        "assistant",
    ],
)
def test_real_assistant_ids_are_not_placeholders(settings: Any, assistant_id: str) -> None:
    assert ids(settings, DEFINITIONS={"vc": {"api_key": "k", "assistant_id": assistant_id}}) == []


def test_settings_are_read_when_used(settings: Any) -> None:
    from nitro_assistants.conf import app_settings

    settings.NITRO_ASSISTANTS = {"DELIVERY_PENDING_AFTER": 7}
    assert app_settings.DELIVERY_PENDING_AFTER == 7
    assert app_settings.RUN_MODE == "wait"  # default
    assert app_settings.client_config()["definitions"] == {}


@pytest.fixture
def fresh_project(tmp_path: Path) -> Project:
    return start_project(tmp_path / "site", Path(sys.executable), pythonpath=str(ROOT))


def test_a_fresh_project_without_a_celery_app_fails_the_check(fresh_project: Project) -> None:
    done = fresh_project.manage("check")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "nitro_assistants.E008" in done.stderr
    assert "No Celery app is configured" in done.stderr
    assert "System check identified 1 issue" in done.stderr


def test_a_fresh_project_with_celerys_django_layout_passes(fresh_project: Project) -> None:
    fresh_project.add_celery_app()
    done = fresh_project.manage("check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


def test_a_request_limit_reaches_the_client(settings: Any) -> None:
    import nitro_assistants

    assert ids(settings, MAX_CONCURRENT_REQUESTS=6) == []
    transport = nitro_assistants.assistants()["tools"].client.transport
    assert transport.max_concurrent_requests == 6


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("", []),  # prune refuses and verify says to set it: no warning for those who never prune
        ("k" * 32, []),
        ("short", ["nitro_assistants.W003"]),
        (None, ["nitro_assistants.W002"]),  # the SECRET_KEY
    ],
)
def test_a_weak_or_shared_audit_key_is_warned_of(
    settings: Any, key: str | None, expected: list[str]
) -> None:
    assert ids(settings, AUDIT_KEY=settings.SECRET_KEY if key is None else key) == expected


# -- the database: PostgreSQL or SQLite (issue 35) --------------------------------------------------

#: pytest-django blocks this module's database access (no ``django_db`` mark): a check that
#: connected would fail these tests; and neither MySQL's nor Oracle's driver is installed, so one
#: that imported the backend would too.
OVERRIDING_DATABASES = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


class ToLegacy:
    """A host's router that keeps nitro_assistants' models on the ``legacy`` alias."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "legacy" if model._meta.app_label == "nitro_assistants" else None

    db_for_write = db_for_read


def database_errors(settings: Any, **databases: dict[str, Any]) -> list[Any]:
    settings.DATABASES = {**settings.DATABASES, **databases}
    return [m for m in check_settings() if m.id == "nitro_assistants.E018"]


@OVERRIDING_DATABASES
@pytest.mark.parametrize(
    ("engine", "vendor"),
    [
        ("django.db.backends.mysql", "mysql"),  # MariaDB too: Django's vendor for both
        ("django.db.backends.oracle", "oracle"),
        ("django.contrib.gis.db.backends.mysql", "mysql"),
    ],
)
def test_an_unsupported_database_fails_the_check_without_connecting(
    settings: Any, engine: str, vendor: str
) -> None:
    [error] = database_errors(settings, default={"ENGINE": engine, "NAME": "nitro"})
    assert error.msg == (
        f"DATABASES['default'] is a {vendor} database ({engine}): nitro_assistants supports "
        "only PostgreSQL and SQLite."
    )
    assert "PostgreSQL (14 or later) or SQLite (3.35 or later)" in error.hint
    assert "DATABASE_ROUTERS" in error.hint
    assert ids(settings) == ["nitro_assistants.E018"]


@OVERRIDING_DATABASES
@pytest.mark.parametrize(
    "engine",
    [
        "django.db.backends.postgresql",
        "django.db.backends.sqlite3",
        "django.contrib.gis.db.backends.postgis",
        "django.contrib.gis.db.backends.spatialite",
    ],
)
def test_postgresql_and_sqlite_pass(settings: Any, engine: str) -> None:
    assert database_errors(settings, default={"ENGINE": engine, "NAME": "nitro"}) == []


@OVERRIDING_DATABASES
def test_only_the_databases_the_apps_models_are_routed_to_are_checked(settings: Any) -> None:
    """A host may keep other apps on MySQL; nitro_assistants' models must not be there."""
    legacy = {"ENGINE": "django.db.backends.mysql", "NAME": "legacy"}
    assert database_errors(settings, legacy=legacy) == []
    settings.DATABASE_ROUTERS = [f"{__name__}.ToLegacy"]
    [error] = database_errors(settings, legacy=legacy)
    assert error.msg.startswith("DATABASES['legacy'] is a mysql database")


@pytest.mark.parametrize("lead", ["15 minutes", [900], True])
def test_an_expiry_warning_lead_the_sweep_cannot_read_is_a_check_error(
    settings: Any, lead: Any
) -> None:
    assert ids(settings, EXPIRY_WARNING_LEAD=lead) == ["nitro_assistants.E036"]


@pytest.mark.parametrize("lead", [900, 0, None, datetime.timedelta(minutes=5)])
def test_an_expiry_warning_lead_in_seconds_or_a_timedelta_passes(settings: Any, lead: Any) -> None:
    assert ids(settings, EXPIRY_WARNING_LEAD=lead) == []
