"""Throughput of run → review → resume: through Celery (2 worker processes, Redis, Postgres) vs `langgraph_sdk` driving the same flows directly.

    .venv/bin/python bench/throughput.py [--threads 200] [--concurrency 20] [--rounds 3] [--binding prepared]

Real ``langgraph dev`` servers (in-memory runtime, ``--n-jobs-per-worker 10``) runs the
``tools`` graph of tests/graphs/agents.py: "Can I move my appointment to Tuesday?" pauses on a held
``reschedule_appointment`` call; approving it runs the tool and the model answers.

- **Celery**: ``services.start_run`` for every thread at once; two ``celery worker`` processes
  run and mirror them, with ``MAX_CONCURRENT_REQUESTS`` set so that together they keep at most
  ``--concurrency`` requests in flight at the server, as the SDK side does; each has twice that
  many threads (``--worker-threads``), so a thread that has finished its database work is ready
  to send as soon as a request slot frees (without them, the flows' database work leaves the
  server's queue empty and its scheduler sleeps, see docs/benchmarks.md). This process decides
  each review as soon as it appears (``services.decide``, approve) and the workers resume them. Ends
  when every decision is applied. Real Redis (``NITRO_BENCH_BROKER_URL``, default
  ``redis://127.0.0.1:6379/3``, a queue of its own), real Postgres (a scratch database, created
  and dropped).
- **SDK**: ``--concurrency`` threads, each flow ``threads.create`` → ``runs.wait`` (pauses) →
  ``runs.wait`` with ``command.resume`` (approve), with ``langgraph_sdk``'s sync client.
- **Our client alone**: ``--concurrency`` threads sending what the workers send
  (``Assistants.run``, then ``Assistants.review`` with the pause held), with no database, no
  Celery and no reviewing process: how much of the gap is the requests themselves.
- **Celery alone**: two of Celery's own no-op tasks a flow, sent from this process and run by the
  same two workers: what Celery's machinery costs a flow with nothing in the tasks.

``--server-cpu N`` pins the server to CPU N on both sides (``taskset``), as if it had a core of
its own the way a deployed Agent Server has its own host; everything else shares all the cores.

Rounds (``--rounds``, default 5) take the sides in turn (Celery, SDK, our client alone); each
side of each round gets a fresh server on the same port, warmed up with ``--concurrency`` flows
of its own (the in-memory runtime scans every run it holds to pick the next one, so a server that
already ran another side's flows is slower). Prints the median round's CPU per flow, Celery
side / SDK side (the goal, ≤ 1.5: the cost, which does not swing as the throughput does on a
shared host), the median round's throughputs and ratio Celery / SDK (for information), every
round's ratios, and where the Celery side's time and CPU went. Also the floor of the CPU ratio:
our client alone (its server included), Celery alone and the Celery side's PostgreSQL, over the
SDK side, per round: what the Celery side would cost with no code of ours in the tasks (nothing
mirrored, audited or governed) and no reviewer, which no change to the services can go under. Postgres CPU is that of the
backends connected to the bench's own database. Figures only, no assertions.

``--binding`` (default ``prepared``): the Celery side's PostgreSQL connections (the workers' and
this process's) keep the statements they repeat prepared (``NITRO_TEST_DB_PREPARED=1`` in the
test settings: server-side binding, ``prepare_threshold`` 5), as docs/django.md advises;
``default`` is Django's (client-side binding, nothing prepared).

The test settings the workers run with use Django's connection pool (``OPTIONS["pool"]``):
Celery closes the database connection around every task, and without a pool each task opens a
new PostgreSQL connection (a forked backend), which cost this bench a third of its throughput.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import langgraph_server  # noqa: E402
from nitro_assistants.testing.launchers import CeleryWorker, LangGraphServer, free_port  # noqa: E402

GRAPH = "tools"
MESSAGE = "Can I move my appointment to Tuesday?"
WORKERS = 2
#: The goal for CPU per flow, Celery side over SDK side (issue 21): the cost, which does not
#: swing from run to run the way the throughput ratio does on a shared host.
CPU_RATIO_GOAL = 1.5
#: The SDK side's resume value: approve the held call (HumanInTheLoopMiddleware's decisions).
SDK_APPROVAL = {"decisions": [{"type": "approve"}]}


def approval(payload: dict[str, Any]) -> dict[str, Any]:
    """What the reviewer decides on a review's ``payload``: approve every held call."""
    return {
        "tool_calls": [{"id": call["id"], "action": "approve"} for call in payload["tool_calls"]]
    }


def _admin_connection() -> Any:
    import psycopg

    return psycopg.connect(
        host=os.environ.get("NITRO_TEST_DB_HOST", "127.0.0.1"),
        port=os.environ.get("NITRO_TEST_DB_PORT", "5432"),
        user=os.environ.get("NITRO_TEST_DB_USER", "postgres"),
        password=os.environ.get("NITRO_TEST_DB_PASSWORD", ""),
        dbname="postgres",
        autocommit=True,
    )


def create_database(name: str) -> None:
    with _admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    with _admin_connection() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_workers(count: int, concurrency: int, queue: str, logdir: Path) -> list[CeleryWorker]:
    """``count`` workers of the test project's Celery app on ``queue``, each with ``concurrency``
    threads, in this process's environment (the settings it chose). Not waited for: logging
    below INFO (``NITRO_BENCH_WORKER_LOGLEVEL``, default WARNING) they print no "ready." line;
    :func:`wait_workers_ready` asks them instead."""
    loglevel = os.environ.get("NITRO_BENCH_WORKER_LOGLEVEL", "WARNING")
    return [
        CeleryWorker(
            app="tests.celery_app",
            queue=queue,
            log_dir=logdir,
            concurrency=concurrency,
            loglevel=loglevel,
            cwd=ROOT,
            name=f"bench-{i}-{uuid.uuid4().hex[:6]}",
        ).start(wait=False)
        for i in range(count)
    ]


def sending_app() -> Any:
    """The Celery app this process sends with (``.delay()``) and asks the workers through:
    configured from the Django settings, as the workers' is."""
    from celery import Celery

    app = Celery("bench")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


def wait_workers_ready(app: Any, queue: str, count: int, timeout: float = 60) -> None:
    """Every worker consumes the queue (``celery inspect`` would cost seconds per call)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = app.control.inspect(timeout=1).active_queues() or {}
        ready = [q for queues in replies.values() for q in queues if q["name"] == queue]
        if len(ready) >= count:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{count} workers did not come up on {queue}")


def cpu_seconds(group: int | str) -> float:
    """CPU time (user + system) used so far by the live processes of process group ``group``,
    or, given a name, by every process of that name and the children they reaped (PostgreSQL
    forks a backend per connection), or, given ``"db:NAME"``, by the PostgreSQL backends
    connected to database NAME (see :func:`database_cpu`)."""
    if isinstance(group, str) and group.startswith("db:"):
        return sum(database_cpu(group[3:]).values())
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, rest = stat.read_text().split(" (", 1)[1].rsplit(")", 1)
        except (OSError, IndexError, ValueError):
            continue
        fields = rest.split()  # after the name: state, ppid, pgrp, ..., utime at index 11
        if isinstance(group, str) and name == group:
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        elif int(fields[2]) == group:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def database_cpu(db_name: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend connected to ``db_name``, by pid (its
    title is ``postgres: [CLUSTER: ]USER DB HOST(PORT) STATE``). Only this bench's own database: on a
    machine that other work shares, every ``postgres`` process counts that work too (an SDK
    side, which sends no SQL, showed 0.8 s of it). The bench's connections are pooled, so its
    backends live through a measurement."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            title = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").split()
            if title[:1] != [b"postgres:"] or db_name.encode() not in title[2:4]:
                continue
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError, ValueError):
            continue
        found[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / tick
    return found


def loop_schedule(pid: int) -> tuple[float, float]:
    """Seconds the main thread of process ``pid`` has so far spent on a CPU, and runnable but
    waiting for one (``/proc/PID/task/PID/schedstat``). The server's main thread runs its event
    loop: every request and every run goes through it."""
    try:
        ran, waited = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[:2]
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(ran) / 1e9, int(waited) / 1e9


def measured(
    call: Any, groups: dict[str, int | str]
) -> tuple[float, dict[str, float], tuple[float, float]]:
    """Wall seconds of ``call()``, the CPU seconds each process group spent meanwhile, and the
    seconds the server's event loop (``groups["server"]``) ran and waited for a CPU meanwhile."""
    server_pid = int(groups["server"])
    before = {name: cpu_seconds(pgid) for name, pgid in groups.items()}
    loop_before = loop_schedule(server_pid)
    own = time.process_time()
    seconds = call()
    cpu = {name: cpu_seconds(pgid) - before[name] for name, pgid in groups.items()}
    cpu["this process"] = time.process_time() - own
    loop_after = loop_schedule(server_pid)
    loop = (loop_after[0] - loop_before[0], loop_after[1] - loop_before[1])
    return seconds, cpu, loop


def through_celery(threads: int, timeout: float) -> float:
    """Seconds for ``threads`` flows through the app's services and the Celery workers.

    This process is the reviewer: it polls for new reviews (by primary key, every 0.1 s, a
    cheap query) and approves each through ``services.decide``, as the admin would."""
    from django.db.models import Max

    from nitro_assistants import services
    from nitro_assistants.models import Decision, Review

    def last_pk(model: Any) -> int:
        return int(model.objects.aggregate(last=Max("pk"))["last"] or 0)

    first_review, first_decision = last_pk(Review), last_pk(Decision)
    started = time.perf_counter()
    for _ in range(threads):
        services.start_run(GRAPH, MESSAGE)
    decided = 0
    deadline = time.monotonic() + timeout
    while True:
        # Not a moving watermark: a review's pk is taken before its transaction commits.
        reviews = Review.objects.filter(pk__gt=first_review, status=Review.Status.PENDING)
        shown = reviews.order_by("pk").values_list("pk", "payload", "revision", "digest")
        for pk, payload, revision, digest in shown:
            services.decide(pk, None, {**approval(payload), "revision": revision, "digest": digest})
            decided += 1
        ours = Decision.objects.filter(pk__gt=first_decision)
        applied = ours.filter(outcome=Decision.Outcome.APPLIED).count()
        if applied == threads:
            return time.perf_counter() - started
        failed = ours.exclude(outcome__in=[Decision.Outcome.APPLIED, Decision.Outcome.PENDING])
        if failed.exists() or time.monotonic() > deadline:
            raise RuntimeError(
                f"Celery side: {applied}/{threads} applied, {decided} decided, "
                f"{failed.count()} failed or superseded"
            )
        time.sleep(0.1)


def server_queue(log: Path, last: int, jobs: int = 10) -> dict[str, float]:
    """What the server logged of its last ``last`` runs: ms each waited in its queue before a
    job slot took it (mean, p90, share over 500 ms), ms each ran (mean), and the stretches over
    100 ms when a job slot stood free while runs waited (the scheduler asleep: the in-memory
    runtime sleeps 0.5 s when it finds its queue empty, then takes only runs created before)."""
    import re
    from datetime import datetime

    ansi = re.compile(r"\x1b\[[0-9;]*m")
    waits, runs, spans = [], [], []
    for line in log.read_text(errors="replace").splitlines():
        line = ansi.sub("", line)
        if "Background run succeeded" not in line:
            continue
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        if "run_wait_time_ms" in fields and "run_exec_ms" in fields:
            waits.append(int(fields["run_wait_time_ms"]))
            runs.append(int(fields["run_exec_ms"]))
            spans.append(
                tuple(
                    datetime.fromisoformat(fields[f"run_{name}"]).timestamp()
                    for name in ("created_at", "started_at", "ended_at")
                )
            )
    waits, runs, spans = waits[-last:], runs[-last:], spans[-last:]
    if not waits:
        return {}
    events = sorted(
        [(created, 1, 0) for created, _, _ in spans]
        + [(started, -1, 1) for _, started, _ in spans]
        + [(ended, 0, -1) for _, _, ended in spans]
    )
    pending = running = 0
    idle_since: float | None = None
    stretches: list[float] = []
    for at, pending_change, running_change in events:
        pending += pending_change
        running += running_change
        idle = running < jobs and pending > 0
        if idle and idle_since is None:
            idle_since = at
        elif not idle and idle_since is not None:
            if at - idle_since > 0.1:
                stretches.append(at - idle_since)
            idle_since = None
    ordered = sorted(waits)
    return {
        "wait": sum(waits) / len(waits),
        "wait p90": ordered[int(0.9 * (len(ordered) - 1))],
        "waited > 500 ms": 100 * sum(w > 500 for w in waits) / len(waits),
        "ran": sum(runs) / len(runs),
        "stalls": len(stretches),
        "stalled s": sum(stretches),
    }


def stages(threads: int) -> dict[str, float]:
    """Mean seconds of each stage of the last ``threads`` flows, from the rows' timestamps."""
    from nitro_assistants.models import Decision, Run

    decisions = list(Decision.objects.select_related("review", "run").order_by("-pk")[:threads])
    runs = {
        r.thread_id: r
        for r in Run.objects.filter(
            kind=Run.Kind.RUN, thread__in=[d.review.thread_id for d in decisions]
        )
    }
    spans: dict[str, list[float]] = {}

    def add(name: str, start: Any, end: Any) -> None:
        if start and end:
            spans.setdefault(name, []).append((end - start).total_seconds())

    for decision in decisions:
        run, resume = runs.get(decision.review.thread_id), decision.run
        if run is None or resume is None:
            continue
        add("run: queued in Celery", run.created_at, run.started_at)
        add("run: task (server run + mirror)", run.started_at, run.finished_at)
        add("review: shown → decided (this process polls)", run.finished_at, decision.decided_at)
        add("resume: queued in Celery", decision.decided_at, resume.started_at)
        add("resume: task (server run + mirror)", resume.started_at, resume.finished_at)
    return {name: sum(v) / len(v) for name, v in spans.items()}


def in_threads(flow: Any, threads: int, concurrency: int) -> float:
    """Seconds to call ``flow(i)`` for ``threads`` flows from ``concurrency`` threads."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(flow, range(threads)))
    return time.perf_counter() - started


def median_round(rounds: list[tuple[float, float]]) -> tuple[float, float, float]:
    """The median round of (seconds, SDK seconds) pairs by ratio SDK / seconds: (ratio, seconds,
    SDK seconds)."""
    ratio = sorted(sdk / ours for ours, sdk in rounds)[len(rounds) // 2]
    ours, sdk = next((o, s) for o, s in rounds if s / o == ratio)
    return ratio, ours, sdk


def through_client(url: str, threads: int, concurrency: int) -> float:
    """Seconds for ``threads`` flows sent with our client alone, at ``concurrency``: the requests
    the workers send (``Assistants.run`` creating the thread, ``Assistants.review`` with the pause
    held, streamed), with no database, no Celery and no reviewing process."""
    from nitro_assistants.client import Assistants

    client = Assistants(url, "unused-by-langgraph-dev", user_id="bench")

    def flow(_: int) -> None:
        thread_id = str(uuid.uuid4())
        paused = client.run(
            thread_id,
            GRAPH,
            [{"role": "user", "content": MESSAGE}],
            context={},
            metadata={"nitro_run_id": str(uuid.uuid4())},  # services.runs.RUN_KEY, as the workers
        )
        assert paused.review is not None, paused
        done = client.review(
            thread_id,
            GRAPH,
            "bench",
            context={},
            pending=paused.review,
            **approval({"tool_calls": paused.review.tool_calls}),
        )
        assert str(done.reply).startswith("Done!"), done.reply

    return in_threads(flow, threads, concurrency)


def through_celery_alone(
    app: Any, broker_url: str, queue: str, threads: int, timeout: float
) -> float:
    """Seconds for Celery's own part of ``threads`` flows with nothing in the tasks: two tasks a
    flow (the run's and the resume's), sent from this process as ``start_run`` and ``decide``
    send theirs (by name, a pk-sized argument), run by the same two workers from the same queue.
    The task is Celery's built-in no-op ``celery.accumulate`` (it returns its arguments; there is
    no result backend to store them), acknowledged on receipt where ours are acknowledged late:
    if anything, less than our tasks cost. Done when the broker holds none of them, queued or
    unacknowledged (polled every 50 ms; each poll is two Redis commands)."""
    import redis

    broker = redis.Redis.from_url(broker_url)
    started = time.perf_counter()
    for _ in range(2 * threads):
        app.send_task("celery.accumulate", args=(str(uuid.uuid4()),), queue=queue)
    deadline = time.monotonic() + timeout
    while broker.llen(queue) or broker.hlen("unacked"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Celery alone: {broker.llen(queue)} tasks still queued")
        time.sleep(0.05)
    return time.perf_counter() - started


def through_sdk(url: str, threads: int, concurrency: int) -> float:
    """Seconds for ``threads`` flows driven with ``langgraph_sdk`` at ``concurrency``."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=url, api_key=None)
    metadata = {"user_id": "bench"}

    def flow(_: int) -> None:
        thread_id = client.threads.create(metadata={"graph_id": GRAPH})["thread_id"]
        paused = client.runs.wait(
            thread_id,
            GRAPH,
            input={"messages": [{"role": "user", "content": MESSAGE}]},
            context={},
            metadata=metadata,
            config={"metadata": metadata},
        )
        assert isinstance(paused, dict)
        interrupt_id = paused["__interrupt__"][0]["id"]
        done = client.runs.wait(
            thread_id,
            GRAPH,
            command={"resume": {interrupt_id: SDK_APPROVAL}},
            context={},
            metadata=metadata,
            config={"metadata": metadata},
        )
        assert isinstance(done, dict)
        assert "__interrupt__" not in done, done
        assert str(done["messages"][-1]["content"]).startswith("Done!"), done["messages"][-1]

    return in_threads(flow, threads, concurrency)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=200, help="conversations (default 200)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds of Celery then SDK, interleaved, each side on a fresh server (default 5)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=20,
        help="flows in flight at the server on each side: SDK threads, and the Celery workers' "
        f"MAX_CONCURRENT_REQUESTS over {WORKERS} processes (default 20)",
    )
    parser.add_argument(
        "--worker-threads",
        type=int,
        default=0,
        help="threads per Celery worker process (default: twice its request slots)",
    )
    parser.add_argument(
        "--server-cpu",
        default="",
        help="pin the server to this CPU on both sides (taskset -c; default: not pinned)",
    )
    parser.add_argument(
        "--binding",
        choices=("default", "prepared"),
        default="prepared",
        help="PostgreSQL for the Celery side: Django's default (client-side binding) or the "
        "statements prepared, as docs/django.md advises (default: prepared)",
    )
    args = parser.parse_args()
    threads, concurrency = max(1, args.threads), max(WORKERS, args.concurrency)
    slots = concurrency // WORKERS
    worker_threads = args.worker_threads or 2 * slots

    db_name = f"nitro_bench_throughput_{os.getpid()}"
    queue = f"nitro-bench-{uuid.uuid4().hex[:8]}"
    broker_url = os.environ.get("NITRO_BENCH_BROKER_URL", "redis://127.0.0.1:6379/3")
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "NITRO_TEST_DB_NAME": db_name,
            "NITRO_TEST_BROKER_URL": broker_url,
            "NITRO_TEST_QUEUE": queue,
            "NITRO_TEST_MAX_CONCURRENT_REQUESTS": str(slots),
            # tests.settings: the workers' and this process's connections (see --binding)
            "NITRO_TEST_DB_PREPARED": "1" if args.binding == "prepared" else "0",
        }
    )
    create_database(db_name)
    workdir = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    port = free_port()
    server = langgraph_server(workdir / "server-0", port=port, cpus=args.server_cpu)
    workers: list[CeleryWorker] = []

    def fresh_server(tag: str) -> LangGraphServer:
        """A new server on the same port (the workers keep their URL), with no earlier data: the
        in-memory runtime scans every run it holds to pick the next one, so it slows down as
        runs pile up, and whichever side came later would pay for the other's."""
        nonlocal server
        server.stop()
        server = langgraph_server(workdir / f"server-{tag}", port=port, cpus=args.server_cpu)
        return server.start()

    try:
        server.start()
        os.environ["NITRO_TEST_ASSISTANTS_URL"] = server.url
        import django

        django.setup()
        import logging

        logging.getLogger("nitro_assistants").setLevel(logging.ERROR)
        from django.core.management import call_command

        app = sending_app()
        call_command("migrate", verbosity=0)
        workers = start_workers(WORKERS, worker_threads, queue, workdir)
        wait_workers_ready(app, queue, WORKERS)
        timeout = 60 + threads * 3.0
        warm_up = min(concurrency, threads)

        def groups() -> dict[str, int | str]:
            assert server.process is not None
            found: dict[str, int | str] = {
                "server": server.process.pid,
                "postgres": f"db:{db_name}",
                "redis": "redis-server",
            }
            found.update(
                {f"worker {i + 1}": w.process.pid for i, w in enumerate(workers) if w.process}
            )
            return found

        rounds: list[tuple[float, float]] = []
        client_rounds: list[tuple[float, float]] = []  # our client alone, and that round's SDK
        cpu_rounds: list[tuple[float, float]] = []  # CPU seconds per flow: Celery side, SDK side
        # CPU seconds: our client alone, Celery alone, the Celery side's PostgreSQL, the SDK side
        floor_rounds: list[tuple[float, float, float, float]] = []
        for i in range(max(1, args.rounds)):
            fresh_server(f"{i}-celery")
            through_celery(warm_up, timeout=120)  # graph loaded, connections open
            celery_seconds, celery_cpu, celery_loop = measured(
                lambda: through_celery(threads, timeout), groups()
            )
            celery_stages = stages(threads)
            celery_queue = server_queue(server.log_path, 2 * threads)
            fresh_server(f"{i}-sdk")
            through_sdk(server.url, warm_up, concurrency)
            sdk_seconds, sdk_cpu, sdk_loop = measured(
                lambda: through_sdk(server.url, threads, concurrency), groups()
            )
            sdk_queue = server_queue(server.log_path, 2 * threads)
            fresh_server(f"{i}-client")
            through_client(server.url, warm_up, concurrency)
            client_seconds, client_cpu, _ = measured(
                lambda: through_client(server.url, threads, concurrency), groups()
            )
            _, alone_cpu, _ = measured(
                lambda: through_celery_alone(app, broker_url, queue, threads, timeout), groups()
            )
            client_rounds.append((client_seconds, sdk_seconds))
            rounds.append((celery_seconds, sdk_seconds))
            cpu_rounds.append((sum(celery_cpu.values()), sum(sdk_cpu.values())))
            # The least CPU a flow through Celery could cost with no code of ours in the tasks and
            # no reviewer: the requests the workers send (server and client), the two tasks, and
            # PostgreSQL as the Celery side's statements cost it this round. Only the processes
            # each pass works in: the others idle meanwhile (the workers poll the broker).
            floor_rounds.append(
                (
                    client_cpu["server"] + client_cpu["this process"],
                    sum(v for k, v in alone_cpu.items() if k != "server" and k != "postgres"),
                    celery_cpu["postgres"],
                    sum(sdk_cpu.values()),
                )
            )
        # Would the SDK side go faster with as many threads as the Celery side has? (No: at
        # --concurrency requests in flight the server's job slots are already always busy.)
        wide = WORKERS * worker_threads
        fresh_server("wide")
        through_sdk(server.url, wide, wide)
        wide_seconds = through_sdk(server.url, threads, wide)
    finally:
        for worker in workers:
            worker.stop()
        server.stop()
        from django.db import connections

        connections.close_all()
        drop_database(db_name)

    ratio, celery_seconds, sdk_seconds = median_round(rounds)
    celery_rate, sdk_rate = threads / celery_seconds, threads / sdk_seconds
    verdict = "met" if ratio >= 0.8 else "**not met**"
    print(
        f"{threads} conversations, each run → review → resume (graph `{GRAPH}`), "
        f"{concurrency} in flight on each side; `langgraph dev` in-memory runtime, "
        "`--n-jobs-per-worker 10`"
        + (f", pinned to CPU {args.server_cpu} on both sides" if args.server_cpu else "")
        + (
            "; PostgreSQL's statements prepared (`--binding prepared`)"
            if args.binding == "prepared"
            else "; Django's default binding (`--binding default`)"
        )
        + ".\n"
    )
    print("| path | seconds | flows/s |")
    print("|---|---:|---:|")
    print(
        f"| Celery: {WORKERS} worker processes × {worker_threads} threads, at most {slots} "
        f"requests in flight each, Redis, Postgres | {celery_seconds:.1f} | {celery_rate:.2f} |"
    )
    print(
        f"| `langgraph_sdk` sync client, {concurrency} threads | {sdk_seconds:.1f} "
        f"| {sdk_rate:.2f} |"
    )
    print(
        f"| `langgraph_sdk` sync client, {wide} threads (as many as the Celery side has; "
        f"one run) | {wide_seconds:.1f} | {threads / wide_seconds:.2f} |"
    )
    client_ratio, client_seconds, _ = median_round(client_rounds)
    print(
        f"| our client alone, {concurrency} threads: `Assistants.run`, then `Assistants.review` "
        f"with the pause held; no database, no Celery (its median round) | {client_seconds:.1f} "
        f"| {threads / client_seconds:.2f} |"
    )
    print(
        f"\n- ratio Celery / SDK: **{ratio:.2f}** (goal ≥ 0.8: {verdict}), the median of {len(rounds)} rounds"
    )
    print(
        "- every round (Celery s / SDK s → ratio): "
        + "; ".join(f"{c:.1f} / {s:.1f} → {s / c:.2f}" for c, s in rounds)
    )
    print(
        f"- ratio our client alone / SDK: {client_ratio:.2f}, the median of {len(client_rounds)} "
        "rounds (each against that round's SDK side): what the requests the workers send cost, "
        "apart from the database, Celery and the reviewing process; every round: "
        + ", ".join(f"{s / c:.2f}" for c, s in client_rounds)
    )
    per_call = sdk_seconds * concurrency / (2 * threads)
    print(f"- SDK: {per_call:.2f} s per `runs/wait` call at this concurrency (two per flow)")
    print(
        "- the server's own log, last round (`run_wait_time_ms`: queued until one of its 10 job "
        "slots took the run; `run_exec_ms`: running):"
    )
    for label, queue_stats in (("Celery", celery_queue), ("SDK", sdk_queue)):
        if queue_stats:
            print(
                f"  - {label}: queued {queue_stats['wait']:.0f} ms on average "
                f"(p90 {queue_stats['wait p90']:.0f} ms, {queue_stats['waited > 500 ms']:.0f} % "
                f"over 500 ms), ran {queue_stats['ran']:.0f} ms; job slots stood free while runs "
                f"waited {queue_stats['stalls']:.0f} times for over 100 ms, "
                f"{queue_stats['stalled s']:.1f} s in all"
            )
    print("- mean seconds per stage of a flow through Celery (last round):")
    for name, seconds in celery_stages.items():
        print(f"  - {name}: {seconds:.2f}")
    print(
        f"- CPU seconds spent during each side, last round ({os.cpu_count()} cores on this "
        "machine; postgres: the backends of this bench's database; redis: every redis-server "
        "of the machine):"
    )
    last_seconds = dict(zip(("Celery", "SDK"), rounds[-1], strict=True))
    for label, cpu in (("Celery", celery_cpu), ("SDK", sdk_cpu)):
        parts = ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.items() if seconds)
        total = sum(cpu.values())
        print(
            f"  - {label}: {parts}; {1000 * total / threads:.0f} ms of CPU per flow, "
            f"{total / last_seconds[label]:.2f} of the {os.cpu_count()} cores busy on average"
        )
    # Per round, then the median: on a host other work shares, one round's CPU swings too.
    ratios = sorted(celery / sdk for celery, sdk in cpu_rounds if sdk)
    cpu_ratio = ratios[len(ratios) // 2] if ratios else 0.0
    cpu_verdict = "met" if cpu_ratio <= CPU_RATIO_GOAL else "**not met**"
    print(
        f"- CPU per flow, Celery side / SDK side: **{cpu_ratio:.2f}** (goal ≤ {CPU_RATIO_GOAL}: "
        f"{cpu_verdict}), the median of {len(cpu_rounds)} rounds; every round (ms per flow, "
        "Celery / SDK → ratio): "
        + "; ".join(
            f"{1000 * c / threads:.0f} / {1000 * s / threads:.0f} → {c / s if s else 0:.2f}"
            for c, s in cpu_rounds
        )
        + ". The throughput ratio above is for information."
    )
    # The floor: what the Celery side would cost with no service code at all (nothing mirrored,
    # nothing audited, no reviewer), by round, over that round's SDK side.
    floors = sorted(
        ((client + alone + postgres) / sdk, (client + alone) / sdk)
        for client, alone, postgres, sdk in floor_rounds
        if sdk
    )
    floor_ratio, floor_no_db = floors[len(floors) // 2] if floors else (0.0, 0.0)
    print(
        f"- the floor of that ratio, with no code of ours in the tasks: **{floor_ratio:.2f}** "
        f"({floor_no_db:.2f} with PostgreSQL's CPU left out too), the median of "
        f"{len(floor_rounds)} rounds; every round (ms per flow: our client alone, its server "
        "included / Celery alone, two no-op tasks / the Celery side's PostgreSQL / the SDK side "
        "→ ratio): "
        + "; ".join(
            f"{1000 * c / threads:.1f} / {1000 * a / threads:.1f} / {1000 * p / threads:.1f} / "
            f"{1000 * s / threads:.1f} → {(c + a + p) / s if s else 0:.2f}"
            for c, a, p, s in floor_rounds
        )
    )
    print(
        "- the server's event loop (its main thread, which every request and run goes through), "
        "last round: of each second, how long it ran and how long it was ready to run but "
        "waited for a CPU (`/proc/PID/task/PID/schedstat`):"
    )
    for label, (ran, waited) in (("Celery", celery_loop), ("SDK", sdk_loop)):
        wall = last_seconds[label]
        print(
            f"  - {label}: ran {1000 * ran / wall:.0f} ms, waited {1000 * waited / wall:.0f} ms "
            f"({100 * waited / (ran + waited) if ran + waited else 0:.0f} % of its ready time)"
        )
    # The server is one process: it cannot use more than a core. Everything else shares what is
    # left. So with this much CPU per flow, no scheduling finishes the Celery side sooner than:
    cores = os.cpu_count() or 1
    floor = max(celery_cpu["server"], sum(celery_cpu.values()) / cores)
    sdk_last = threads / sdk_seconds if sdk_seconds else 0.0
    print(
        f"- with this CPU per flow, {cores} cores fully used would finish the Celery side in "
        f"{floor:.1f} s at best: ratio ≤ {floor and (threads / floor) / sdk_last:.2f} "
        "against the SDK's median round"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
