"""The review queue page at 100,000 reviews vs the admin changelist of 100,000 users: SQL queries and render time.

Both pages in the same run, through the Django test client as a logged-in superuser: the SQL
query count and the render time (median of several warm requests) of each, and the ratio
queue / users. No assertions: the goals are at most 10 queries and a ratio of at most 1.5.
Beside them, the live endpoint the queue polls, changed (200) and unchanged (304; goal: at most
2 SQL statements), with the change token in a shared cache (the suite's Redis cache, ``live``)
and without one, for a superuser and for a reviewer whose permissions come from a group.

    .venv/bin/python bench/review_queue.py [--rows 100000] [--repeat 7]

Uses its own PostgreSQL database (``test_nitro_bench``, kept between runs, seeded once).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("NITRO_TEST_DB_NAME", "nitro_bench")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib import admin  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Group, Permission  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Value  # noqa: E402
from django.db.models.functions import Concat  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import (  # noqa: E402
    CaptureQueriesContext,
    override_settings,
    setup_test_environment,
)
from django.utils import timezone  # noqa: E402

from nitro_assistants.models import Delivery, Review, Thread  # noqa: E402

BATCH = 5000


def seed(rows: int) -> None:
    """``rows`` threads each with one review (a tenth decided, the rest pending, mixed kinds and
    ages), a delivery on every third thread, and ``rows`` plain users."""
    User = get_user_model()
    if Review.objects.count() >= rows and User.objects.count() >= rows:
        if not Thread.objects.filter(subject="").exists():
            return
        Thread.objects.update(subject=Concat(Value("Customer "), "id"))  # seeded before 0007
        return
    print(f"seeding {rows:,} reviews and {rows:,} users (once) ...", file=sys.stderr, flush=True)
    Review.objects.all().delete()
    Delivery.objects.all().delete()
    Thread.objects.all().delete()
    User.objects.all().delete()
    now = timezone.now()
    for start in range(0, rows, BATCH):
        size = min(BATCH, rows - start)
        threads = Thread.objects.bulk_create(
            Thread(
                thread_id=uuid.uuid4(),
                assistant_key=("walkthrough", "tools", "per_call")[n % 3],
                status=Thread.Status.INTERRUPTED,
                # What THREAD_SUBJECT computes as a thread is saved (bulk_create saves none).
                subject=f"Customer {start + n} · +1 555 {(start + n) % 10_000:04d}",
                values={
                    "messages": [
                        {"type": "human", "id": "h1", "content": f"Customer {start + n} asks"},
                        {"type": "ai", "id": "a1", "content": "Let me do that for you."},
                    ]
                },
            )
            for n in range(size)
        )
        reviews = []
        deliveries = []
        for n, thread in enumerate(threads):
            index = start + n
            if index % 2:
                payload: dict[str, Any] = {
                    "tool_calls": [],
                    "reply": {
                        "content": f"Done! See you Tuesday at 10 (#{index}).",
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
                            "args": {"appointment_id": index, "day": "Tuesday", "time": "10:00"},
                            "allowed_decisions": ["approve", "edit", "reject", "respond"],
                        }
                    ],
                    "reply": None,
                }
                kind = Review.Kind.TOOL_CALLS
            reviews.append(
                Review(
                    thread=thread,
                    kind=kind,
                    status=Review.Status.APPLIED if index % 10 == 0 else Review.Status.PENDING,
                    interrupt_ids=[uuid.uuid4().hex],
                    payload=payload,
                )
            )
            if index % 3 == 0:
                deliveries.append(
                    Delivery(
                        thread=thread,
                        message_id="a1",
                        tool="send_sms",
                        status=("delivered", "failed", "pending")[index % 9 // 3],
                        first_seen_at=now,
                    )
                )
        Review.objects.bulk_create(reviews)
        Delivery.objects.bulk_create(deliveries)
        User.objects.bulk_create(
            User(
                username=f"user{start + n:07d}", email=f"user{start + n}@example.com", password="!"
            )
            for n in range(size)
        )
    # Spread the request times over the last 3 days (auto_now_add set them all to now).
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE nitro_assistants_review SET requested_at = %s - (id %% 4320) * interval '1 minute'",
            [now],
        )
        cursor.execute("ANALYZE")
    print(f"seeded {connection.settings_dict['NAME']}", file=sys.stderr, flush=True)


def measure(client: Client, url: str, repeat: int) -> tuple[int, float, int]:
    """(queries, median milliseconds, bytes) of GET ``url``, after one warm-up request."""
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    times = []
    queries = 0
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
        queries = len(captured)
    return queries, statistics.median(times), len(response.content)


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, keepdb=True, serialize=False)
    seed(args.rows)
    with connection.cursor() as cursor:  # the steady state autovacuum keeps a live table in
        for table in ("nitro_assistants_review", "nitro_assistants_delivery", "auth_user"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    User = get_user_model()
    admin_user = User.objects.filter(
        username="bench-admin"
    ).first() or User.objects.create_superuser("bench-admin", password="!")
    client = Client()
    client.force_login(admin_user)
    # Same page size on both sides (the users changelist shows Django's default, 100 rows).
    queue_admin = admin.site._registry[Review]
    queue_admin.list_per_page = admin.site._registry[User].list_per_page

    pages = {
        "review queue (pending, default)": "/admin/nitro_assistants/review/",
        "review queue (all statuses)": "/admin/nitro_assistants/review/?status=all",
        "review queue (tool calls, delivery failed)": "/admin/nitro_assistants/review/?kind__exact=tool_calls&delivery=failed",
        # Search: who it is about, text of the conversation, the start of a thread id (the
        # trigram indexes of migration 0007 serve each).
        "review queue (search: a customer)": "/admin/nitro_assistants/review/?q=Customer+4242",
        "review queue (search: message text)": "/admin/nitro_assistants/review/?q=4242+asks",
        "review queue (search: thread id prefix)": "/admin/nitro_assistants/review/?q="
        + str(Thread.objects.order_by("pk").values_list("thread_id", flat=True)[500])[:8],
        "thread list (search: a customer)": "/admin/nitro_assistants/thread/?q=Customer+4242",
        "users changelist (baseline)": "/admin/auth/user/",
        "users changelist (search, baseline)": "/admin/auth/user/?q=user0004242",
    }
    results = {name: measure(client, url, args.repeat) for name, url in pages.items()}
    reviewer = reviewer_client()
    live: dict[str, tuple[int, int, float]] = {}
    for cache, alias in (("shared cache (Redis)", "live"), ("no shared cache", "")):
        with override_settings(NITRO_ASSISTANTS={**settings.NITRO_ASSISTANTS, "LIVE_CACHE": alias}):
            for who, user_client in (
                ("superuser", client),
                ("reviewer, group permissions", reviewer),
            ):
                live.update(
                    (f"{cache}: {name}, {who}", figures)
                    for name, figures in measure_live(user_client, args.repeat).items()
                )
    baseline = results["users changelist (baseline)"][1]
    print(
        f"{Review.objects.count():,} reviews ({Review.objects.filter(status='pending').count():,} "
        f"pending) and {User.objects.count():,} users in PostgreSQL; {queue_admin.list_per_page} "
        f"rows a page on both; median of {args.repeat} warm requests each.\n"
    )
    print("| page | SQL queries | render ms | ratio to users | KiB |")
    print("|---|---:|---:|---:|---:|")
    for name, (queries, ms, size) in results.items():
        print(f"| {name} | {queries} | {ms:.1f} | {ms / baseline:.2f} | {size / 1024:.0f} |")
    queue_queries, queue_ms, _ = results["review queue (pending, default)"]
    print(
        f"\n- queue: **{queue_queries} queries** (goal ≤ 10: "
        f"{'met' if queue_queries <= 10 else 'not met'}), the same for 1 and 100 rows "
        "(asserted by tests/admin/test_queue.py)"
    )
    print(
        f"- render: {queue_ms:.0f} ms vs {baseline:.0f} ms for the users changelist: "
        f"**ratio {queue_ms / baseline:.2f}** (goal ≤ 1.5: "
        f"{'met' if queue_ms / baseline <= 1.5 else 'not met'})"
    )
    print(
        "\n| live endpoint (`/admin/nitro_assistants/review/live/`) | SQL (all / its own) | ms | ratio to users |"
    )
    print("|---|---:|---:|---:|")
    for name, (total, own, ms) in live.items():
        print(f"| {name} | {total} / {own} | {ms:.1f} | {ms / baseline:.2f} |")
    unchanged = "unchanged: 304 (If-None-Match)"
    worst = max(
        live[f"shared cache (Redis): {unchanged}, {who}"][0]
        for who in ("superuser", "reviewer, group permissions")
    )
    ms_304 = live[f"shared cache (Redis): {unchanged}, superuser"][2]
    print(
        f"\n- live endpoint, unchanged, with a shared cache: a 304 in **{worst} SQL statements** "
        f"in all, none of its own (goal ≤ 2: {'met' if worst <= 2 else 'not met'}): Django's "
        f"session and user lookups, for a superuser and a reviewer with group permissions "
        f"alike; {ms_304:.1f} ms, against {queue_ms:.0f} ms for the queue page and "
        f"{baseline:.0f} ms for the users changelist"
    )
    fallback = live[f"no shared cache: {unchanged}, superuser"]
    print(
        f"- without a shared cache (a per-process default cache): {fallback[0]} statements "
        f"({fallback[1]} of its own, the marker) and {fallback[2]:.1f} ms; a reviewer with group "
        f"permissions adds Django's two permission lookups"
    )
    return {
        **{
            name: {"queries": q, "ms": round(ms, 1), "ratio": round(ms / baseline, 2)}
            for name, (q, ms, _size) in results.items()
        },
        **{
            f"live: {name}": {"queries": total, "own": own, "ms": round(ms, 1)}
            for name, (total, own, ms) in live.items()
        },
    }


def reviewer_client() -> Client:
    """A staff reviewer whose permissions come from a group (Django loads them per request: two
    statements that a superuser does not cost)."""
    User = get_user_model()
    group, _created = Group.objects.get_or_create(name="bench reviewers")
    group.permissions.set(
        Permission.objects.filter(
            content_type__app_label="nitro_assistants",
            codename__in=["view_review", "decide_review"],
        )
    )
    user = User.objects.filter(username="bench-reviewer").first() or User.objects.create_user(
        "bench-reviewer", password="!", is_staff=True
    )
    user.groups.add(group)
    client = Client()
    client.force_login(user)
    return client


def measure_live(client: Client, repeat: int) -> dict[str, tuple[int, int, float]]:
    """The live endpoint as the queue polls it (a page of row ids): changed (200) and unchanged
    (304 on the ETag). (statements in all, statements of its own, median ms). Nothing writes
    meanwhile: the change token, with a shared cache, stands through the measurement."""
    ids = ",".join(
        str(pk)
        for pk in Review.objects.filter(status="pending")
        .order_by("requested_at", "pk")
        .values_list("pk", flat=True)[:100]
    )
    url = f"/admin/nitro_assistants/review/live/?ids={ids}"
    out = {}
    for name, conditional in (
        ("changed: 200 with rows", False),
        ("unchanged: 304 (If-None-Match)", True),
    ):
        tag = client.get(url)["ETag"]
        headers = {"HTTP_IF_NONE_MATCH": tag} if conditional else {}
        times, total, own = [], 0, 0
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get(url, **headers)
                times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == (304 if conditional else 200), response.status_code
            total = len(captured)
            own = sum("nitro_assistants_" in q["sql"] for q in captured.captured_queries)
        out[name] = (total, own, statistics.median(times))
    return out


if __name__ == "__main__":
    main()
