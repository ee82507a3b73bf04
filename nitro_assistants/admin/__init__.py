"""Read-only registrations: every record here is written by the services. The review screens
(deciding from the admin) come with their own issue."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from nitro_assistants.models import Decision, Delivery, Event, Review, Run, Thread


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Thread)
class ThreadAdmin(ReadOnlyAdmin):
    list_display = ["thread_id", "assistant_key", "status", "created_at", "synced_at"]
    list_filter = ["status", "assistant_key"]
    search_fields = ["thread_id"]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "thread", "kind", "status", "attempts", "created_at"]
    list_filter = ["kind", "status"]
    list_select_related = ["thread"]


@admin.register(Review)
class ReviewAdmin(ReadOnlyAdmin):
    list_display = ["pk", "thread", "kind", "status", "requested_at"]
    list_filter = ["kind", "status", "thread__assistant_key"]
    list_select_related = ["thread"]
    ordering = ["requested_at"]


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ["pk", "review", "reviewer_id", "outcome", "decided_at"]
    list_filter = ["outcome"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["message_id", "thread", "tool", "status", "attempts", "first_seen_at"]
    list_filter = ["status", "tool"]
    list_select_related = ["thread"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["at", "thread", "verb", "actor"]
    list_filter = ["verb"]
    list_select_related = ["thread", "actor"]
