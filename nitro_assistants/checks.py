"""System checks: a misconfigured ``NITRO_ASSISTANTS`` fails ``manage.py check``, not a worker."""

from __future__ import annotations

import re
from importlib import import_module
from typing import Any
from urllib.parse import urlparse

from celery import _state
from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.db import router
from django.utils.module_loading import import_string

from nitro_assistants.client.http import is_request_limit
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.redaction import BUILTINS as BUILTIN_REDACTORS
from nitro_assistants.services import changes
from nitro_assistants.services.enqueue import is_fallback
from nitro_assistants.services.notifiers import load as load_notifier
from nitro_assistants.subjects import setting_problem

# What a value copied from a docs snippet or an example settings file looks like: "...", "<id>",
# "{{ id }}", "your-assistant-id", "changeme". No assistant is called that, and the server would
# only say 404 or 422 at the first run, in a worker; say it in ``manage.py check`` instead.
_PLACEHOLDER = re.compile(
    r"[.…]+|<.*>|\{.*\}|\[.*\]|your[-_ ].*|x{3,}|"
    r"change[-_ ]?me|replace[-_ ]?me|todo|tbd|fixme|placeholder|assistant[-_ ]?id",
    re.IGNORECASE,
)


def is_placeholder(value: str) -> bool:
    """True for a value that stands for one still to be filled in (``"..."``, ``"<id>"``)."""
    return bool(_PLACEHOLDER.fullmatch(value.strip()))


def _bad_url(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme not in ("http", "https") or not parsed.netloc


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    if not app_settings.BASE_URL or _bad_url(app_settings.BASE_URL):
        errors.append(
            Error(
                f"NITRO_ASSISTANTS['BASE_URL'] is not an http(s) URL: {app_settings.BASE_URL!r}.",
                hint="Set it to the root of the Assistants API, e.g. https://assistants.example.com",
                id="nitro_assistants.E001",
            )
        )
    definitions = app_settings.DEFINITIONS
    if not isinstance(definitions, dict) or not definitions:
        errors.append(
            Error(
                "NITRO_ASSISTANTS['DEFINITIONS'] names no assistant.",
                hint='Add {"<key>": {"api_key": ..., "assistant_id": ...}}.',
                id="nitro_assistants.E002",
            )
        )
    else:
        for key, definition in definitions.items():
            for field in ("api_key", "assistant_id"):
                if not isinstance(definition, dict) or not definition.get(field):
                    errors.append(
                        Error(
                            f"Assistant definition {key!r} has no {field!r}.",
                            hint=f'Set "{field}" in NITRO_ASSISTANTS["DEFINITIONS"][{key!r}].',
                            id="nitro_assistants.E003",
                        )
                    )
            assistant_id = definition.get("assistant_id") if isinstance(definition, dict) else None
            if isinstance(assistant_id, str) and assistant_id and is_placeholder(assistant_id):
                errors.append(
                    Error(
                        f"Assistant definition {key!r} has a placeholder assistant_id: "
                        f"{assistant_id!r}.",
                        hint="Set it to the assistant's UUID (POST /assistants/search on the "
                        'server lists them) or to a graph id of its langgraph.json, e.g. "agent".',
                        id="nitro_assistants.E010",
                    )
                )
    if app_settings.AUTH not in ("bearer", "x-api-key"):
        errors.append(
            Error(
                f"NITRO_ASSISTANTS['AUTH'] is {app_settings.AUTH!r}.",
                hint='Use "bearer" or "x-api-key".',
                id="nitro_assistants.E004",
            )
        )
    limit = app_settings.MAX_CONCURRENT_REQUESTS
    if not is_request_limit(limit):
        errors.append(
            Error(
                f"NITRO_ASSISTANTS['MAX_CONCURRENT_REQUESTS'] is {limit!r}.",
                hint="Use a positive integer (requests per process), or None for no limit.",
                id="nitro_assistants.E009",
            )
        )
    if app_settings.RUN_MODE not in ("wait", "background"):
        errors.append(
            Error(
                f"NITRO_ASSISTANTS['RUN_MODE'] is {app_settings.RUN_MODE!r}.",
                hint='Use "wait" or "background".',
                id="nitro_assistants.E005",
            )
        )
    if app_settings.WEBHOOK_URL:
        if _bad_url(app_settings.WEBHOOK_URL):
            errors.append(
                Error(
                    f"NITRO_ASSISTANTS['WEBHOOK_URL'] is not an http(s) URL: "
                    f"{app_settings.WEBHOOK_URL!r}.",
                    hint="Give the absolute URL of the nitro_assistants:webhook view.",
                    id="nitro_assistants.E006",
                )
            )
        if not app_settings.WEBHOOK_SECRET:
            errors.append(
                Error(
                    "NITRO_ASSISTANTS['WEBHOOK_URL'] is set but 'WEBHOOK_SECRET' is blank.",
                    hint="Set WEBHOOK_SECRET to a long random string; it signs webhook URLs.",
                    id="nitro_assistants.E007",
                )
            )
    errors.extend(_check_inbox())
    errors.extend(_check_governance())
    errors.extend(_check_channels())
    errors.extend(_check_redact())
    errors.extend(_check_expiry())
    subject_problem = setting_problem()
    if subject_problem:
        errors.append(
            Error(
                f"NITRO_ASSISTANTS['THREAD_SUBJECT'] cannot describe threads: {subject_problem}.",
                hint='Give a list of context keys or (label, key) pairs, e.g. ["customer_name", '
                '("order", "order_id")], or the dotted path of a callable taking the thread.',
                id="nitro_assistants.E016",
            )
        )
    errors.extend(_check_celery())
    errors.extend(_check_audit_key())
    errors.extend(_check_databases())
    return errors


#: The database vendors the app is tested on (scripts/test.sh runs the suite on both): its
#: hand-written statements, row locks and JSON lookups are written and checked for these only.
SUPPORTED_VENDORS = {"postgresql": "PostgreSQL", "sqlite": "SQLite"}

#: Django's own backends by ``ENGINE``: their vendor is known without importing the backend,
#: whose driver (mysqlclient, oracledb) a host on PostgreSQL need not have installed.
_DJANGO_BACKENDS = {
    "django.db.backends.postgresql": "postgresql",
    "django.db.backends.sqlite3": "sqlite",
    "django.db.backends.mysql": "mysql",
    "django.db.backends.oracle": "oracle",
    "django.contrib.gis.db.backends.postgis": "postgresql",
    "django.contrib.gis.db.backends.spatialite": "sqlite",
    "django.contrib.gis.db.backends.mysql": "mysql",
    "django.contrib.gis.db.backends.oracle": "oracle",
}


def database_vendor(engine: str) -> str | None:
    """The vendor (``connection.vendor``) of the backend ``engine`` names, read off the backend's
    class without connecting; None when the backend cannot be imported (Django says why)."""
    known = _DJANGO_BACKENDS.get(engine)
    if known is not None:
        return known
    try:  # a third-party backend (a wrapper of PostgreSQL's, say) declares its vendor
        vendor = import_module(f"{engine}.base").DatabaseWrapper.vendor
    except (ImportError, ImproperlyConfigured, AttributeError):
        return None
    return str(vendor)


def _check_databases() -> list[CheckMessage]:
    # Read from settings, not from ``connections``: ``manage.py check`` must say it without a
    # server to reach or the vendor's driver installed, and only of the databases the app's
    # models are routed to (a host may keep other apps on MySQL).
    configured = getattr(settings, "DATABASES", None) or {}
    aliases: set[str] = set()
    for model in apps.get_app_config("nitro_assistants").get_models():
        aliases.add(router.db_for_read(model))
        aliases.add(router.db_for_write(model))
    errors: list[CheckMessage] = []
    for alias in sorted(a for a in aliases if a in configured):
        engine = str(configured[alias].get("ENGINE") or "")
        vendor = database_vendor(engine)
        if vendor is None or vendor in SUPPORTED_VENDORS:
            continue
        errors.append(
            Error(
                f"DATABASES[{alias!r}] is a {vendor} database ({engine}): nitro_assistants "
                "supports only PostgreSQL and SQLite.",
                hint="Keep nitro_assistants' models on a PostgreSQL (14 or later) or SQLite "
                "(3.35 or later) database: set its ENGINE, or route the app's models to such an "
                "alias with a database router (DATABASE_ROUTERS). MySQL, MariaDB and Oracle "
                "are not supported.",
                id="nitro_assistants.E018",
            )
        )
    return errors


#: Shorter than this, an HMAC key can be guessed offline from one signed checkpoint.
AUDIT_KEY_MIN_LENGTH = 32


def _check_audit_key() -> list[CheckMessage]:
    # Blank is no warning: prune refuses to run without it and verify reports every checkpoint
    # as unverifiable, each saying to set it; an installation that never prunes needs none.
    key = app_settings.AUDIT_KEY
    if not key:
        return []
    if key == str(getattr(settings, "SECRET_KEY", "") or ""):
        return [
            CheckWarning(
                "NITRO_ASSISTANTS['AUDIT_KEY'] is the SECRET_KEY.",
                hint="Give it a secret of its own: it vouches for the audit trail's prune "
                "checkpoints, and SECRET_KEY is shared with much of Django and often rotated "
                "(a rotated key no longer verifies the checkpoints it signed).",
                id="nitro_assistants.W002",
            )
        ]
    if len(key) < AUDIT_KEY_MIN_LENGTH:
        return [
            CheckWarning(
                f"NITRO_ASSISTANTS['AUDIT_KEY'] is {len(key)} characters long.",
                hint=f"Use a random secret of at least {AUDIT_KEY_MIN_LENGTH} characters "
                "(python -c 'import secrets; print(secrets.token_urlsafe(48))').",
                id="nitro_assistants.W003",
            )
        ]
    return []


def _check_inbox() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key in ("CLAIM_MINUTES", "LIVE_POLL_SECONDS", "LIVE_CACHE_SECONDS"):
        try:
            value = float(getattr(app_settings, key))
        except (TypeError, ValueError):
            value = 0.0
        if not value > 0:
            errors.append(
                Error(
                    f"NITRO_ASSISTANTS[{key!r}] is not a positive number.",
                    hint="Give a number of minutes (CLAIM_MINUTES) or seconds (LIVE_POLL_SECONDS, "
                    "LIVE_CACHE_SECONDS).",
                    id="nitro_assistants.E012",
                )
            )
    errors.extend(_check_live_cache())
    path = app_settings.ASSIGN_REVIEW
    if path:
        try:
            rule = import_string(path)
        except ImportError as exc:
            rule, problem = None, str(exc)
        else:
            problem = "" if callable(rule) else f"{path} is not callable"
        if problem:
            errors.append(
                Error(
                    f"NITRO_ASSISTANTS['ASSIGN_REVIEW'] cannot be used: {problem}.",
                    hint="Give the dotted path of a function rule(review) -> User | Group | None.",
                    id="nitro_assistants.E011",
                )
            )
    return errors


def _check_live_cache() -> list[CheckMessage]:
    alias = app_settings.LIVE_CACHE
    if not alias:  # unset (the default cache when it is shared) or "" (none)
        return []
    if alias not in (getattr(settings, "CACHES", None) or {}):
        return [
            Error(
                f"NITRO_ASSISTANTS['LIVE_CACHE'] names no cache: {alias!r} is not in CACHES.",
                hint='Name an alias of CACHES (a Redis or memcached one), or "" for none.',
                id="nitro_assistants.E017",
            )
        ]
    backend = changes.backend_of(alias)
    # With eager Celery and one web process a per-process cache is the only one; anything else
    # (workers, several web processes) writes tokens the polling process never reads.
    if (
        backend in changes.PER_PROCESS_BACKENDS
        and not _state.get_current_app().conf.task_always_eager
    ):
        return [
            CheckWarning(
                f"NITRO_ASSISTANTS['LIVE_CACHE'] is {alias!r}, a {backend.rsplit('.', 1)[-1]}: "
                "each process has its own change token, so what a Celery worker or another web "
                "process changes reaches the live pages only when the token expires "
                "(LIVE_CACHE_SECONDS).",
                hint="Use a cache every process shares (Redis, memcached), or leave LIVE_CACHE "
                "unset: the live endpoint then asks the database on every poll.",
                id="nitro_assistants.W001",
            )
        ]
    return []


def _check_governance() -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    configured = (getattr(settings, "NITRO_ASSISTANTS", None) or {}).get("SEPARATE_DUTIES")
    if configured is not None and configured not in ("quorum", "always", "never"):
        errors.append(
            Error(
                f"NITRO_ASSISTANTS['SEPARATE_DUTIES'] is {configured!r}.",
                hint='Use "quorum" (the default), "always" or "never".',
                id="nitro_assistants.E013",
            )
        )
    notifiers = app_settings.NOTIFIERS
    for name, definition in notifiers.items():
        try:
            load_notifier(str(name), definition)
        except NitroAssistantsError as exc:
            errors.append(
                Error(
                    f"NITRO_ASSISTANTS['NOTIFIERS'][{name!r}]: {exc}",
                    hint='Give {"BACKEND": "dotted.path.Notifier", "OPTIONS": {...}}; the '
                    "built-in ones are in nitro_assistants.services.notifiers.",
                    id="nitro_assistants.E014",
                )
            )
    if notifiers and app_settings.NOTIFY_BASE_URL and _bad_url(app_settings.NOTIFY_BASE_URL):
        errors.append(
            Error(
                f"NITRO_ASSISTANTS['NOTIFY_BASE_URL'] is not an http(s) URL: "
                f"{app_settings.NOTIFY_BASE_URL!r}.",
                hint="Give the scheme and host reviewers reach the admin at.",
                id="nitro_assistants.E015",
            )
        )
    return errors


def _installed(module: str) -> bool:
    try:
        import_module(module)
    except ImportError:
        return False
    return True


def _check_channels() -> list[CheckMessage]:
    """Slack and e-mail replies: configured, with their extra installed and what they need."""
    errors: list[CheckMessage] = []
    uses_slack = app_settings.SLACK_ENABLED or any(
        "SlackNotifier" in str((d or {}).get("BACKEND", ""))
        for d in app_settings.NOTIFIERS.values()
    )
    if uses_slack and not _installed("slack_sdk"):
        errors.append(
            Error(
                "Slack is configured (NITRO_ASSISTANTS['SLACK'] or a SlackNotifier) but slack_sdk "
                "is not installed.",
                hint='Install the extra: pip install "nitro-assistants[slack]".',
                id="nitro_assistants.E030",
            )
        )
    if uses_slack:
        slack = app_settings.SLACK
        missing = [key for key in ("BOT_TOKEN", "SIGNING_SECRET") if not slack.get(key)]
        if missing:
            errors.append(
                Error(
                    f"NITRO_ASSISTANTS['SLACK'] has no {' and no '.join(missing)}.",
                    hint="Copy them from your Slack app's settings (OAuth & Permissions: the "
                    "Bot User OAuth Token; Basic Information: the Signing Secret); see "
                    "docs/slack-and-email.md.",
                    id="nitro_assistants.E031",
                )
            )
        if not app_settings.NOTIFY_BASE_URL:
            errors.append(
                CheckWarning(
                    "Slack cards have no 'Open in admin' button without NOTIFY_BASE_URL.",
                    hint="Set NITRO_ASSISTANTS['NOTIFY_BASE_URL'] to the scheme and host "
                    "reviewers reach the admin at.",
                    id="nitro_assistants.W030",
                )
            )
    if app_settings.INBOUND_EMAIL_ENABLED:
        if not _installed("anymail"):
            errors.append(
                Error(
                    "NITRO_ASSISTANTS['INBOUND_EMAIL'] is set but django-anymail is not "
                    "installed: replies could not be received.",
                    hint='Install the extra: pip install "nitro-assistants[email]", and include '
                    "anymail.urls for your ESP's inbound webhook.",
                    id="nitro_assistants.E032",
                )
            )
        address = str(app_settings.INBOUND_EMAIL.get("REPLY_ADDRESS") or "")
        if address.count("{token}") != 1 or "@" not in address.split("{token}")[-1]:
            errors.append(
                Error(
                    f"NITRO_ASSISTANTS['INBOUND_EMAIL']['REPLY_ADDRESS'] is {address!r}.",
                    hint="Give the address replies go to, with {token} once in its local part, "
                    'e.g. "reviews+{token}@reply.example.com".',
                    id="nitro_assistants.E033",
                )
            )
    return errors


def _check_expiry() -> list[CheckMessage]:
    """``EXPIRY_WARNING_LEAD``: seconds or a ``timedelta`` (read when the sweep runs: a bad value
    would fail every sweep, so it is told at start-up)."""
    try:
        _ = app_settings.EXPIRY_WARNING_LEAD
    except NitroAssistantsError as exc:
        return [
            Error(
                str(exc),
                hint="e.g. 900 (15 minutes) or datetime.timedelta(minutes=15); 0 or None: no "
                "warning before a review expires.",
                id="nitro_assistants.E036",
            )
        ]
    return []


def _check_redact() -> list[CheckMessage]:
    """``REDACT``: known built-ins, patterns that compile, callables that import."""
    config = app_settings.REDACT
    if not config:
        return []
    errors: list[CheckMessage] = []
    unknown = sorted(set(config["BUILTINS"]) - {"secrets", *BUILTIN_REDACTORS})
    if unknown:
        errors.append(
            Error(
                f"NITRO_ASSISTANTS['REDACT']['BUILTINS'] names unknown redactors: {unknown}.",
                hint="Choose among: secrets, " + ", ".join(BUILTIN_REDACTORS) + ".",
                id="nitro_assistants.E040",
            )
        )
    for name, pattern in dict(config["PATTERNS"]).items():
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            errors.append(
                Error(
                    f"NITRO_ASSISTANTS['REDACT']['PATTERNS'][{name!r}] does not compile: {exc}.",
                    hint="Give a valid Python regular expression (re module syntax).",
                    id="nitro_assistants.E041",
                )
            )
    for name, value in dict(config["CALLABLES"]).items():
        try:
            found = import_string(value) if isinstance(value, str) else value
        except ImportError as exc:
            found, problem = None, str(exc)
        else:
            problem = "it is not callable"
        if not callable(found):
            errors.append(
                Error(
                    f"NITRO_ASSISTANTS['REDACT']['CALLABLES'][{name!r}] is unusable: {problem}.",
                    hint="Give a callable, or its dotted path, taking a string and returning it.",
                    id="nitro_assistants.E042",
                )
            )
    return errors


def _check_celery() -> list[CheckMessage]:
    # A shared_task with no app to bind to falls back to an app Celery builds for itself, which
    # would send every task to amqp://localhost, where no worker of the project listens: that is a
    # missing app, not a choice.
    if is_fallback(_state.get_current_app()):
        return [
            Error(
                "No Celery app is configured: nitro_assistants tasks would not reach a worker.",
                hint="Create a Celery app in your project (celery.py) and import it in "
                "your project's __init__.py, as the Celery Django guide shows.",
                id="nitro_assistants.E008",
            )
        ]
    return []
