"""The app's hand-written SQL, all of it: the only code in the package that opens a cursor, sends
raw SQL or looks at a database connection (tests/test_layers.py holds it to that). Everything
else is the ORM.

A statement is written out only where a measurement showed the ORM's form costs more (a round
trip, or the query compiler's CPU); each is named for the flow it serves, takes every table and
column name from the models' ``_meta`` (quoted by the backend; every value is a parameter), and
is held equal to its ORM form by a test. Flow → statement (``module.builder``) → its test:

- **start_run** of a new thread (PostgreSQL): the thread, its run, their events and the
  chain's head in one statement, none of them while a stop refuses the run (the stops' ORM
  query, compiled by the ORM, in a ``WHERE NOT EXISTS``; ``events.insert_new_thread``) →
  tests/core/test_sql_parity.py, against the rows ``save()`` writes;
  tests/core/test_writes.py, a stop refusing it.
- **every batch of audit events** on one chain (PostgreSQL): the head locked, the events linked
  by the database and inserted, the head moved, the batch's queued row writes first, in one
  statement (``events.append_to_one_chain``, built by ``events.linked_sql``); other batches:
  the head locked (``events.lock_head``), then the events inserted and the heads moved
  (``events.insert_linked``) → tests/core/test_audit_chain.py (each link checked against
  ``hashchain.link_hash``).
- **a service's row writes in a batch** (PostgreSQL, no receiver watching the model): UPDATEs
  and INSERTs by primary key queued and sent as CTEs of the events' statement (``writes.save``,
  ``writes.insert``, ``writes.ctes``) → tests/core/test_writes.py,
  tests/core/test_model_signals.py.
- **the locked reads of one row** (decide, execute_resume, execute_run, the mirror's thread):
  the queryset's own SQL compiled once per connection (``reads.Read``) →
  tests/core/test_rows.py.
- **the mirror's open reviews** (execute_run, execute_resume): the queryset's own SQL compiled
  once per connection (``reads.Rows``) → tests/core/test_rows.py.
- **decide** and **the mirror** (PostgreSQL): the decision's and the review's ids taken from
  their sequences by the locked read sent anyway (``ids.next_id``) →
  tests/core/test_sql_parity.py.
- **execute_resume**: the attempt counted on the decision's run (``runs.count_decided_attempt``)
  → tests/core/test_sql_parity.py.
- **claim_review** (PostgreSQL): the first claim and its event in one statement
  (``claims.first_claim_gate``), a renewal in one (``claims.renew``); on every database a claim
  inserted unless the review has one (``claims.insert_unless_claimed``) →
  tests/core/test_sql_parity.py.
- **the admin's metrics page** (PostgreSQL): the held calls' actions counted in the JSON
  (``metrics.tool_call_actions``) → tests/core/test_sql_parity.py, against the Python count.
- **the admin's live pages**: "has anything changed" in one statement (``live.marker``) →
  tests/core/test_sql_parity.py, against four ORM reads.

The open reviews a mirror reads after the thread's lock are an ordinary ORM query again, in a
statement of its own (issue 35 walked back the statement that read them with the thread's
lock), compiled once.
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
