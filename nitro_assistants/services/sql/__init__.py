"""The app's hand-written SQL, all of it: the only code in the package that opens a cursor, sends
raw SQL or looks at a database connection (tests/test_layers.py holds it to that). Everything
else is the ORM.

A statement is written out only where a measurement showed the ORM's form costs more (a round
trip, or the query compiler's CPU); each is named for the flow it serves, takes every table and
column name from the models' ``_meta`` (quoted by the backend; every value is a parameter), and
is held equal to its ORM form by a test. What each flow sends:

=============================  =================================================  ==============================
flow                           statement (module: builder)                        held equal by
=============================  =================================================  ==============================
start_run, a new thread (PG)   the thread, its run, their events and the chain's  tests/core/test_sql_parity.py
                               head in one (``events.insert_new_thread``)         (the rows ``save()`` writes)
every event batch, one chain   the chain's head locked, the events linked by the  tests/core/test_audit_chain.py
(PG)                           database and inserted, the head moved, the         (each link checked against
                               batch's queued row writes first, in one            ``hashchain.link_hash``)
                               (``events.append_to_one_chain``)
other event batches            the head locked (``events.lock_head``), then the   tests/core/test_audit_chain.py
                               events inserted and the heads moved
                               (``events.insert_linked``)
a service's row writes in a    UPDATEs and INSERTs by primary key queued and      tests/core/test_writes.py,
batch (PG, no receiver)        sent as CTEs of the events' statement              tests/core/test_model_signals.py
                               (``writes.save``, ``writes.insert``)
locked reads of one row        the queryset's SQL compiled once per connection    tests/core/test_rows.py
(decide, resume, run, mirror)  (``reads.Read``)
decide (PG)                    the decision's id taken from its sequence with     tests/core/test_sql_parity.py
                               the review's locked read (``ids.next_id``)
execute_resume                 the attempt counted on the decision's run          tests/core/test_sql_parity.py
                               (``runs.count_decided_attempt``)
claim_review (PG)              the first claim and its event in one               tests/core/test_sql_parity.py
                               (``claims.first_claim_gate``), a renewal in one
                               (``claims.renew``), a claim inserted unless the
                               review has one (``claims.insert_unless_claimed``)
admin metrics (PG)             the tool-call actions counted in JSON              tests/core/test_sql_parity.py
                               (``metrics.tool_call_actions``)
admin live pages               "has anything changed" in one statement            tests/admin/test_live.py
                               (``live.marker``)
=============================  =================================================  ==============================
"""

from __future__ import annotations

from typing import Any

from django.db import connections, router
from django.db.models import Model


def vendor(model: type[Model], *, write: bool = True) -> str:
    """The vendor (``"postgresql"``, ``"sqlite"``) of the database ``model`` is written to (read
    from, when not ``write``)."""
    alias = router.db_for_write(model) if write else router.db_for_read(model)
    return str(connections[alias].vendor)


def postgresql(model: type[Model]) -> bool:
    """Whether ``model`` is written to PostgreSQL (where the single-statement paths exist)."""
    return vendor(model) == "postgresql"


def vendor_of(alias: str) -> str:
    """The vendor of the database ``alias`` (a queryset's ``.db``)."""
    return str(connections[alias].vendor)


def table(model: type[Model], connection: Any) -> str:
    """``model``'s table, quoted for ``connection``."""
    return str(connection.ops.quote_name(model._meta.db_table))


def column(model: type[Model], name: str, connection: Any) -> str:
    """The column of ``model``'s field ``name`` (``"pk"``: its primary key), quoted."""
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    assert field is not None
    return str(connection.ops.quote_name(str(field.column)))  # type: ignore[union-attr]
