"""Real processes the fault tests start, break and start again: a Redis server of their own and
Celery workers. Loopback only; every process is started in its own session and stopped by pid."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from tests.langgraph_server import free_port

ROOT = Path(__file__).resolve().parents[2]


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@dataclass
class RedisServer:
    """A ``redis-server`` on a free loopback port, never the machine's own Redis.

    ``appendonly``: every write is logged and fsynced (``appendfsync always``) so the data
    survives even a SIGKILL; without it nothing is saved at all (``save ""``).
    """

    workdir: Path
    appendonly: bool = True
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> RedisServer:
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
        _wait(self._answers, 10, f"redis-server on port {self.port}")
        return self

    def _answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
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
    """One ``celery worker`` of ``tests.reliability.worker_app`` (thread pool unless ``pool``)."""

    log_dir: Path
    broker_url: str
    queue: str
    db_name: str
    assistants_url: str
    concurrency: int = 4
    pool: str = "threads"
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    name: str = field(default_factory=lambda: f"rel-{uuid.uuid4().hex[:8]}")

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    @property
    def signal_log(self) -> Path:
        return self.log_dir / f"{self.name}.signals.jsonl"

    def start(self, timeout: float = 60) -> CeleryWorker:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
            "NITRO_TEST_DB_NAME": self.db_name,
            "NITRO_TEST_BROKER_URL": self.broker_url,
            "NITRO_TEST_QUEUE": self.queue,
            "NITRO_TEST_ASSISTANTS_URL": self.assistants_url,
            "NITRO_REL_SIGNAL_LOG": str(self.signal_log),
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        ready_before = self.log().count(" ready.")  # a restarted worker appends to its log
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.reliability.worker_app",
                "worker",
                f"--pool={self.pool}",
                f"--concurrency={self.concurrency}",
                "--loglevel=DEBUG",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-Q",
                self.queue,
                "-n",
                f"{self.name}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        process = self.process
        _wait(
            lambda: process.poll() is not None or self.log().count(" ready.") > ready_before,
            timeout,
            f"celery worker {self.name}",
        )
        if process.poll() is not None:
            raise RuntimeError(f"celery worker exited:\n{self.log_tail()}")
        return self

    def supervise(self) -> bool:
        """What a process supervisor does (compose ``restart:``, systemd ``Restart=``): start the
        worker again if it has exited. True when it had."""
        if self.process is None or self.process.poll() is None:
            return False
        self.start()
        return True

    def crashes(self) -> list[str]:
        """The "Unrecoverable error" lines of every exit of this worker."""
        return re.findall(r"Unrecoverable error: .*", self.log())

    def kill(self) -> None:
        """SIGKILL the worker: no warm shutdown, nothing acknowledged, connections cut."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def children(self) -> list[int]:
        """Pids of the worker's pool processes (prefork)."""
        if self.process is None:
            return []
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.process.pid:
                pids.append(int(stat.parent.name))
        return pids

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def received(self, task: str) -> int:
        return len(re.findall(rf"Task {re.escape(task)}\[[^\]]+\] received", self.log()))

    def finished(self, task: str) -> int:
        """Runs of ``task`` this worker finished (succeeded or raised)."""
        pattern = rf"Task {re.escape(task)}\[[^\]]+\] (?:succeeded|raised)"
        return len(re.findall(pattern, self.log()))

    def retry_delays(self, task: str) -> list[float]:
        """Countdowns of the retries of ``task`` after an error (not a poll's "not yet")."""
        return [d for delays in self.retries(task).values() for d in delays]

    def retries(self, task: str) -> dict[str, list[float]]:
        """The countdowns of each task id's retries after an error, in order."""
        pattern = rf"Task {re.escape(task)}\[([^\]]+)\] retry: Retry in ([0-9.]+)s: \w"
        found: dict[str, list[float]] = {}
        for task_id, delay in re.findall(pattern, self.log()):
            found.setdefault(task_id, []).append(float(delay))
        return found

    def signals(self, name: str | None = None) -> list[dict[str, str]]:
        try:
            lines = self.signal_log.read_text().splitlines()
        except OSError:
            return []
        sent = [json.loads(line) for line in lines if line.strip()]
        return [s for s in sent if name is None or s["signal"] == name]
