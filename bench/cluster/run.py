"""Many hosts on one machine: the example site as a cluster of network namespaces, loaded with a
day's reviews at 100,000 a day and ten times that, through faults. Needs root.

    sudo .venv/bin/python bench/cluster/run.py [--minutes 10] [--rates 1,10] [--no-faults] [--drain 4]
    sudo .venv/bin/python bench/cluster/run.py --teardown    # remove what a killed run left

Hosts (namespaces on the bridge nitro39br, 10.239.39.0/24; the driver talks from .1): db (.2,
PostgreSQL of its own, initdb in a temporary directory), broker (.3, redis-server, append-only),
lg (.4, ``langgraph dev`` serving the demo assistant), web (.5, the site under gunicorn), w1-w3
(.11-.13, a Celery worker each, beat on w1). Nothing leaves the subnet (no default route) and
everything goes when the script ends, however it ends. docs/scale.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.cluster import hosts, ledger  # noqa: E402
from bench.cluster.hosts import (  # noqa: E402
    ASSISTANTS,
    BROKER,
    DB,
    NOTIFY_QUEUE,
    WEB,
    WORKERS,
    Host,
    Process,
)

BIN = ROOT / ".venv" / "bin"
#: Temporal Cloud's published p99 signal latency (issue 39): the goal at the base rate.
GOAL_P99 = 0.091
#: The Agent Server's sweep interval: back to the goal within this after each fault.
RECOVERY_GOAL = 120.0
#: The first phase's first seconds, whose latencies are reported apart (Phase.warmup).
WARMUP = 60.0
FAULTS = (
    "kill_worker",
    "cut_db",
    "cut_assistants",
    "restart_redis",
    "restart_postgres",
    "move_beat",
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="load at each rate (default 10)"
    )
    parser.add_argument(
        "--rates", default="1,10", help="multiples of 100,000 reviews a day, in turn (default 1,10)"
    )
    parser.add_argument(
        "--faults", action=argparse.BooleanOptionalAction, default=True,
        help="inject the faults during each rate (default: yes)",
    )  # fmt: skip
    parser.add_argument(
        "--reviewers", type=int, default=40, help="simulated reviewers (default 40)"
    )
    parser.add_argument(
        "--drain",
        type=float,
        default=4.0,
        help="minutes the work in flight is given to settle after each rate (default 4)",
    )
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument(
        "--logs", type=Path, default=ROOT / "var" / "cluster", help="logs kept here"
    )
    parser.add_argument(
        "--teardown", action="store_true", help="only remove a previous run's leftovers"
    )
    args = parser.parse_args(argv)
    if not 0.5 <= args.minutes <= 120:
        parser.error("--minutes: from 0.5 to 120")
    try:
        args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        parser.error(f"--rates: `{args.rates}` is not a comma-separated list of numbers")
    if not args.rates or any(not 0 < r <= 20 for r in args.rates):
        parser.error("--rates: each from just above 0 to 20")
    if not 0.5 <= args.drain <= 60:
        parser.error("--drain: from 0.5 to 60")
    if not 2 <= args.reviewers <= 500:
        parser.error("--reviewers: from 2 to 500")
    return args


def fault_plan(seconds: float, quiet: float = 0.25) -> list[tuple[float, str]]:
    """When each fault starts, in seconds from the rate's start: the first ``quiet`` share of
    the time without any (the rate's undisturbed figures), the rest shared out evenly."""
    start = seconds * quiet
    step = (seconds - start) / len(FAULTS)
    return [(start + i * step, name) for i, name in enumerate(FAULTS)]


@dataclass
class Cluster:
    work: Path
    procs: dict[str, Process] = field(default_factory=dict)
    beat_on: Host = WORKERS[0]
    events: list[tuple[float, float, str]] = field(default_factory=list)
    supervising: threading.Lock = field(default_factory=threading.Lock)

    @property
    def env(self) -> dict[str, str]:
        return {
            "DJANGO_SETTINGS_MODULE": "bench.cluster.settings",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": f"postgres://postgres@{DB.address}:{hosts.PG_PORT}/nitro",
            "CELERY_BROKER_URL": f"redis://{BROKER.address}:{hosts.REDIS_PORT}/0",
            "ASSISTANTS_URL": f"http://{ASSISTANTS.address}:{hosts.LG_PORT}",
            "ALLOWED_HOSTS": WEB.address,
            "STATIC_ROOT": str(self.work / "static"),
            "DEMO_OUTBOX": str(self.work / "outbox.jsonl"),
            "NOTIFY_BASE_URL": f"http://{WEB.address}:{hosts.WEB_PORT}",
            "LOG_LEVEL": "WARNING",
            "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
            "SECRET_KEY": "cluster-39-only",
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "LANGGRAPH_NO_VERSION_CHECK": "true",
        }

    def log(self, name: str) -> Path:
        return self.work / "logs" / f"{name}.log"

    # --- the hosts ---------------------------------------------------------------------------

    def pg_bin(self, name: str) -> str:
        found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
        if not found:
            raise RuntimeError(f"no PostgreSQL {name} under /usr/lib/postgresql/*/bin")
        return str(found[-1])

    def start_postgres(self) -> None:
        data = self.work / "pg"
        if not data.exists():
            data.mkdir(parents=True)
            shutil.chown(data, "postgres", "postgres")
            subprocess.run(
                ["runuser", "-u", "postgres", "--", self.pg_bin("initdb"), "-D", str(data),
                 "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {hosts.SUBNET}.0/24 trust\n")
        self.procs["postgres"] = Process(
            DB,
            [self.pg_bin("postgres"), "-D", str(data), "-c", f"listen_addresses={DB.address}",
             "-c", f"unix_socket_directories={data}", "-c", "max_connections=300",
             "-c", "shared_buffers=128MB", "-c", "synchronous_commit=on",
             # A worker host cut off leaves its sessions open here, idle in a transaction and
             # holding row locks its retried task then waits for: drop a client whose data goes
             # unacknowledged for 10 s, or that stops answering keepalives (docs/scale.md).
             "-c", "tcp_user_timeout=10000", "-c", "tcp_keepalives_idle=10",
             "-c", "tcp_keepalives_interval=5", "-c", "tcp_keepalives_count=3"],
            self.log("postgres"), user="postgres",
        ).start()  # fmt: skip
        hosts.wait_until("PostgreSQL", self.postgres_ready, 60)

    def postgres_ready(self) -> bool:
        done = subprocess.run(
            [self.pg_bin("pg_isready"), "-h", DB.address, "-p", str(hosts.PG_PORT), "-q"],
            check=False, timeout=10,
        )  # fmt: skip
        return done.returncode == 0

    def start_redis(self) -> None:
        (self.work / "redis").mkdir(exist_ok=True)
        self.procs["redis"] = Process(
            BROKER,
            ["redis-server", "--bind", BROKER.address, "--port", str(hosts.REDIS_PORT),
             "--protected-mode", "no", "--dir", str(self.work / "redis"), "--save", "",
             "--appendonly", "yes", "--appendfsync", "everysec"],
            self.log("redis"),
        ).start()  # fmt: skip
        hosts.wait_until("Redis", lambda: self.tcp_ready(BROKER, hosts.REDIS_PORT), 30)

    def tcp_ready(self, host: Host, port: int) -> bool:
        import socket

        try:
            with socket.create_connection((host.address, port), timeout=1):
                return True
        except OSError:
            return False

    def start_assistants(self) -> None:
        lg = self.work / "lg"
        lg.mkdir(exist_ok=True)
        (lg / "langgraph.json").write_text(
            json.dumps(
                {
                    "graphs": {"virtual-confirmation": f"{ROOT}/reviewsite/agent/graph.py:graph"},
                    "dependencies": [str(ROOT)],
                    "webhooks": {"url": {"disable_loopback": False, "require_https": False}},
                }
            )
        )
        self.procs["langgraph"] = Process(
            ASSISTANTS,
            [str(BIN / "langgraph"), "dev", "--no-browser", "--no-reload", "--host",
             ASSISTANTS.address, "--port", str(hosts.LG_PORT), "--config", "langgraph.json",
             "--n-jobs-per-worker", "10"],
            self.log("langgraph"), env=self.env, cwd=lg,
        ).start()  # fmt: skip
        hosts.wait_until("langgraph dev", lambda: self.http_ok(f"{self.lg_url}/ok"), 120)

    @property
    def lg_url(self) -> str:
        return f"http://{ASSISTANTS.address}:{hosts.LG_PORT}"

    @property
    def web_url(self) -> str:
        return f"http://{WEB.address}:{hosts.WEB_PORT}"

    def http_ok(self, url: str) -> bool:
        import requests

        try:
            return requests.get(url, timeout=2).ok
        except requests.RequestException:
            return False

    def manage(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "python"), str(ROOT / "manage.py"), *argv],
            env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip

    def start_web(self) -> None:
        self.procs["web"] = Process(
            WEB,
            [str(BIN / "gunicorn"), "reviewsite.wsgi", "--bind", f"{WEB.address}:{hosts.WEB_PORT}",
             "--workers", "3", "--threads", "4", "--timeout", "60"],
            self.log("web"), env=self.env, cwd=ROOT,
        ).start()  # fmt: skip
        hosts.wait_until("the site", lambda: self.http_ok(f"{self.web_url}/admin/login/"), 90)

    def start_worker(self, host: Host) -> None:
        """The host's two workers: one for the runs, resumes and sweeps (Celery's default
        queue), and one thread at a lower CPU priority for the notification sends (their own
        queue, settings.py): a reviewer's batched digest can list hundreds of reviews, and every
        reviewer's falls due at about the same time, so on the runs' queue they took every
        thread for seconds and the resumes waited behind them (docs/scale.md)."""
        self.procs[f"worker-{host.name}"] = Process(
            host,
            [str(BIN / "celery"), "-A", "reviewsite", "worker", "-n", f"worker@{host.name}",
             "-Q", "celery", "--pool", "threads", "--concurrency", "10", "-l", "info"],
            self.log(f"worker-{host.name}"), env=self.env, cwd=ROOT,
        ).start()  # fmt: skip
        self.procs[f"notify-{host.name}"] = Process(
            host,
            ["nice", "-n", "10", str(BIN / "celery"), "-A", "reviewsite", "worker",
             "-n", f"notify@{host.name}", "-Q", NOTIFY_QUEUE, "--pool", "threads",
             "--concurrency", "1", "-l", "info"],
            self.log(f"notify-{host.name}"), env=self.env, cwd=ROOT,
        ).start()  # fmt: skip

    def start_beat(self, host: Host) -> None:
        self.beat_on = host
        self.procs["beat"] = Process(
            host,
            [str(BIN / "celery"), "-A", "reviewsite", "beat", "-l", "info",
             "-s", str(self.work / f"beat-{host.name}")],
            self.log(f"beat-{host.name}"), env=self.env, cwd=ROOT,
        ).start()  # fmt: skip

    def build(self) -> None:
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        os.chmod(self.work, 0o755)
        hosts.build_network()
        say("hosts: " + ", ".join(f"{h.name} {h.address}" for h in hosts.HOSTS))
        self.start_postgres()
        subprocess.run(
            [self.pg_bin("createdb"), "-h", DB.address, "-U", "postgres", "nitro"],
            check=True, timeout=60,
        )  # fmt: skip
        self.start_redis()
        self.start_assistants()
        for argv in (
            ["migrate", "--noinput", "-v", "0"],
            ["collectstatic", "--noinput", "-v", "0"],
        ):
            done = self.manage(*argv)
            if done.returncode != 0:
                raise RuntimeError(f"manage.py {argv[0]} failed:\n{done.stderr[-2000:]}")
        self.start_web()
        for host in WORKERS:
            self.start_worker(host)
        self.start_beat(WORKERS[0])
        say("cluster up: PostgreSQL, Redis, langgraph dev, gunicorn, 3 workers, beat on w1")

    # --- the faults --------------------------------------------------------------------------

    def fault(self, name: str) -> None:
        """Inflict ``name`` and undo it; records (start, end, name)."""
        start = time.time()
        _w1, w2, w3 = WORKERS
        if name == "kill_worker":
            victim = w2 if self.beat_on is not w2 else w3
            with self.supervising:  # the supervisor must not start it again meanwhile
                killed = hosts.kill_host(victim)
                self.procs[f"worker-{victim.name}"].reap()
                self.procs[f"notify-{victim.name}"].reap()
            say(f"fault: {victim.name} killed ({killed} processes); back in 20 s")
            time.sleep(20)
            with self.supervising:
                self.start_worker(victim)
        elif name in ("cut_db", "cut_assistants"):
            target = DB if name == "cut_db" else ASSISTANTS
            victim = w3
            hosts.cut(victim, target)
            say(f"fault: {victim.name} cut off from {target.name} for 30 s")
            time.sleep(30)
            hosts.mend(victim, target)
        elif name == "restart_redis":
            say("fault: Redis restarted")
            self.procs["redis"].stop(signal.SIGTERM)
            self.start_redis()
        elif name == "restart_postgres":
            say("fault: PostgreSQL restarted (fast shutdown)")
            self.procs["postgres"].stop(signal.SIGINT, timeout=60)
            self.start_postgres()
        elif name == "move_beat":
            old = self.beat_on
            new = next(h for h in WORKERS if h is not old)
            self.procs["beat"].stop(signal.SIGKILL)
            say(f"fault: beat killed on {old.name}, started on {new.name}")
            self.start_beat(new)
        else:
            raise ValueError(name)
        self.events.append((start, time.time(), name))

    def keep_workers_up(self) -> None:
        """What the workers' supervisor does (systemd ``Restart=always``): start again a worker
        that exited (docs/django.md: one may exit when Redis goes away)."""
        with self.supervising:
            self._restart_exited()

    def supervise(self, stop: threading.Event) -> threading.Thread:
        """:meth:`keep_workers_up` every second until ``stop``, in a thread of its own."""

        def loop() -> None:
            while not stop.wait(1.0):
                try:
                    self.keep_workers_up()
                except Exception as exc:  # reported, and tried again in a second
                    say(f"supervisor: {exc!r}")

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return thread

    def _restart_exited(self) -> None:
        for host in WORKERS:
            procs = [self.procs.get(f"{kind}-{host.name}") for kind in ("worker", "notify")]
            exited = [p for p in procs if p and p.popen is not None and p.popen.poll() is not None]
            if exited:
                codes = ", ".join(str(p.popen.returncode) for p in exited if p.popen)
                say(f"supervisor: a worker on {host.name} exited ({codes}); started again")
                for proc in procs:
                    if proc and proc not in exited:
                        proc.stop()
                self.start_worker(host)

    def stop_all(self) -> None:
        with self.supervising:
            self._stop_all()

    def _stop_all(self) -> None:
        workers = [f"{kind}-{h.name}" for h in WORKERS for kind in ("worker", "notify")]
        for name in ["beat", *workers, "web", "langgraph", "redis"]:
            if name in self.procs:
                self.procs[name].stop()
        if "postgres" in self.procs:
            self.procs["postgres"].stop(signal.SIGINT)


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


@dataclass
class Phase:
    rate: float
    start: float = 0.0
    end: float = 0.0
    started: int = 0
    start_errors: int = 0
    faults: list[tuple[float, float, str]] = field(default_factory=list)
    #: Seconds at its start whose decisions are reported apart: the first requests of each
    #: gunicorn process and worker thread import, connect and fill their pools (the cluster's
    #: first phase only; a deployment in its steady state is warm).
    warmup: float = 0.0
    #: CPU seconds each host (and the driver, its reviewers included) used during the phase.
    cpu: dict[str, float] = field(default_factory=dict)


def cpu_now() -> dict[str, float]:
    import resource

    used = {h.name: hosts.cpu_seconds(h) for h in hosts.HOSTS}
    me = resource.getrusage(resource.RUSAGE_SELF)
    used["driver"] = me.ru_utime + me.ru_stime
    return used


def drive(
    cluster: Cluster,
    reviewers: Any,
    rate: float,
    seconds: float,
    faults: bool,
    seed: int,
    warmup: float = 0.0,
) -> Phase:
    """Start conversations at ``rate`` × 100,000 reviews a day for ``seconds`` (and until the
    faults are over), the faults in a thread of their own."""
    from django import db

    from bench.cluster import load

    phase = Phase(rate=rate, start=time.time(), warmup=warmup)
    cpu_start = cpu_now()
    per_second = rate * load.BASE_PER_DAY / 86400 / load.REVIEWS_PER_CONVERSATION
    rng = random.Random(seed)
    plan = fault_plan(seconds) if faults else []
    done = threading.Event()

    def inflict() -> None:
        for at, name in plan:
            while time.time() < phase.start + at:
                time.sleep(0.2)
            try:
                cluster.fault(name)
            except Exception as exc:  # a fault that could not be inflicted is reported, not fatal
                say(f"fault {name} failed: {exc!r}")
        done.set()

    injector = threading.Thread(target=inflict, daemon=True)
    if plan:
        injector.start()
    else:
        done.set()
    n = 0
    next_at = time.monotonic()
    hard_stop = time.time() + seconds + 600
    while (time.time() < phase.start + seconds or not done.is_set()) and time.time() < hard_stop:
        next_at += rng.expovariate(per_second)
        time.sleep(max(0.0, next_at - time.monotonic()))
        try:
            load.start_conversation(rng, n)
            phase.started += 1
        except Exception as exc:  # the database restarting: the gateway would retry; we count it
            phase.start_errors += 1
            if phase.start_errors <= 3:
                say(f"start refused: {type(exc).__name__}: {str(exc)[:120]}")
            db.close_old_connections()
            db.connections.close_all()
        n += 1
    phase.end = time.time()
    phase.cpu = {k: v - cpu_start.get(k, 0.0) for k, v in cpu_now().items()}
    phase.faults = [e for e in cluster.events if e[0] >= phase.start]
    return phase


def settle(cluster: Cluster, timeout: float) -> None:
    """Wait (bounded) until no run is queued or running and no decision waits to be applied."""
    from django import db

    from nitro_assistants.models import Decision, Run

    deadline = time.time() + timeout
    while time.time() < deadline:
        cluster.keep_workers_up()
        try:
            busy = Run.objects.filter(status__in=["queued", "running"]).count()
            waiting = Decision.objects.filter(outcome="pending").count()
        except Exception:
            db.connections.close_all()
            busy = waiting = -1
        if busy == 0 and waiting == 0:
            return
        time.sleep(2)
    say(f"still busy after {timeout:.0f}s of drain")


def latencies(
    posts: list[Any], since: float, until: float, lg_url: str, csv: Path | None = None
) -> tuple[list[ledger.Sample], dict[str, Any]]:
    """Decision-to-applied of every decision posted in [since, until): the POST's start to the
    resume run's end in the mirror, minus the server's own time (its run's created_at →
    updated_at)."""
    import requests
    from django.utils.dateparse import parse_datetime

    from nitro_assistants.models import Decision

    final: dict[int, float] = {}
    for post in posts:
        if (
            since <= post.at < until
            and post.status == 200
            and not post.pending
            and post.how == "api"
        ):
            final[post.review] = post.at
    rows = Decision.objects.filter(review_id__in=list(final), outcome="applied").select_related(
        "run", "review__thread"
    )
    samples: list[ledger.Sample] = []
    server_times: list[float] = []
    rows_out = ["posted_at,latency,server,queued,run_started,run_finished"]
    session = requests.Session()
    for decision in rows:
        run = decision.run
        if run is None or run.finished_at is None or not run.remote_run_id:
            continue
        remote = session.get(
            f"{lg_url}/threads/{decision.review.thread.thread_id}/runs/{run.remote_run_id}",
            timeout=10,
        )
        if not remote.ok:
            continue
        body = remote.json()
        created, updated = parse_datetime(body["created_at"]), parse_datetime(body["updated_at"])
        if created is None or updated is None:
            continue
        server = (updated - created).total_seconds()
        server_times.append(server)
        total = run.finished_at.timestamp() - final[decision.review_id]
        samples.append(ledger.Sample(final[decision.review_id], total - server))
        rows_out.append(
            f"{final[decision.review_id]:.3f},{total - server:.4f},{server:.4f},"
            f"{run.created_at.timestamp():.3f},{run.started_at.timestamp() if run.started_at else 0:.3f},"
            f"{run.finished_at.timestamp():.3f}"
        )
    if csv is not None:
        csv.write_text("\n".join(rows_out) + "\n")
    return samples, {"server_p50": ledger.percentile(server_times, 50)}


def queue_latencies(since: float, until: float) -> list[float]:
    import datetime

    from nitro_assistants.models import Run

    lo = datetime.datetime.fromtimestamp(since, datetime.UTC)
    hi = datetime.datetime.fromtimestamp(until, datetime.UTC)
    return [
        (started - created).total_seconds()
        for created, started in Run.objects.filter(
            created_at__gte=lo, created_at__lt=hi, started_at__isnull=False
        ).values_list("created_at", "started_at")
    ]


def report_phase(phase: Phase, reviewers: Any, cluster: Cluster) -> list[str]:
    import datetime

    from nitro_assistants.models import Decision, Review

    lo = datetime.datetime.fromtimestamp(phase.start, datetime.UTC)
    hi = datetime.datetime.fromtimestamp(phase.end, datetime.UTC)
    seconds = phase.end - phase.start
    csv = cluster.work / "logs" / f"latency-x{phase.rate:g}.csv"
    samples, extra = latencies(reviewers.posts, phase.start, phase.end, cluster.lg_url, csv)
    quiet_end = phase.faults[0][0] if phase.faults else phase.end
    warm_end = phase.start + phase.warmup
    warming = [s.latency for s in samples if s.at < warm_end]
    quiet = [s.latency for s in samples if warm_end <= s.at < quiet_end]
    queue = queue_latencies(phase.start, phase.end)
    reviews = Review.objects.filter(requested_at__gte=lo, requested_at__lt=hi).count()
    applied = Decision.objects.filter(
        decided_at__gte=lo, decided_at__lt=hi, outcome="applied"
    ).count()

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.0f} ms"

    lines = [
        f"rate ×{phase.rate:g} ({phase.rate * 100_000:,.0f} reviews/day asked), {seconds / 60:.1f} min",
        f"  conversations started {phase.started} ({phase.started / seconds:.2f}/s), refused {phase.start_errors}",
        f"  reviews requested {reviews} ({reviews / seconds:.2f}/s = {reviews / seconds * 86400:,.0f}/day); "
        f"decisions applied {applied} ({applied / seconds:.2f}/s)",
        "  decision→applied (API, minus server) before faults"
        + (f", after the first {phase.warmup:.0f} s" if phase.warmup else "")
        + f": n={len(quiet)} p50 {ms(ledger.percentile(quiet, 50))}"
        f" p99 {ms(ledger.percentile(quiet, 99))} max {ms(max(quiet, default=None))} (goal ≤ 91 ms at ×1)",
        *(
            [
                f"  decision→applied in the first {phase.warmup:.0f} s (processes warming up): n={len(warming)}"
                f" p50 {ms(ledger.percentile(warming, 50))} p99 {ms(ledger.percentile(warming, 99))}"
                f" max {ms(max(warming, default=None))}"
            ]
            if phase.warmup
            else []
        ),
        f"  decision→applied, whole phase: n={len(samples)} p50 {ms(ledger.percentile([s.latency for s in samples], 50))}"
        f" p99 {ms(ledger.percentile([s.latency for s in samples], 99))}; server's own p50 {ms(extra['server_p50'])}",
        f"  run queue latency (queued → started): n={len(queue)} p50 {ms(ledger.percentile(queue, 50))}"
        f" p99 {ms(ledger.percentile(queue, 99))}",
    ]
    lines.append(
        "  CPU used (cores busy on average; a host restarted in a fault counts from then): "
        + ", ".join(f"{k} {v / seconds:.2f}" for k, v in phase.cpu.items())
        + f"; all {sum(phase.cpu.values()) / seconds:.2f} of {os.cpu_count()}"
    )
    ends = [f[1] for f in phase.faults] + [phase.end]
    for i, (start, end, name) in enumerate(phase.faults):
        back = ledger.recovery(samples, end, GOAL_P99, until=ends[i + 1] + 60)
        after = [s.latency for s in samples if end <= s.at < end + 60]
        verdict = (
            "not within the run"
            if back is None
            else f"{back:.0f} s" + (" ✓" if back <= RECOVERY_GOAL else " ✗")
        )
        lines.append(
            f"  fault {name:<17} at +{start - phase.start:.0f}s for {end - start:.0f}s: back to p99 ≤ 91 ms after {verdict};"
            f" p99 in the minute after {ms(ledger.percentile(after, 99))}"
        )
    return lines


def the_ledger(cluster: Cluster) -> ledger.Ledger:
    import requests

    from nitro_assistants.models import Decision, Review, Run, Thread

    session = requests.Session()
    server_runs: dict[str, list[dict[str, Any]]] = {}
    live: dict[str, list[str]] = {}
    messages: dict[str, tuple[list[str], list[str]]] = {}
    for thread in Thread.objects.all().iterator():
        tid = str(thread.thread_id)
        runs: list[dict[str, Any]] = []
        offset = 0
        while offset < 1000:
            page = session.get(
                f"{cluster.lg_url}/threads/{tid}/runs",
                params={"limit": 100, "offset": offset},
                timeout=20,
            )
            if not page.ok:
                break
            got = page.json()
            runs += got
            if len(got) < 100:
                break
            offset += 100
        server_runs[tid] = runs
        state = session.get(f"{cluster.lg_url}/threads/{tid}/state", timeout=20)
        if state.ok:
            body = state.json()
            live[tid] = [i.get("id") for i in body.get("interrupts") or []]
            for task in body.get("tasks") or []:
                live[tid] += [i.get("id") for i in task.get("interrupts") or []]
            server_ids = [m.get("id") for m in (body.get("values") or {}).get("messages") or []]
            mirror_ids = [m.get("id") for m in (thread.values or {}).get("messages") or []]
            messages[tid] = (mirror_ids, server_ids)
    decisions = [
        {
            "review": d.review_id,
            "thread": str(d.review.thread.thread_id),
            "outcome": d.outcome,
            "match": {"reviewer_id": d.reviewer_id, "reviewed_at": d.decided_at.isoformat()},
        }
        for d in Decision.objects.select_related("review__thread")
    ]
    pending = [
        {
            "review": r["pk"],
            "thread": str(r["thread__thread_id"]),
            "interrupt_ids": r["interrupt_ids"],
        }
        for r in Review.objects.filter(status="pending").values(
            "pk", "thread__thread_id", "interrupt_ids"
        )
    ]
    mirror_runs = [
        {
            "id": str(r["id"]),
            "thread": str(r["thread__thread_id"]),
            "kind": r["kind"],
            "status": r["status"],
        }
        for r in Run.objects.values("id", "thread__thread_id", "kind", "status")
    ]
    (cluster.work / "logs" / "server-runs.json").write_text(json.dumps(server_runs, default=str))
    (cluster.work / "logs" / "mirror-decisions.json").write_text(json.dumps(decisions, default=str))
    audit = cluster.manage("nitro_assistants_audit", "verify")
    (cluster.work / "logs" / "audit-verify.log").write_text(audit.stdout + audit.stderr)
    return ledger.compute(
        decisions=decisions, server_runs=server_runs, mirror_runs=mirror_runs, pending=pending,
        live_interrupts=live, messages=messages, audit_ok=audit.returncode == 0,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print(
            "bench/cluster/run.py needs root (network namespaces): run it with sudo",
            file=sys.stderr,
        )
        return 2
    if args.teardown:
        removed = hosts.teardown()
        print("removed: " + (", ".join(removed) if removed else "nothing"))
        return 0
    hosts.teardown()

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, stop)
    cluster = Cluster(work=hosts.WORKDIR)
    stopping = threading.Event()
    cluster.work.mkdir(parents=True)
    out: list[str] = []
    reviewers = None
    try:
        cluster.build()
        cluster.supervise(stopping)
        os.environ.update(cluster.env | {"CLUSTER_NO_POOL": "1"})
        import django

        django.setup()
        from bench.cluster import load

        keys = load.seed(args.reviewers)
        reviewers = load.Reviewers(cluster.web_url, keys, seed=args.seed).start()
        phases = []
        for i, rate in enumerate(args.rates):
            say(
                f"load: ×{rate:g} for {args.minutes:g} min"
                + (" with faults" if args.faults else "")
            )
            phases.append(
                drive(
                    cluster,
                    reviewers,
                    rate,
                    args.minutes * 60,
                    args.faults,
                    args.seed + i,
                    warmup=WARMUP if i == 0 else 0.0,
                )
            )
            say("load stopped; draining")
            settle(cluster, args.drain * 60)
        reviewers.stop()
        settle(cluster, 60)
        for phase in phases:
            out += report_phase(phase, reviewers, cluster)
        out.append(f"reviewers: {len(reviewers.posts)} posts, {reviewers.abandoned} claimed and abandoned, "
                   f"{reviewers.bulked} bulk-approved; errors {dict(sorted(reviewers.errors.items()))}")  # fmt: skip
        result = the_ledger(cluster)
        out.append("ledger:")
        out += result.lines()
        out.append("ledger: " + ("OK" if result.ok else "FAILED"))
        print("\n".join(out), flush=True)
        return 0 if result.ok else 1
    finally:
        stopping.set()
        if reviewers is not None:
            reviewers._stop.set()
        args.logs.mkdir(parents=True, exist_ok=True)
        if (cluster.work / "logs").exists():
            shutil.copytree(cluster.work / "logs", args.logs, dirs_exist_ok=True)
        if out:
            (args.logs / "report.txt").write_text("\n".join(out) + "\n")
        try:
            cluster.stop_all()
        finally:
            hosts.teardown()


if __name__ == "__main__":
    sys.exit(main())
