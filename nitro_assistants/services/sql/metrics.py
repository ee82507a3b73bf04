"""The admin metrics page's count of tool-call decisions by action, in the database (PostgreSQL's
JSON functions); :mod:`nitro_assistants.admin.metrics` counts them in Python elsewhere."""

from __future__ import annotations

import datetime
from collections import Counter

from django.db import connections, router

from nitro_assistants.models import Decision
from nitro_assistants.services.sql import column, table


def tool_call_actions(since: datetime.datetime) -> Counter[str] | None:
    """How many held calls of the decisions made since ``since`` were approved, edited,
    rejected, answered (by the ``action`` of each entry of ``Decision.tool_calls``); None where
    the database cannot count them (the caller counts in Python)."""
    connection = connections[router.db_for_read(Decision)]
    if connection.vendor != "postgresql":
        return None
    calls, decided_at = (
        column(Decision, name, connection) for name in ("tool_calls", "decided_at")
    )
    sql = (
        f"SELECT item->>'action', COUNT(*) FROM {table(Decision, connection)} AS d, "  # noqa: S608
        f"jsonb_array_elements(CASE WHEN jsonb_typeof(d.{calls}) = 'array' "
        f"THEN d.{calls} ELSE '[]'::jsonb END) AS item "
        f"WHERE d.{decided_at} >= %s GROUP BY 1"
    )
    counts: Counter[str] = Counter()
    with connection.cursor() as cursor:
        cursor.execute(sql, [since])
        for action, n in cursor.fetchall():
            counts[str(action)] += n
    return counts
