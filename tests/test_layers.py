"""The package's import graph: no cycles, layers that only point down, and no Django below the
services (DESIGN.md "Layers"). Every import counts, including ones written inside functions.
And the hand-written SQL's one home: only ``services/sql/`` touches a database connection."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "nitro_assistants"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

#: Modules (and everything below them) that must never import Django, directly or through the
#: package's own modules they import.
DJANGO_FREE = (
    "nitro_assistants.client",
    "nitro_assistants.rules",
    "nitro_assistants.policy_rules",
    "nitro_assistants.grant_rules",
    "nitro_assistants.policies",  # its former name, an alias
    "nitro_assistants.exceptions",
    "nitro_assistants.redaction",
    "nitro_assistants.previews",
    "nitro_assistants.dataset_formats",
    # bench/ and host tests start servers with it before (or without) Django is set up.
    "nitro_assistants.testing.launchers",
)

#: Layers, top first: a module may import its own layer and those below it, never above.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # The test double and the launchers: used by tests (ours and a host's), never by the app.
    ("testing", ("nitro_assistants.testing",)),
    (
        "entry points",
        (
            "nitro_assistants.admin",
            "nitro_assistants.api",
            "nitro_assistants.management",
            "nitro_assistants.views",
            "nitro_assistants.urls",
            # Slack's interaction endpoint and the inbound e-mail receiver.
            "nitro_assistants.integrations",
            "nitro_assistants.apps",
            "nitro_assistants.admin_apps",
            "nitro_assistants.admin_site",
            "nitro_assistants.checks",
            "nitro_assistants.receivers",
            "nitro_assistants.templatetags",
        ),
    ),
    ("tasks", ("nitro_assistants.tasks",)),
    ("services", ("nitro_assistants.services",)),
    # The hand-written statements (and the only code that touches a connection): below every
    # service, so a statement never calls back into one.
    ("sql", ("nitro_assistants.services.sql",)),
    # Reading the mirror without changing it, for the admin and the API alike.
    ("readers", ("nitro_assistants.conversation",)),
    # ``nitro_assistants`` itself: the ``assistants()`` registry accessor and ``operation``.
    ("the package's facade", (PACKAGE,)),
    (
        "models",
        (
            "nitro_assistants.models",
            "nitro_assistants.signals",
            "nitro_assistants.conf",
            # What the database cannot store (NUL, lone surrogates): for the admin and the API.
            "nitro_assistants.validators",
            # How a thread is described for people (THREAD_SUBJECT): computed as a Thread saves.
            "nitro_assistants.subjects",
            # The REDACT setting applied to copies of what reviewers read.
            "nitro_assistants.redacting",
            "nitro_assistants.redaction_setting",
        ),
    ),
    ("agent", ("nitro_assistants.agent",)),
    # ``hashchain``: the audit trail's hash chain, pure (canonical content, links, the walk).
    (
        "rules",
        (
            "nitro_assistants.rules",
            "nitro_assistants.policy_rules",
            "nitro_assistants.grant_rules",
            "nitro_assistants.policies",
            "nitro_assistants.operations",
            "nitro_assistants.hashchain",
            # What a reviewer must not read: the redactors, pure.
            "nitro_assistants.redaction",
            # What a reviewer must have been shown: collapse thresholds and parts, pure.
            "nitro_assistants.previews",
            # Decided reviews as dataset lines (JSONL, OpenAI, LangSmith), pure.
            "nitro_assistants.dataset_formats",
        ),
    ),
    (
        "client",
        ("nitro_assistants.client", "nitro_assistants.exceptions"),
    ),
]


def module_name(path: Path, root: Path = ROOT, package: str = PACKAGE) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    return {
        module_name(path, root, package): path
        for path in sorted(root.rglob("*.py"))
        if "migrations" not in path.parts
    }


def imported(path: Path, name: str, known: set[str]) -> Iterator[str]:
    """Every module ``path`` imports (anywhere in it, functions included); ``from X import Y``
    names ``X.Y`` when that is a module of ours."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                yield candidate if candidate in known else source


def graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    found = modules(root, package)
    known = set(found)
    edges: dict[str, set[str]] = {}
    for name, path in found.items():
        edges[name] = {
            target
            for target in imported(path, name, known)
            if target == "django" or target.startswith("django.") or target in known
        }
        edges[name].discard(name)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each import cycle once (as found by a depth-first walk)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in edges:
                continue
            if state.get(target) == 1:
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def layer_of(module: str) -> int:
    best, rank = -1, len(LAYERS)
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            below = prefix != PACKAGE and module.startswith(prefix + ".")  # the root: itself only
            if (module == prefix or below) and len(prefix) > best:
                best, rank = len(prefix), index
    return rank


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(graph())
    assert not found, "Import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def test_imports_only_point_down() -> None:
    wrong = []
    for source, targets in graph().items():
        for target in targets:
            if target.startswith("django"):
                continue
            if layer_of(target) < layer_of(source):
                wrong.append(
                    f"{source} ({LAYERS[layer_of(source)][0]}) imports {target} "
                    f"({LAYERS[layer_of(target)][0]})"
                )
    assert not wrong, "Imports that point up:\n" + "\n".join(sorted(wrong))


def test_services_never_import_tasks() -> None:
    edges = graph()
    offenders = sorted(
        source
        for source, targets in edges.items()
        if source.startswith("nitro_assistants.services") and "nitro_assistants.tasks" in targets
    )
    assert offenders == [], "services enqueue by task name (services.enqueue), never import tasks"


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        for target in edges.get(node, ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


@pytest.mark.parametrize("root", DJANGO_FREE)
def test_the_client_and_the_rules_import_no_django(root: str) -> None:
    edges = graph()
    for module in (m for m in edges if m == root or m.startswith(root + ".")):
        django = sorted(t for t in reachable(edges, module) if t.startswith("django"))
        chain = sorted(t for t in reachable(edges, module) if t in edges)
        assert not django, f"{module} imports Django ({django[0]}) through {chain}"


def test_the_client_imports_without_django_installed(tmp_path: Path) -> None:
    """Run for real: a Python with Django made unimportable imports the client and the rules."""
    import subprocess
    import sys

    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'django' or name.startswith('django.'):\n"
        "            raise ImportError('Django is blocked for this test')\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    code = (
        "import nitro_assistants.client, nitro_assistants.rules;"
        "assert not any(m == 'django' or m.startswith('django.') for m in __import__('sys').modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": f"{tmp_path}:{ROOT.parent}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_the_checker_finds_a_cycle_and_a_function_level_import(tmp_path: Path) -> None:
    """The checks above can fail: a package with a loop held together by an import written
    inside a function is reported."""
    package = tmp_path / "loopy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from loopy import b\n")
    (package / "b.py").write_text("def f():\n    from loopy.a import thing\n    return thing\n")
    (package / "c.py").write_text("import django.db\n")
    edges = graph(package, "loopy")
    assert cycles(edges) == [["loopy.a", "loopy.b", "loopy.a"]]
    assert "django.db" in reachable(edges, "loopy.c")
    assert importlib.util.find_spec("loopy") is None  # read as text, never imported


#: The one package allowed to touch a database connection (DESIGN.md "Layers", STYLE.md 13).
SQL_HOME = "nitro_assistants.services.sql"

#: Names that reach a connection or send SQL past the ORM, wherever they appear.
_DATABASE_NAMES = frozenset({"connection", "connections", "get_connection", "RawSQL"})
#: Attributes that do, read or called on anything.
_DATABASE_ATTRIBUTES = frozenset(
    {"connection", "connections", "get_connection", "cursor", "execute_wrapper", "run_on_commit"}
)


def database_touches(path: Path) -> Iterator[str]:
    """Each place ``path`` reaches a database connection, a cursor or raw SQL: an import of
    ``django.db.connection(s)`` (or ``transaction.get_connection``, ``RawSQL``), the attributes
    above, and a call of ``.raw(...)`` (``Manager.raw``). Plain names and attributes only: a
    local variable that happens to be called ``connection`` (the HTTP client's) is not one."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django.db"):
            for alias in node.names:
                if alias.name in _DATABASE_NAMES:
                    yield f"{where} imports {node.module}.{alias.name}"
        elif isinstance(node, ast.Attribute):
            if node.attr in _DATABASE_ATTRIBUTES or node.attr == "RawSQL":
                yield f"{where} uses .{node.attr}"
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "raw":
                yield f"{where} calls .raw()"


def connection_touches(
    root: Path = ROOT, package: str = PACKAGE, django_free: tuple[str, ...] = DJANGO_FREE
) -> list[str]:
    """Every module (migrations aside) that reaches a connection outside :data:`SQL_HOME`. The
    modules that import no Django (held to it above) are skipped: their ``connection`` is an
    HTTP one."""
    home = SQL_HOME.replace(PACKAGE, package, 1)
    found = []
    for name, path in modules(root, package).items():
        if name == home or name.startswith(home + "."):
            continue
        if any(name == free or name.startswith(free + ".") for free in django_free):
            continue
        found += [f"{name}: {what}" for what in database_touches(path)]
    return found


def test_only_the_sql_package_touches_a_connection() -> None:
    """A cursor, raw SQL, an execute wrapper or a look at a connection's state anywhere but
    ``services/sql/`` fails here: a statement written out goes there, named for its flow, its
    names from ``_meta``, with a parity test; a vendor check asks ``services.sql.vendor``."""
    found = connection_touches()
    assert not found, "Outside services/sql/:\n" + "\n".join(found)


def test_the_sql_home_check_can_fail(tmp_path: Path) -> None:
    """Each way of reaching the database past the ORM is reported outside the SQL package and
    allowed inside it; a variable merely named ``connection`` is not reported."""
    package = tmp_path / "pkg"
    (package / "services" / "sql").mkdir(parents=True)
    for init in (package, package / "services", package / "services" / "sql"):
        (init / "__init__.py").write_text("")
    offenders = {
        "imports.py": "from django.db import connection, connections\n",
        "transaction.py": "from django.db.transaction import get_connection\n",
        "raw.py": "from django.db.models.expressions import RawSQL\n",
        "cursor.py": "def f(c):\n    with c.cursor() as cursor:\n        cursor.execute('SELECT 1')\n",
        "manager.py": "def f(Model):\n    return list(Model.objects.raw('SELECT 1'))\n",
        "wrapper.py": "def f(db):\n    return db.execute_wrapper(print)\n",
        "hooks.py": "def f(db):\n    return db.run_on_commit\n",
        "vendor.py": "import django.db\ndef f():\n    return django.db.connection.vendor\n",
    }
    for name, code in offenders.items():
        (package / "services" / name).write_text(code)
        (package / "services" / "sql" / name).write_text(code)
    (package / "client.py").write_text("def f(connection):\n    return connection.sock\n")
    (package / "http.py").write_text("def f(watch):\n    return watch.connection\n")
    found = connection_touches(package, "pkg", django_free=("pkg.http",))
    assert sorted({line.split(":")[0] for line in found}) == sorted(
        f"pkg.services.{name.removesuffix('.py')}" for name in offenders
    )
