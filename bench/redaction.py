"""The review queue with and without redaction (``REDACT``), at 100,000 reviews: SQL queries and
render time of each, and their ratio, measured in the same run.

Each page through the Django test client as a logged-in superuser, the median of several warm
requests, alternating between the two settings so that a machine under load weighs on both
alike. No assertions: the goals are a ratio of at most 1.2 and the same query count. Beside the
queue, the review screen of one tool-call review (its conversation and form redacted too).

    .venv/bin/python bench/redaction.py [--rows 100000] [--repeat 9]

Uses its own PostgreSQL database (``test_nitro_bench_redact``, kept between runs, seeded once by
``bench/review_queue.py``'s seeding).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("NITRO_TEST_DB_NAME", "nitro_bench_redact")

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings, setup_test_environment

from bench.review_queue import seed
from nitro_assistants.models import Review


def once(client: Client, url: str) -> tuple[int, float]:
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        response = client.get(url)
        elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, (url, response.status_code)
    return len(captured), elapsed


def compare(client: Client, url: str, repeat: int) -> dict[str, Any]:
    """Both settings on ``url``, alternating, after a warm-up of each."""
    off = {**settings.NITRO_ASSISTANTS, "REDACT": {}}
    on = {**settings.NITRO_ASSISTANTS, "REDACT": True}
    found: dict[str, list[tuple[int, float]]] = {"off": [], "on": []}
    for value in (off, on):
        with override_settings(NITRO_ASSISTANTS=value):
            once(client, url)
    for _ in range(repeat):
        for name, value in (("off", off), ("on", on)):
            with override_settings(NITRO_ASSISTANTS=value):
                found[name].append(once(client, url))
    result: dict[str, Any] = {}
    for name, runs in found.items():
        result[name] = (runs[-1][0], statistics.median(ms for _, ms in runs))
    return result


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, keepdb=True, serialize=False)
    seed(args.rows)
    User = get_user_model()
    admin_user = User.objects.filter(
        username="bench-admin"
    ).first() or User.objects.create_superuser("bench-admin", password="!")
    client = Client()
    client.force_login(admin_user)
    admin.site._registry[Review].list_per_page = 100
    review = Review.objects.filter(kind=Review.Kind.TOOL_CALLS, status="pending").first()
    assert review is not None
    pages = {
        "review queue (pending, 100 rows)": "/admin/nitro_assistants/review/",
        "review queue (all statuses)": "/admin/nitro_assistants/review/?status=all",
        "review screen (one tool call)": f"/admin/nitro_assistants/review/{review.pk}/review/",
    }
    results = {}
    print(f"{Review.objects.count():,} reviews, median of {args.repeat} warm requests each")
    print(f"{'page':40} {'queries off/on':>15} {'ms off':>9} {'ms on':>9} {'ratio':>7}")
    for label, url in pages.items():
        measured = compare(client, url, args.repeat)
        (q_off, ms_off), (q_on, ms_on) = measured["off"], measured["on"]
        results[label] = {"queries": (q_off, q_on), "ms": (ms_off, ms_on), "ratio": ms_on / ms_off}
        print(
            f"{label:40} {q_off:>7}/{q_on:<7} {ms_off:>9.1f} {ms_on:>9.1f} {ms_on / ms_off:>6.2f}x"
        )
    return results


if __name__ == "__main__":
    main()
