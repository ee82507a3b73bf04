"""Settings of the example site, from the environment (django-environ); see .env.example.

With no ``DATABASE_URL`` it uses a SQLite file, and with no ``CELERY_BROKER_URL``/``REDIS_URL``
Celery runs tasks eagerly in the web process: the embedded default for the demo. Production sets
PostgreSQL and Redis (docker-compose.yml does).
"""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="reviewsite-demo-only-change-me")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    # Before the admin: its admin/base_site.html (the stop banner) extends the admin's.
    "nitro_assistants",
    "nitro_assistants.admin_apps.NitroAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # WhiteNoise serves the static files under runserver too, as it does under gunicorn.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "reviewsite.apps.ReviewSiteConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The admin's CSS and JS, from STATIC_ROOT (collectstatic), whatever DEBUG is: the demo
    # (runserver) and production (gunicorn) serve them the same way.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "reviewsite.urls"
WSGI_APPLICATION = "reviewsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The demo with a broker has the site, the seed and a Celery worker writing at once: WAL lets
    # readers and a writer overlap, and IMMEDIATE transactions wait for the write lock up front
    # (up to the timeout) instead of failing with "database is locked" halfway through.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"}
    )
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Celery closes the connection around every task: pooled, a task does not open a new one.
    # The statements a connection repeats (every flow's) are kept prepared: PostgreSQL parses
    # and plans them once (docs/django.md, "Deploying the workers"). Behind a proxy that pools
    # by transaction (PgBouncer before 1.21), leave the last two out.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "pool": {"min_size": 1, "max_size": 24},
            "server_side_binding": True,
            "prepare_threshold": 5,
        }
    )
    # The pool checks a connection before lending it: after a PostgreSQL restart every pooled
    # connection is closed, and without the check each fails the request or task it is lent to
    # (docs/scale.md). One round trip a checkout.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = env.path("STATIC_ROOT", default=VAR_DIR / "static")
# collectstatic writes hashed, compressed copies that WhiteNoise serves with far-future cache
# headers; without DEBUG the pages need that manifest, so collectstatic is part of every start
# (scripts/demo.sh, the Dockerfile).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# Celery: a broker makes tasks go to workers; none runs them eagerly in-process (demo default).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=env.str("REDIS_URL", default=""))
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = False

# The live pages' change token (and the decide API's rate counts) belong in a cache the site and
# its Celery workers share: with Redis as the broker, Redis (CACHE_URL names another); embedded,
# the one process's own, and the live endpoint asks the database on every poll.
_SHARED_CACHE = CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else ""
CACHES = {
    "default": env.cache_url_config(
        env.str("CACHE_URL", default="") or _SHARED_CACHE or "locmemcache://"
    )
}
CACHES["default"].setdefault("KEY_PREFIX", "reviewsite")
CELERY_BEAT_SCHEDULE = {
    # Alert on deliveries that failed or stayed pending (see nitro_assistants' signals).
    "nitro-assistants-sweep-deliveries": {
        "task": "nitro_assistants.sweep_deliveries",
        "schedule": env.float("SWEEP_EVERY", default=60.0),
    },
    # Work committed by a process that died before enqueuing it, or lost by the broker.
    "nitro-assistants-requeue-stale": {
        "task": "nitro_assistants.requeue_stale",
        "schedule": 60.0,
    },
    "nitro-assistants-requeue-plan-steps": {
        "task": "nitro_assistants.requeue_plan_steps",
        "schedule": 60.0,
    },
    "nitro-assistants-verify-audit": {
        "task": "nitro_assistants.verify_audit",
        "schedule": 3600.0,
    },
    # Review deadlines (escalate, decide, flag overdue) and notifications a lost task left queued.
    "nitro-assistants-sweep-deadlines": {
        "task": "nitro_assistants.sweep_deadlines",
        "schedule": 60.0,
    },
    "nitro-assistants-flush-notifications": {
        "task": "nitro_assistants.flush_notifications",
        "schedule": 300.0,
    },
}

WEB_PORT = env.int("WEB_PORT", default=8000)

NITRO_ASSISTANTS = {
    "BASE_URL": env.str("ASSISTANTS_URL", default="http://127.0.0.1:2024"),
    "USER_ID": env.str("ASSISTANTS_USER_ID", default="reviewsite"),
    "AUTH": env.str("ASSISTANTS_AUTH", default="bearer"),
    # Requests each process keeps in flight at the server (0: no limit); see docs/django.md.
    "MAX_CONCURRENT_REQUESTS": env.int("ASSISTANTS_MAX_CONCURRENT_REQUESTS", default=0) or None,
    "DEFINITIONS": {
        "virtual-confirmation": {
            "api_key": env.str("VC_KEY", default="local-dev-key"),
            "assistant_id": env.str("VC_ASSISTANT_ID", default="virtual-confirmation"),
        },
    },
    "DELIVERY_PENDING_AFTER": env.int("DELIVERY_PENDING_AFTER", default=300),
    "RUN_MODE": env.str("RUN_MODE", default="wait"),
    "WEBHOOK_SECRET": env.str("WEBHOOK_SECRET", default=SECRET_KEY),
    "WEBHOOK_URL": env.str("WEBHOOK_URL", default=""),
    # Reviewers are told what waits for them by e-mail (the console backend in the demo).
    "NOTIFIERS": {"email": {"BACKEND": "nitro_assistants.services.notifiers.EmailNotifier"}},
    # Blank: the site as the demo serves it, on WEB_PORT (scripts/demo.sh exports the port it
    # serves on), so the links follow the port whatever it is.
    "NOTIFY_BASE_URL": env.str("NOTIFY_BASE_URL", default="") or f"http://127.0.0.1:{WEB_PORT}",
    # Who a conversation is about: the SMS gateway's customer (the thread's metadata, see
    # seed_demo); a conversation without one is described by its first message.
    "THREAD_SUBJECT": ["customer", "phone"],
    # Signs the audit trail's prune checkpoints; blank: pruning is refused (docs/evidence.md).
    "AUDIT_KEY": env.str("AUDIT_KEY", default=""),
}

# Slack (docs/slack-and-email.md): with a Slack app's token, signing secret and a channel, the
# reviews also come as cards there, decided with their buttons (the app's interactivity URL:
# <NOTIFY_BASE_URL>/nitro/slack/interactions/, which Slack must reach). Unset: no Slack.
SLACK_BOT_TOKEN = env.str("SLACK_BOT_TOKEN", default="")
if SLACK_BOT_TOKEN:
    NITRO_ASSISTANTS["SLACK"] = {
        "BOT_TOKEN": SLACK_BOT_TOKEN,
        "SIGNING_SECRET": env.str("SLACK_SIGNING_SECRET", default=""),
        "TEAM_ID": env.str("SLACK_TEAM_ID", default=""),
    }
    NITRO_ASSISTANTS["NOTIFIERS"]["slack"] = {
        "BACKEND": "nitro_assistants.services.slack.SlackNotifier",
        "OPTIONS": {"channel": env.str("SLACK_CHANNEL", default="")},
    }

# Where the demo assistant's send_sms tool "sends" its messages (shown at /outbox/).
DEMO_OUTBOX = env.path("DEMO_OUTBOX", default=VAR_DIR / "outbox.jsonl")

ADMINS = [("Review team", env.str("ADMIN_EMAIL", default="reviews@example.com"))]
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
SERVER_EMAIL = env.str("SERVER_EMAIL", default="reviewsite@example.com")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "nitro_assistants": {
            "handlers": ["console"],
            "level": env.str("LOG_LEVEL", default="INFO"),
        },
        "reviewsite": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    },
}
