"""Bases for records the services write: staff may look, nobody edits them by hand."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

DECIDE_PERMISSION = "nitro_assistants.decide_review"


def can_decide(request: HttpRequest) -> bool:
    """The custom permission to decide reviews (superusers have every permission)."""
    return bool(request.user.is_active and request.user.has_perm(DECIDE_PERMISSION))


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Machine-written records: no add, change or delete from the admin. A POST of an action
    the user may not run (deciding, syncing) answers 403, as every refused POST here does,
    instead of Django's "No action selected" page."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        action = request.POST.get("action") if request.method == "POST" else None
        if action and action in (self.actions or []) and action not in self.get_actions(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
