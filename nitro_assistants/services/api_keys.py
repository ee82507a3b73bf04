"""API keys of the decide API: who may create one for whom, and the audit trail of each key
created, revoked or deleted.

A key acts as its user in the API (it decides their sessions and reads what they may read), so
creating a key for somebody else is acting as them: it needs its own permission, and it can never
hand the creator more than they hold themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from nitro_assistants.models import ApiKey
from nitro_assistants.services.audit import record_event

ADD_PERMISSION = "nitro_assistants.add_apikey"
FOR_OTHERS_PERMISSION = "nitro_assistants.add_apikey_for_others"
#: At most this many of the permissions a creator lacks are named in a refusal.
NAMED_PERMISSIONS = 5


def creation_refusal(actor: Any, user: Any) -> str | None:
    """Why ``actor`` may not create an API key for ``user`` (None when they may).

    Anyone with ``add_apikey`` may create their own; a key for anybody else needs
    ``add_apikey_for_others`` too, and a user who is a superuser, or holds a permission the
    actor does not, gets a key only from a superuser (or from someone who holds those too):
    otherwise the key would be a way to act with permissions one was never given.
    """
    if actor is None or not getattr(actor, "is_active", False):
        return "Sign in to create an API key."
    if actor.is_superuser:
        return None
    if not actor.has_perm(ADD_PERMISSION):
        return "You may not create API keys."
    if user.pk == actor.pk:
        return None
    if not actor.has_perm(FOR_OTHERS_PERMISSION):
        return (
            f"You may create an API key for yourself only: a key for {user.get_username()} "
            "acts as them, and needs the permission “Can add API keys for other users”."
        )
    if user.is_superuser:
        return (
            f"{user.get_username()} is a superuser: only a superuser may create a key that "
            "acts as one."
        )
    missing = sorted(user.get_all_permissions() - actor.get_all_permissions())
    if missing:
        named = ", ".join(missing[:NAMED_PERMISSIONS])
        more = (
            f" and {len(missing) - NAMED_PERMISSIONS} more"
            if len(missing) > NAMED_PERMISSIONS
            else ""
        )
        return (
            f"{user.get_username()} holds permissions you do not ({named}{more}): only a "
            "superuser, or someone who holds them too, may create a key that acts as them."
        )
    return None


def _described(key: ApiKey) -> dict[str, Any]:
    """What an audit event says about a key: never the key itself, nor its hash."""
    return {
        "apiKey": key.pk,
        "prefix": key.prefix,
        "name": key.name,
        "userId": key.user_id,
        "user": key.user.get_username(),
    }


def issue_api_key(key: ApiKey, *, actor: Any) -> str:
    """Save the unsaved ``key`` (its ``user`` and ``name`` set, as the admin's form builds it)
    with a fresh secret, and record who created it for whom (``api_key_created``). Returns the
    secret, which is never shown again. Raises ``PermissionDenied`` (with
    :func:`creation_refusal`'s reason) when ``actor`` may not create it."""
    refusal = creation_refusal(actor, key.user)
    if refusal is not None:
        raise PermissionDenied(refusal)
    with transaction.atomic():
        secret = key.set_new_key()
        key.save()
        record_event(None, "api_key_created", actor=actor, **_described(key))
    return secret


def create_api_key(user: Any, name: str, *, actor: Any) -> tuple[ApiKey, str]:
    """Create an API key for ``user`` on behalf of ``actor``: the row and its secret."""
    key = ApiKey(user=user, name=name)
    return key, issue_api_key(key, actor=actor)


def revoke_api_keys(keys: Iterable[ApiKey], *, actor: Any) -> int:
    """Revoke each live key of ``keys`` (one ``api_key_revoked`` event each); returns how many
    were revoked. A key revoked already is left as it was."""
    pks = [key.pk for key in keys]
    now = timezone.now()
    with transaction.atomic():
        live = list(
            ApiKey.objects.select_for_update(of=("self",))
            .select_related("user")
            .filter(pk__in=pks, revoked_at__isnull=True)
        )
        for key in live:
            key.revoked_at = now
            key.save(update_fields=["revoked_at"])
            record_event(None, "api_key_revoked", actor=actor, **_described(key))
    return len(live)


def delete_api_keys(keys: Iterable[ApiKey], *, actor: Any) -> int:
    """Delete keys (a deleted key stops working, as a revoked one does), each with an
    ``api_key_deleted`` event, so the trail outlives the row. Returns how many were deleted."""
    pks = [key.pk for key in keys]
    with transaction.atomic():
        rows = list(
            ApiKey.objects.select_for_update(of=("self",)).select_related("user").filter(pk__in=pks)
        )
        for key in rows:
            record_event(
                None, "api_key_deleted", actor=actor, revoked=key.revoked, **_described(key)
            )
        ApiKey.objects.filter(pk__in=[key.pk for key in rows]).delete()
    return len(rows)
