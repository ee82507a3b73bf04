"""The admin live pages' "has anything changed" (:mod:`nitro_assistants.admin.live`), in one
statement on every database."""

from __future__ import annotations

from typing import Any

from django.db import connections, router
from django.db.models import QuerySet

from nitro_assistants.models import Claim, Event, Review
from nitro_assistants.services.sql import column, table


def marker(decidable: QuerySet[Review]) -> tuple[Any, ...]:
    """(newest event id, newest claim change, newest review id, how many ``decidable`` rows):
    the four reads in one statement, each value as the ORM's aggregate returns it."""
    connection = connections[router.db_for_read(Review)]
    inner, params = decidable.order_by().values("pk").query.sql_with_params()
    # Table and column names are the models' own, quoted by the backend; the values are the
    # compiled queryset's bound parameters.
    sql = (
        f"SELECT (SELECT MAX({column(Event, 'pk', connection)}) FROM {table(Event, connection)}),"  # noqa: S608
        f" (SELECT MAX({column(Claim, 'changed_at', connection)}) FROM {table(Claim, connection)}),"
        f" (SELECT MAX({column(Review, 'pk', connection)}) FROM {table(Review, connection)}),"
        f" (SELECT COUNT(*) FROM ({inner}) {connection.ops.quote_name('decidable')})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        event, changed_at, review, count = cursor.fetchone()
    # As the ORM returns it (SQLite sends a datetime as text).
    column_ = Claim._meta.get_field("changed_at").get_col(Claim._meta.db_table)
    for convert in [
        *connection.ops.get_db_converters(column_),
        *column_.get_db_converters(connection),
    ]:
        changed_at = convert(changed_at, column_, connection)
    return (event, changed_at, review, count)
