"""Bases for records the services write: staff may look, nobody edits them by hand."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import BadRequest, PermissionDenied, ValidationError
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from nitro_assistants import redacting
from nitro_assistants.admin.search import may_search_content

DECIDE_PERMISSION = "nitro_assistants.decide_review"
M = TypeVar("M", bound=Model)
#: The largest primary key (the app's are ``BigAutoField``s, as are most hosts' user tables).
MAX_PK = 2**63 - 1


def can_decide(request: HttpRequest) -> bool:
    """The custom permission to decide reviews (superusers have every permission)."""
    return bool(request.user.is_active and request.user.has_perm(DECIDE_PERMISSION))


def object_or_404(queryset: QuerySet[M], object_id: str) -> M:
    """The row whose primary key ``object_id`` (from the URL) spells: 404 for an id that matches
    nothing and for one that is no primary key at all (``abc``, ``1.0``, a NUL, ``../..``),
    which would otherwise fail in the query (a 500) instead of finding nothing."""
    try:
        pk = queryset.model._meta.pk.to_python(object_id)
    except (ValidationError, ValueError, TypeError):
        raise Http404(_("No such record.")) from None
    found = queryset.filter(pk=pk).first()
    if found is None:
        raise Http404(_("No such record."))
    return found


def refuse_nul(request: HttpRequest) -> None:
    """400 for a query string holding a NUL character: PostgreSQL refuses NUL in text, so a
    filter or search on one would fail in the query (a 500); no record can hold one anyway."""
    if any(
        "\x00" in key or any("\x00" in v for v in values) for key, values in request.GET.lists()
    ):
        raise BadRequest(_("A query parameter holds a NUL character."))


def refuse_bad_selection(request: HttpRequest, model: type[Model]) -> None:
    """400 for a bulk action POST whose ticked ids (``_selected_action``) are not all primary
    keys: ``abc`` or ``1e3`` would fail in the query (a 500), and ``" 1"``, ``1_0`` or a number
    past the largest key would quietly select something else or nothing. No row is touched: the
    action is refused whole, rather than run on the ids that happen to parse."""
    if request.method != "POST":
        return
    for value in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
        if not (value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_PK):
            shown = value[:40].encode("unicode_escape").decode("ascii")
            raise BadRequest(
                _(
                    "“%(value)s” is not the id of any %(name)s: nothing was done. Tick the rows "
                    "on the list and try again."
                )
                % {"value": shown, "name": model._meta.verbose_name}
            )


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Machine-written records: no add, change or delete from the admin. A POST of an action
    the user may not run (deciding, syncing) answers 403, as every refused POST here does,
    instead of Django's "No action selected" page."""

    class Media:
        # Every list and page of the app: long model-written values wrap instead of widening it.
        css = {"all": ["nitro_assistants/admin.css"]}

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        """The record as a read-only page shows it: its text redacted (``REDACT``)."""
        return redacting.shown_instance(super().get_object(request, object_id, from_field))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if term and not may_search_content(term, request.user):
            messages.warning(request, _("Redacted values are not searched."))
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)

    def list_title(self, request: HttpRequest) -> str:
        """The list's title: what it lists ("Threads"), not Django's "Select thread to view"."""
        return str(capfirst(self.opts.verbose_name_plural))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied  # as Django would, before the query string is looked at
        extra_context = {"title": self.list_title(request), **(extra_context or {})}
        action = request.POST.get("action") if request.method == "POST" else None
        if action and action in (self.actions or []) and action not in self.get_actions(request):
            raise PermissionDenied
        try:
            refuse_nul(request)
            refuse_bad_selection(request, self.model)
            return super().changelist_view(request, extra_context)
        except BadRequest as exc:  # a filter value that names nothing: say which, as a 400
            return self.bad_request(request, str(exc))

    def bad_request(self, request: HttpRequest, message: str) -> HttpResponse:
        opts = self.opts
        context = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "title": _("Bad request"),
            "message": message,
            "list_url": reverse(
                f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_changelist"
            ),
        }
        return TemplateResponse(
            request, "admin/nitro_assistants/bad_request.html", context, status=400
        )

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
