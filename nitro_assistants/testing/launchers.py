"""Real processes for tests and benchmarks: a ``langgraph dev`` server, a Celery worker, Redis.

Each runs in its own session (``start_new_session``), logs to a file of its own, and is stopped
by its own pid or process group, never by name. Loopback only. Nothing here imports Django,
LangGraph or redis-py: ``langgraph`` is run as a program, from the ``langgraph-cli[inmem]`` extra.

::

    from nitro_assistants.testing.launchers import LangGraphServer

    graph = Path("agent/graph.py").resolve()  # paths in langgraph.json: absolute, or from workdir
    server = LangGraphServer(tmp_path / "server", graphs={"support": f"{graph}:graph"}).start()
    try:
        with override_settings(NITRO_ASSISTANTS={**settings.NITRO_ASSISTANTS, "BASE_URL": server.url}):
            ...
    finally:
        server.stop()
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import requests

from nitro_assistants.exceptions import InvalidArgumentError, LaunchError

__all__ = ["CeleryWorker", "LangGraphServer", "RedisServer", "free_port"]

BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise LaunchError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def _stop_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM the process group, SIGKILL it if it has not exited within ``timeout``."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class LangGraphServer:
    """One ``langgraph dev`` server (the LangGraph Agent Server, in-memory runtime).

    docs/protocol.md §1: it runs in ``workdir``, a directory of its own (it keeps its state in
    ``./.langgraph_api`` and a graph may write files there), on a free port checked after start-up
    (it silently moves when its port is busy), with ten jobs per worker, and with no analytics,
    tracing or version check (there may be no network).

    ``graphs`` maps graph ids to ``"path/to/file.py:variable"``; ``dependencies`` are the
    directories put on the server's import path (default: the current directory); or ``config``
    is a whole ``langgraph.json`` of its own (paths relative to ``workdir``). ``cpus`` pins the
    server to those CPUs (``taskset -c`` syntax, e.g. ``"0"``; empty: any). ``bin`` is the bin
    directory of the virtual environment whose ``langgraph`` serves (default: this one's);
    ``environ`` the environment it starts from (default: this process's). ``stop()`` (or
    ``kill()``) then ``start()`` again keeps the port and the working directory.
    """

    workdir: Path
    graphs: dict[str, str] = field(default_factory=dict)
    dependencies: list[str] = field(default_factory=list)
    config: dict[str, Any] | None = None
    port: int = 0
    cpus: str = ""
    bin: Path = BIN
    environ: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def start(self, timeout: float = 90.0) -> Self:
        """Start the server and wait until it answers ``GET /ok``."""
        if not self.graphs and self.config is None:
            raise InvalidArgumentError("LangGraphServer needs graphs or a config")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        config = self.config or {
            "graphs": self.graphs,
            "dependencies": self.dependencies or [os.getcwd()],
            "webhooks": {"url": {"disable_loopback": False, "require_https": False}},
        }
        (self.workdir / "langgraph.json").write_text(json.dumps(config))
        env = {
            **(os.environ if self.environ is None else self.environ),
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "LANGGRAPH_NO_VERSION_CHECK": "true",
            "PYTHONUNBUFFERED": "1",
        }
        pinned = ["taskset", "-c", self.cpus] if self.cpus else []
        self.process = subprocess.Popen(
            [
                *pinned,
                str(self.bin / "langgraph"),
                "dev",
                "--no-browser",
                "--no-reload",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--config",
                "langgraph.json",
                "--n-jobs-per-worker",
                "10",
            ],
            cwd=self.workdir,
            env=env,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LaunchError(f"langgraph dev exited early:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/ok", timeout=1).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.25)
        self.stop()
        raise LaunchError(f"langgraph dev did not answer on {self.url}:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM: a graceful shutdown (open requests are finished or cut, state written)."""
        if self.process is not None:
            _stop_group(self.process, timeout=15)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: no graceful drain, nothing written to ``.langgraph_api`` since its last
        periodic flush (every 10 s)."""
        if self.process is not None:
            _kill_group(self.process)
        self.process = None

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)


@dataclass
class RedisServer:
    """A ``redis-server`` of its own on a free loopback port, never the machine's own Redis.

    ``appendonly``: every write is logged and fsynced (``appendfsync always``) so the data
    survives even a SIGKILL; without it nothing is saved at all (``save ""``). ``kill()`` (or
    ``stop()``) then ``start()`` again keeps the port and the directory, so the append-only file
    is replayed.
    """

    workdir: Path
    appendonly: bool = True
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> Self:
        """Start the server and wait until it answers ``PING``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.appendonly
            else ["--appendonly", "no"]
        )
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.workdir),
                "--save",
                "",
                *persistence,
            ],
            stdout=(self.workdir / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait(self.answers, timeout, f"redis-server on port {self.port}")
        return self

    def answers(self) -> bool:
        """True when the server answers ``PING`` (loading its append-only file, it does not)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown save, open connections cut."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None


@dataclass
class CeleryWorker:
    """One ``celery -A app worker`` process consuming ``queue``, with Django settings
    ``settings`` (``DJANGO_SETTINGS_MODULE``; empty: the environment's) and ``env`` added to
    ``environ`` (default: this process's environment). It runs in ``cwd`` (default: the current
    directory), so ``app`` and ``settings`` import from there, with the ``celery`` of the virtual
    environment whose bin directory is ``bin`` (default: this interpreter's, ``python -m celery``).

    ``start()`` waits for the worker's "ready." line, which it logs at ``INFO`` and below; with
    a quieter ``loglevel`` pass ``wait=False`` and wait another way (``celery inspect``).
    The log (``log_path``) is appended to across restarts; :meth:`finished`,
    :meth:`retry_delays` and the like read it.
    """

    app: str
    queue: str
    log_dir: Path
    settings: str = ""
    env: dict[str, str] = field(default_factory=dict)
    pool: str = "threads"
    concurrency: int = 4
    loglevel: str = "INFO"
    cwd: Path | None = None
    environ: dict[str, str] | None = None
    bin: Path | None = None
    name: str = field(default_factory=lambda: f"worker-{uuid.uuid4().hex[:8]}")
    process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def environment(self) -> dict[str, str]:
        """The worker's environment: ``environ`` (or this process's), the settings module, then
        ``env``."""
        env = {**(os.environ if self.environ is None else self.environ), "PYTHONUNBUFFERED": "1"}
        if self.settings:
            env["DJANGO_SETTINGS_MODULE"] = self.settings
        return {**env, **self.env}

    def start(self, timeout: float = 60.0, wait: bool = True) -> Self:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        ready_before = self.log().count(" ready.")  # a restarted worker appends to its log
        celery = [str(self.bin / "celery")] if self.bin else [sys.executable, "-m", "celery"]
        process = self.process = subprocess.Popen(
            [
                *celery,
                "-A",
                self.app,
                "worker",
                f"--pool={self.pool}",
                f"--concurrency={self.concurrency}",
                f"--loglevel={self.loglevel}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-Q",
                self.queue,
                "-n",
                f"{self.name}@%h",
            ],
            cwd=self.cwd or os.getcwd(),
            env=self.environment(),
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if wait:
            _wait(
                lambda: process.poll() is not None or self.log().count(" ready.") > ready_before,
                timeout,
                f"celery worker {self.name}",
            )
            if process.poll() is not None:
                raise LaunchError(f"celery worker exited:\n{self.log_tail()}")
        return self

    def supervise(self) -> bool:
        """What a process supervisor does (compose ``restart:``, systemd ``Restart=``): start the
        worker again if it has exited. True when it had."""
        if self.process is None or self.process.poll() is None:
            return False
        self.start()
        return True

    def kill(self) -> None:
        """SIGKILL the worker: no warm shutdown, nothing acknowledged, connections cut."""
        if self.process is not None:
            _kill_group(self.process)
        self.process = None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a warm shutdown: running tasks finish), SIGKILL after ``timeout``."""
        if self.process is not None:
            _stop_group(self.process, timeout)
        self.process = None

    def children(self) -> list[int]:
        """Pids of the worker's pool processes (prefork)."""
        if self.process is None:
            return []
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == self.process.pid:
                pids.append(int(stat.parent.name))
        return pids

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def crashes(self) -> list[str]:
        """The "Unrecoverable error" lines of every exit of this worker."""
        return re.findall(r"Unrecoverable error: .*", self.log())

    def received(self, task: str) -> int:
        """Deliveries of ``task`` this worker received (logged at ``INFO``)."""
        return len(re.findall(rf"Task {re.escape(task)}\[[^\]]+\] received", self.log()))

    def finished(self, task: str) -> int:
        """Runs of ``task`` this worker finished, succeeded or raised (logged at ``INFO``)."""
        pattern = rf"Task {re.escape(task)}\[[^\]]+\] (?:succeeded|raised)"
        return len(re.findall(pattern, self.log()))

    def retry_delays(self, task: str) -> list[float]:
        """Countdowns of the retries of ``task`` after an error, in order."""
        return [d for delays in self.retries(task).values() for d in delays]

    def retries(self, task: str) -> dict[str, list[float]]:
        """The countdowns of each task id's retries after an error, in order."""
        pattern = rf"Task {re.escape(task)}\[([^\]]+)\] retry: Retry in ([0-9.]+)s: \w"
        found: dict[str, list[float]] = {}
        for task_id, delay in re.findall(pattern, self.log()):
            found.setdefault(task_id, []).append(float(delay))
        return found
