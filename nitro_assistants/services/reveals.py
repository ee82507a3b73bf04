"""A redacted review shown whole to one person: allowed by a permission, and on the record."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from nitro_assistants.exceptions import InteractionForbiddenError
from nitro_assistants.models import Event, Review
from nitro_assistants.redacting import hidden_paths, may_reveal
from nitro_assistants.services.audit import record_event


def reveal(review: Review, user: Any) -> Event:
    """Record that ``user`` was shown ``review`` unredacted: an audit event in the thread's
    chain naming who, when and which values (their paths, never the values themselves).
    ``InteractionForbiddenError`` without the ``reveal_redacted`` permission."""
    if not may_reveal(user):
        raise InteractionForbiddenError("You may not reveal redacted values.")
    with transaction.atomic():
        return record_event(
            review.thread, "review_revealed", review=review, actor=user, paths=hidden_paths(review)
        )
