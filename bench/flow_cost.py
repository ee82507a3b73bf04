"""Where a flow's CPU goes: each service call on its own (CPU and SQL statements), and what each way of sending a resume costs the server.

    .venv/bin/python bench/flow_cost.py [--flows 30] [--rounds 2] [--resumes 200] [--repeats 2] [--show-sql]

Against a real ``langgraph dev`` (in-memory runtime) running the ``tools`` graph of
tests/graphs/agents.py, the same flow as bench/throughput.py: a held ``reschedule_appointment``
call, approved, then the model's answer.

1. **Our side, per call.** One process, no Celery, a scratch Postgres database, the shared
   Redis cache a deployment names in ``LIVE_CACHE`` (tests.settings' ``live`` alias, on the
   broker's Redis, with a key prefix of this process's own: the live pages' change token and the
   policy rules' stamp live there, so a mirrored review reads no rule while the rules are
   unchanged), the flow the admin takes with governance on: a review rule (:data:`POLICY`: the held call needs a member of
   Staff) matches the held call, a staff reviewer in Staff opens the review (which claims it,
   ``claims.claim_review``) and approves it through the admin's form path
   (``services.decide(pk, user, decision + shown stamp, via="admin")``); the audit chain is
   always on. ``start_run``, ``execute_run``, the claim, ``decide`` and ``execute_resume`` for
   ``--flows`` flows, one call at a time, twice: the first pass counts the SQL statements each
   call sent (BEGIN, COMMIT and SAVEPOINTs included; ``--show-sql`` prints one flow's), the
   second measures this process's CPU (``time.process_time``) without the statement capture's
   own cost, and the CPU of the PostgreSQL backends connected to the bench's database. Each of
   ``--rounds`` rounds runs the flows twice, with Django's default (client-side binding, nothing
   prepared) and with :data:`PREPARED` in the database's ``OPTIONS`` (PostgreSQL keeps the
   statements each connection repeats prepared: no parse and plan for them), and prints each
   per call, a flow's total each round and the ratio. The admin page's own reads (the review it
   shows, the request's user and its permissions, which its ``can_decide`` reads before calling
   ``decide``) are not counted. The server's CPU is left out here: calls one at a time leave it
   waiting on its scheduler's 0.5 s sleep.
2. **The server's side, per resume.** ``--resumes`` threads paused (with ``langgraph_sdk``),
   then resumed 20 at a time, each way on a fresh server, ``--repeats`` times in turn: the
   server's CPU per resume. ``runs/wait`` is what the SDK flow of bench/throughput.py sends; it
   cannot tell an applied resume from a stale one the server ignored. ``Assistants.review``
   streams ``checkpoints`` + ``updates``: the updates show whether a node ran (applied or
   stale), the last checkpoint whether the run had finished or the stream was cut short.

``--against REV`` also measures another commit's own flow in the same run: REV's files (``git
archive``, nothing checked out here) in a scratch folder, its own ``bench/flow_cost.py
--flows N --resumes 1 --repeats 1`` run with this venv before each round of part 1, and the
ratio of this ``main``'s flow to REV's printed per round. Milliseconds of CPU swing by a third and
more between days on this machine (the same code gave 14.0 and 25.1 ms a flow); a ratio to a
peer measured in the same run does not. :data:`FILED_AT` is the commit issue 21 was filed
against (34 statements and 22 ms a flow that day, no review rule, no claim, no audit chain): its
goal, half that CPU with all three on, is a ratio of at most 0.5 to it.

Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import langgraph_server  # noqa: E402
from bench.throughput import (  # noqa: E402
    GRAPH,
    MESSAGE,
    SDK_APPROVAL,
    approval,
    cpu_seconds,
    create_database,
    database_cpu,
    drop_database,
)
from nitro_assistants.testing.launchers import free_port  # noqa: E402

CONCURRENCY = 20
RESUME_WAYS = {
    "`runs/wait` (the SDK flow's)": None,
    "`runs/stream`, updates": ["updates"],
    "`runs/stream`, values + updates": ["values", "updates"],
    "`runs/stream`, checkpoints + updates (`Assistants.review`)": ["checkpoints", "updates"],
}


#: The review rule part 1 seeds: the flow's held call needs one approval by a member of Staff.
POLICY = {
    "name": "Rescheduling is for staff",
    "tool": "reschedule_appointment",
    "action": "review",
    "approvals": 1,
    "priority": 1,
}
#: What a host adds to ``DATABASES["default"]["OPTIONS"]`` for PostgreSQL to keep the statements
#: each connection runs again and again prepared (docs/django.md, "Deploying the workers"):
#: psycopg's server-side binding, a statement prepared from its 5th run on a connection (psycopg's
#: own threshold; Django's default turns preparing off).
PREPARED = {"server_side_binding": True, "prepare_threshold": 5}
#: The two ways part 1 runs, in turn: Django's default and :data:`PREPARED`.
BINDINGS = {
    "Django's default (client-side binding)": {},
    "statements prepared (`server_side_binding`, `prepare_threshold`)": PREPARED,
}

#: The commit issue 21 ("half the SQL and half the CPU") was filed against: its flow had no
#: review rule, claim or audit chain, 34 statements and about 22 ms of CPU that day.
FILED_AT = "c62fc2f"
#: The flow's row of a flow_cost table (each commit's bench prints one): its CPU and statements.
#: Part 2 of another commit's bench cut short (its flow_cost may not take ``--resumes 0``).
ONE_RESUME = ("--resumes", "1", "--repeats", "1")
FLOW_ROW = re.compile(r"^\| \*\*a flow\*\* \| \*\*([0-9.]+)\*\* \| \*\*([0-9.]+)\*\* \|", re.M)

CALLS = (
    "`services.start_run` (a new thread)",
    "`services.execute_run` (the `run_thread` task)",
    "`claims.claim_review` (the reviewer opens the review)",
    '`services.decide` (approve, `via="admin"`)',
    "`services.execute_resume` (the `resume_thread` task)",
)


def seed_reviewer() -> int:
    """The policy rule of :data:`POLICY` (its group: Staff) and a staff reviewer in Staff, who
    may decide reviews through the group (not a superuser: the group check is a real one)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group, Permission

    from nitro_assistants.models import Policy

    staff = Group.objects.create(name="Staff")
    staff.permissions.add(Permission.objects.get(codename="decide_review"))
    user = get_user_model().objects.create_user("reviewer", "reviewer@example.com", is_staff=True)
    user.groups.add(staff)
    Policy.objects.create(group=staff, **POLICY)
    return int(user.pk)


def use_binding(options: dict[str, Any]) -> None:
    """From the next connection on, the default database's ``OPTIONS`` are the pool's and
    ``options`` (the pool closed, so its connections are made again with them)."""
    from django.db import connection

    connection.close()
    connection.close_pool()
    current = connection.settings_dict.setdefault("OPTIONS", {})
    for name in PREPARED:
        current.pop(name, None)
    current.update(options)


def our_side(
    flows: int, reviewer: int, db_name: str, show_sql: bool = False
) -> list[tuple[str, float, float, float]]:
    """(call, ms of our CPU per call, SQL statements per call, ms of PostgreSQL's CPU per call),
    the calls of :data:`CALLS`; PostgreSQL's is that of the backends connected to ``db_name``."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from nitro_assistants import services, tasks
    from nitro_assistants.models import Review
    from nitro_assistants.services import claims
    from nitro_assistants.services.decisions import DECIDE_PERMISSION

    # Called directly here, so nothing is enqueued (no worker is running).
    tasks.run_thread.delay = lambda *args, **kwargs: None
    tasks.resume_thread.delay = lambda *args, **kwargs: None

    def each(
        counting: bool, call: Callable[[Any], Any], items: Iterable[Any], name: str
    ) -> tuple[list[Any], float, float, float]:
        """Call ``call`` on every item: count the SQL statements sent (and show the first
        item's with ``--show-sql``), or measure the CPU used."""
        items = list(items)
        if counting:
            results, sent = [], 0
            for n, item in enumerate(items):
                with CaptureQueriesContext(connection) as queries:
                    results.append(call(item))
                sent += len(queries.captured_queries)
                if show_sql and n == 0:
                    print(f"\n{name}: {len(queries.captured_queries)} statements")
                    for i, query in enumerate(queries.captured_queries, 1):
                        print(f"  {i:2}. {query['sql'][:300]}")
            return results, 0.0, sent / len(items), 0.0
        database = sum(database_cpu(db_name).values())
        started = time.process_time()
        results = [call(item) for item in items]
        ours = 1000 * (time.process_time() - started) / len(items)
        database = 1000 * (sum(database_cpu(db_name).values()) - database) / len(items)
        return results, ours, 0.0, database

    def opened(review: Review) -> tuple[Review, Any]:
        """What the admin's review screen holds when it claims (GET): the review as it reads it
        and the request's user. Not counted: the page's own reads."""
        review = Review.objects.select_related("thread", "decision", "decision__decided_by").get(
            pk=review.pk
        )
        return review, get_user_model().objects.get(pk=reviewer)

    def posted(review: Review) -> tuple[Review, Any, dict[str, Any]]:
        """What the admin's decide POST hands ``services.decide``: the review's pk, the request's
        user (its permissions already read: the view's ``can_decide`` checked them first, not
        counted) and the form's decision with the stamp the page was rendered from."""
        user = get_user_model().objects.get(pk=reviewer)
        assert user.has_perm(DECIDE_PERMISSION)
        shown = {"revision": review.revision, "digest": review.digest}
        if review.interrupt_id:
            shown["interrupt_id"] = review.interrupt_id
        return review, user, {**approval(review.payload), "note": "", **shown}

    def decide(item: tuple[Review, Any, dict[str, Any]]) -> Any:
        review, user, decision = item
        return services.decide(review.pk, user, decision, via="admin")

    def one_pass(counting: bool) -> list[tuple[str, float, float, float]]:
        rows: list[tuple[str, float, float, float]] = []
        names = iter(CALLS)

        def measure(call: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
            name = next(names)
            results, cpu, sql, database = each(counting, call, items, name)
            rows.append((name, cpu, sql, database))
            return results

        runs = measure(lambda _: services.start_run(GRAPH, MESSAGE), range(flows))
        measure(lambda run: services.execute_run(run.pk), runs)
        reviews = [Review.objects.get(run=run) for run in runs]
        for review in reviews:  # the policy matched: the staff rule handles every review
            assert review.handling.policy_id is not None, "the review policy did not match"
        screens = [opened(review) for review in reviews]
        measure(lambda screen: claims.claim_review(*screen), screens)
        decisions = measure(decide, [posted(review) for review, _ in screens])
        measure(lambda decision: services.execute_resume(decision.pk), decisions)
        return rows

    passes = [one_pass(counting) for counting in (True, False)]
    counted, timed = passes
    return [
        (name, cpu, sql, database)
        for (name, _, sql, _), (_, cpu, _, database) in zip(counted, timed, strict=True)
    ]


def other_commit(rev: str, folder: Path) -> Path:
    """``rev``'s files (``git archive``) in ``folder``, to run its own bench with this venv."""
    folder.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev], capture_output=True, check=False
    )
    if archive.returncode:  # a shallow clone, say, has no older commit
        raise SystemExit(f"--against {rev}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def their_flow(folder: Path, flows: int) -> tuple[float, float]:
    """(ms of CPU, SQL statements) a flow, as the commit in ``folder`` measures its own, in a
    process of its own (its part 2 cut to one resume a way, which only its table needs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NITRO_TEST_", "DJANGO_"))}
    done = subprocess.run(
        [sys.executable, "bench/flow_cost.py", "--flows", str(flows), *ONE_RESUME],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    found = FLOW_ROW.search(done.stdout)
    if done.returncode or not found:
        raise RuntimeError(f"{folder.name}'s flow_cost: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return float(found[1]), float(found[2])


def server_side(url: str, pid: int, resumes: int, modes: list[str] | None) -> float:
    """Server CPU ms per resume sent as ``modes`` (None: ``runs/wait``)."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, api_key=None)

    def pause(_: int) -> tuple[str, str]:
        thread_id = client.threads.create()["thread_id"]
        paused = client.runs.wait(
            thread_id, GRAPH, input={"messages": [{"role": "user", "content": MESSAGE}]}
        )
        assert isinstance(paused, dict)
        return thread_id, paused["__interrupt__"][0]["id"]

    def resume(paused: tuple[str, str]) -> None:
        thread_id, interrupt_id = paused
        command = {"resume": {interrupt_id: SDK_APPROVAL}}
        if modes is None:
            client.runs.wait(thread_id, GRAPH, command=command)  # type: ignore[arg-type]
        else:
            for _ in client.runs.stream(thread_id, GRAPH, command=command, stream_mode=modes):  # type: ignore[arg-type]
                pass

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        waiting = list(pool.map(pause, range(resumes)))
    before = cpu_seconds(pid)
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(resume, waiting))
    return 1000 * (cpu_seconds(pid) - before) / resumes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=30, help="flows for part 1 (default 30)")
    parser.add_argument(
        "--resumes", type=int, default=200, help="resumes per way (default 200; 0: part 1 only)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="turns of part 2 (default 2)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="rounds of part 1, each running both ways of binding in turn (default 2)",
    )
    parser.add_argument(
        "--show-sql", action="store_true", help="print each statement of one flow, per call"
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        default="",
        help=f"also measure REV's own flow before each round (issue 21's baseline: {FILED_AT})",
    )
    args = parser.parse_args()

    db_name = f"nitro_bench_flow_cost_{os.getpid()}"
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "NITRO_TEST_DB_NAME": db_name,
            "NITRO_TEST_QUEUE": f"nitro-bench-flow-cost-{os.getpid()}",
            # Part 1 as a deployment runs it: LIVE_CACHE names a cache every process shares.
            "NITRO_TEST_LIVE_CACHE": "live",
        }
    )
    workdir = Path(tempfile.mkdtemp(prefix="bench-flow-cost-"))
    theirs: list[tuple[float, float]] = []
    against = other_commit(args.against, workdir / "against") if args.against else None
    port = free_port()
    create_database(db_name)
    server = langgraph_server(workdir / "ours", port=port).start()
    try:
        os.environ["NITRO_TEST_ASSISTANTS_URL"] = server.url
        import django

        django.setup()
        import logging

        logging.getLogger("nitro_assistants").setLevel(logging.ERROR)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        reviewer = seed_reviewer()
        ours: dict[str, list[list[tuple[str, float, float, float]]]] = {b: [] for b in BINDINGS}
        for turn in range(max(1, args.rounds)):
            if against is not None:
                theirs.append(their_flow(against, max(1, args.flows)))
            for binding, options in BINDINGS.items():
                use_binding(options)
                shown = args.show_sql and turn == 0
                ours[binding].append(our_side(max(1, args.flows), reviewer, db_name, shown))
        server.stop()
        per_way: dict[str, list[float]] = {name: [] for name in RESUME_WAYS}
        for turn in range(max(1, args.repeats) if args.resumes > 0 else 0):
            for way, (name, modes) in enumerate(RESUME_WAYS.items()):
                server = langgraph_server(workdir / f"resume-{turn}-{way}", port=port).start()
                assert server.process is not None
                per_way[name].append(
                    server_side(server.url, server.process.pid, args.resumes, modes)
                )
                server.stop()
    finally:
        server.stop()
        from django.db import connections

        connections.close_all()
        drop_database(db_name)
        shutil.rmtree(workdir, ignore_errors=True)

    print(
        f"Our side, one call at a time ({args.flows} flows a round, {args.rounds} rounds taking "
        "both bindings in turn; no Celery, Postgres, LIVE_CACHE in Redis). CPU: the mean of the "
        "rounds; PostgreSQL's is that of the backends connected to the bench's database."
    )
    flows: dict[str, list[tuple[float, float]]] = {}
    for binding, rounds in ours.items():
        print(f"\n{binding}:\n")
        print(
            "| call | our CPU ms per call | SQL statements per call | PostgreSQL CPU ms per call |"
        )
        print("|---|---:|---:|---:|")
        for i, name in enumerate(CALLS):
            cpu = sum(r[i][1] for r in rounds) / len(rounds)
            database = sum(r[i][3] for r in rounds) / len(rounds)
            print(f"| {name} | {cpu:.2f} | {rounds[0][i][2]:.0f} | {database:.2f} |")
        flows[binding] = [(sum(c[1] for c in r), sum(c[3] for c in r)) for r in rounds]
        cpu = sum(f[0] for f in flows[binding]) / len(rounds)
        database = sum(f[1] for f in flows[binding]) / len(rounds)
        statements = sum(c[2] for c in rounds[0])
        print(f"| **a flow** | **{cpu:.2f}** | **{statements:.0f}** | **{database:.2f}** |")
    print("\n| binding | our CPU ms a flow, each round | PostgreSQL CPU ms a flow, each round |")
    print("|---|---|---|")
    for binding, figures in flows.items():
        ours_each = ", ".join(f"{f[0]:.2f}" for f in figures)
        theirs_each = ", ".join(f"{f[1]:.2f}" for f in figures)
        print(f"| {binding} | {ours_each} | {theirs_each} |")
    default, prepared = (
        [sum(f[k] for f in figures) / len(figures) for k in (0, 1)] for figures in flows.values()
    )
    if default[0] and default[1]:
        print(
            f"\nPrepared / default, a flow: our CPU {prepared[0] / default[0]:.2f}, "
            f"PostgreSQL's {prepared[1] / default[1]:.2f}, both {sum(prepared) / sum(default):.2f}."
        )
    if theirs:
        print(
            f"\nIn the same run, `{args.against}`'s own flow (its bench, {args.flows} flows, "
            f"{theirs[0][1]:.0f} statements), measured before each round: "
            + ", ".join(f"{cpu:.2f}" for cpu, _ in theirs)
            + " ms of CPU.\n"
        )
        print(f"| binding | ours / `{args.against}`'s, each round | mean |")
        print("|---|---|---:|")
        for binding, figures in flows.items():
            ratios = [ours / cpu for (ours, _), (cpu, _) in zip(figures, theirs, strict=True)]
            each_round = ", ".join(f"{r:.2f}" for r in ratios)
            print(f"| {binding} | {each_round} | {sum(ratios) / len(ratios):.2f} |")
    if args.resumes <= 0:
        return 0
    print(
        f"\nThe server's side: CPU ms per resume, {args.resumes} resumes {CONCURRENCY} at a time, "
        f"each way on a fresh server, {args.repeats} turns:\n"
    )
    print("| resume sent as | server CPU ms per resume (mean) | each turn |")
    print("|---|---:|---|")
    means = {name: sum(figures) / len(figures) for name, figures in per_way.items()}
    base = means[next(iter(RESUME_WAYS))]
    for name, figures in per_way.items():
        extra = f" ({means[name] / base:.2f}×)" if base else ""
        print(f"| {name} | {means[name]:.1f}{extra} | {', '.join(f'{f:.1f}' for f in figures)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
