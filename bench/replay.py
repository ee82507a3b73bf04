"""A replay of a rule set of 1,000 rules over 100,000 decided reviews: time and memory (goal:
under 30 s, and memory that does not grow with the number of reviews).

    .venv/bin/python bench/replay.py [--reviews 100000] [--rules 1000]

The reviews (with their threads, handlings and decisions: a third approved by a person, a third
rejected, a third decided by a rule) are seeded in their own PostgreSQL database
(``nitro_assistants_bench``, or ``NITRO_BENCH_DB_NAME``; created and migrated if missing, its
tables emptied on each run). The replay is ``services.rule_trials.Replay``, as the management
command and the admin view run it; it is timed once as it is, then run again under
``tracemalloc`` over a tenth of the reviews and over all of them: the peak of the memory Python
allocated is the same (the rows are read in chunks, nothing is kept per review).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ["NITRO_TEST_DB_NAME"] = os.environ.get("NITRO_BENCH_DB_NAME", "nitro_assistants_bench")

from bench.policies import ASSISTANTS, make_rules  # noqa: E402
from bench.sweep import ensure_database  # noqa: E402
from nitro_assistants import policy_rules  # noqa: E402

BATCH = 5000


def seed(total: int, rng: random.Random) -> float:
    """``total`` decided tool-call reviews; returns the seconds it took."""
    from django.contrib.auth.models import User
    from django.db import connection
    from django.utils import timezone

    from nitro_assistants.models import Decision, Review, ReviewHandling, Thread

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE nitro_assistants_thread, nitro_assistants_policy CASCADE")
    User.objects.filter(username="bench").delete()
    person = User.objects.create_user("bench")
    started = time.perf_counter()
    now = timezone.now()
    handling = policy_rules.DEFAULT.as_dict()
    for offset in range(0, total, BATCH):
        count = min(BATCH, total - offset)
        threads = Thread.objects.bulk_create(
            Thread(assistant_key=rng.choice(ASSISTANTS)) for _ in range(count)
        )
        reviews = []
        for thread in threads:
            calls = [
                {
                    "id": f"c{j}",
                    "name": rng.choice([f"tool_{rng.randint(0, 399)}", f"crm_{rng.randint(0, 9)}"]),
                    "args": {"amount": rng.randint(0, 1000), "order": f"ORD-{rng.randint(0, 99)}"},
                }
                for j in range(rng.choice([1, 1, 1, 2]))
            ]
            reviews.append(
                Review(
                    thread=thread,
                    kind="tool_calls",
                    status="applied",
                    payload={"tool_calls": calls, "reply": None},
                    interrupt_ids=[f"i{thread.pk}"],
                    digest="d",
                )
            )
        Review.objects.bulk_create(reviews)
        ReviewHandling.objects.bulk_create(
            ReviewHandling(review=review, rule=handling) for review in reviews[::2]
        )
        decisions = []
        for i, review in enumerate(reviews):
            share = (offset + i) % 3
            action = "reject" if share == 1 else "approve"
            decisions.append(
                Decision(
                    review=review,
                    decided_by=person if share < 2 else None,
                    reviewer_id="bench" if share < 2 else "policy:bench",
                    channel="admin" if share < 2 else "policy",
                    tool_calls=[{"id": call["id"], "action": action} for call in review.tool_calls],
                    decided_at=now,
                    outcome="applied",
                )
            )
        Decision.objects.bulk_create(decisions)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return time.perf_counter() - started


def replayed(rule_set: policy_rules.RuleSet, last: int) -> Any:
    from nitro_assistants.services import rule_trials

    replay = rule_trials.Replay(rule_set, last)
    for _ in replay:
        pass
    return replay.summary


def peak(rule_set: policy_rules.RuleSet, last: int) -> float:
    """The peak of what Python allocated during a replay of ``last`` reviews, in MiB."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    replayed(rule_set, last)
    _, top = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return top / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reviews", type=int, default=100_000)
    parser.add_argument("--rules", type=int, default=1000)
    args = parser.parse_args()
    ensure_database(os.environ["NITRO_TEST_DB_NAME"])
    import django

    django.setup()
    logging.getLogger("nitro_assistants").setLevel(logging.ERROR)
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", verbosity=0)
    rng = random.Random(7)
    seconds = seed(args.reviews, rng)
    rule_set = policy_rules.RuleSet(make_rules(args.rules, rng))
    print(
        f"seeded {args.reviews:,} decided reviews (a third approved, a third rejected by a "
        f"person, a third by a rule) in {seconds:.0f} s; the rule set: {args.rules:,} rules"
    )
    print()
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        summary = replayed(rule_set, args.reviews)
        elapsed = time.perf_counter() - started
    from nitro_assistants.services.rule_trials import CHUNK_SIZE

    # At least two chunks: fewer reviews than a chunk would measure a smaller chunk.
    tenth = min(max(args.reviews // 10, 2 * CHUNK_SIZE), args.reviews)
    small, large = peak(rule_set, tenth), peak(rule_set, args.reviews)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"| replay, {args.rules:,} rules | reviews | time | per review | peak (tracemalloc) |")
    print("|---|---|---|---|---|")
    print(
        f"| `rule_trials.Replay` | {summary.looked_at:,} | {elapsed:.1f} s | "
        f"{elapsed / max(summary.looked_at, 1) * 1e6:.0f} µs | {large:.1f} MiB |"
    )
    print(f"| the same over fewer | {tenth:,} | | | {small:.1f} MiB |")
    print()
    print(
        f"- {len(queries)} statements (the decisions read in chunks of 2,000 through a "
        f"server-side cursor); {summary.changed:,} reviews would be handled otherwise; "
        f"agreement with people: {summary.rate_then or 0:.1%} then, "
        f"{summary.rate_draft or 0:.1%} with the rule set"
    )
    print(
        f"- time: **{elapsed:.1f} s** (goal < 30 s: {'met' if elapsed < 30 else 'missed'}); "
        f"memory: a peak of {large:.1f} MiB over {args.reviews:,} reviews and {small:.1f} MiB "
        f"over {tenth:,} ({'constant' if large < small * 1.5 + 1 else 'GROWS'}); the process's "
        f"largest resident size, the seeding included: {rss:.0f} MiB"
    )


if __name__ == "__main__":
    main()
