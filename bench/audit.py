"""The audit trail's hash chain: what it costs a decision, and verify and export over 1,000,000 events (time, peak memory).

    .venv/bin/python bench/audit.py [--events 1000000] [--decisions 200]

1. **Write cost, with the chain and without, in one run.** ``services.decide`` (approve) on
   ``--decisions`` pending tool-call reviews, each on its own thread, alternating one with the
   chain (as shipped) and one without it (the events written by a plain ``bulk_create``, as
   before the chain): SQL statements per decision and the median wall time of each. Likewise
   one ``record_event`` outside a batch (the unbatched path). Resumes are not enqueued (no
   worker here).
2. **Verify and export at scale.** ``--events`` chained events over 1,000 threads (seeded once
   through the real write path into ``test_nitro_bench_audit``, kept between runs), then, each in
   a process of its own: ``nitro_assistants_audit verify``; ``nitro_assistants_audit export``
   as JSONL and CSV to ``/dev/null``; and, as the floor they are measured against, the same rows
   read through the same chunked cursor and nothing done with them. Wall time and the process's
   peak RSS (``ru_maxrss``), beside a process that only starts Django.

Figures only, no assertions. PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("NITRO_TEST_DB_NAME", "nitro_bench_audit")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402

from nitro_assistants import services  # noqa: E402
from nitro_assistants.models import AuditChain, Event, Review, Thread  # noqa: E402
from nitro_assistants.services import audit  # noqa: E402
from nitro_assistants.services import decisions as deciding  # noqa: E402
from nitro_assistants.services.audit import events_batched, record_event  # noqa: E402

THREADS = 1000
BATCH = 5000


def use_test_database() -> None:
    setup_test_environment()
    name = connection.creation.create_test_db(verbosity=0, keepdb=True, serialize=False)
    os.environ["NITRO_BENCH_DB"] = name


def seed(events: int) -> None:
    if Event.objects.exclude(seq=None).count() == events:
        return
    print(f"seeding {events:,} events over {THREADS:,} threads (once) ...", file=sys.stderr)
    Event.objects.all().delete()
    AuditChain.objects.all().delete()
    Review.objects.all().delete()
    Thread.objects.all().delete()
    threads = Thread.objects.bulk_create(
        Thread(thread_id=uuid.uuid4(), assistant_key=("walkthrough", "tools")[n % 2])
        for n in range(THREADS)
    )
    written = 0
    while written < events:
        size = min(BATCH, events - written)
        with events_batched():  # one INSERT, one head per thread in it: the real write path
            for n in range(size):
                thread = threads[(written + n) % THREADS]
                record_event(
                    thread,
                    ("run_requested", "review_requested", "review_decided", "run_succeeded")[n % 4],
                    messages=[{"role": "user", "content": f"Move appointment {written + n}"}],
                    note="día ✓",
                )
        written += size
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE nitro_assistants_event")


# -- 1. write cost --------------------------------------------------------------------------------


def plain_append(events: list[Event]) -> list[Event]:
    """The write path before the chain: the same rows, unchained, in one bulk INSERT."""
    return Event.objects.bulk_create(events)


def pending_reviews(count: int) -> list[Review]:
    threads = Thread.objects.bulk_create(
        Thread(thread_id=uuid.uuid4(), assistant_key="tools") for _ in range(count)
    )
    return Review.objects.bulk_create(
        Review(
            thread=thread,
            kind=Review.Kind.TOOL_CALLS,
            interrupt_ids=[uuid.uuid4().hex],
            payload={
                "tool_calls": [
                    {
                        "id": f"call-{n}",
                        "name": "reschedule_appointment",
                        "args": {"appointment_id": n, "day": "Tuesday", "time": "10:00"},
                        "allowed_decisions": ["approve", "edit", "reject", "respond"],
                    }
                ],
                "reply": None,
            },
        )
        for n, thread in enumerate(threads)
    )


def timed(call: Any) -> tuple[int, float]:
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        call()
        elapsed = (time.perf_counter() - started) * 1000
    return len(captured), elapsed


def write_cost(decisions: int) -> dict[str, dict[str, tuple[int, float]]]:
    deciding.enqueue = lambda *args, **kwargs: None  # no worker: the resume is not sent
    shipped = audit.append
    pending = pending_reviews(decisions)
    threads = [r.thread for r in pending]
    figures: dict[str, dict[str, list[tuple[int, float]]]] = {
        "decide (approve)": {"chain": [], "plain": []},
        "record_event, unbatched": {"chain": [], "plain": []},
    }
    for n, review in enumerate(pending):
        way = "chain" if n % 2 == 0 else "plain"
        audit.append = shipped if way == "chain" else plain_append  # type: ignore[assignment]
        decision = {"tool_calls": [{"id": review.tool_calls[0]["id"], "action": "approve"}]}
        figures["decide (approve)"][way].append(
            timed(lambda r=review, d=decision: services.decide(r, None, d))
        )
        figures["record_event, unbatched"][way].append(
            timed(lambda t=threads[n]: record_event(t, "bench_event", n=1))
        )
    audit.append = shipped
    # Leave the seeded trail as it was: these threads (their events, reviews, runs) and heads go.
    Thread.objects.filter(pk__in=[t.pk for t in threads]).delete()
    AuditChain.objects.filter(chain__in=[str(t.thread_id) for t in threads]).delete()
    return {
        name: {
            way: (
                int(statistics.median(q for q, _ in rows)),
                statistics.median(ms for _, ms in rows),
            )
            for way, rows in ways.items()
        }
        for name, ways in figures.items()
    }


# -- 2. verify and export, each in a process of its own ------------------------------------------


def child(task: str) -> None:
    """Run one measured task in this (fresh) process and print its wall seconds."""
    connection.settings_dict["NAME"] = os.environ["NITRO_BENCH_DB"]
    started = time.perf_counter()
    devnull = open(os.devnull, "w")  # noqa: SIM115
    if task == "verify":
        call_command("nitro_assistants_audit", "verify", stdout=devnull, stderr=devnull)
    elif task in ("jsonl", "csv"):
        call_command(
            "nitro_assistants_audit", "export", "--format", task, stdout=devnull, stderr=devnull
        )
    elif task == "read":
        for _ in (
            Event.objects.order_by("thread_id", "seq", "pk")
            .values_list("pk", "thread__thread_id", "data", "hash")
            .iterator(chunk_size=5000)
        ):
            pass
    seconds = time.perf_counter() - started
    print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def measure(task: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of ``task`` in a process of its own."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", task],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
    )
    seconds, peak_kib = done.stdout.strip().splitlines()[-1].split()
    return float(seconds), int(peak_kib) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0

    use_test_database()
    cost = write_cost(args.decisions)
    seed(args.events)
    print(
        f"Write cost: {args.decisions} decisions on PostgreSQL, alternating with the chain and "
        "without it (plain `bulk_create`), SQL statements and median wall time each.\n"
    )
    print("| write | statements, chain | statements, plain | ms, chain | ms, plain | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, ways in cost.items():
        (cq, cms), (pq, pms) = ways["chain"], ways["plain"]
        print(f"| {name} | {cq} | {pq} | {cms:.2f} | {pms:.2f} | {cms / pms:.2f} |")
    total = Event.objects.count()
    rows = []
    for label, task in [
        ("Django started, nothing read (the floor)", "none"),
        ("rows read through the chunked cursor, nothing done (the peer)", "read"),
        ("`nitro_assistants_audit verify`", "verify"),
        ("`nitro_assistants_audit export --format jsonl`", "jsonl"),
        ("`nitro_assistants_audit export --format csv`", "csv"),
    ]:
        rows.append((label, *measure(task)))
    print(
        f"\nVerify and export over {total:,} events in {THREADS:,} chains, each in its own process.\n"
    )
    print("| task | seconds | events/s | peak RSS MiB | time ratio to reading |")
    print("|---|---:|---:|---:|---:|")
    read_seconds = rows[1][1]
    for label, seconds, peak in rows:
        rate = f"{total / seconds:,.0f}" if seconds > 0.5 else "—"
        print(f"| {label} | {seconds:.1f} | {rate} | {peak:.0f} | {seconds / read_seconds:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
