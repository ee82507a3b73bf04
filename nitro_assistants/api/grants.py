"""The grants of the decide API: listed (filtered) and revoked. Reading them needs
``view_grant``; revoking needs ``grant_approval`` (whoever may give grants may take any back).
Grants are given with an approval (the decide body's ``grant``), never here. See docs/api.md."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from nitro_assistants import redacting
from nitro_assistants.api.errors import ApiError
from nitro_assistants.api.views import _json_body, _page_params, endpoint
from nitro_assistants.models import Grant
from nitro_assistants.services import grants

VIEW_PERMISSION = "nitro_assistants.view_grant"
MAX_PK = 2**63 - 1
STATES = [state.value for state in Grant.State]
SCOPES = [scope.value for scope in Grant.Scope]


def describe_grant(grant: Grant) -> dict[str, Any]:
    def when(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "id": grant.pk,
        "state": grant.state,
        "scope": grant.scope,
        "key": redacting.shown_text(grant.key) if grant.scope == "subject" else grant.key,
        "assistant": grant.assistant_key,
        "tool": grant.tool,
        "args": redacting.shown(grant.constraints),
        "maxUses": grant.max_uses,
        "usesLeft": grant.uses_left,
        "uses": grant.uses,
        "duration": grant.duration.total_seconds() if grant.duration is not None else None,
        "expiresAt": when(grant.expires_at),
        "review": grant.review_id,
        "grantedBy": grant.granted_by.get_username() if grant.granted_by is not None else None,
        "grantedAt": when(grant.granted_at),
        "revokedAt": when(grant.revoked_at),
        "revokedBy": grant.revoked_by.get_username() if grant.revoked_by is not None else None,
        "revokeReason": grant.revoke_reason,
    }


def _grants() -> QuerySet[Grant]:
    return Grant.objects.select_related("granted_by", "revoked_by")


def _filters(request: HttpRequest) -> Q:
    chosen = Q()
    state = request.GET.get("state")
    if state is not None:
        if state not in STATES:
            raise ApiError(
                400,
                "invalid_query",
                f"Unknown state {state!r}; one of: {', '.join(STATES)}",
                field="state",
            )
        chosen &= grants.by_state(state, timezone.now())
    scope = request.GET.get("scope")
    if scope is not None:
        if scope not in SCOPES:
            raise ApiError(
                400,
                "invalid_query",
                f"Unknown scope {scope!r}; one of: {', '.join(SCOPES)}",
                field="scope",
            )
        chosen &= Q(scope=scope)
    for name, lookup in (("tool", "tool"), ("assistant", "assistant_key")):
        value = request.GET.get(name)
        if value is not None:
            chosen &= Q(**{lookup: value})
    return chosen


@endpoint("GET", query=("state", "scope", "tool", "assistant", "limit", "after"))
def grant_list(request: HttpRequest, user: Any) -> HttpResponse:
    """Grants, newest last, ``limit`` at a time after the cursor ``after``."""
    if not user.has_perm(VIEW_PERMISSION):
        raise ApiError(
            403, "forbidden", "Reading grants needs the nitro_assistants.view_grant permission"
        )
    filters = _filters(request)
    limit, after = _page_params(request)
    page = list(_grants().filter(filters, pk__gt=after).order_by("pk")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return JsonResponse(
        {"items": [describe_grant(g) for g in page], "next": page[-1].pk if more else None}
    )


def _grant_for(user: Any, grant_id: str) -> Grant:
    pk = int(grant_id) if grant_id.isascii() and grant_id.isdigit() else 0
    grant = _grants().filter(pk=pk).first() if 1 <= pk <= MAX_PK else None
    if grant is None or not (
        user.has_perm(VIEW_PERMISSION) or user.has_perm(grants.GRANT_PERMISSION)
    ):
        raise ApiError(404, "not_found", f"No grant {grant_id}", field="grantId")
    return grant


@endpoint("GET")
def grant(request: HttpRequest, user: Any, grant_id: str) -> HttpResponse:
    return JsonResponse(describe_grant(_grant_for(user, grant_id)))


@endpoint("POST")
def revoke(request: HttpRequest, user: Any, grant_id: str) -> HttpResponse:
    """Revoke a grant, with an optional ``{"reason"}``; revoking one revoked already is a 409."""
    found = _grant_for(user, grant_id)
    if not user.has_perm(grants.GRANT_PERMISSION):
        raise ApiError(
            403, "forbidden", "Revoking grants needs the nitro_assistants.grant_approval permission"
        )
    body = _json_body(request) if request.META.get("CONTENT_LENGTH") not in (None, "", "0") else {}
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "The body must be an object")
    reason = body.get("reason", "")
    if not isinstance(reason, str) or len(reason) > 500:
        raise ApiError(
            400, "invalid_json", "`reason` must be a text of at most 500 characters", field="reason"
        )
    if not grants.revoke(found.pk, user, reason):
        raise ApiError(409, "conflict", f"Grant {found.pk} is revoked already")
    return JsonResponse(describe_grant(_grants().get(pk=found.pk)))
