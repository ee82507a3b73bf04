"""The metrics page: a few aggregate queries and bar charts drawn as server-side SVG (no script,
no network). Everything is computed for a window of days ending today."""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.db.models import (
    Aggregate,
    Count,
    DateField,
    DurationField,
    ExpressionWrapper,
    F,
    QuerySet,
    RowRange,
    Value,
    Window,
)
from django.db.models.functions import RowNumber, TruncDate
from django.utils import timezone

from nitro_assistants import rules
from nitro_assistants.models import Decision, Delivery, Review
from nitro_assistants.services import sql
from nitro_assistants.services.sql import metrics as sql_metrics

ACTIONS = rules.TOOL_CALL_ACTIONS
COLORS = {
    "approve": "#417690",
    "edit": "#79aec8",
    "reject": "#ba2121",
    "respond": "#e5a50a",
    "delivered": "#2e7d32",
    "pending": "#e5a50a",
    "failed": "#ba2121",
}
DEFAULT_COLOR = "#417690"


@dataclass
class Bar:
    label: str
    value: float
    shown: str
    x: float = 0
    y: float = 0
    width: float = 0
    height: float = 0
    color: str = DEFAULT_COLOR

    @property
    def label_x(self) -> float:
        return self.x - 8

    @property
    def value_x(self) -> float:
        return self.x + self.width + 6

    @property
    def text_y(self) -> float:
        return self.y + self.height / 2 + 4


@dataclass
class Chart:
    """A bar chart laid out for SVG: bars (or stacked segments) with their boxes computed."""

    title: str
    width: int = 640
    height: int = 220
    bars: list[Bar] = field(default_factory=list)
    labels: list[dict[str, Any]] = field(default_factory=list)
    legend: list[dict[str, Any]] = field(default_factory=list)
    empty: bool = True


def horizontal_chart(title: str, items: list[tuple[str, float, str]], colors: Any = None) -> Chart:
    """One bar per ``(label, value, shown value)``, longest value = full width."""
    row, label_width, plot = 32, 150, 400
    chart = Chart(title=title, height=max(row * len(items) + 10, 60))
    top = max((value for _label, value, _shown in items), default=0)
    chart.empty = top <= 0
    for index, (label, value, shown) in enumerate(items):
        chart.bars.append(
            Bar(
                label=label,
                value=value,
                shown=shown,
                x=label_width,
                y=5 + index * row,
                width=max(plot * value / top, 1) if top > 0 and value > 0 else 0,
                height=row - 10,
                color=(colors or {}).get(label, DEFAULT_COLOR),
            )
        )
    return chart


def stacked_columns(
    title: str, days: list[datetime.date], series: dict[str, dict[datetime.date, int]]
) -> Chart:
    """One column per day, one stacked segment per series (in ``series`` order)."""
    chart = Chart(title=title, height=240)
    left, bottom, plot_h = 40, 200, 170
    column = (chart.width - left - 10) / max(len(days), 1)
    totals = {day: sum(values.get(day, 0) for values in series.values()) for day in days}
    top = max(totals.values(), default=0)
    chart.empty = top <= 0
    for index, day in enumerate(days):
        x, base = left + index * column, float(bottom)
        for name, values in series.items():
            count = values.get(day, 0)
            if not count or top <= 0:
                continue
            height = plot_h * count / top
            base -= height
            chart.bars.append(
                Bar(
                    label=f"{day:%b %d} {name}",
                    value=count,
                    shown=str(count),
                    x=x + 2,
                    y=base,
                    width=max(column - 4, 1),
                    height=height,
                    color=COLORS.get(name, DEFAULT_COLOR),
                )
            )
        if index % max(len(days) // 7, 1) == 0:
            chart.labels.append({"x": x + column / 2, "y": bottom + 16, "text": f"{day:%b %d}"})
    chart.labels.append({"x": left - 6, "y": bottom - plot_h + 4, "text": str(top), "end": True})
    chart.labels.append({"x": left - 6, "y": bottom, "text": "0", "end": True})
    chart.legend = [{"name": name, "color": COLORS.get(name, DEFAULT_COLOR)} for name in series]
    return chart


def shown_duration(value: datetime.timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = value.total_seconds()
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _decision_time() -> ExpressionWrapper[Any]:
    return ExpressionWrapper(
        F("decided_at") - F("review__requested_at"), output_field=DurationField()
    )


class Median(Aggregate):
    """PostgreSQL's ``percentile_cont(0.5)``, which also takes intervals."""

    function = "PERCENTILE_CONT"
    name = "Median"
    template = "%(function)s(0.5) WITHIN GROUP (ORDER BY %(expressions)s)"


def medians(
    decisions: QuerySet[Decision], by_day: bool = False
) -> dict[datetime.date | None, datetime.timedelta]:
    """The median time to decision of ``decisions`` (under the key ``None``), or of each day's
    (under its date): one query, on every database.

    The median is PostgreSQL's ``percentile_cont(0.5)``: the mean of the two middle values of
    an even count. Other databases have no such aggregate; there window functions rank each
    day's decisions and the query returns the (one or two) middle rows of each day, never
    every decision. PostgreSQL keeps its aggregate, which costs about 60% of the window query.
    """
    if sql.vendor_of(decisions.db) == "postgresql":
        median = Median(_decision_time(), output_field=DurationField())
        if not by_day:
            value = decisions.aggregate(m=median)["m"]
            return {} if value is None else {None: value}
        return dict(
            decisions.annotate(day=TruncDate("decided_at"))
            .order_by()
            .values("day")
            .annotate(m=median)
            .values_list("day", "m")
        )
    day = TruncDate("decided_at") if by_day else Value(None, output_field=DateField())
    partition = [TruncDate("decided_at")] if by_day else None
    rows = (
        decisions.annotate(
            took=_decision_time(),
            day=day,
            rank=Window(RowNumber(), partition_by=partition, order_by=F("took").asc()),
            # The rank's window (order and all) with the whole partition in its frame: the
            # database sorts once for both.
            size=Window(
                Count("pk"),
                partition_by=partition,
                order_by=F("took").asc(),
                frame=RowRange(start=None, end=None),
            ),
        )
        # Ranks (size + 1) // 2 and size // 2 + 1: one row for an odd size, two for an even one.
        .filter(rank__gte=(F("size") + 1) / 2, rank__lte=F("size") / 2 + 1)
        .order_by()
        .values_list("day", "took")
    )
    middle: dict[datetime.date | None, list[datetime.timedelta]] = {}
    for key, took in rows:
        middle.setdefault(key, []).append(took)
    return {key: sum(values, datetime.timedelta()) / len(values) for key, values in middle.items()}


def _action_counts(since: datetime.datetime) -> Counter[str]:
    counts: Counter[str] = Counter()
    for row in (
        Decision.objects.filter(decided_at__gte=since, reply__isnull=False)
        .values("reply__action")
        .annotate(n=Count("pk"))
    ):
        counts[str(row["reply__action"])] += row["n"]
    counted = sql_metrics.tool_call_actions(since)
    if counted is not None:
        counts.update(counted)
    else:  # SQLite (the example site's default) and the rest: the same count, in Python
        rows = Decision.objects.filter(decided_at__gte=since).values_list("tool_calls", flat=True)
        for calls in rows.iterator():
            for call in calls if isinstance(calls, list) else []:
                counts[str(call.get("action") if isinstance(call, dict) else None)] += 1
    return counts


def collect(days: int = 14, now: datetime.datetime | None = None) -> dict[str, Any]:
    """Every figure and chart of the metrics page, for the last ``days`` days."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    window = [today - datetime.timedelta(days=n) for n in range(days - 1, -1, -1)]
    since = timezone.make_aware(
        datetime.datetime.combine(window[0], datetime.time.min), timezone.get_current_timezone()
    )

    pending = dict(
        Review.objects.filter(status=Review.Status.PENDING)
        .values_list("kind")
        .annotate(n=Count("pk"))
        .values_list("kind", "n")
    )
    pending_chart = horizontal_chart(
        "Pending reviews by kind",
        [
            (str(label), pending.get(kind, 0), str(pending.get(kind, 0)))
            for kind, label in Review.Kind.choices
        ],
    )

    decided = Decision.objects.filter(decided_at__gte=since)
    median_all = medians(decided).get(None)
    per_day = medians(decided, by_day=True)
    median_chart = horizontal_chart(
        "Median time to decision per day",
        [
            (f"{day:%a %b %d}", per_day[day].total_seconds(), shown_duration(per_day[day]))
            for day in window
            if per_day.get(day) is not None
        ],
    )

    actions = _action_counts(since)
    total = sum(actions[a] for a in ACTIONS)
    rates = {a: (100.0 * actions[a] / total if total else 0.0) for a in ACTIONS}
    rates_chart = horizontal_chart(
        "Decisions by action",
        [(a, rates[a], f"{rates[a]:.0f}% ({actions[a]})") for a in ACTIONS],
        colors=COLORS,
    )

    by_channel = dict(decided.order_by().values_list("channel").annotate(n=Count("pk")))
    channel_names = [("", "code"), *Decision.Channel.choices]
    channels_chart = horizontal_chart(
        "Decisions by channel",
        [
            (str(label), by_channel.get(value, 0), str(by_channel.get(value, 0)))
            for value, label in channel_names
            if value != Decision.Channel.GRANT or by_channel.get(value)
        ],
    )

    outcomes: dict[str, dict[datetime.date, int]] = {s: {} for s in Delivery.Status.values}
    for row in (
        Delivery.objects.filter(first_seen_at__gte=since)
        .annotate(day=TruncDate("first_seen_at"))
        .values("day", "status")
        .annotate(n=Count("pk"))
    ):
        outcomes.setdefault(row["status"], {})[row["day"]] = row["n"]
    delivery_chart = stacked_columns(
        "Delivery outcomes per day",
        window,
        {s: outcomes[s] for s in ("delivered", "pending", "failed") if s in outcomes},
    )
    return {
        "days": days,
        "pending_total": sum(pending.values()),
        "median_all": shown_duration(median_all),
        "decisions_total": decided.count(),
        "actions_total": total,
        "rates": rates,
        "channels": {value or "code": by_channel.get(value, 0) for value, _ in channel_names},
        "charts": [pending_chart, median_chart, rates_chart, channels_chart, delivery_chart],
    }
