"""Our `Assistants.run(..., known_thread=True)` against `langgraph_sdk`'s sync `runs.wait`.

Both run the same graph on the same threads of one real `langgraph dev` server, interleaved
(which goes first alternates every round), with the same request body. Prints the medians and
the ratio ours / SDK; the goal is ≤ 1.05. Prints figures only.

    .venv/bin/python bench/client_overhead.py [--runs 100] [--threads 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from langgraph_sdk import get_sync_client  # noqa: E402

from bench import langgraph_server  # noqa: E402
from nitro_assistants.client import Assistants  # noqa: E402

GRAPH = "plain"
USER_ID = "bench"


def timed(call: Callable[[str, str], None], thread_id: str, text: str) -> tuple[float, float]:
    """Wall time of one call, and the CPU time this process spent on it (the client's own work)."""
    started, cpu = time.perf_counter(), time.process_time()
    call(thread_id, text)
    return time.perf_counter() - started, time.process_time() - cpu


Timings = list[tuple[float, float]]


def measure(base_url: str, runs: int, threads: int) -> tuple[Timings, Timings]:
    ours = Assistants(base_url, "bench-key", user_id=USER_ID, auth="x-api-key")
    sdk = get_sync_client(url=base_url, api_key=None)
    metadata = {"user_id": USER_ID}
    thread_ids = [str(uuid.uuid4()) for _ in range(threads)]
    for thread_id in thread_ids:  # create each thread, and warm both clients' connections
        sdk.threads.create(thread_id=thread_id)
        ours.run(thread_id, GRAPH, [{"role": "user", "content": "reply: warm"}], known_thread=True)
        sdk.runs.wait(
            thread_id,
            GRAPH,
            input={"messages": [{"role": "user", "content": "reply: warm"}]},
            context={},
            metadata=metadata,
            config={"metadata": metadata},
        )

    def run_ours(thread_id: str, text: str) -> None:
        result = ours.run(
            thread_id, GRAPH, [{"role": "user", "content": text}], context={}, known_thread=True
        )
        assert result.reply == text.removeprefix("reply: "), result.raw

    def run_sdk(thread_id: str, text: str) -> None:
        values = sdk.runs.wait(
            thread_id,
            GRAPH,
            input={"messages": [{"role": "user", "content": text}]},
            context={},
            metadata=metadata,
            config={"metadata": metadata},
        )
        assert isinstance(values, dict), values

    ours_times: list[tuple[float, float]] = []
    sdk_times: list[tuple[float, float]] = []
    for i in range(runs):
        thread_id = thread_ids[i % threads]
        text = f"reply: round {i}"
        if i % 2 == 0:
            ours_times.append(timed(run_ours, thread_id, text))
            sdk_times.append(timed(run_sdk, thread_id, text))
        else:
            sdk_times.append(timed(run_sdk, thread_id, text))
            ours_times.append(timed(run_ours, thread_id, text))
    return ours_times, sdk_times


def report(runs: int, threads: int, ours_timings: Timings, sdk_timings: Timings) -> str:
    def ms(values: list[float], q: float) -> str:
        ordered = sorted(values)
        return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f}"

    ours, sdk = [w for w, _ in ours_timings], [w for w, _ in sdk_timings]
    ours_cpu, sdk_cpu = [c for _, c in ours_timings], [c for _, c in sdk_timings]
    median_ratio = statistics.median(a / b for a, b in zip(ours, sdk, strict=True))
    ratio_of_medians = statistics.median(ours) / statistics.median(sdk)
    lines = [
        f"`runs/wait` on graph `{GRAPH}`, {runs} runs each, interleaved over {threads} threads "
        f"(`langgraph dev`, in-memory runtime).",
        "",
        "| client | median ms | p10 ms | p90 ms | min ms | max ms | client CPU ms (median) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, values, cpu in (
        ("nitro_assistants `Assistants.run(known_thread=True)`", ours, ours_cpu),
        ("langgraph_sdk `get_sync_client().runs.wait`", sdk, sdk_cpu),
    ):
        lines.append(
            f"| {name} | {statistics.median(values) * 1000:.1f} | {ms(values, 0.1)} "
            f"| {ms(values, 0.9)} | {min(values) * 1000:.1f} | {max(values) * 1000:.1f} "
            f"| {statistics.median(cpu) * 1000:.2f} |"
        )
    verdict = "met" if median_ratio <= 1.05 else "**not met**"
    lines += [
        "",
        f"- median of the paired ratios ours / SDK: **{median_ratio:.3f}** (goal ≤ 1.05: {verdict})",
        f"- ratio of the medians: {ratio_of_medians:.3f}",
        f"- client CPU per run, ours / SDK: {statistics.median(ours_cpu) * 1000:.2f} ms / "
        f"{statistics.median(sdk_cpu) * 1000:.2f} ms (this process only: building the request, "
        "parsing the answer, and for ours reading the result)",
        "- the server's in-memory queue polls every 0.5 s, so most of each run is server time;",
        "  the wall-clock ratio measures what each client adds on top of it.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per client (default 100)")
    parser.add_argument("--threads", type=int, default=4, help="threads to spread runs over")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as workdir:
        server = langgraph_server(Path(workdir)).start()
        try:
            ours, sdk = measure(server.url, args.runs, max(1, args.threads))
        finally:
            server.stop()
    print(report(args.runs, args.threads, ours, sdk))
    return 0


if __name__ == "__main__":
    sys.exit(main())
