"""The admin: the review queue and review screens (``reviews``), threads and runs (``threads``),
deliveries and the audit trail. Importing each module registers its ``ModelAdmin``s.

Every record here is written by the services; the only thing staff do is decide reviews (with
the ``nitro_assistants.decide_review`` permission), which goes through
:func:`nitro_assistants.services.decide`.
"""

from __future__ import annotations

from nitro_assistants.admin import (
    api_keys,
    channels,
    deliveries,
    dialect_forms,
    events,
    grants,
    interactions,
    notifications,
    policies,
    reviews,
    stops,
    threads,
)
from nitro_assistants.admin.forms import DECISION_FORMS, register_decision_form
from nitro_assistants.admin.options import ReadOnlyAdmin

__all__ = [
    "DECISION_FORMS",
    "ReadOnlyAdmin",
    "api_keys",
    "channels",
    "deliveries",
    "dialect_forms",
    "events",
    "grants",
    "interactions",
    "notifications",
    "policies",
    "register_decision_form",
    "reviews",
    "stops",
    "threads",
]
