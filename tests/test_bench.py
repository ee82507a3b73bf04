"""bench/ stands on the package, not on the test suite: it imports nothing from tests/."""

from __future__ import annotations

import ast
from pathlib import Path

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
    files = sorted(BENCH.glob("*.py"))
    assert files, BENCH
    found = {
        f"{path.name}:{line}": module
        for path in files
        for line, module in from_tests(path.read_text(encoding="utf-8"))
    }
    assert found == {}
