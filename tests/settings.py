"""Settings for the test suite: real PostgreSQL (or SQLite, ``NITRO_TEST_DB=sqlite``) and a real
Redis broker."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    # Before the admin: its admin/base_site.html (the stop banner) extends the admin's.
    "nitro_assistants",
    "nitro_assistants.admin_apps.NitroAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

#: ``NITRO_TEST_DB=sqlite`` runs the suite on SQLite (the example site's embedded default, an
#: in-memory test database) instead of PostgreSQL; scripts/test.sh runs the admin and API tests
#: that way too. Tests that need PostgreSQL's row locks carry ``@pytest.mark.postgresql``.
TEST_DB = os.environ.get("NITRO_TEST_DB", "postgresql")
if TEST_DB not in ("postgresql", "sqlite"):
    raise ValueError(f"NITRO_TEST_DB must be postgresql or sqlite, not {TEST_DB!r}")

DATABASES: dict[str, dict[str, Any]]
if TEST_DB == "sqlite":
    _SQLITE_NAME = os.environ.get("NITRO_TEST_DB_NAME", "nitro_assistants")
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            # Out of the checkout, as the test database is: a run leaves no file in the repository.
            "NAME": str(Path(tempfile.gettempdir()) / f"{_SQLITE_NAME}.sqlite3"),
            # As the example site runs it (reviewsite/settings.py): writers take the lock when
            # they begin and wait for it up to the timeout, WAL lets readers read meanwhile.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL;",
            },
            # A file, not Django's in-memory test database: that one shares a cache between
            # connections, whose table locks fail a reader at once ("database table is locked")
            # while the live server's thread writes, where a file's reader waits or reads.
            "TEST": {"NAME": str(Path(tempfile.gettempdir()) / f"{_SQLITE_NAME}-test.sqlite3")},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("NITRO_TEST_DB_NAME", "nitro_assistants"),
            "USER": os.environ.get("NITRO_TEST_DB_USER", "postgres"),
            "PASSWORD": os.environ.get("NITRO_TEST_DB_PASSWORD", ""),
            "HOST": os.environ.get("NITRO_TEST_DB_HOST", "127.0.0.1"),
            "PORT": os.environ.get("NITRO_TEST_DB_PORT", "5432"),
            # Django's connection pool (psycopg-pool): Celery closes the database connection
            # before and after every task, and without a pool each task would open a new one.
            "OPTIONS": {
                **(
                    {"pool": {"min_size": 1, "max_size": 24}}
                    if os.environ.get("NITRO_TEST_DB_POOL", "1") == "1"
                    else {}
                ),
                # NITRO_TEST_DB_PREPARED=1: the statements a connection repeats are kept prepared
                # (server-side binding, prepared from their 5th run), as docs/django.md advises a
                # host without a transaction-pooling proxy; the test command runs the suite both
                # ways. Unset: Django's default (client-side binding, nothing prepared).
                **(
                    {"server_side_binding": True, "prepare_threshold": 5}
                    if os.environ.get("NITRO_TEST_DB_PREPARED") == "1"
                    else {}
                ),
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"

CELERY_BROKER_URL = os.environ.get("NITRO_TEST_BROKER_URL", "redis://127.0.0.1:6379/9")

#: The default cache stays per process (the API rate limit's counters, and the live endpoint asks
#: the database: its fallback). ``"live"`` is a real Redis cache on the broker's database, which
#: the live tests name in ``LIVE_CACHE`` (tests/admin/test_live.py, the inbox's browser tests).
#: Its keys carry a prefix of their own per test process, so parallel runs (and xdist workers)
#: never bump each other's token; a process a test starts is given its parent's in
#: ``NITRO_TEST_CACHE_PREFIX``.
CACHE_PREFIX = os.environ.get("NITRO_TEST_CACHE_PREFIX") or (
    f"nitro-tests-{os.getpid()}-{uuid.uuid4().hex[:8]}"
)
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "live": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": CELERY_BROKER_URL,
        "KEY_PREFIX": CACHE_PREFIX,
    },
}
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("NITRO_TEST_QUEUE", "nitro_tests")

NITRO_ASSISTANTS = {
    "BASE_URL": os.environ.get("NITRO_TEST_ASSISTANTS_URL", "http://127.0.0.1:2024"),
    "USER_ID": "tests",
    "AUTH": "bearer",
    "TIMEOUT": 30,
    # Every real flow of the suite goes through the cap (a slot a stream failed to give back would
    # hang a test); bench/throughput.py sets its own (requests per worker process); 0: none.
    "MAX_CONCURRENT_REQUESTS": int(os.environ.get("NITRO_TEST_MAX_CONCURRENT_REQUESTS", "10"))
    or None,
    "DEFINITIONS": {
        "walkthrough": {"api_key": "test-key", "assistant_id": "walkthrough"},
        "tools": {"api_key": "test-key", "assistant_id": "tools"},
        "per_call": {"api_key": "test-key", "assistant_id": "per_call"},
        "plain": {"api_key": "test-key", "assistant_id": "plain"},
        "interactions": {"api_key": "test-key", "assistant_id": "interactions"},
        "refunds": {"api_key": "test-key", "assistant_id": "refunds"},
        # graphs pausing in other dialects (tests/graphs/dialects.py, docs/protocol.md §9)
        "inbox": {"api_key": "test-key", "assistant_id": "inbox"},
        "plain_interrupt": {"api_key": "test-key", "assistant_id": "plain_interrupt"},
        "parallel": {"api_key": "test-key", "assistant_id": "parallel"},
        "schema": {"api_key": "test-key", "assistant_id": "schema"},
        "slow": {"api_key": "test-key", "assistant_id": "slow"},
        "expiring": {"api_key": "test-key", "assistant_id": "expiring"},
    },
    "DELIVERY_PENDING_AFTER": 300,
    "RUN_MODE": os.environ.get("NITRO_TEST_RUN_MODE", "wait"),
    "WEBHOOK_SECRET": "tests-webhook-secret",
    "WEBHOOK_URL": os.environ.get("NITRO_TEST_WEBHOOK_URL", ""),
    "TASK_RETRY_BACKOFF": 1,
    "TASK_RETRY_BACKOFF_MAX": 4,
    # Off in the suite: every test's refused keys come from the test client's one address and
    # would add up across the tests of a minute; tests/interactions/test_rate_limits.py sets it.
    "API_AUTH_FAILURE_LIMIT": 0,
    # NITRO_TEST_LIVE_CACHE=live runs the whole suite with the change token in Redis.
    "LIVE_CACHE": os.environ.get("NITRO_TEST_LIVE_CACHE") or None,
}

#: django-anymail's inbound webhooks (tests/channels/test_email_replies.py posts to Mailgun's,
#: signed with this key, as Mailgun signs).
ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": "mailgun-signing-key-of-the-tests"}

#: A Celery worker the Slack tests start posts cards to their local Slack server
#: (tests/channels/test_real_server.py).
if os.environ.get("NITRO_TEST_SLACK_API_URL"):
    from tests.channels.channel_settings import slack_settings

    NITRO_ASSISTANTS.update(slack_settings(os.environ["NITRO_TEST_SLACK_API_URL"]))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"nitro_assistants": {"handlers": ["console"], "level": "WARNING"}},
}

# Fast hashing: tests create many users; the real hasher costs ~0.2 s per password.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
