"""Claim statements of :func:`nitro_assistants.services.claims.claim_review`: what its
transaction does with the ORM (a renewal's ``update()``, the first claim's insert), each in one
statement without a transaction, on PostgreSQL."""

from __future__ import annotations

from django.db import connections, router

from nitro_assistants.models import AuditChain, Claim
from nitro_assistants.services.sql import column, table
from nitro_assistants.services.sql.events import GatingWrite
from nitro_assistants.services.sql.reads import cast


def renew(claim: Claim) -> Claim | None:
    """``Claim.objects.filter(review_id=..., user_id=..., expires_at__gt=claimed_at)
    .update(expires_at=..., changed_at=claimed_at)`` and the claim as it then stands, in one
    statement (``UPDATE ... RETURNING``); None when ``claim.user`` holds no live claim on the
    review."""
    connection = connections[router.db_for_write(Claim)]
    expires, changed, review, user = (
        column(Claim, name, connection) for name in ("expires_at", "changed_at", "review", "user")
    )
    at = Claim._meta.get_field("expires_at")
    until, now = (at.get_db_prep_save(v, connection) for v in (claim.expires_at, claim.claimed_at))
    sql = (
        f"UPDATE {table(Claim, connection)} SET {expires} = %s, {changed} = %s "  # noqa: S608
        f"WHERE {review} = %s AND {user} = %s AND {expires} > %s RETURNING *"
    )
    params = [until, now, claim.review_id, claim.user_id, now]
    renewed = list(Claim.objects.raw(sql, params, using=connection.alias))
    return renewed[0] if renewed else None


def first_claim_gate(claim: Claim, chain_key: str) -> GatingWrite:
    """The insert of ``claim`` unless its review has one, as the gate of its event's append
    (:func:`.events.append_to_one_chain`): made only when chain ``chain_key`` has a head; its
    ``returned`` is the claim's pk."""
    connection = connections[router.db_for_write(Claim)]
    qn = connection.ops.quote_name
    fields = [f for f in Claim._meta.concrete_fields if not f.primary_key]
    casts = ", ".join(cast(f, connection) for f in fields)
    return GatingWrite(
        ctes=[
            f"claim_row AS (INSERT INTO {table(Claim, connection)} "  # noqa: S608
            f"({', '.join(qn(str(f.column)) for f in fields)}) SELECT {casts} "
            f"WHERE EXISTS (SELECT 1 FROM {table(AuditChain, connection)} "
            f"WHERE {column(AuditChain, 'chain', connection)} = %s) "
            f"ON CONFLICT ({column(Claim, 'review', connection)}) DO NOTHING "
            f"RETURNING {column(Claim, 'pk', connection)})"
        ],
        params=[
            *(f.get_db_prep_save(f.pre_save(claim, True), connection) for f in fields),
            chain_key,
        ],
        condition="EXISTS (SELECT 1 FROM claim_row)",
        returning="(SELECT * FROM claim_row)",
    )


def insert_unless_claimed(claim: Claim) -> Claim | None:
    """``claim.save(force_insert=True)`` unless its review has a claim (``ON CONFLICT DO
    NOTHING``: one statement, no savepoint to recover from a lost race); the claim saved, or
    None when there was one. Sends no model signal: the caller takes it only while no receiver
    watches claims."""
    connection = connections[router.db_for_write(Claim)]
    qn = connection.ops.quote_name
    fields = [f for f in Claim._meta.concrete_fields if not f.primary_key]
    sql = (
        f"INSERT INTO {table(Claim, connection)} ({', '.join(qn(str(f.column)) for f in fields)}) "  # noqa: S608
        f"VALUES ({', '.join(['%s'] * len(fields))}) "
        f"ON CONFLICT ({column(Claim, 'review', connection)}) DO NOTHING "
        f"RETURNING {column(Claim, 'pk', connection)}"
    )
    values = [f.get_db_prep_save(f.pre_save(claim, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        row = cursor.fetchone()
    if row is None:
        return None
    claim.pk = row[0]
    claim._state.adding = False
    claim._state.db = connection.alias
    return claim
