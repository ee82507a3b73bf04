"""API keys of the decide API: created here for a user, shown once, revocable."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from nitro_assistants.admin.options import refuse_nul
from nitro_assistants.models import ApiKey
from nitro_assistants.models.interactions import API_KEY_PREFIX


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "user", "key_prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "user__username", "prefix"]
    list_select_related = ["user"]
    raw_id_fields = ["user"]
    actions = ["revoke"]

    @admin.display(description=_("key"))
    def key_prefix(self, obj: ApiKey) -> str:
        return f"{API_KEY_PREFIX}{obj.prefix}_…"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # A search or filter on a NUL would fail in the query (500), as on the app's other lists.
        if self.has_view_or_change_permission(request):
            refuse_nul(request)  # BadRequest: Django's 400
        return super().changelist_view(request, extra_context)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is None:
            return ("user", "name")
        return ("user", "name", "key_prefix", "created_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        return ["user", "key_prefix", "created_at", "last_used_at", "revoked_at"]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if not change:
            # The key exists only in this response: only its hash is stored.
            request._nitro_new_api_key = obj.set_new_key()  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)

    def response_add(
        self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None
    ) -> HttpResponse:
        secret = getattr(request, "_nitro_new_api_key", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("API key created"),
            "key": obj,
            "secret": secret,
        }
        response = TemplateResponse(request, "admin/nitro_assistants/apikey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description=_("Revoke selected API keys"), permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(
            request,
            ngettext("%(count)d API key revoked.", "%(count)d API keys revoked.", count)
            % {"count": count},
            messages.SUCCESS,
        )
