"""Decision-to-applied latency on an idle system: from the reviewer's POST in the admin to the resume applied, minus the server's own time for it.

    .venv/bin/python bench/decision_latency.py [--flows 30] [--warm-up 3]

Everything is real and in a process of its own where a deployment has one: a ``langgraph dev``
(in-memory runtime) running the ``tools`` graph of tests/graphs/agents.py, a scratch PostgreSQL
database (created and dropped), Redis (``NITRO_BENCH_BROKER_URL``, default
``redis://127.0.0.1:6379/3``, a queue of its own), one ``celery worker`` (threads pool, the test
project's app and settings, at INFO) and the project's Django admin served over HTTP by Django's
threaded WSGI server (the live server of Django's tests) in this process. A staff reviewer (view
permissions and ``decide_review``, not a superuser) logs in through the admin's login form.

For each of ``--flows`` flows, one at a time with nothing else of ours going on:
``services.start_run`` ("Can I move my appointment to Tuesday?") and the worker runs it until
its review is pending; the reviewer opens the review screen (a GET, which claims it), then posts
its decide form as a browser does: every field the form holds, as rendered, and the one-click
approve button (``_approve``), urlencoded, with the session and CSRF cookies; then follows the
redirect. The flow ends when the worker's ``resume_thread`` task has finished.

The timestamps are on the one clock every process here shares (``time.time()``, the server's
run records, the worker's log):

- **the end**: the worker's ``Task … succeeded in …s`` line: written once the task returned,
  after its transaction committed, so the applied decision is there for everyone to read; to
  the millisecond (the log's resolution), and read from the log, so nothing here polls the
  database meanwhile. ``Decision.applied_at`` would not do: it is set before the mirror and the
  evidence are written and before the commit.
- **the server's own time**: the remote run's ``created_at`` → ``updated_at`` (``GET
  /threads/{id}/runs/{run_id}``), from the server storing the resume's run to marking it done.
  Most of it is the run waiting for the in-memory runtime's scheduler, which looks for pending
  runs every 0.5 s when idle (``Runs.next``, ``run_wait_time_ms`` in its log), then the graph
  (the tool and the scripted model). What the server does before storing the run (reading the
  request, finding the thread) and after marking it done (the stream's last events) stays on
  our side: if anything, the latency is overstated. The server's CPU would not do: its time is
  mostly that wait, which uses none.

The parts, each from the end of the one before:

1. **POST handling**: the POST sent → the ``resume_thread`` task about to be published
   (Celery's ``before_task_publish``, in the site's thread, from the decision's ``on_commit``):
   the request, the admin view, ``services.decide`` and its commit. (Not
   ``after_task_publish``: the worker may start the task before the site's thread runs again.)
2. **queue wait**: → the worker starts the task (the ``succeeded`` line's time minus the run
   time it gives, a millisecond early at most): sending to Redis, the worker's consumer, its
   pool.
3. **worker to server**: → the server stored the run: the task's statements before the request
   (the attempt counted and committed, the decision locked), building the request, sending it,
   the server reading it.
4. **server**: as above, subtracted.
5. **after-server recording**: the run done → the task's end: the stream's end reaching the
   worker, the applied decision, the mirror and the evidence recorded, the commit.

The latency is the end minus the POST's start minus the server's part (goal: at most 50 ms at the
median). Also printed: the POST's round trip as the reviewer sees it; the CPU this process
spent in the POST (the site, and the reviewer's client) and the worker spent per flow; and, with
the machine's load average, how long the processes on the path were runnable but waiting for a
CPU (``/proc/PID/task/*/schedstat``: this process during the POST, then the worker and this
database's PostgreSQL backends until the task's end), which is what other work on a busy
machine added (an indication, not a part to subtract: threads of one process, and the backend
of the redirected page, may wait at the same time). Figures only, no assertions.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import langgraph_server  # noqa: E402
from bench.throughput import (  # noqa: E402
    GRAPH,
    MESSAGE,
    cpu_seconds,
    create_database,
    drop_database,
    sending_app,
    wait_workers_ready,
)
from nitro_assistants.testing.launchers import CeleryWorker, LangGraphServer  # noqa: E402

PASSWORD = "bench-reviewer"
#: How a browser sends a form without files.
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
RESUME_TASK = "nitro_assistants.resume_thread"
GOAL = 0.050  # seconds, the median latency issue 21 sets
PARTS = [
    "POST handling",
    "queue wait",
    "worker to server",
    "server (subtracted)",
    "after-server recording",
]
#: ``[2026-12-01 12:00:00,123: INFO/MainProcess] Task name[id] succeeded in 0.05s: 'applied'``
SUCCEEDED = re.compile(
    r"^\[(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): \w+/[^\]]*\] "
    r"Task (?P<name>[\w.]+)\[(?P<id>[0-9a-f-]+)\] succeeded in (?P<seconds>[0-9.e-]+)s"
)


class FormFields(HTMLParser):
    """What a browser submits of the first ``<form class="...{css}...">`` on a page: each named
    ``input`` (checkboxes and radios only when checked, no submit buttons), ``textarea`` and
    ``select`` (its selected option, else its first) with the value it was rendered with."""

    def __init__(self, css: str) -> None:
        super().__init__()
        self.css = css
        self.fields: list[tuple[str, str]] = []
        self._depth = 0  # inside the form while > 0
        self._done = False
        self._textarea: tuple[str, list[str]] | None = None
        self._select: tuple[str, list[str], list[str]] | None = None  # name, selected, first

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        named = self.css in a.get("class", "").split() or a.get("id") == self.css
        if tag == "form" and not self._done and named:
            self._depth = 1
            return
        if not self._depth:
            return
        if tag == "form":
            self._depth += 1
        elif tag == "input" and a.get("name") and "disabled" not in a:
            kind = a.get("type", "text").lower()
            if kind in ("submit", "button", "image", "reset", "file"):
                return
            if kind in ("checkbox", "radio") and "checked" not in a:
                return
            self.fields.append((a["name"], a.get("value", "on" if kind == "checkbox" else "")))
        elif tag == "textarea" and a.get("name"):
            self._textarea = (a["name"], [])
        elif tag == "select" and a.get("name"):
            self._select = (a["name"], [], [])
        elif tag == "option" and self._select is not None:
            value = a.get("value", "")
            if not self._select[2]:
                self._select[2].append(value)
            if "selected" in a:
                self._select[1].append(value)

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._textarea[1].append(data)

    def handle_endtag(self, tag: str) -> None:
        if not self._depth:
            return
        if tag == "textarea" and self._textarea is not None:
            name, text = self._textarea
            # The HTML parser keeps the newline a browser drops after <textarea>.
            self.fields.append((name, "".join(text).removeprefix("\n")))
            self._textarea = None
        elif tag == "select" and self._select is not None:
            name, selected, first = self._select
            self.fields += [(name, v) for v in selected or first]
            self._select = None
        elif tag == "form":
            self._depth -= 1
            self._done = not self._depth


def form_fields(html: str, css: str) -> list[tuple[str, str]]:
    parser = FormFields(css)
    parser.feed(html)
    if not parser.fields:
        raise RuntimeError(f'no <form class="{css}"> with fields on the page')
    return parser.fields


def log_time(text: str) -> float:
    """A Celery log timestamp (local time, milliseconds) as seconds since the epoch."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def succeeded(log: Path, task_id: str) -> tuple[float, float] | None:
    """(started, ended) of task ``task_id`` from the worker's log: ended is its ``succeeded``
    line's time, started that minus the run time the line reports."""
    for line in log.read_text(errors="replace").splitlines():
        found = SUCCEEDED.match(line)
        if found and found["id"] == task_id:
            ended = log_time(found["at"])
            return ended - float(found["seconds"]), ended
    return None


def live_server() -> Any:
    """The project's Django site over HTTP (Django's threaded WSGI server, as its live-server
    tests use), in a thread of this process; ``.port`` is where it listens."""
    from django.test.testcases import LiveServerThread, _StaticFilesHandler

    server = LiveServerThread("127.0.0.1", _StaticFilesHandler)
    server.daemon = True
    server.start()
    server.is_ready.wait()
    if server.error:
        raise server.error
    return server


def reviewer() -> Any:
    """A staff user who may look at the queue and decide, and nothing else."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("bench-reviewer", password=PASSWORD, is_staff=True)
    names = ["view_thread", "view_run", "view_review", "view_decision", "view_event"]
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="nitro_assistants", codename__in=[*names, "decide_review"]
        )
    )
    return user


def log_in(http: Any, base: str, username: str) -> None:
    """Through the admin's login form, as a browser does (its CSRF cookie and token)."""
    login = f"{base}/admin/login/?next=/admin/"
    page = http.get(login)
    fields = {**dict(form_fields(page.text, "login-form")), "username": username}
    done = http.post(login, data={**fields, "password": PASSWORD}, headers={"Referer": login})
    if done.status_code != 302 or "sessionid" not in http.cookies:
        raise RuntimeError(f"log-in failed: {done.status_code}")


def wait_for(check: Any, what: str, timeout: float = 60.0, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise RuntimeError(f"timed out waiting for {what}")


def iso_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def cpu_waits(pids: list[int]) -> float:
    """Seconds the threads of ``pids`` have so far been runnable but waiting for a CPU
    (``/proc/PID/task/TID/schedstat``): what a busy machine adds to a latency."""
    total = 0
    for pid in pids:
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                total += int(stat.read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return total / 1e9


@dataclass
class Bench:
    """What the flows run against: the reviewer's HTTP session on the site (``base``), the
    Assistants server, the worker, and the ``resume_thread`` tasks this process published."""

    http: Any
    base: str
    server: LangGraphServer
    worker: CeleryWorker
    db_name: str
    published: dict[str, float] = field(default_factory=dict)

    def on_publish(self, sender: Any = None, headers: Any = None, **_: Any) -> None:
        """Celery's ``before_task_publish``, in the thread that sent it (the site's)."""
        if sender == RESUME_TASK and headers:
            self.published[headers["id"]] = time.time()

    def backends(self) -> list[int]:
        """The PostgreSQL backends of this database (the site's, the worker's, this process's)."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.db_name])
            return [row[0] for row in cursor.fetchall()]

    def paused_review(self) -> Any:
        """A new thread, run by the worker until its review is pending."""
        from nitro_assistants import services
        from nitro_assistants.models import Review

        run = services.start_run(GRAPH, MESSAGE)
        return wait_for(
            lambda: Review.objects.filter(run=run, status=Review.Status.PENDING).first(),
            f"the review of run {run.pk}",
        )

    def flow(self) -> dict[str, float]:
        """One flow, paused then approved in the admin: its parts in seconds."""
        import httpx
        from django.urls import reverse

        from nitro_assistants.models import Decision

        review = self.paused_review()
        screen = self.base + reverse("admin:nitro_assistants_review_review", args=[review.pk])
        page = self.http.get(screen)  # opening it claims it
        page.raise_for_status()
        button = re.search(
            r'<input type="submit" class="nitro-approve" name="_approve" '
            r'value="([^"]*)"',
            page.text,
        )
        if button is None:
            raise RuntimeError("the review screen offers no one-click approve")
        body = urlencode(
            [*form_fields(page.text, "nitro-decide"), ("_approve", unescape(button[1]))]
        )
        time.sleep(0.2)  # idle: the run's task and the page's requests are over
        self.published.clear()
        assert self.worker.process is not None
        worker_pid, backends = self.worker.process.pid, self.backends()
        ours = [os.getpid(), worker_pid, *backends]
        waits, worker_cpu = cpu_waits(ours), cpu_seconds(worker_pid)
        own_cpu, began = time.process_time(), time.time()
        posted = self.http.post(screen, content=body, headers={"Referer": screen, **FORM})
        answered, post_cpu = time.time(), time.process_time() - own_cpu
        post_waits = cpu_waits(ours) - waits
        if posted.status_code != 302:
            raise RuntimeError(f"the decision POST answered {posted.status_code}")
        # From here on this process only follows the redirect and reads the worker's log (no
        # statements of its own while the worker works): its waits are not on the path.
        waits = cpu_waits([worker_pid, *backends])
        self.http.get(httpx.URL(screen).join(posted.headers["location"]))  # as a browser does
        task_id, sent = next(iter(self.published.items()))
        log = self.worker.log_path
        started, ended = wait_for(
            lambda: succeeded(log, task_id), f"task {task_id}'s end", every=0.005
        )
        worker_waits = cpu_waits([worker_pid, *backends]) - waits
        worker_cpu = cpu_seconds(worker_pid) - worker_cpu
        decision = Decision.objects.select_related("run").get(review=review)
        if decision.outcome != Decision.Outcome.APPLIED or decision.run is None:
            raise RuntimeError(f"decision {decision.pk}: {decision.outcome} {decision.error}")
        thread_id = review.thread.thread_id
        remote_id = decision.run.remote_run_id
        remote = httpx.get(f"{self.server.url}/threads/{thread_id}/runs/{remote_id}").json()
        created, updated = iso_time(remote["created_at"]), iso_time(remote["updated_at"])
        return {
            "POST handling": sent - began,
            "queue wait": started - sent,
            "worker to server": created - started,
            "server (subtracted)": updated - created,
            "after-server recording": ended - updated,
            "total": ended - began,
            "latency": ended - began - (updated - created),
            "POST round trip": answered - began,
            "POST CPU": post_cpu,
            "worker CPU": worker_cpu,
            "waited for a CPU": post_waits + worker_waits,
        }


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=30, help="flows measured (default 30)")
    parser.add_argument("--warm-up", type=int, default=3, help="flows before (default 3)")
    args = parser.parse_args()

    db_name = f"nitro_bench_latency_{os.getpid()}"
    queue = f"nitro-bench-latency-{uuid.uuid4().hex[:8]}"
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "NITRO_TEST_DB_NAME": db_name,
            "NITRO_TEST_BROKER_URL": os.environ.get(
                "NITRO_BENCH_BROKER_URL", "redis://127.0.0.1:6379/3"
            ),
            "NITRO_TEST_QUEUE": queue,
        }
    )
    create_database(db_name)
    workdir = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    server = langgraph_server(workdir / "server")
    worker: CeleryWorker | None = None
    site: Any = None
    figures: list[dict[str, float]] = []
    loads: list[float] = []
    try:
        server.start()
        os.environ["NITRO_TEST_ASSISTANTS_URL"] = server.url
        import django

        django.setup()
        import logging

        logging.getLogger("nitro_assistants").setLevel(logging.ERROR)
        import httpx
        from celery import signals
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        app = sending_app()
        # INFO: the worker logs each task's end (and its run time), which is what ends a flow.
        worker = CeleryWorker(
            app="tests.celery_app", queue=queue, log_dir=workdir, loglevel="INFO", cwd=ROOT
        ).start()
        wait_workers_ready(app, queue, 1)
        site = live_server()
        base = f"http://127.0.0.1:{site.port}"
        user = reviewer()
        loads.append(os.getloadavg()[0])
        with httpx.Client(timeout=60) as http:
            log_in(http, base, user.username)
            bench = Bench(http=http, base=base, server=server, worker=worker, db_name=db_name)
            signals.before_task_publish.connect(bench.on_publish, weak=False)
            for i in range(args.warm_up + max(1, args.flows)):
                flow = bench.flow()
                if i >= args.warm_up:
                    figures.append(flow)
        loads.append(os.getloadavg()[0])
    finally:
        if site is not None:
            site.terminate()
        if worker is not None:
            worker.stop()
        server.stop()
        from django.db import connections

        connections.close_all()
        drop_database(db_name)

    def ms(name: str, share: float = 0.5) -> str:
        return f"{1000 * percentile([f[name] for f in figures], share):.0f}"

    median = percentile([f["latency"] for f in figures], 0.5)
    verdict = "met" if median <= GOAL else "**not met**"
    print(
        f"{len(figures)} flows one at a time (graph `{GRAPH}`, after {args.warm_up} to warm up): "
        "the reviewer's one-click approve posted to the admin over HTTP → Redis → one Celery "
        "worker (threads pool) → `langgraph dev` → recorded. Load average of the machine "
        f"({os.cpu_count()} cores) {loads[0]:.1f} before, {loads[-1]:.1f} after.\n"
    )
    print(
        "- latency, the POST sent → the worker's task done, minus the server's own time: "
        f"median **{ms('latency')} ms** (goal ≤ {1000 * GOAL:.0f} ms: {verdict}), "
        f"p90 {ms('latency', 0.9)} ms, min {ms('latency', 0)} ms, max {ms('latency', 1)} ms"
    )
    print(
        f"- with the server's time: median {ms('total')} ms, p90 {ms('total', 0.9)} ms; the POST's "
        f"round trip as the reviewer sees it: median {ms('POST round trip')} ms"
    )
    print(
        f"- CPU per flow, median: this process during the POST (the site and the reviewer's "
        f"client) {ms('POST CPU')} ms, the worker {ms('worker CPU')} ms"
    )
    print(
        "- runnable but waiting for a CPU on the path (this process during the POST, the worker "
        "and this database's PostgreSQL backends until the task's end): median "
        f"{ms('waited for a CPU')} ms, p90 {ms('waited for a CPU', 0.9)} ms, what the machine's "
        "other load added (threads of a process may wait at once: not to be subtracted)\n"
    )
    print("| part | median ms | p90 ms | mean ms |")
    print("|---|---:|---:|---:|")
    for part in PARTS:
        values = [f[part] for f in figures]
        print(
            f"| {part} | {1000 * percentile(values, 0.5):.1f} | "
            f"{1000 * percentile(values, 0.9):.1f} | {1000 * statistics.mean(values):.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
