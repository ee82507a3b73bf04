"""List filters of the review queue and the delivery list. None of them queries the database to
build its choices, so the queue's query count stays flat."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

from django.contrib import admin
from django.core.exceptions import BadRequest
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from nitro_assistants import rules
from nitro_assistants.conf import app_settings
from nitro_assistants.models import Delivery, Review

AGE_BUCKETS = {
    "5m": (_("under 5 minutes"), datetime.timedelta(minutes=5)),
    "1h": (_("under 1 hour"), datetime.timedelta(hours=1)),
    "1d": (_("under 1 day"), datetime.timedelta(days=1)),
}


class QueueStatusFilter(admin.SimpleListFilter):
    """Status, with ``pending`` as the default: the queue opens on what needs a person."""

    title = _("status")
    parameter_name = "status"
    template = "admin/nitro_assistants/review/status_filter.html"
    ALL = rules.ALL_STATUSES
    #: With no kind filtered, the statuses of the two lifecycles are listed apart, under these
    #: headings; those every kind can be in come first, with none.
    GROUPS = (
        ("", rules.REVIEW_KINDS + rules.DIALECT_KINDS + rules.INTERACTION_KINDS),
        (_("Tool calls, replies and pauses"), rules.REVIEW_KINDS + rules.DIALECT_KINDS),
        (_("Questions, blueprints and plans"), rules.INTERACTION_KINDS),
    )

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        # The statuses the kind filtered can be in (every kind's when none is).
        statuses = rules.statuses_for(self.kind)
        labels = dict(Review.Status.choices)
        return [*((status, labels[status]) for status in statuses), (self.ALL, _("All"))]

    def selected(self) -> str:
        return str(self.value() or Review.Status.PENDING)

    def __init__(self, request: HttpRequest, *args: Any) -> None:
        self.kind = request.GET.get("kind__exact") or None
        super().__init__(request, *args)

    def group_of(self, status: str) -> str:
        """The heading ``status`` is listed under: its lifecycle's; none when every kind can be
        in it, or when one kind is filtered (one lifecycle)."""
        if self.kind in rules.TRANSITIONS:
            return ""
        for heading, kinds in self.GROUPS:
            if all(status in rules.statuses_for(kind) for kind in kinds):
                return str(heading)
        return ""

    def choices(self, changelist: Any) -> Iterator[Any]:
        selected = self.selected()
        headings = [str(heading) for heading, _kinds in self.GROUPS]
        listed = [
            {
                "selected": selected == str(value),
                "query_string": changelist.get_query_string({self.parameter_name: value}),
                "display": label,
                "group": "" if value == self.ALL else self.group_of(str(value)),
                "all": value == self.ALL,
            }
            for value, label in self.lookup_choices
        ]
        # Each lifecycle's together (the template regroups them), in lifecycle order; All last.
        yield from sorted(listed, key=lambda c: (c["all"], headings.index(c["group"])))

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        selected = self.selected()
        if selected == self.ALL:
            return queryset
        if selected not in Review.Status.values:  # a typo, not "no such reviews"
            raise BadRequest(
                gettext("Unknown status %(status)r; one of: %(choices)s.")
                % {"status": selected, "choices": ", ".join([*Review.Status.values, self.ALL])}
            )
        return queryset.filter(status=selected)


class AssistantFilter(admin.SimpleListFilter):
    """The configured assistants (from settings, not a DISTINCT over every thread)."""

    title = _("assistant")
    parameter_name = "assistant"
    field_path = "thread__assistant_key"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(key, key) for key in sorted(app_settings.DEFINITIONS)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(**{self.field_path: self.value()})
        return queryset


class AgeFilter(admin.SimpleListFilter):
    """How long ago the review was asked for."""

    title = _("age")
    parameter_name = "age"
    OLDER = "older"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [
            *((key, label) for key, (label, _age) in AGE_BUCKETS.items()),
            (self.OLDER, _("older than 1 day")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value, now = self.value(), timezone.now()
        if value in AGE_BUCKETS:
            return queryset.filter(requested_at__gte=now - AGE_BUCKETS[value][1])
        if value == self.OLDER:
            return queryset.filter(requested_at__lt=now - AGE_BUCKETS["1d"][1])
        return queryset


class DeliveryStateFilter(admin.SimpleListFilter):
    """The state of the thread's latest delivery (annotated as ``delivery_state``)."""

    title = _("delivery state")
    parameter_name = "delivery"
    NONE = "none"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [*Delivery.Status.choices, (self.NONE, _("no delivery"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # Written as (anti-)semi-joins on the deliveries rather than as a filter on the
        # annotation: the count of a filtered queue then costs one hash join, not one
        # subquery per review.
        value = self.value()
        if value == self.NONE:
            return queryset.exclude(
                Exists(Delivery.objects.filter(thread_id=OuterRef("thread_id")))
            )
        if value in Delivery.Status.values:
            return queryset.filter(
                thread_id__in=latest_deliveries().filter(status=value).values("thread_id")
            )
        return queryset


def latest_deliveries() -> QuerySet[Delivery]:
    """Each thread's most recent delivery (the one the queue shows)."""
    newer = Delivery.objects.filter(thread_id=OuterRef("thread_id")).filter(
        Q(first_seen_at__gt=OuterRef("first_seen_at"))
        | Q(first_seen_at=OuterRef("first_seen_at"), pk__gt=OuterRef("pk"))
    )
    return Delivery.objects.exclude(Exists(newer))


class StuckDeliveryFilter(admin.SimpleListFilter):
    """Deliveries pending longer than ``DELIVERY_PENDING_AFTER``."""

    title = _("stuck")
    parameter_name = "stuck"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("pending too long"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            cutoff = timezone.now() - datetime.timedelta(
                seconds=app_settings.DELIVERY_PENDING_AFTER
            )
            return queryset.filter(status=Delivery.Status.PENDING, first_seen_at__lte=cutoff)
        return queryset
