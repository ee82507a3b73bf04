"""Review datasets at 10,000 and 100,000 decided reviews: the time of each format's export and
its peak memory, to show the export streams in constant memory.

Each export runs ``services.datasets.export`` over the first N decided reviews into a sink that
counts bytes (nothing kept): once timed, once under ``tracemalloc`` for the peak of Python's
allocations (tracemalloc slows the run, so the time is from the first). Also the JSONL export
with every built-in redactor on (``REDACT: True``). No assertions: the goal is a peak that does
not grow with N (the same at 10,000 and 100,000, give or take a chunk's worth).

    .venv/bin/python bench/datasets.py [--rows 100000] [--formats jsonl,openai,langsmith]

Uses its own PostgreSQL database (``test_nitro_bench_datasets``, kept between runs, seeded once:
one thread per review, a tool call edited or a reply approved, with its decision record event).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("NITRO_TEST_DB_NAME", "nitro_bench_datasets")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test.utils import override_settings, setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from nitro_assistants import redacting  # noqa: E402
from nitro_assistants.models import Decision, Event, Review, Thread  # noqa: E402
from nitro_assistants.services import datasets  # noqa: E402

BATCH = 5_000
SIZES = (10_000, 100_000)


def seed(rows: int) -> None:
    """``rows`` decided reviews, each on its own thread: even ones a tool call edited (with a
    decision record of what ran), odd ones a reply approved."""
    if Review.objects.filter(decision__isnull=False).count() >= rows:
        return
    print(f"seeding {rows:,} decided reviews (once) ...", file=sys.stderr, flush=True)
    Thread.objects.all().delete()  # with their reviews, decisions and events
    now = timezone.now()
    for start in range(0, rows, BATCH):
        size = min(BATCH, rows - start)
        with transaction.atomic():
            threads = Thread.objects.bulk_create(
                Thread(
                    thread_id=uuid.uuid4(),
                    assistant_key=("walkthrough", "billing")[(start + n) % 2],
                    status=Thread.Status.IDLE,
                    values={"messages": conversation(start + n)},
                )
                for n in range(size)
            )
            reviews = Review.objects.bulk_create(
                review(thread, start + n) for n, thread in enumerate(threads)
            )
            Decision.objects.bulk_create(decision(r, start + n, now) for n, r in enumerate(reviews))
            Event.objects.bulk_create(
                record_event(r, start + n, now)
                for n, r in enumerate(reviews)
                if not (start + n) % 2
            )
        print(f"  {start + size:,}", file=sys.stderr, flush=True)


def conversation(index: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"type": "system", "id": "s0", "content": "You book appointments for Example Clinic."},
        {
            "type": "human",
            "id": "h1",
            "content": f"Customer {index} (jane{index}@example.com, +1 555 {index % 10_000:04d}) "
            "asks: can I move my appointment to Tuesday at 10?",
        },
    ]
    if index % 2:
        messages.append({"type": "ai", "id": "a1", "content": f"Done! See you Tuesday (#{index})."})
    else:
        messages.append(
            {
                "type": "ai",
                "id": "a1",
                "content": "Let me do that for you.",
                "tool_calls": [
                    {"id": f"call-{index}", "name": "reschedule_appointment", "args": args(index)}
                ],
            }
        )
    return messages


def args(index: int) -> dict[str, Any]:
    return {"appointment_id": index, "day": "Tuesday", "time": "10:00"}


def review(thread: Thread, index: int) -> Review:
    if index % 2:
        payload: dict[str, Any] = {
            "tool_calls": [],
            "reply": {
                "content": f"Done! See you Tuesday (#{index}).",
                "allowed_decisions": ["approve", "edit", "reject"],
                "message_id": "a1",
            },
        }
        kind = Review.Kind.REPLY
    else:
        payload = {
            "tool_calls": [
                {
                    "previous_message_id": "h1",
                    "id": f"call-{index}",
                    "name": "reschedule_appointment",
                    "args": args(index),
                    "allowed_decisions": ["approve", "edit", "reject", "respond"],
                }
            ],
            "reply": None,
        }
        kind = Review.Kind.TOOL_CALLS
    found = Review(thread=thread, kind=kind, status=Review.Status.APPLIED, payload=payload)
    found.prepare_save(None)  # the digest save() computes (bulk_create calls no save())
    return found


def decision(found: Review, index: int, now: Any) -> Decision:
    if index % 2:
        return Decision(
            review=found,
            reviewer_id="alice",
            reply={"action": "approve"},
            decided_at=now,
            outcome=Decision.Outcome.APPLIED,
            channel=Decision.Channel.ADMIN,
        )
    return Decision(
        review=found,
        reviewer_id="bob",
        tool_calls=[{"id": f"call-{index}", "action": "edit", "args": {"day": "Thursday"}}],
        note="The customer called back",
        decided_at=now,
        outcome=Decision.Outcome.APPLIED,
        channel=Decision.Channel.API,
    )


def record_event(found: Review, index: int, now: Any) -> Event:
    ran = {**args(index), "day": "Thursday"}
    return Event(
        thread_id=found.thread_id,
        review=found,
        verb="decision_recorded",
        at=now,
        seq=1,
        hash=f"{index:064x}",
        data={
            "executed": {
                "tool_calls": [
                    {
                        "id": f"call-{index}",
                        "name": "reschedule_appointment",
                        "args": ran,
                        "ran": True,
                        "status": "success",
                        "result": f"Appointment {index} moved to Thursday at 10:00.",
                    }
                ]
            }
        },
    )


class Sink:
    """Counts what it is given, keeps nothing."""

    def __init__(self) -> None:
        self.lines = 0
        self.bytes = 0

    def drain(self, lines: Any) -> None:
        for line in lines:
            self.lines += 1
            self.bytes += len(line)


def first(rows: int) -> Any:
    last = (
        Review.objects.filter(decision__isnull=False)
        .order_by("pk")
        .values_list("pk", flat=True)[rows - 1]
    )
    return Review.objects.filter(pk__lte=last)


def export(rows: int, fmt: str, redact: bool) -> dict[str, Any]:
    config = {**settings.NITRO_ASSISTANTS, "REDACT": redact or {}}
    with override_settings(NITRO_ASSISTANTS=config):
        redaction = redacting.current()
        sink = Sink()
        started = time.perf_counter()
        sink.drain(datasets.export(first(rows), fmt, datasets.Filters(), redaction=redaction))
        elapsed = time.perf_counter() - started
        tracemalloc.start()
        Sink().drain(datasets.export(first(rows), fmt, datasets.Filters(), redaction=redaction))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {"lines": sink.lines, "bytes": sink.bytes, "seconds": elapsed, "peak": peak}


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=SIZES[-1])
    parser.add_argument("--formats", default=",".join(datasets.FORMATS))
    args_ = parser.parse_args()
    sizes = sorted({min(size, args_.rows) for size in SIZES})
    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, keepdb=True, serialize=False)
    seed(args_.rows)
    runs = [(fmt, False) for fmt in args_.formats.split(",")] + [("jsonl", True)]
    print(f"chunk {datasets.CHUNK} reviews; peak: tracemalloc's, of the export alone")
    print(
        f"{'format':18} {'reviews':>9} {'lines':>9} {'MB out':>8} {'s':>7} {'rev/s':>8} "
        f"{'peak MiB':>9}"
    )
    results: dict[str, Any] = {}
    for fmt, redact in runs:
        label = f"{fmt} (REDACT on)" if redact else fmt
        for rows in sizes:
            got = export(rows, fmt, redact)
            results[f"{label} {rows}"] = got
            print(
                f"{label:18} {rows:>9,} {got['lines']:>9,} {got['bytes'] / 1e6:>8.1f} "
                f"{got['seconds']:>7.1f} {rows / got['seconds']:>8,.0f} "
                f"{got['peak'] / 2**20:>9.2f}",
                flush=True,
            )
    return results


if __name__ == "__main__":
    main()
