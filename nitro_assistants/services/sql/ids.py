"""Primary keys taken ahead of their row's INSERT, from the sequence the ORM's inserts use, by a
read the flow sends anyway (an annotation of its locked read, no statement of its own): the row
can then be queued (:mod:`.writes`) and ride on the events' statement. PostgreSQL only; an id
taken and not used (a replay, an approval, an error, a run that does not pause) is a gap in the
ids, as a rolled-back INSERT leaves one."""

from __future__ import annotations

from django.db import connections, router
from django.db.models import BigIntegerField, Expression, Model
from django.db.models.expressions import RawSQL

from nitro_assistants.services.sql import table


def next_id(model: type[Model]) -> Expression | None:
    """An annotation giving ``model``'s next id (``nextval`` of its primary key's sequence), or
    None where the database has no sequence to take it from (the INSERT assigns it there). Used
    by decide (the decision's id, with the review's locked read) and the mirror (the review's
    id, with the thread's)."""
    connection = connections[router.db_for_write(model)]
    if connection.vendor != "postgresql":
        return None
    # pg_get_serial_sequence takes the table's name as SQL text and the column's unquoted.
    pk = model._meta.pk
    assert pk is not None
    return RawSQL(
        "nextval(pg_get_serial_sequence(%s, %s))",
        [table(model, connection), str(pk.column)],
        output_field=BigIntegerField(),
    )
