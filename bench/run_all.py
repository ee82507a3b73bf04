"""Run every benchmark in bench/ (each as a subprocess) and write their output to docs/benchmarks.md.

.venv/bin/python bench/run_all.py            # full runs
.venv/bin/python bench/run_all.py --quick    # fewer runs: QUICK_ARGS (e.g. throughput --threads 40)

The part of docs/benchmarks.md between NOTES_START and NOTES_END is written by hand (what the
figures mean for a deployment) and is written back as it was; everything else is regenerated.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUTPUT = ROOT / "docs" / "benchmarks.md"
SKIP = {"__init__.py", "run_all.py"}
NOTES_START = "<!-- notes: written by hand; bench/run_all.py keeps this part as it is -->"
NOTES_END = "<!-- end of notes -->"
QUICK_ARGS = {
    "audit.py": ["--events", "100000", "--decisions", "60"],
    "client_overhead.py": ["--runs", "10"],
    "decision_latency.py": ["--flows", "10"],
    "flow_cost.py": ["--flows", "10", "--rounds", "1", "--resumes", "60", "--repeats", "1"],
    "throughput.py": ["--threads", "40"],
}
#: Benches run more than once: the arguments added, and why (each run gets its own section).
VARIANTS: dict[str, list[tuple[list[str], str]]] = {
    "flow_cost.py": [
        (
            ["--against", "c62fc2f"],
            "With the flow of the commit issue 21 was filed against (`c62fc2f`: no review rule, "
            "no claim, no audit chain) measured in the same run, before each round: the issue's "
            "CPU goal, half of that flow's with all three on, is a ratio of at most 0.5 to it, "
            "which the machine's swing from day to day does not move.",
        ),
    ],
    "throughput.py": [
        ([], ""),
        (
            ["--concurrency", "40", "--worker-threads", "20"],
            "Like for like at the server's capacity: one flow per Celery worker thread, no "
            "request cap, against as many SDK threads (at 20 in flight the SDK side already "
            "keeps the server's 10 job slots busy).",
        ),
        (
            ["--server-cpu", "0"],
            "The server pinned to one core on both sides (`taskset`), as a deployed Agent "
            "Server has a host of its own; everything else shares both cores. Unpinned, the "
            "server runs slower when other processes share its cores, and so does the SDK side "
            "alone: pinned, what is left is whether the Celery side has the CPU it needs "
            "(the cores-busy figure).",
        ),
    ],
}


def benches() -> list[Path]:
    return sorted(
        p for p in BENCH.glob("*.py") if p.name not in SKIP and not p.name.startswith("_")
    )


def arguments(path: Path, quick: bool, variant: list[str]) -> list[str]:
    return [*(QUICK_ARGS.get(path.name, []) if quick else []), *variant]


def run(path: Path, args: list[str]) -> tuple[int, str, float]:
    command = [sys.executable, str(path), *args]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    output = done.stdout.strip()
    if output and "\n|---" not in output and not output.startswith("|"):
        output = f"```text\n{output}\n```"  # plain text: keep its layout
    if done.returncode != 0:
        output += f"\n\n**Failed with exit code {done.returncode}:**\n\n```\n{done.stderr.strip()[-4000:]}\n```"
    return done.returncode, output, time.monotonic() - started


def kept_notes(*paths: Path) -> str:
    """The hand-written notes of the first of ``paths`` that has them, markers included."""
    for path in paths:
        text = path.read_text() if path.exists() else ""
        start, end = text.find(NOTES_START), text.find(NOTES_END)
        if 0 <= start < end:
            return text[start : end + len(NOTES_END)]
    return ""


def write(output: Path, head: str, sections: list[str]) -> None:
    """Write the generated ``head`` and ``sections`` to ``output``, keeping its notes (or, for a
    new file, those of docs/benchmarks.md)."""
    notes = kept_notes(output, OUTPUT)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(head + (f"{notes}\n\n" if notes else "") + "\n".join(sections))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs where a bench allows it")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()

    sections = []
    failed = 0
    for path in benches():
        summary = (path.read_text().split('"""')[1].strip().splitlines() or [""])[0]
        for variant, why in VARIANTS.get(path.name, [([], "")]):
            given = arguments(path, args.quick, variant)
            print(f"running {' '.join([path.name, *given])} …", flush=True)
            code, output, seconds = run(path, given)
            failed += code != 0
            doc = summary + (f"\n\n{why}" if why else "")
            title = f"`{' '.join([f'bench/{path.name}', *variant])}`"
            sections.append(
                f"## {title}\n\n{doc}\n\n{output}\n\n"
                f"_`{' '.join(['.venv/bin/python', f'bench/{path.name}', *given])}`"
                f" took {seconds:.0f} s._\n"
            )
            print(output, flush=True)

    head = (
        "# Benchmarks\n\n"
        "Written by `bench/run_all.py`; each bench starts its own `langgraph dev` server "
        "(in-memory runtime, scripted model) and prints figures only, no assertions.\n\n"
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()} "
        f"({platform.system()}, Python {platform.python_version()}), {os.cpu_count()} cores "
        "that each bench's server, PostgreSQL, Redis and processes all share"
        f"{', quick mode' if args.quick else ''}.\n\n"
    )
    write(args.output, head, sections)
    print(
        f"wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
