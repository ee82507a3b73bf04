"""The ``REDACT`` setting compiled into the redaction every screen shows values through (built
once per distinct setting), the app's own secrets, and who may reveal. Imports no model: a
model's ``__str__`` (a thread's subject) is shown through it too."""

from __future__ import annotations

import re
from typing import Any

from django.utils.module_loading import import_string

from nitro_assistants.conf import app_settings
from nitro_assistants.redaction import Redaction, build

#: The permission that lets a reviewer see a review's values unredacted (each reveal audited).
REVEAL_PERMISSION = "nitro_assistants.reveal_redacted"

_cache: dict[str, Any] = {"key": None, "redaction": Redaction()}


def configured_secrets() -> list[str]:
    """Every definition's ``api_key``, the webhook secret, the audit key and Slack's token and
    signing secret: never shown to a reviewer, never in an error text."""
    found = [str((d or {}).get("api_key") or "") for d in app_settings.DEFINITIONS.values()]
    found += [app_settings.WEBHOOK_SECRET, app_settings.AUDIT_KEY]
    if app_settings.SLACK_ENABLED:
        found += [app_settings.SLACK["BOT_TOKEN"], app_settings.SLACK["SIGNING_SECRET"]]
    return [str(secret) for secret in found if secret]


def _callable(value: Any) -> Any:
    return import_string(value) if isinstance(value, str) else value


def current() -> Redaction:
    """The redaction the ``REDACT`` setting asks for (empty when it is off), built once per
    distinct setting. A pattern that does not compile raises ``re.error`` (the system check
    ``nitro_assistants.E040`` says so first)."""
    config = app_settings.REDACT
    if not config:
        return Redaction()
    secrets = configured_secrets()
    key = repr((sorted(config.items(), key=lambda item: item[0]), secrets))
    if _cache["key"] != key:
        _cache["redaction"] = build(
            config["BUILTINS"],
            {name: re.compile(pattern) for name, pattern in config["PATTERNS"].items()},
            {name: _callable(value) for name, value in config["CALLABLES"].items()},
            secrets,
            float(config["TIME_LIMIT"]),
        )
        _cache["key"] = key
    return _cache["redaction"]  # type: ignore[no-any-return]


def may_reveal(user: Any) -> bool:
    return bool(getattr(user, "has_perm", None) and user.has_perm(REVEAL_PERMISSION))
