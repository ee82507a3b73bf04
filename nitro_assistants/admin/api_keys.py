"""API keys of the decide API: created here for a user, shown once, revocable.

A key acts as its user, so who may create one for whom is the service's rule
(:func:`nitro_assistants.services.api_keys.creation_refusal`): ``add_apikey`` for one's own keys,
``add_apikey_for_others`` too for anybody else's. Every key created, revoked or deleted is an
audit event (``api_key_created``, ``api_key_revoked``, ``api_key_deleted``).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from nitro_assistants.admin.options import refuse_bad_selection, refuse_nul
from nitro_assistants.models import ApiKey
from nitro_assistants.models.interactions import API_KEY_PREFIX
from nitro_assistants.services import api_keys


class ApiKeyAddForm(forms.ModelForm):  # type: ignore[type-arg]
    """The add form: refuses a user the signed-in creator may not create a key for."""

    request: HttpRequest  # set by ApiKeyAdmin.get_form

    class Meta:
        model = ApiKey
        fields = ("user", "name")

    def clean_user(self) -> Any:
        user = self.cleaned_data["user"]
        refusal = api_keys.creation_refusal(self.request.user, user)
        if refusal is not None:
            raise forms.ValidationError(refusal, code="forbidden")
        return user


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
            refuse_bad_selection(request, self.model)  # a ticked id that is no key: 400 too
        return super().changelist_view(request, extra_context)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is None:
            return ("user", "name")
        return ("user", "name", "key_prefix", "created_at", "last_used_at", "revoked_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        return ["user", "key_prefix", "created_at", "last_used_at", "revoked_at"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = type("ApiKeyAddForm", (ApiKeyAddForm,), {"request": request})
        return super().get_form(request, obj, change=change, **kwargs)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        # Most people create keys for themselves (and may only do that without the permission
        # to create them for others).
        return {"user": request.user.pk, **super().get_changeform_initial_data(request)}

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # The key exists only in this response: only its hash is stored.
        secret = api_keys.issue_api_key(obj, actor=request.user)
        request._nitro_new_api_key = secret  # type: ignore[attr-defined]

    def delete_model(self, request: HttpRequest, obj: ApiKey) -> None:
        api_keys.delete_api_keys([obj], actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        api_keys.delete_api_keys(queryset, actor=request.user)

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
        count = api_keys.revoke_api_keys(queryset, actor=request.user)
        self.message_user(
            request,
            ngettext("%(count)d API key revoked.", "%(count)d API keys revoked.", count)
            % {"count": count},
            messages.SUCCESS,
        )
