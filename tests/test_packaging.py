"""The package as a user gets it: an sdist and a wheel built (``python -m build``, the wheel from
the sdist) from a clean copy of this checkout; the wheel installed into a fresh virtual
environment; a fresh ``startproject`` host running on it; and the extras serving an agent with
``langgraph dev`` and running a Celery worker on Redis.

Dependencies come from the package index, held to the tested versions of requirements.txt."""

from __future__ import annotations

import email.parser
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import nitro_assistants
from nitro_assistants.testing.launchers import CeleryWorker, LangGraphServer
from tests.fresh_project import Project, clean_environ, start_project

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("templates", "static", "migrations")
#: What is left out of the copy the packages are built from: what a clean checkout does not have.
NOT_SOURCE = shutil.ignore_patterns(
    ".venv", ".git", "var", "artifacts", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
    ".*_cache", ".langgraph_api", "node_modules", "db.sqlite3",
)  # fmt: skip
MOVE = (
    'tools: [{"name": "reschedule_appointment", '
    '"args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"}}]'
)
# A graph as a user writes one with the `agent` extra: our middleware holds the tool call.
GRAPH = """
from langchain.agents import create_agent

from nitro_assistants.agent import ReviewMiddleware
from nitro_assistants.agent.testing import APPOINTMENT_TOOLS, ScriptedChatModel

graph = create_agent(
    ScriptedChatModel(),
    tools=APPOINTMENT_TOOLS,
    middleware=[ReviewMiddleware({"reschedule_appointment": True})],
)
"""


def run(*args: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, **kwargs
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def shipped_files() -> list[str]:
    """The package's non-code files and migrations, as paths inside the package archives."""
    files = [
        path.relative_to(ROOT).as_posix()
        for part in SHIPPED
        for path in (ROOT / "nitro_assistants" / part).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    ]
    for part in SHIPPED:
        assert any(f.startswith(f"nitro_assistants/{part}/") for f in files), part
    return sorted(files)


@dataclass
class Dist:
    sdist: Path
    wheel: Path


@dataclass
class Venv:
    root: Path
    constraints: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def install(self, *requirements: str) -> None:
        # pip of the test's environment installs into the fresh one (which has none of its own).
        pip = [sys.executable, "-m", "pip", "--python", self.python, "install", "-q"]
        run(*pip, "-c", self.constraints, *requirements, env=clean_environ(), timeout=600)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    work = tmp_path_factory.mktemp("build")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    # No isolation: the build backend (setuptools) is the one requirements.txt installed.
    build = [sys.executable, "-m", "build", "--no-isolation", "--outdir", work / "dist", source]
    run(*build, env=clean_environ(), timeout=300)
    (sdist,) = (work / "dist").glob("*.tar.gz")
    (wheel,) = (work / "dist").glob("*.whl")
    return Dist(sdist=sdist, wheel=wheel)


@pytest.fixture(scope="module")
def venv(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    work = tmp_path_factory.mktemp("venv")
    # Constraints: the versions requirements.txt pins (pip takes no extras or editables there).
    pins = [
        line.split("#", 1)[0].strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "-"))
    ]
    constraints = work / "constraints.txt"
    constraints.write_text("".join(f"{_no_extras(pin)}\n" for pin in pins))
    base_python = getattr(sys, "_base_executable", sys.executable)
    run(base_python, "-m", "venv", "--without-pip", work / "fresh", env=clean_environ())
    fresh = Venv(root=work / "fresh", constraints=constraints, wheel=dist.wheel)
    fresh.install(str(dist.wheel))
    return fresh


def _no_extras(pin: str) -> str:
    name, bracket, rest = pin.partition("[")
    return name + rest.partition("]")[2] if bracket else pin


@pytest.fixture(scope="module")
def host(venv: Venv, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """``startproject host`` on the fresh environment, with nitro_assistants and a Celery app."""
    project = start_project(tmp_path_factory.mktemp("host") / "site", venv.python)
    project.add_celery_app()
    return project


def test_sdist_and_wheel_ship_templates_static_files_and_migrations(dist: Dist) -> None:
    wanted = shipped_files()
    with zipfile.ZipFile(dist.wheel) as wheel:
        in_wheel = set(wheel.namelist())
        version = nitro_assistants.__version__
        metadata = email.parser.Parser().parsestr(
            wheel.read(f"nitro_assistants-{version}.dist-info/METADATA").decode()
        )
    assert [f for f in wanted if f not in in_wheel] == []
    with tarfile.open(dist.sdist) as sdist:
        in_sdist = {m.name.partition("/")[2] for m in sdist.getmembers()}
    assert [f for f in wanted if f not in in_sdist] == []
    assert {"README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml"} <= in_sdist
    assert not [name for name in in_sdist if name.startswith("tests/")]

    assert metadata["Name"] == "nitro-assistants"
    assert metadata["Version"] == version
    assert metadata["License-Expression"] == "MIT"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert {"agent", "redis"} <= set(metadata.get_all("Provides-Extra") or [])
    assert f"## [{version}]" in (ROOT / "CHANGELOG.md").read_text()


def test_a_fresh_host_runs_on_the_installed_wheel(venv: Venv, host: Project) -> None:
    where = run(
        venv.python, "-c", "import nitro_assistants; print(nitro_assistants.__file__)",
        cwd=host.root, env=host.env,
    )  # fmt: skip
    assert where.stdout.strip().startswith(str(venv.root)), where.stdout

    migrated = host.manage("migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    for migration in sorted((ROOT / "nitro_assistants" / "migrations").glob("0*.py")):
        assert f"Applying nitro_assistants.{migration.stem}... OK" in migrated.stdout
    checked = host.manage("check")
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout

    collected = host.manage("collectstatic", "--no-input")
    assert collected.returncode == 0, collected.stderr
    for static in (ROOT / "nitro_assistants" / "static").rglob("*"):
        if static.is_file():
            copied = host.root / "static" / static.relative_to(ROOT / "nitro_assistants" / "static")
            assert copied.read_bytes() == static.read_bytes()

    # The review queue, rendered by the admin from the installed templates.
    page = host.manage("shell", "-c", QUEUE_PAGE)
    assert page.returncode == 0, page.stderr
    status, templates = page.stdout.strip().splitlines()[-2:]
    assert status == "200"
    assert "admin/nitro_assistants/review/change_list.html" in templates.split(",")


QUEUE_PAGE = """
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()
admin = get_user_model().objects.create_superuser("admin", "admin@example.com", "pw")
client = Client()
client.force_login(admin)
response = client.get("/admin/nitro_assistants/review/")
print(response.status_code)
print(",".join(t.name for t in response.templates if t.name))
"""


@pytest.fixture(scope="module")
def extras(venv: Venv) -> Venv:
    """The fresh environment with the extras a user names to serve an agent and run a worker."""
    venv.install(f"nitro-assistants[agent,redis] @ {venv.wheel.as_uri()}")
    return venv


@pytest.fixture
def agent_server(extras: Venv, tmp_path: Path) -> Iterator[LangGraphServer]:
    """``langgraph dev`` of the fresh environment serving a graph that uses our middleware."""
    workdir = tmp_path / "agent"
    workdir.mkdir()
    (workdir / "graph.py").write_text(GRAPH)
    server = LangGraphServer(
        workdir=workdir,
        config={"graphs": {"support": "./graph.py:graph"}, "dependencies": ["."]},
        bin=extras.root / "bin",
        environ=clean_environ(),
    )
    try:
        yield server.start()
    finally:
        server.stop()


def test_the_extras_serve_an_agent_and_run_a_worker(
    extras: Venv, agent_server: LangGraphServer, host: Project, tmp_path: Path
) -> None:
    migrated = host.manage("migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    queue = f"{os.environ.get('NITRO_TEST_QUEUE', 'nitro_tests')}-fresh-host-{uuid.uuid4().hex[:8]}"
    broker = os.environ.get("NITRO_TEST_BROKER_URL", "redis://127.0.0.1:6379/9")
    worker = CeleryWorker(
        app=host.name,
        queue=queue,
        log_dir=tmp_path,
        name="worker",
        pool="solo",
        cwd=host.root,
        environ=host.env,
        bin=extras.root / "bin",
    )
    try:
        settings = host.root / host.name / "settings.py"
        settings.write_text(
            settings.read_text()
            + f'NITRO_ASSISTANTS["BASE_URL"] = {agent_server.url!r}\n'
            + f"CELERY_BROKER_URL = {broker!r}\n"
            + f"CELERY_TASK_DEFAULT_QUEUE = {queue!r}\n"
        )
        worker.start()  # waits for its "ready." line
        started = host.manage(
            "shell",
            "-c",
            f"from nitro_assistants import services; services.start_run('support', {MOVE!r})",
        )
        assert started.returncode == 0, started.stderr

        def held() -> list[tuple[str, str]]:
            with sqlite3.connect(host.root / "db.sqlite3") as db:
                return db.execute("SELECT kind, status FROM nitro_assistants_review").fetchall()

        _wait(held, worker, 60)
        assert held() == [("tool_calls", "pending")]
        with sqlite3.connect(host.root / "db.sqlite3") as db:
            (payload,) = db.execute("SELECT payload FROM nitro_assistants_review").fetchone()
        assert json.loads(payload)["tool_calls"][0]["name"] == "reschedule_appointment"
    finally:
        worker.stop(timeout=30)


def _wait(predicate: Callable[[], object], worker: CeleryWorker, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        exited = worker.process is None or worker.process.poll() is not None
        if exited or time.monotonic() > deadline:
            raise AssertionError(f"worker log:\n{worker.log()[-4000:]}")
        time.sleep(0.25)


def test_the_checkout_tracks_no_database_and_ignores_the_ones_runs_leave() -> None:
    # An empty nitro_assistants.sqlite3 was once committed at the root (issue 40, item 12).
    tracked = run("git", "ls-files", "--", "*.sqlite3", "*.sqlite3-*", cwd=ROOT)
    assert tracked.returncode == 0, tracked.stderr
    assert tracked.stdout == ""
    for name in ("nitro_assistants.sqlite3", "nitro_h_x.sqlite3-wal", "db.sqlite3"):
        ignored = run("git", "check-ignore", "--no-index", "--quiet", name, cwd=ROOT)
        assert ignored.returncode == 0, f"{name} is not ignored"
