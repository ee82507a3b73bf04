"""The audit trail's export as admin actions on threads and reviews: the trail of the selected
threads (of a review: its thread's), as ``nitro_assistants_audit export`` writes it, streamed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy

from nitro_assistants import redacting
from nitro_assistants.models import Review, Thread
from nitro_assistants.services import evidence

CONTENT_TYPES = {"jsonl": "application/x-ndjson", "csv": "text/csv"}


def _redacted(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows with their events' data redacted (``REDACT``): an event whose data changed no
    longer verifies against its hash, which the export then says (its chain check)."""
    redaction = redacting.current()
    for row in rows:
        yield {**row, "data": redaction.value(row["data"])} if redaction and "data" in row else row


def _download(
    queryset: QuerySet[Any], fmt: str, request: HttpRequest | None = None
) -> StreamingHttpResponse:
    if queryset.model is Review:
        threads = Thread.objects.filter(pk__in=queryset.values("thread_id"))
    else:
        threads = Thread.objects.filter(pk__in=queryset.values("pk"))
    events, covered = evidence.selection(threads=threads)
    rows: Iterable[dict[str, Any]] = evidence.export_rows(events, covered)
    if request is None or not redacting.may_reveal(request.user):
        rows = _redacted(rows)
    lines = evidence.jsonl_lines(rows) if fmt == "jsonl" else evidence.csv_lines(rows)
    response = StreamingHttpResponse(lines, content_type=CONTENT_TYPES[fmt])
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="audit-trail-{stamp}.{fmt}"'
    return response


@admin.action(description=gettext_lazy("Export audit trail (JSONL)"), permissions=["view"])
def export_audit_jsonl(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]
) -> StreamingHttpResponse:
    return _download(queryset, "jsonl", request)


@admin.action(description=gettext_lazy("Export audit trail (CSV)"), permissions=["view"])
def export_audit_csv(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]
) -> StreamingHttpResponse:
    return _download(queryset, "csv", request)
