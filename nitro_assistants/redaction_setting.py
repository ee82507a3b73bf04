"""The ``REDACT`` setting compiled into the redaction every screen shows values through (built
once per distinct setting), the app's own secrets, and who may reveal. Imports no model: a
model's ``__str__`` (a thread's subject) is shown through it too."""

from __future__ import annotations

import copy
import re
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from nitro_assistants.conf import app_settings
from nitro_assistants.redaction import Redaction, build

#: The permission that lets a reviewer see a review's values unredacted (each reveal audited).
REVEAL_PERMISSION = "nitro_assistants.reveal_redacted"

_cache: dict[str, Any] = {"source": None, "snapshot": None, "redaction": Redaction()}


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
    distinct ``NITRO_ASSISTANTS``: a page asks for it per row, so the check that the settings are
    the ones it was built from is one identity and one equality test. A pattern that does not
    compile raises ``re.error`` (the system check ``nitro_assistants.E041`` says so first)."""
    configured = getattr(settings, "NITRO_ASSISTANTS", None) or {}
    if _cache["source"] is configured and _cache["snapshot"] == configured:
        return _cache["redaction"]  # type: ignore[no-any-return]
    config = app_settings.REDACT
    redaction = Redaction()
    if config:
        redaction = build(
            config["BUILTINS"],
            {name: re.compile(pattern) for name, pattern in config["PATTERNS"].items()},
            {name: _callable(value) for name, value in config["CALLABLES"].items()},
            configured_secrets(),
            float(config["TIME_LIMIT"]),
        )
    # Kept with a copy of the settings: a dict changed in place is told from the one it was.
    _cache.update(source=configured, snapshot=copy.deepcopy(configured), redaction=redaction)
    return redaction


def may_reveal(user: Any) -> bool:
    return bool(getattr(user, "has_perm", None) and user.has_perm(REVEAL_PERMISSION))
