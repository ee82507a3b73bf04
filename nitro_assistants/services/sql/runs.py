"""The attempt count of :func:`nitro_assistants.services.resumes.execute_resume`, written out."""

from __future__ import annotations

from typing import Any

from django.db import connections, router
from django.utils import timezone

from nitro_assistants.models import Decision, Run
from nitro_assistants.services.sql import column, table


def count_decided_attempt(decision_pk: Any) -> int:
    """``Run.objects.filter(decision__pk=decision_pk, decision__outcome=PENDING).update(
    attempts=F("attempts") + 1, status=RUNNING, started_at=Coalesce("started_at", now))``: one
    statement, written out (what the ORM sends, without compiling it each time). The number of
    runs counted: 0 or 1."""
    connection = connections[router.db_for_write(Run)]
    attempts, status, started, run_pk = (
        column(Run, name, connection) for name in ("attempts", "status", "started_at", "pk")
    )
    run_of, decision_pk_col, outcome = (
        column(Decision, name, connection) for name in ("run", "pk", "outcome")
    )
    now = Run._meta.get_field("started_at").get_db_prep_save(timezone.now(), connection)
    sql = (
        f"UPDATE {table(Run, connection)} SET {attempts} = {attempts} + 1, "  # noqa: S608
        f"{status} = %s, {started} = COALESCE({started}, %s) "
        f"WHERE {run_pk} = (SELECT {run_of} FROM {table(Decision, connection)} "
        f"WHERE {decision_pk_col} = %s AND {outcome} = %s)"
    )
    params = [str(Run.Status.RUNNING), now, int(decision_pk), str(Decision.Outcome.PENDING)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)
