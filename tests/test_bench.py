"""bench/ stands on the package, not on the test suite: it imports nothing from tests/."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from bench.flow_cost import FILED_AT, FLOW_ROW, ONE_RESUME, other_commit

BENCH = Path(__file__).resolve().parents[1] / "bench"


def imported_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``source``, wherever it is written (a function too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def from_tests(source: str) -> list[tuple[int, str]]:
    return [(line, m) for line, m in imported_modules(source) if m.split(".")[0] == "tests"]


def test_the_check_sees_every_way_of_importing_tests() -> None:
    source = (
        "import tests.celery_app\n"
        "from tests.langgraph_server import LangGraphServer\n"
        "def main():\n    import tests\n"
        "import testsuite, bench.tests\n"
    )
    assert from_tests(source) == [
        (1, "tests.celery_app"),
        (2, "tests.langgraph_server"),
        (4, "tests"),
    ]


def test_no_bench_file_imports_from_tests() -> None:
    files = sorted(BENCH.rglob("*.py"))
    assert files, BENCH
    found = {
        f"{path.name}:{line}": module
        for path in files
        for line, module in from_tests(path.read_text(encoding="utf-8"))
    }
    assert found == {}


def test_the_flow_row_is_read_as_this_bench_and_the_filed_at_commit_print_it() -> None:
    # This bench's row (our CPU, statements, PostgreSQL's CPU) and c62fc2f's (no PostgreSQL).
    ours = "| call | ... |\n| **a flow** | **13.96** | **16** | **7.33** |\n"
    theirs = "| `services.decide` (approve) | 4.76 | 7 |\n| **a flow** | **42.72** | **34** |\n"
    assert [m.groups() for m in map(FLOW_ROW.search, (ours, theirs)) if m] == [
        ("13.96", "16"),
        ("42.72", "34"),
    ]
    assert FLOW_ROW.search("| `services.start_run` | 0.67 | 1 | 0.67 |") is None


def test_the_filed_at_commit_s_bench_takes_what_against_passes_it(tmp_path: Path) -> None:
    """``flow_cost --against`` runs the commit issue 21 was filed against with its own bench: it
    must be in the history, and its bench must take the arguments and print the row read."""
    root = BENCH.parent
    found = subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{FILED_AT}^{{commit}}"])
    if found.returncode:
        pytest.skip(f"{FILED_AT} is not in this clone's history (a shallow clone)")
    source = (other_commit(FILED_AT, tmp_path / "then") / "bench" / "flow_cost.py").read_text()
    for option in ("--flows", *ONE_RESUME[::2]):
        assert f'"{option}"' in source, option
    assert '"| **a flow** | **' in source
