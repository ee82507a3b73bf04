"""The stop button in the admin: staff with the ``stop_assistants`` permission add a stop (all
assistants, one assistant, one tool or one thread, with a reason) and resume it, in stages, by
the list's actions. Stops are records: never edited or deleted here."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from nitro_assistants.exceptions import InvalidArgumentError
from nitro_assistants.models import Stop
from nitro_assistants.services import stops


class StopForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Stop
        fields = ("scope", "assistant", "tool", "thread", "reason")

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        try:
            stops.validate(
                cleaned.get("scope") or "",
                cleaned.get("assistant") or "",
                cleaned.get("tool") or "",
                cleaned.get("thread"),
                cleaned.get("reason") or "",
            )
        except InvalidArgumentError as exc:
            scope = cleaned.get("scope")
            field = scope if scope in ("assistant", "tool", "thread") else None
            if "reason" in str(exc):
                field = "reason"
            raise forms.ValidationError({field: str(exc)} if field else str(exc)) from None
        return cleaned


@admin.register(Stop)
class StopAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = StopForm
    list_display = [
        "target",
        "reason",
        "stopped_by_name",
        "stopped_at",
        "state",
        "cancel_outcome",
    ]
    list_filter = ["scope", ("resumed_at", admin.EmptyFieldListFilter)]
    search_fields = ["reason", "assistant", "tool", "stopped_by_name"]
    list_select_related = ["thread"]
    raw_id_fields = ["thread"]
    actions = ["resume_reviews", "resume_all"]
    readonly_fields = [
        "stopped_by_name",
        "stopped_at",
        "cancelled_runs",
        "cancel_failures",
        "reviews_resumed_at",
        "resumed_at",
        "resumed_by",
    ]

    @admin.display(description=_("state"))
    def state(self, obj: Stop) -> str:
        if obj.resumed_at is not None:
            return str(_("resumed"))
        if obj.reviews_resumed_at is not None:
            return str(_("reviews resumed; new runs refused"))
        return str(_("in force"))

    @admin.display(description=_("runs cancelled on the server"))
    def cancel_outcome(self, obj: Stop) -> str:
        text = str(len(obj.cancelled_runs or []))
        if obj.cancel_failures:
            text += " " + str(_("(%(n)d failed)") % {"n": len(obj.cancel_failures)})
        return text

    def has_stop_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(stops.STOP_PERMISSION))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_stop_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_stop_permission(request) or super().has_view_permission(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a record: resumed by the actions, never edited

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["scope", "assistant", "tool", "thread", "reason"]
        return ["scope", "assistant", "tool", "thread", "reason", *self.readonly_fields]

    def save_model(self, request: HttpRequest, obj: Stop, form: Any, change: bool) -> None:
        row = stops.stop(
            request.user,
            scope=obj.scope,
            reason=obj.reason,
            assistant=obj.assistant,
            tool=obj.tool,
            thread=obj.thread,
        )
        obj.__dict__.update({k: v for k, v in row.__dict__.items() if k != "_state"})
        obj._state.adding = False
        # The cancels go out once the admin's transaction commits; one that fails shows in
        # the banner and on the stop's page.

    def _resume(self, request: HttpRequest, queryset: QuerySet[Stop], stage: str) -> None:
        count = 0
        for row in queryset.filter(resumed_at__isnull=True):
            stops.resume(row, request.user, stage=stage)  # type: ignore[arg-type]
            count += 1
        self.message_user(
            request,
            ngettext("%(count)d stop resumed.", "%(count)d stops resumed.", count)
            % {"count": count},
            messages.SUCCESS,
        )

    @admin.action(
        description=_("Resume reviews of selected stops (new runs stay refused)"),
        permissions=["stop"],
    )
    def resume_reviews(self, request: HttpRequest, queryset: QuerySet[Stop]) -> None:
        self._resume(request, queryset, "reviews")

    @admin.action(description=_("Resume selected stops fully"), permissions=["stop"])
    def resume_all(self, request: HttpRequest, queryset: QuerySet[Stop]) -> None:
        self._resume(request, queryset, "all")
