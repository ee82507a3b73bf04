"""The audit trail: append-only, read-only here too."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy

from nitro_assistants.admin.options import ReadOnlyAdmin
from nitro_assistants.admin.threads import shown
from nitro_assistants.models import Event


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["at", "thread", "verb", "review", "actor"]
    list_filter = ["verb"]
    list_select_related = ["thread", "actor", "review"]
    search_fields = ["verb"]
    date_hierarchy = "at"
    fields = readonly_fields = (
        "at",
        "thread",
        "review",
        "run",
        "actor",
        "verb",
        "shown_data",
        # Its link in the hash chain (docs/evidence.md).
        "seq",
        "prev_hash",
        "hash",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Event]:
        return super().get_queryset(request).defer("thread__values", "thread__context")

    @admin.display(description=gettext_lazy("data"))
    def shown_data(self, obj: Event) -> SafeString:
        return shown(obj.data)
