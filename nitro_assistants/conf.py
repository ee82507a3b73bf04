"""Settings of nitro_assistants: one dict, ``settings.NITRO_ASSISTANTS``, read when used.

Every key is a property of :data:`app_settings`, so ``override_settings`` always applies and nothing
is read at import time. Defaults live in :attr:`AppSettings.DEFAULTS`, in one place.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.conf import settings

from nitro_assistants.exceptions import ConfigurationError


class AppSettings:
    DEFAULTS: dict[str, Any] = {
        "BASE_URL": "",
        "USER_ID": "default-user",
        "AUTH": "bearer",
        "TIMEOUT": 60.0,
        "MAX_CONCURRENT_REQUESTS": None,
        "DEFINITIONS": {},
        "DELIVERY_PENDING_AFTER": 300,
        "RUN_MODE": "wait",
        "WEBHOOK_SECRET": "",
        "WEBHOOK_URL": "",
        "TASK_MAX_RETRIES": 8,
        "TASK_RETRY_BACKOFF": 2,
        "TASK_RETRY_BACKOFF_MAX": 300,
        "SWEEP_BATCH_SIZE": 2000,
        "REQUEUE_AFTER": 600,
        "API_RATE_LIMIT": 120,
        "API_AUTH_FAILURE_LIMIT": 20,
        "CLAIM_MINUTES": 5,
        "ASSIGN_REVIEW": "",
        "LIVE_POLL_SECONDS": 3,
        "LIVE_CACHE": None,
        "LIVE_CACHE_SECONDS": 60,
        "NEXT_AFTER_DECISION": False,
        "SEPARATE_DUTIES": "quorum",
        "DEADLINE_BATCH_SIZE": 500,
        "EXPIRY_WARNING_LEAD": 900,
        "NOTIFIERS": {},
        "NOTIFY_BASE_URL": "",
        "NOTIFY_DELAY": 10,
        "NOTIFY_INTERVAL": 300,
        "NOTIFY_LINK_MAX_AGE": 7 * 24 * 3600,
        "NOTIFY_MAX_ATTEMPTS": 5,
        "THREAD_SUBJECT": None,
        "AUDIT_KEY": "",
        "SLACK": {},
        "INBOUND_EMAIL": {},
        "REDACT": {},
    }

    #: The keys of ``REDACT`` and their defaults (docs/redaction.md).
    REDACT_DEFAULTS: dict[str, Any] = {
        "BUILTINS": ["secrets", "token", "card", "iban", "email", "phone"],
        "PATTERNS": {},
        "CALLABLES": {},
        "TIME_LIMIT": 0.05,
    }

    #: The keys of ``SLACK`` and their defaults (docs/slack-and-email.md).
    SLACK_DEFAULTS: dict[str, Any] = {
        "BOT_TOKEN": "",
        "SIGNING_SECRET": "",
        "TEAM_ID": "",
        "API_URL": "https://slack.com/api/",
        "REQUEST_MAX_AGE": 300,
        "TIMEOUT": 10,
    }
    #: The keys of ``INBOUND_EMAIL`` and their defaults (docs/slack-and-email.md).
    INBOUND_EMAIL_DEFAULTS: dict[str, Any] = {
        "REPLY_ADDRESS": "",
        "FROM_EMAIL": "",
        "MAX_SPAM_SCORE": 5.0,
    }

    def _setting(self, name: str) -> Any:
        configured = getattr(settings, "NITRO_ASSISTANTS", None) or {}
        return configured.get(name, self.DEFAULTS[name])

    @property
    def BASE_URL(self) -> str:
        """Root URL of the Assistants API, e.g. ``https://assistants.example.com``."""
        return str(self._setting("BASE_URL") or "").rstrip("/")

    @property
    def USER_ID(self) -> str:
        return str(self._setting("USER_ID"))

    @property
    def AUTH(self) -> str:
        """``"bearer"`` (``Authorization: Bearer``) or ``"x-api-key"``."""
        return str(self._setting("AUTH"))

    @property
    def TIMEOUT(self) -> float:
        return float(self._setting("TIMEOUT"))

    @property
    def MAX_CONCURRENT_REQUESTS(self) -> Any:
        """Requests one process sends the Assistants server at once, across its threads (None:
        no limit). With more worker threads than this, a thread that has finished its database
        work waits for a slot, ready to send, instead of adding to the server's queue."""
        return self._setting("MAX_CONCURRENT_REQUESTS")

    @property
    def DEFINITIONS(self) -> dict[str, dict[str, Any]]:
        """``{key: {"api_key": ..., "assistant_id": ...}}``, one per assistant."""
        return dict(self._setting("DEFINITIONS") or {})

    @property
    def DELIVERY_PENDING_AFTER(self) -> int:
        """Seconds a delivery may stay ``pending`` before ``delivery_pending`` is sent."""
        return int(self._setting("DELIVERY_PENDING_AFTER"))

    @property
    def RUN_MODE(self) -> str:
        """``"wait"``: a worker waits on ``runs/wait``.
        ``"background"``: create the run and return."""
        return str(self._setting("RUN_MODE"))

    @property
    def WEBHOOK_SECRET(self) -> str:
        """Key that signs webhook URLs given to the server in background mode."""
        return str(self._setting("WEBHOOK_SECRET") or "")

    @property
    def AUDIT_KEY(self) -> str:
        """Key of the HMAC that signs each prune checkpoint of the audit trail. Keep it apart from
        the database (and from ``SECRET_KEY``): whoever holds it and can write to the database can
        forge a checkpoint. Blank: ``prune`` refuses to run, and ``verify`` cannot vouch for a
        checkpoint (each one is reported)."""
        return str(self._setting("AUDIT_KEY") or "")

    @property
    def WEBHOOK_URL(self) -> str:
        """Absolute URL of the app's webhook view (``nitro_assistants:webhook``) as the server
        reaches it, e.g. ``https://review.example.com/nitro/webhook/``.
        Blank: background runs are polled."""
        return str(self._setting("WEBHOOK_URL") or "")

    @property
    def TASK_MAX_RETRIES(self) -> int:
        return int(self._setting("TASK_MAX_RETRIES"))

    @property
    def TASK_RETRY_BACKOFF(self) -> int:
        """First retry delay in seconds; doubles every retry (with jitter), capped by the max."""
        return int(self._setting("TASK_RETRY_BACKOFF"))

    @property
    def TASK_RETRY_BACKOFF_MAX(self) -> int:
        return int(self._setting("TASK_RETRY_BACKOFF_MAX"))

    @property
    def SWEEP_BATCH_SIZE(self) -> int:
        return int(self._setting("SWEEP_BATCH_SIZE"))

    @property
    def REQUEUE_AFTER(self) -> int:
        """Seconds without progress after which a run or decision is enqueued again."""
        return int(self._setting("REQUEUE_AFTER"))

    @property
    def API_RATE_LIMIT(self) -> int:
        """Requests per minute the decide API accepts from one user: all their API keys and
        their session count against one budget (0: no limit)."""
        return int(self._setting("API_RATE_LIMIT"))

    @property
    def API_AUTH_FAILURE_LIMIT(self) -> int:
        """Refused API keys per minute from one client address (``REMOTE_ADDR``) before every
        key request from it is answered 429 for the rest of the minute (0: no limit)."""
        return int(self._setting("API_AUTH_FAILURE_LIMIT"))

    @property
    def CLAIM_MINUTES(self) -> float:
        """Minutes a reviewer's claim on a review lasts; the open review screen renews it (every
        third of that), so a closed tab or a lost session frees the review within this time."""
        return float(self._setting("CLAIM_MINUTES"))

    @property
    def ASSIGN_REVIEW(self) -> str:
        """Dotted path of the host project's assignment rule, called with each new review:
        ``rule(review) -> User | Group | None``. Blank: reviews are assigned by hand only."""
        return str(self._setting("ASSIGN_REVIEW") or "")

    @property
    def LIVE_POLL_SECONDS(self) -> float:
        """How often the queue and the review screen ask the live endpoint what changed."""
        return float(self._setting("LIVE_POLL_SECONDS"))

    @property
    def LIVE_CACHE(self) -> str | None:
        """Alias of the cache (shared by every web process and Celery worker) holding the live
        pages' change token, so that an unchanged poll costs no SQL of its own; ``""``: none, the
        live endpoint asks the database every poll. None: ``"default"`` when that cache is Redis
        or memcached, none otherwise (:mod:`nitro_assistants.services.changes`)."""
        value = self._setting("LIVE_CACHE")
        return None if value is None else str(value or "")

    @property
    def LIVE_CACHE_SECONDS(self) -> float:
        """Seconds the change token lives: what changes without a write through the services (a
        user's permissions or groups, a claim running out) reaches the live pages within this."""
        return float(self._setting("LIVE_CACHE_SECONDS"))

    @property
    def NEXT_AFTER_DECISION(self) -> bool:
        """After a decision on its screen, open the next review (claimed for the reviewer; the
        decision's outcome follows live at the top) instead of staying on the decided one."""
        return bool(self._setting("NEXT_AFTER_DECISION"))

    @property
    def SEPARATE_DUTIES(self) -> str:
        """Who may not approve their own assistant's action (the person who opened the
        conversation or started the run): ``"quorum"`` on reviews a policy rule gives more
        than one approval, ``"always"`` on every review, ``"never"``."""
        value = str(self._setting("SEPARATE_DUTIES"))
        return value if value in ("quorum", "always", "never") else "quorum"

    @property
    def DEADLINE_BATCH_SIZE(self) -> int:
        """Passed deadlines one run of ``nitro_assistants.sweep_deadlines`` applies at most
        (the next run takes the rest)."""
        return int(self._setting("DEADLINE_BATCH_SIZE"))

    @property
    def EXPIRY_WARNING_LEAD(self) -> datetime.timedelta | None:
        """How long before a review expires its reviewers are warned, once (seconds or a
        ``timedelta``; 900: 15 minutes). ``0`` or ``None``: no warning."""
        value = self._setting("EXPIRY_WARNING_LEAD")
        if value is None:
            return None
        if isinstance(value, datetime.timedelta):
            lead = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            lead = datetime.timedelta(seconds=value)
        else:
            raise ConfigurationError(
                f"NITRO_ASSISTANTS['EXPIRY_WARNING_LEAD'] is {value!r}: give seconds (a number) "
                "or a datetime.timedelta; 0 or None for no warning"
            )
        return lead if lead > datetime.timedelta(0) else None

    @property
    def NOTIFIERS(self) -> dict[str, dict[str, Any]]:
        """Notification channels by name: ``{"email": {"BACKEND": "...EmailNotifier",
        "OPTIONS": {...}}}`` (:mod:`nitro_assistants.services.notifiers`). Empty: none."""
        return dict(self._setting("NOTIFIERS") or {})

    @property
    def NOTIFY_BASE_URL(self) -> str:
        """Scheme and host the links in notifications start with, e.g.
        ``https://review.example.com``; blank: links are paths (relative)."""
        return str(self._setting("NOTIFY_BASE_URL") or "").rstrip("/")

    @property
    def NOTIFY_DELAY(self) -> float:
        """Seconds a first notification waits, so what arrives meanwhile joins its message."""
        return float(self._setting("NOTIFY_DELAY"))

    @property
    def NOTIFY_INTERVAL(self) -> float:
        """A reviewer gets at most one message per channel per this many seconds."""
        return float(self._setting("NOTIFY_INTERVAL"))

    @property
    def NOTIFY_LINK_MAX_AGE(self) -> int:
        """Seconds a notification's signed link to a review works."""
        return int(self._setting("NOTIFY_LINK_MAX_AGE"))

    @property
    def NOTIFY_MAX_ATTEMPTS(self) -> int:
        """Tries of a failing channel before its notifications are marked failed (logged)."""
        return int(self._setting("NOTIFY_MAX_ATTEMPTS"))

    @property
    def THREAD_SUBJECT(self) -> Any:
        """How a thread is described for people (:mod:`nitro_assistants.subjects`): a list of
        context keys (or ``(label, key)`` pairs), or the dotted path of a callable taking the
        thread. None: by the customer's first message."""
        return self._setting("THREAD_SUBJECT")

    @property
    def SLACK(self) -> dict[str, Any]:
        """Slack: ``BOT_TOKEN`` (``xoxb-…``), ``SIGNING_SECRET``, ``TEAM_ID`` (blank: any
        workspace the token's app is in), ``API_URL`` (the Web API's root, another for a test
        server), ``REQUEST_MAX_AGE`` (seconds a signed request is accepted, and remembered to
        refuse it twice), ``TIMEOUT``. Empty: Slack is off."""
        configured = self._setting("SLACK") or {}
        return {**self.SLACK_DEFAULTS, **configured}

    @property
    def SLACK_ENABLED(self) -> bool:
        return bool(self._setting("SLACK"))

    @property
    def INBOUND_EMAIL(self) -> dict[str, Any]:
        """Decisions by e-mail reply: ``REPLY_ADDRESS`` (``"reviews+{token}@reply.example.com"``:
        the notification's Reply-To, ``{token}`` its signed token), ``FROM_EMAIL`` of the answers
        to refused replies (blank: ``DEFAULT_FROM_EMAIL``), ``MAX_SPAM_SCORE`` (a reply the ESP
        scored higher is refused). Empty: replies are not read."""
        configured = self._setting("INBOUND_EMAIL") or {}
        return {**self.INBOUND_EMAIL_DEFAULTS, **configured}

    @property
    def INBOUND_EMAIL_ENABLED(self) -> bool:
        return bool(self._setting("INBOUND_EMAIL"))

    @property
    def REDACT(self) -> dict[str, Any]:
        """What reviewers are not shown (docs/redaction.md): ``BUILTINS`` (names of the built-in
        redactors: ``secrets``, ``token``, ``card``, ``iban``, ``email``, ``phone``),
        ``PATTERNS`` (name to regular expression), ``CALLABLES`` (name to a callable, or its
        dotted path, taking a string and returning it redacted), ``TIME_LIMIT`` (seconds one
        redactor may take on one value). ``True``: every built-in. Empty: nothing is redacted."""
        configured = self._setting("REDACT")
        if configured is True:
            return dict(self.REDACT_DEFAULTS)
        if not configured:
            return {}
        return {**self.REDACT_DEFAULTS, **configured}

    def client_config(self) -> dict[str, Any]:
        """What :class:`nitro_assistants.client.registry.Registry` is built from."""
        return {
            "base_url": self.BASE_URL,
            "user_id": self.USER_ID,
            "auth": self.AUTH,
            "timeout": self.TIMEOUT,
            "max_concurrent_requests": self.MAX_CONCURRENT_REQUESTS,
            "definitions": {
                key: {"api_key": d.get("api_key", ""), "assistant_id": d.get("assistant_id", "")}
                for key, d in self.DEFINITIONS.items()
            },
        }


app_settings = AppSettings()
