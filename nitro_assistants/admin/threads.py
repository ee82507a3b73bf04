"""Threads (the mirrored conversation with its runs, reviews, deliveries and audit trail) and
runs. "Sync from server" reads the thread back from the Assistants API through
:func:`nitro_assistants.services.sync_thread`."""

from __future__ import annotations

from typing import Any

import requests
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.loader import render_to_string
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from nitro_assistants import redacting, services
from nitro_assistants.admin.content import show_value
from nitro_assistants.admin.conversation import held_summary, show_message
from nitro_assistants.admin.evidence import export_audit_csv, export_audit_jsonl
from nitro_assistants.admin.options import (
    ReadOnlyAdmin,
    ReadOnlyInline,
    can_decide,
    object_or_404,
)
from nitro_assistants.admin.search import (
    conversation_matches,
    may_search_content,
    whole_thread_id,
)
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import Delivery, Event, Review, Run, Thread

SYNC_ERRORS = (NitroAssistantsError, requests.RequestException)


def shown(value: Any) -> SafeString:
    """A value as the review screens draw it: text as text, an object as key/value rows, long
    content collapsed to its first line (the template escapes every value)."""
    return render_to_string(
        "admin/nitro_assistants/content/value.html",
        {"value": show_value(redacting.shown(value))},
    )


def thread_identity(thread: Any, url: str) -> SafeString:
    """A thread as lists show it: its subject as the link, and the start of its id (the whole
    id on hover), so no row is identified by a bare truncated UUID. The subject is redacted."""
    subject = redacting.shown_subject(thread.subject or "")
    return format_html(
        '<a class="nitro-about" href="{}" title="{} · {}">{}</a> <span class="nitro-muted nitro-short-id">{}…</span>',
        url,
        subject,
        thread.thread_id,
        subject or _("(no message yet)"),
        thread.short_id,
    )


class RunInline(ReadOnlyInline):
    model = Run
    fields = readonly_fields = (
        "kind",
        "status",
        "attempts",
        "remote_run_id",
        "created_at",
        "finished_at",
        "shown_error",
    )
    ordering = ["created_at"]

    @admin.display(description=gettext_lazy("error"))
    def shown_error(self, obj: Run) -> SafeString:
        return shown(obj.error)


class ReviewInline(ReadOnlyInline):
    model = Review
    fields = readonly_fields = (
        "review_link",
        "kind",
        "status",
        "held",
        "requested_at",
        "closed_at",
    )
    ordering = ["requested_at"]

    @admin.display(description=gettext_lazy("review"))
    def review_link(self, obj: Review) -> str:
        url = reverse(f"{self.admin_site.name}:nitro_assistants_review_review", args=[obj.pk])
        return format_html('<a href="{}">#{}</a>', url, obj.pk)

    @admin.display(description=gettext_lazy("what is held"))
    def held(self, obj: Review) -> str:
        return held_summary(obj)


class DeliveryInline(ReadOnlyInline):
    model = Delivery
    fields = readonly_fields = (
        "message_id",
        "tool",
        "status",
        "attempts",
        "shown_error",
        "first_seen_at",
        "delivered_at",
    )
    ordering = ["first_seen_at"]

    @admin.display(description=gettext_lazy("error"))
    def shown_error(self, obj: Delivery) -> str:
        return redacting.shown_text(obj.error or "")


class EventInline(ReadOnlyInline):
    model = Event
    fields = readonly_fields = ("at", "verb", "actor", "shown_data")
    ordering = ["at", "pk"]

    @admin.display(description=gettext_lazy("data"))
    def shown_data(self, obj: Event) -> SafeString:
        return shown(obj.data)


@admin.register(Thread)
class ThreadAdmin(ReadOnlyAdmin):
    list_display = ["about", "assistant_key", "status", "created_at", "synced_at"]
    list_display_links = None  # "about" links to the thread itself
    list_filter = ["status", "assistant_key"]
    search_fields = ["=thread_id", "subject"]
    search_help_text = gettext_lazy(
        "Who it is about, text of the conversation, or the start of a thread id."
    )
    fields = readonly_fields = (
        "shown_subject",
        "thread_id",
        "assistant_key",
        "status",
        "opened_by",
        "created_at",
        "updated_at",
        "synced_at",
        "shown_context",
        "shown_metadata",
        "conversation",
    )
    inlines = [ReviewInline, RunInline, DeliveryInline, EventInline]
    actions = ["sync_selected", export_audit_jsonl, export_audit_csv]
    change_form_template = "admin/nitro_assistants/thread/change_form.html"

    def has_sync_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_decide(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Thread]:
        queryset = super().get_queryset(request)
        if request.resolver_match and (request.resolver_match.url_name or "").endswith(
            "changelist"
        ):
            queryset = queryset.defer("values", "context", "metadata")
        return queryset

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Thread], search_term: str
    ) -> tuple[QuerySet[Thread], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        thread_id = whole_thread_id(term)
        if thread_id is not None:
            return queryset.filter(thread_id=thread_id), False
        if not may_search_content(term, request.user):
            messages.warning(
                request,
                _("Redacted values are not searched: search by thread id instead."),
            )
            return queryset.none(), False
        return queryset.filter(conversation_matches(term)), False

    @admin.display(description=gettext_lazy("about"), ordering="subject")
    def about(self, obj: Thread) -> SafeString:
        url = reverse(f"{self.admin_site.name}:nitro_assistants_thread_change", args=[obj.pk])
        return thread_identity(obj, url)

    @admin.display(description=gettext_lazy("subject"))
    def shown_subject(self, obj: Thread) -> str:
        return redacting.shown_subject(obj.subject or "")

    @admin.display(description=gettext_lazy("context"))
    def shown_context(self, obj: Thread) -> SafeString:
        return shown(obj.context or {})

    @admin.display(description=gettext_lazy("metadata"))
    def shown_metadata(self, obj: Thread) -> SafeString:
        return shown(obj.metadata or {})

    @admin.display(description=gettext_lazy("conversation"))
    def conversation(self, obj: Thread) -> SafeString:
        messages = redacting.shown(obj.messages)
        shown = [show_message(m) for m in messages if isinstance(m, dict)]
        # The template escapes every message; its output is safe to embed.
        return render_to_string("admin/nitro_assistants/conversation.html", {"conversation": shown})

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "<path:object_id>/sync/",
                self.admin_site.admin_view(self.sync_view),
                name="{}_{}_sync".format(*info),
            ),
            *super().get_urls(),
        ]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra_context = {
            **(extra_context or {}),
            "can_sync": self.has_sync_permission(request),
            "sync_url": reverse(
                f"{self.admin_site.name}:nitro_assistants_thread_sync", args=[object_id]
            ),
        }
        return super().change_view(request, object_id, form_url, extra_context)

    def _sync(self, request: HttpRequest, thread: Thread) -> bool:
        try:
            services.sync_thread(thread)
        except SYNC_ERRORS as exc:
            messages.error(
                request,
                _("Could not sync thread %(thread)s: %(error)s")
                % {"thread": thread.thread_id, "error": str(exc) or exc.__class__.__name__},
            )
            return False
        return True

    def sync_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_sync_permission(request):
            raise PermissionDenied
        thread = object_or_404(Thread.objects.all(), object_id)
        if self._sync(request, thread):
            messages.success(request, _("Thread synced from the server."))
        return HttpResponseRedirect(
            reverse(f"{self.admin_site.name}:nitro_assistants_thread_change", args=[thread.pk])
        )

    @admin.action(description=gettext_lazy("Sync from server"), permissions=["sync"])
    def sync_selected(self, request: HttpRequest, queryset: QuerySet[Thread]) -> None:
        synced = sum(self._sync(request, thread) for thread in queryset)
        if synced:
            messages.success(
                request,
                ngettext("%(count)d thread synced.", "%(count)d threads synced.", synced)
                % {"count": synced},
            )


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "thread", "kind", "status", "attempts", "created_at"]
    list_filter = ["kind", "status"]
    list_select_related = ["thread"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return super().get_queryset(request).defer("thread__values", "thread__context")
