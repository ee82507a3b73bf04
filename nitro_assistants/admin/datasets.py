"""The review queue's "Export dataset…" action: the ticked reviews' decisions as a dataset
(:mod:`nitro_assistants.services.datasets`), the format chosen on an intermediate page, the
file streamed as it is written.

It needs the ``export_dataset`` permission; the export is redacted (``REDACT``) unless its
person may reveal (``reveal_redacted``) and ticks *Unredacted*.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from nitro_assistants import redacting
from nitro_assistants.models import Review
from nitro_assistants.services import datasets

EXPORT_PERMISSION = "nitro_assistants.export_dataset"

FORMAT_LABELS = {
    "jsonl": gettext_lazy("JSONL records (everything: conversation, decision, what ran)"),
    "openai": gettext_lazy("OpenAI fine-tuning chat (the decided message as the target)"),
    "langsmith": gettext_lazy("LangSmith dataset (inputs, outputs, metadata)"),
}


class DatasetExportForm(forms.Form):
    """The intermediate page: the format, and for those who may reveal, unredacted or not."""

    format = forms.ChoiceField(
        label=gettext_lazy("Format"),
        choices=[(fmt, FORMAT_LABELS[fmt]) for fmt in datasets.FORMATS],
        initial="jsonl",
        widget=forms.RadioSelect,
    )
    unredacted = forms.BooleanField(
        label=gettext_lazy("Unredacted"),
        required=False,
        help_text=gettext_lazy("Export the values REDACT hides (your reveal permission)."),
    )

    def __init__(self, *args: Any, may_reveal: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not may_reveal:
            del self.fields["unredacted"]


class DatasetExportMixin:
    """Mixed into :class:`~nitro_assistants.admin.reviews.ReviewAdmin` after
    :class:`~nitro_assistants.admin.bulk.BulkDecisionsMixin`, whose selection and confirmation
    page it shares (list ``export_dataset`` in ``actions``)."""

    def has_export_dataset_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.has_perm(EXPORT_PERMISSION))

    @admin.action(description=gettext_lazy("Export dataset…"), permissions=["export_dataset"])
    def export_dataset(
        self, request: HttpRequest, queryset: QuerySet[Review]
    ) -> TemplateResponse | StreamingHttpResponse | None:
        bulk: Any = self  # BulkDecisionsMixin's selection and page
        may_reveal = redacting.may_reveal(request.user)
        form = DatasetExportForm(
            request.POST if "post" in request.POST else None, may_reveal=may_reveal
        )
        if form.is_bound and form.is_valid():
            selected = Review.objects.filter(pk__in=bulk._selected(request, queryset).values("pk"))
            unredacted = may_reveal and form.cleaned_data.get("unredacted", False)
            fmt = form.cleaned_data["format"]
            try:
                lines = datasets.export(
                    selected,
                    fmt,
                    datasets.Filters(),
                    redaction=None if unredacted else redacting.current(),
                    by=request.user,
                )
            except datasets.DatasetError:
                messages.error(
                    request,
                    _("Nothing to export: none of the selected reviews has been decided."),
                )
                return None
            response = StreamingHttpResponse(lines, content_type="application/x-ndjson")
            stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
            response["Content-Disposition"] = f'attachment; filename="reviews-{fmt}-{stamp}.jsonl"'
            return response
        context = bulk._confirmation_context(request, queryset, "export_dataset")
        context.update({"title": _("Export selected reviews as a dataset"), "form": form})
        return TemplateResponse(
            request, "admin/nitro_assistants/review/export_dataset.html", context
        )
