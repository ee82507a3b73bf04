"""Notifications in the admin: each reviewer turns theirs off (or on) for themselves; staff who
may look at notifications see the outbox, what was sent and what failed, with the error."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from nitro_assistants.admin.options import ReadOnlyAdmin, refuse_bad_selection
from nitro_assistants.models import Notification, NotificationPreference


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Any staff member edits their own preference (and only theirs; a superuser, anyone's)."""

    list_display = ["user", "enabled"]
    fields = ["enabled"]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if self.has_view_or_change_permission(request):
            refuse_bad_selection(request, self.model)  # a ticked id that is no row: 400
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request: HttpRequest) -> QuerySet[NotificationPreference]:
        queryset: QuerySet[NotificationPreference] = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(user_id=int(request.user.pk or 0))

    def _own(self, request: HttpRequest, obj: Any) -> bool:
        return bool(request.user.is_active and request.user.is_staff) and (
            obj is None or obj.user_id == request.user.pk or request.user.is_superuser
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._own(request, None)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._own(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._own(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return (
            self._own(request, None)
            and not NotificationPreference.objects.filter(
                user_id=int(request.user.pk or 0)
            ).exists()
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            obj.user = request.user
        super().save_model(request, obj, form, change)


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "kind",
        "channel",
        "user",
        "review",
        "status",
        "attempts",
        "sent_at",
        "error",
    ]
    list_filter = ["status", "kind", "channel"]
    list_select_related = ["user"]
