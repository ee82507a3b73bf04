"""The delivery sweep over 100,000 deliveries: time and query count.

    .venv/bin/python bench/sweep.py [--deliveries 100000]

Uses its own PostgreSQL database (``nitro_assistants_bench``, created and migrated if missing, its
tables emptied on each run). Most deliveries are settled (delivered or already alerted), as in a
steady state; a few are due: pending past ``DELIVERY_PENDING_AFTER`` or failed and not reported.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ["NITRO_TEST_DB_NAME"] = os.environ.get("NITRO_BENCH_DB_NAME", "nitro_assistants_bench")


def ensure_database(name: str) -> None:
    import psycopg

    with psycopg.connect(
        host=os.environ.get("NITRO_TEST_DB_HOST", "127.0.0.1"),
        user=os.environ.get("NITRO_TEST_DB_USER", "postgres"),
        dbname="postgres",
        autocommit=True,
    ) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deliveries", type=int, default=100_000)
    args = parser.parse_args()
    ensure_database(os.environ["NITRO_TEST_DB_NAME"])

    import django

    django.setup()
    logging.getLogger("nitro_assistants").setLevel(logging.ERROR)  # one warning per alert
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from nitro_assistants.conf import app_settings
    from nitro_assistants.models import Delivery, Thread
    from nitro_assistants.services import sweep_deliveries

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE nitro_assistants_thread CASCADE")

    total = args.deliveries
    now = timezone.now()
    limit = datetime.timedelta(seconds=app_settings.DELIVERY_PENDING_AFTER)
    due_pending, due_failed, fresh_pending = total // 100, total // 200, total // 200
    threads = Thread.objects.bulk_create(
        Thread(assistant_key="bench") for _ in range(max(1, total // 20))
    )

    def delivery(i: int) -> Delivery:
        thread = threads[i % len(threads)]
        fields: dict[str, object] = {
            "status": "delivered",
            "first_seen_at": now - datetime.timedelta(hours=2),
            "alerted_at": now - datetime.timedelta(hours=2),
            "alerted_status": "delivered",
        }
        if i < due_pending:
            fields.update(status="pending", first_seen_at=now - limit * 2, alerted_at=None)
        elif i < due_pending + due_failed:
            fields.update(status="failed", error="gateway refused", alerted_at=None)
        elif i < due_pending + due_failed + fresh_pending:
            fields.update(status="pending", first_seen_at=now, alerted_at=None)
        return Delivery(thread=thread, message_id=f"m-{i}", tool="send_sms", **fields)

    started = time.perf_counter()
    Delivery.objects.bulk_create((delivery(i) for i in range(total)), batch_size=5000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE nitro_assistants_delivery")
    print(
        f"seeded {total:,} deliveries in {time.perf_counter() - started:.1f}s "
        f"({due_pending:,} pending past the limit, {due_failed:,} failed unreported, "
        f"{fresh_pending:,} pending within the limit)"
    )

    signalled = 0

    def count(**kwargs: object) -> None:
        nonlocal signalled
        signalled += 1

    from nitro_assistants import signals

    signals.delivery_pending.connect(count, dispatch_uid="bench")
    signals.delivery_failed.connect(count, dispatch_uid="bench-failed")

    for label in ("first sweep (alerts due)", "second sweep (steady state, nothing due)"):
        signalled = 0
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            counts = sweep_deliveries(now)
            elapsed = time.perf_counter() - started
        print(
            f"{label}: {elapsed * 1000:.1f} ms, {len(queries)} queries, {counts}, "
            f"{signalled} signals"
        )
        selects = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT")]
        if selects:
            print(f"  selecting query: {selects[0][:160]}...")

    with connection.cursor() as cursor:
        cutoff = now - limit
        cursor.execute(
            "EXPLAIN SELECT id FROM nitro_assistants_delivery WHERE alerted_at IS NULL AND "
            "(status = 'failed' OR (status = 'pending' AND first_seen_at <= %s)) "
            "ORDER BY first_seen_at LIMIT 2000",
            [cutoff],
        )
        print("plan of the sweep's selection:")
        for (line,) in cursor.fetchall():
            print(f"  {line}")


if __name__ == "__main__":
    main()
