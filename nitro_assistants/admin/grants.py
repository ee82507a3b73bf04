"""Scoped approval grants in the admin: listed, filtered and revoked (the list's action, with
``grant_approval``). Grants are given with an approval on a review's screen, never added here;
revoked, expired and used-up grants stay as records (never edited or deleted)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from nitro_assistants import redacting
from nitro_assistants.admin.options import ReadOnlyAdmin
from nitro_assistants.models import Grant
from nitro_assistants.services import grants


class StateFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(Grant.State.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Grant]) -> QuerySet[Grant]:
        value = self.value()
        if value not in Grant.State.values:
            return queryset
        return queryset.filter(grants.by_state(str(value), timezone.now()))


@admin.register(Grant)
class GrantAdmin(ReadOnlyAdmin):
    list_display = [
        "pk",
        "tool",
        "scope",
        "scope_key",
        "arguments",
        "uses_shown",
        "expires_at",
        "granted_by",
        "granted_at",
        "state_shown",
    ]
    list_filter = [StateFilter, "scope", "tool", "assistant_key"]
    search_fields = ["tool", "key", "assistant_key", "granted_by__username"]
    list_select_related = ["granted_by", "revoked_by"]
    actions = ["revoke_selected"]
    readonly_fields = [
        "scope",
        "scope_key",
        "thread",
        "assistant_key",
        "tool",
        "arguments",
        "max_uses",
        "uses_left",
        "uses",
        "duration",
        "expires_at",
        "review",
        "policy",
        "group",
        "granted_by",
        "granted_at",
        "revoked_at",
        "revoked_by",
        "revoke_reason",
        "state_shown",
    ]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields

    @admin.display(description=_("for"))
    def scope_key(self, obj: Grant) -> str:
        return redacting.shown_text(obj.key) if obj.scope == Grant.Scope.SUBJECT else obj.key

    @admin.display(description=_("arguments"))
    def arguments(self, obj: Grant) -> str:
        return json.dumps(redacting.shown(obj.constraints), sort_keys=True, default=str)

    @admin.display(description=_("uses"))
    def uses_shown(self, obj: Grant) -> str:
        if obj.max_uses is None:
            return str(obj.uses)
        return f"{obj.uses} / {obj.max_uses}"

    @admin.display(description=_("state"))
    def state_shown(self, obj: Grant) -> str:
        return str(Grant.State(obj.state).label)

    def has_grant_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(grants.GRANT_PERMISSION))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_grant_permission(request) or super().has_view_permission(request, obj)

    @admin.action(description=_("Revoke selected grants"), permissions=["grant"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[Grant]) -> None:
        count = sum(
            1
            for pk in queryset.filter(revoked_at__isnull=True).values_list("pk", flat=True)
            if grants.revoke(pk, request.user, reason="revoked in the admin")
        )
        self.message_user(
            request,
            ngettext("%(count)d grant revoked.", "%(count)d grants revoked.", count)
            % {"count": count},
            messages.SUCCESS,
        )
