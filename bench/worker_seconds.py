"""Worker-seconds held per run of a 5-second model: RUN_MODE "wait" vs "background".

    .venv/bin/python bench/worker_seconds.py [--runs 2] [--seconds 5]

Starts its own ``langgraph dev`` with one graph (``slow``, defined below: a node that thinks for
``--seconds``) and runs the task bodies in this process, timing the time spent inside them: what a
Celery worker would be held for. "background" is measured in poll mode (a ``collect_run`` every
second until the run ends); with a webhook there is no poll at all, only the final read.
Uses the ``nitro_assistants_bench`` database (created and migrated if missing).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECONDS = float(os.environ.get("NITRO_BENCH_SECONDS", "5"))


def _slow_graph() -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def think(state: MessagesState) -> dict[str, Any]:
        time.sleep(SECONDS)
        return {"messages": [AIMessage(content=f"thought for {SECONDS:g}s")]}

    graph = StateGraph(MessagesState)
    graph.add_node("think", think)
    graph.add_edge(START, "think")
    graph.add_edge("think", END)
    return graph.compile()


if os.environ.get("NITRO_BENCH_GRAPH"):  # imported by langgraph dev
    slow = _slow_graph()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ["NITRO_BENCH_SECONDS"] = str(args.seconds)
    os.environ["NITRO_BENCH_GRAPH"] = "1"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ["NITRO_TEST_DB_NAME"] = os.environ.get(
        "NITRO_BENCH_DB_NAME", "nitro_assistants_bench"
    )

    from bench import langgraph_server
    from bench.sweep import ensure_database

    ensure_database(os.environ["NITRO_TEST_DB_NAME"])
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import override_settings

    from nitro_assistants import services, tasks

    call_command("migrate", verbosity=0)
    webhooks: list[str] = []
    tasks.run_thread.delay = lambda *a, **k: None  # timed here, not sent to a broker
    tasks.collect_run.apply_async = lambda *a, **k: None
    tasks.collect_run.delay = lambda run_pk, **k: webhooks.append(run_pk)

    from django.test.testcases import LiveServerThread, _StaticFilesHandler

    app_server = LiveServerThread("127.0.0.1", _StaticFilesHandler)
    app_server.daemon = True
    app_server.start()
    app_server.is_ready.wait()
    if app_server.error:
        raise app_server.error
    webhook_url = f"http://127.0.0.1:{app_server.port}/nitro/webhook/"

    workdir = Path(tempfile.mkdtemp(prefix="nitro-bench-"))
    server = langgraph_server(workdir, graphs={"slow": f"{Path(__file__).resolve()}:slow"})
    server.start()
    try:
        base: dict[str, Any] = {
            "BASE_URL": server.url,
            "USER_ID": "bench",
            "DEFINITIONS": {"slow": {"api_key": "bench", "assistant_id": "slow"}},
            "TIMEOUT": args.seconds * 4,
        }
        print(f"model run: {args.seconds:g}s; {args.runs} run(s) per mode")
        modes = [
            ("wait", {"RUN_MODE": "wait"}),
            ("background, polled", {"RUN_MODE": "background"}),
            ("background, webhook", {"RUN_MODE": "background", "WEBHOOK_URL": webhook_url}),
        ]
        for label, options in modes:
            with override_settings(NITRO_ASSISTANTS={**base, **options}):
                held, wall, calls, created = [], [], [], []
                for _ in range(args.runs):
                    run = services.start_run("slow", "think")
                    began = time.perf_counter()
                    t = time.perf_counter()
                    run = services.execute_run(run.pk)
                    inside, count = time.perf_counter() - t, 1
                    created.append(inside)
                    while not run.finished:
                        if "WEBHOOK_URL" in options:  # the server calls the app's webhook
                            deadline = time.monotonic() + args.seconds * 4
                            while str(run.pk) not in webhooks and time.monotonic() < deadline:
                                time.sleep(0.05)
                            wait = True
                        else:  # a poll task every second
                            time.sleep(1)
                            wait = False
                        t = time.perf_counter()
                        run = services.collect_run(run.pk, wait=wait)
                        inside += time.perf_counter() - t
                        count += 1
                    assert run.status == "succeeded", (run.status, run.error)
                    held.append(inside)
                    wall.append(time.perf_counter() - began)
                    calls.append(count)
                print(
                    f"{label:>20}: worker-seconds held per run {sum(held) / len(held):6.3f}s "
                    f"in {sum(calls) / len(calls):.1f} task runs "
                    f"(first task run: {sum(created) / len(created):.3f}s) "
                    f"(wall {sum(wall) / len(wall):.2f}s)"
                )
    finally:
        server.stop()
        app_server.terminate()


if __name__ == "__main__":
    main()
