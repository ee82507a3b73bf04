"""The id of the decision :func:`nitro_assistants.services.reviews.decide` may insert, taken from
the decisions' sequence by the review's locked read on PostgreSQL (no statement of its own)."""

from __future__ import annotations

from django.db import connections, router
from django.db.models import BigIntegerField, Expression
from django.db.models.expressions import RawSQL

from nitro_assistants.models import Decision
from nitro_assistants.services.sql import table


def next_id() -> Expression | None:
    """An annotation giving the decisions' next id (``nextval`` of the primary key's sequence),
    or None where the database has no sequence to take it from (the decision's INSERT assigns
    it there). Unused (a replay, an approval, an error), it is a gap in the ids."""
    connection = connections[router.db_for_write(Decision)]
    if connection.vendor != "postgresql":
        return None
    # pg_get_serial_sequence takes the table's name as SQL text and the column's unquoted.
    pk = Decision._meta.pk
    assert pk is not None
    return RawSQL(
        "nextval(pg_get_serial_sequence(%s, %s))",
        [table(Decision, connection), str(pk.column)],
        output_field=BigIntegerField(),
    )
