"""Start the real LangGraph Agent Server (``langgraph dev``, in-memory runtime) for tests.

docs/protocol.md §1: each server gets its own empty working directory (it keeps state in
``./.langgraph_api``), a free port checked after start-up (it silently moves when its port is
busy), ten jobs per worker, and no analytics, tracing or version check (there is no network).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

GRAPHS = Path(__file__).parent / "graphs" / "agents.py"
GRAPH_NAMES = ("walkthrough", "tools", "per_call", "plain", "interactions")
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LangGraphServer:
    """One ``langgraph dev`` process. ``stop()`` and ``start()`` again keep the same port."""

    workdir: Path
    graphs: dict[str, str] = field(default_factory=dict)
    port: int = 0
    #: CPUs the server may run on (``taskset -c`` syntax, e.g. ``"0"``); empty: any.
    cpus: str = ""
    #: A ``langgraph.json`` of its own (paths relative to ``workdir``) instead of one for ``graphs``.
    config: dict[str, Any] | None = None
    #: The virtual environment's bin directory whose ``langgraph`` serves the graphs.
    bin: Path = BIN
    #: The environment the server starts from; default: this process's.
    environ: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    def start(self, timeout: float = 90.0) -> LangGraphServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        graphs = self.graphs or {name: f"{GRAPHS}:{name}" for name in GRAPH_NAMES}
        config = self.config or {
            "graphs": graphs,
            "dependencies": [str(Path(__file__).parent.parent)],
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
        log = self.log_path.open("ab")
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
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"langgraph dev exited early:\n{self.log_tail()}")
            try:
                if requests.get(f"{self.url}/ok", timeout=1).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"langgraph dev did not answer on {self.url}:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            self.process = None
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
        self.process = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
