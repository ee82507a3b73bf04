"""What the queue and the review screen ask every few seconds: has anything changed, and if so,
how the rows on screen (or the one review) stand now.

With a shared cache (``LIVE_CACHE``, :mod:`nitro_assistants.services.changes`) the change token
answers "has anything changed": the ETag is a keyed digest of (user, token, rows asked about),
and a poll presenting the current one gets a 304 without a statement of its own. Without one,
one SQL statement answers it for every page (:func:`marker`): the newest audit event (every
review status change, decision outcome, new review and assignment writes one), the newest claim
change (claims, renewals, releases, take-overs) and the number of pending reviews the user may
decide; its digest is the ETag. Only when something changed does a second statement read the rows.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.utils.translation import gettext as _

from nitro_assistants.admin.conversation import held_summary
from nitro_assistants.models import Claim, Decision, Review, Thread
from nitro_assistants.services import changes
from nitro_assistants.services.claims import pending_decidable
from nitro_assistants.services.sql import live as sql_live

logger = logging.getLogger("nitro_assistants")

#: The most rows one poll reports on (the queue shows at most a page of them).
MAX_ROWS = 200


def display_name(first: str | None, last: str | None, username: str | None) -> str:
    """ "Jane Doe", else the username."""
    full = " ".join(part for part in (first, last) if part)
    return full or str(username or "")


def marker(user: Any) -> tuple[Any, ...]:
    """(newest event id, newest claim change, newest review id, pending reviews ``user`` may
    decide): one statement, the same on every page."""
    return sql_live.marker(pending_decidable(user))


def etag(user: Any, mark: tuple[Any, ...], scope: str) -> str:
    """The ETag of a poll: what changed, for whom, about which rows."""
    raw = repr((user.pk, mark, scope)).encode()
    return '"' + hashlib.sha256(raw).hexdigest()[:32] + '"'


def change_token() -> str | None:
    """The change token now, or None: no shared cache, or one that cannot be reached (logged;
    the poll is then answered from the database, as without one)."""
    cache = changes.token_cache()
    if cache is None:
        return None
    try:
        return changes.current_token(cache)
    except Exception:  # the cache's client raises its own errors (redis, pymemcache, ...)
        logger.warning("Could not read the live pages' change token", exc_info=True)
        return None


def token_etag(user: Any, token: str, scope: str) -> str:
    """The ETag of a poll answered from the change token. Keyed with the site's SECRET_KEY, and
    the token is never sent: only the user it was given to in a 200 can present it, and only
    while the token stands (it is what lets the 304 skip the permission check)."""
    digest = salted_hmac("nitro_assistants.live", f"{user.pk}\n{token}\n{scope}").hexdigest()
    return '"t' + digest[:32] + '"'


def short_name(first: str | None, username: str | None) -> str:
    """ "Jane": what a narrow queue column has room for."""
    return str(first or username or "")


def claim_state(
    now: datetime.datetime,
    *,
    pending: bool,
    user_id: Any,
    first: str | None,
    last: str | None,
    username: str | None,
    claimed_at: datetime.datetime | None,
    expires_at: datetime.datetime | None,
) -> dict[str, Any] | None:
    """A live claim as the pages show it, or None (no claim, lapsed, or the review closed)."""
    if not pending or user_id is None or expires_at is None or expires_at <= now:
        return None
    return {
        "user": user_id,
        "name": display_name(first, last, username),
        "short": short_name(first, username),
        "since": claimed_at.isoformat() if claimed_at else None,
        "expires": expires_at.isoformat(),
    }


def claim_of(held: Claim, review: Review) -> dict[str, Any] | None:
    """:func:`claim_state` of a loaded claim on ``review``."""
    return claim_state(
        timezone.now(),
        pending=review.status == Review.Status.PENDING,
        user_id=held.user_id,
        first=held.user.first_name,
        last=held.user.last_name,
        username=held.user.get_username(),
        claimed_at=held.claimed_at,
        expires_at=held.expires_at,
    )


CLAIM_FIELDS = (
    "claim__user_id",
    "claim__user__first_name",
    "claim__user__last_name",
    "claim__user__username",
    "claim__claimed_at",
    "claim__expires_at",
)


def _claim(row: dict[str, Any], now: datetime.datetime) -> dict[str, Any] | None:
    return claim_state(
        now,
        pending=row["status"] == Review.Status.PENDING,
        user_id=row["claim__user_id"],
        first=row["claim__user__first_name"],
        last=row["claim__user__last_name"],
        username=row["claim__user__username"],
        claimed_at=row["claim__claimed_at"],
        expires_at=row["claim__expires_at"],
    )


def queue_rows(ids: list[int]) -> dict[str, Any]:
    """How each review on a queue page stands: status, live claim, assignment (one statement)."""
    now = timezone.now()
    labels = dict(Review.Status.choices)
    rows = Review.objects.filter(pk__in=ids[:MAX_ROWS]).values(
        "pk",
        "status",
        *CLAIM_FIELDS,
        "assignment__user__first_name",
        "assignment__user__last_name",
        "assignment__user__username",
        "assignment__group__name",
    )
    return {
        str(row["pk"]): {
            "status": row["status"],
            "status_label": str(labels.get(row["status"], row["status"])),
            "claim": _claim(row, now),
            "assigned": row["assignment__group__name"]
            or display_name(
                row["assignment__user__first_name"],
                row["assignment__user__last_name"],
                row["assignment__user__username"],
            ),
        }
        for row in rows
    }


def screen_title(pk: Any, kind_label: str, status: str, status_label: str) -> str:
    """What the review screen is, in its heading and the browser tab: "Decide review #12 (tool
    calls)" while it waits, else "Review #12 (tool calls), applied". The live poll sends it too,
    so the heading follows the status it shows (never "decided" beside "applied")."""
    values = {"pk": pk, "kind": kind_label}
    if status == Review.Status.PENDING:
        return _("Decide review #%(pk)s (%(kind)s)") % values
    return _("Review #%(pk)s (%(kind)s), %(status)s") % {**values, "status": status_label}


def _next_pending(field: str) -> Subquery:
    return Subquery(
        Review.objects.filter(thread_id=OuterRef("thread_id"), status=Review.Status.PENDING)
        .exclude(pk=OuterRef("pk"))
        .values(field)[:1]
    )


def review_state(pk: int, review_url: Any) -> dict[str, Any] | None:
    """How one review stands: status (and the screen's title that says it), its thread's
    status, its decision's outcome and error, the live claim, and what the thread waits on next
    (one statement). None when there is no such review."""
    now = timezone.now()
    queryset: QuerySet[Review] = Review.objects.filter(pk=pk).annotate(
        next_pk=_next_pending("pk"),
        next_kind=_next_pending("kind"),
        next_payload=_next_pending("payload"),
    )
    row = (
        queryset.values(
            "pk",
            "kind",
            "status",
            "thread__status",
            "decision__outcome",
            "decision__error",
            "decision__applied_at",
            "next_pk",
            "next_kind",
            "next_payload",
            *CLAIM_FIELDS,
        )
        .order_by()
        .first()
    )
    if row is None:
        return None
    labels = dict(Review.Status.choices)
    kinds = dict(Review.Kind.choices)
    thread_labels = dict(Thread.Status.choices)
    outcomes = {value: str(label) for value, label in Decision.Outcome.choices}
    waiting = None
    if row["next_pk"] is not None:
        payload = row["next_payload"]
        if isinstance(payload, str):  # a JSON column read through a subquery on some backends
            payload = json.loads(payload)
        following = Review(pk=row["next_pk"], kind=row["next_kind"], payload=payload or {})
        waiting = {
            "pk": following.pk,
            "kind": str(following.get_kind_display()),
            "summary": held_summary(following),
            "url": review_url(following),
        }
    outcome = row["decision__outcome"]
    status_label = str(labels.get(row["status"], row["status"]))
    return {
        "pk": row["pk"],
        "status": row["status"],
        "status_label": status_label,
        "title": screen_title(
            row["pk"], str(kinds.get(row["kind"], row["kind"])), row["status"], status_label
        ),
        "thread_status": row["thread__status"],
        "thread_status_label": str(thread_labels.get(row["thread__status"], "")),
        "outcome": outcome,
        "outcome_label": outcomes.get(outcome, "") if outcome else "",
        "error": row["decision__error"] or "",
        "applied_at": row["decision__applied_at"].isoformat()
        if row["decision__applied_at"]
        else None,
        "claim": _claim(row, now),
        "next": waiting,
    }
