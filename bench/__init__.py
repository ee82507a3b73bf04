"""Benchmarks: each module runs on its own (``.venv/bin/python bench/<name>.py``) and prints figures.

Their servers and workers are the package's launchers (:mod:`nitro_assistants.testing.launchers`),
as the test suite's are. They run the test suite's graphs (tests/graphs/agents.py) and Django
project (``tests.settings``, ``tests.celery_app``), named by path and module name: nothing in
bench/ imports from tests/ (tests/test_bench.py checks).
"""

from __future__ import annotations

from pathlib import Path

from nitro_assistants.testing.launchers import LangGraphServer

ROOT = Path(__file__).resolve().parents[1]
AGENTS = ROOT / "tests" / "graphs" / "agents.py"
#: The test suite's graphs, as ``langgraph.json`` names them.
GRAPHS = {
    name: f"{AGENTS}:{name}"
    for name in ("walkthrough", "tools", "per_call", "plain", "interactions")
}


def langgraph_server(
    workdir: Path, port: int = 0, cpus: str = "", graphs: dict[str, str] | None = None
) -> LangGraphServer:
    """A ``langgraph dev`` of its own in ``workdir`` running ``graphs`` (default: the test
    suite's), with this checkout on its import path; ``cpus`` pins it (``taskset -c``)."""
    return LangGraphServer(
        workdir=workdir, graphs=graphs or GRAPHS, dependencies=[str(ROOT)], port=port, cpus=cpus
    )
