"""Deliveries: failed first, then the ones stuck pending (oldest first), then the rest."""

from __future__ import annotations

import datetime
from typing import Any

from django.contrib import admin
from django.db.models import Case, IntegerField, Q, QuerySet, Value, When
from django.http import HttpRequest
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext_lazy

from nitro_assistants import redacting
from nitro_assistants.admin.filters import StuckDeliveryFilter
from nitro_assistants.admin.options import ReadOnlyAdmin
from nitro_assistants.conf import app_settings
from nitro_assistants.models import Delivery


def attention_rank() -> Case:
    """0 failed, 1 pending longer than ``DELIVERY_PENDING_AFTER``, 2 pending, 3 delivered."""
    cutoff = timezone.now() - datetime.timedelta(seconds=app_settings.DELIVERY_PENDING_AFTER)
    return Case(
        When(status=Delivery.Status.FAILED, then=Value(0)),
        When(Q(status=Delivery.Status.PENDING, first_seen_at__lte=cutoff), then=Value(1)),
        When(status=Delivery.Status.PENDING, then=Value(2)),
        default=Value(3),
        output_field=IntegerField(),
    )


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = [
        "message_id",
        "thread",
        "tool",
        "status",
        "attempts",
        "shown_error",
        "first_seen_at",
        "settled",
    ]
    list_filter = ["status", "tool", StuckDeliveryFilter]
    list_select_related = ["thread"]
    search_fields = ["message_id", "content", "error"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).defer("thread__values", "thread__context")

    @admin.display(description=gettext_lazy("error"), ordering="error")
    def shown_error(self, obj: Delivery) -> str:
        return redacting.shown_text(obj.error or "")

    @admin.display(description=gettext_lazy("delivered or failed"))
    def settled(self, obj: Delivery) -> str:
        # One column for when the delivery settled (it is delivered or failed, never both): the
        # list keeps its columns on a 1280 px screen beside the admin's sidebars.
        when = obj.delivered_at or obj.failed_at
        return date_format(timezone.localtime(when), "DATETIME_FORMAT") if when else "—"

    def get_ordering(self, request: HttpRequest) -> list[Any]:
        return [attention_rank().asc(), "first_seen_at", "pk"]
