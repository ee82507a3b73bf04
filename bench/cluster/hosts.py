"""The cluster's hosts: Linux network namespaces on a bridge of their own, and the processes in them.

No Django here (the driver imports it once the database host is up). Every command goes through a
``Shell`` so that the tests can watch what teardown would do without root.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: The cluster's own private subnet: nothing else on this machine routes it.
SUBNET = "10.239.39"
BRIDGE = "nitro39br"
#: Where every host keeps its files (the database's data directory among them), fixed so that
#: ``--teardown`` finds what a killed driver left.
WORKDIR = Path("/tmp/nitro-cluster-39")
PG_PORT = 5432
REDIS_PORT = 6379
LG_PORT = 2024
WEB_PORT = 8000
#: The Celery queue of the notification sends, with a worker of its own on each worker host.
NOTIFY_QUEUE = "nitro-notify"


@dataclass(frozen=True)
class Host:
    name: str
    octet: int

    @property
    def netns(self) -> str:
        return f"nitro39-{self.name}"

    @property
    def veth(self) -> str:
        return f"n39{self.name}"

    @property
    def address(self) -> str:
        return f"{SUBNET}.{self.octet}"


DB = Host("db", 2)
BROKER = Host("broker", 3)
ASSISTANTS = Host("lg", 4)
WEB = Host("web", 5)
WORKERS = (Host("w1", 11), Host("w2", 12), Host("w3", 13))
HOSTS = (DB, BROKER, ASSISTANTS, WEB, *WORKERS)


Shell = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def sh(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run ``command``; its failure is the caller's to judge (teardown expects some)."""
    return subprocess.run(list(command), capture_output=True, text=True, timeout=60, check=False)


def must(shell: Shell, command: Sequence[str]) -> str:
    done = shell(command)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command)}` failed: {done.stderr.strip()}")
    return done.stdout


def build_network(shell: Shell = sh) -> None:
    """The bridge (holding .1, where the driver talks from), one namespace per host, each with
    its loopback up and a veth on the bridge. No default route: a host reaches only the subnet."""
    must(shell, ["ip", "link", "add", BRIDGE, "type", "bridge"])
    must(shell, ["ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE])
    must(shell, ["ip", "link", "set", BRIDGE, "up"])
    for host in HOSTS:
        must(shell, ["ip", "netns", "add", host.netns])
        must(shell, ["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0",
                     "netns", host.netns])  # fmt: skip
        must(shell, ["ip", "link", "set", host.veth, "master", BRIDGE, "up"])
        inside = ["ip", "netns", "exec", host.netns]
        must(shell, [*inside, "ip", "addr", "add", f"{host.address}/24", "dev", "eth0"])
        must(shell, [*inside, "ip", "link", "set", "eth0", "up"])
        must(shell, [*inside, "ip", "link", "set", "lo", "up"])


def namespace_pids(netns: str, shell: Shell = sh) -> list[int]:
    done = shell(["ip", "netns", "pids", netns])
    if done.returncode != 0:
        return []
    return [int(pid) for pid in done.stdout.split() if pid.isdigit()]


def cpu_seconds(host: Host, shell: Shell = sh, proc: Path = Path("/proc")) -> float:
    """CPU time (user and system, with reaped children's) of the processes now on ``host``: a
    process that exited since (a killed host's) takes its share with it."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in namespace_pids(host.netns, shell):
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            continue
        # The fields after the command's closing parenthesis: utime is the 12th, stime,
        # cutime and cstime follow (proc(5), counted from state as the 1st).
        fields = stat.rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15])
    return total / tick


def kill_host(host: Host, shell: Shell = sh, sig: int = signal.SIGKILL) -> int:
    """Every process in the host's namespace, by pid, with ``sig`` (no goodbye by default)."""
    pids = namespace_pids(host.netns, shell)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return len(pids)


def teardown(shell: Shell = sh, workdir: Path = WORKDIR, wait: float = 10.0) -> list[str]:
    """Remove whatever the cluster left: its processes, namespaces, links and files. Safe to run
    any number of times, with nothing there or half of it: it returns what it removed."""
    removed: list[str] = []
    listed = shell(["ip", "netns", "list"])
    present = {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}
    for host in HOSTS:
        if host.netns not in present:
            continue
        if kill_host(host, shell, signal.SIGTERM):
            deadline = time.monotonic() + wait
            while namespace_pids(host.netns, shell) and time.monotonic() < deadline:
                time.sleep(0.2)
            kill_host(host, shell, signal.SIGKILL)
        shell(["ip", "netns", "del", host.netns])
        removed.append(f"netns {host.netns}")
    for link in [*(host.veth for host in HOSTS), BRIDGE]:
        if shell(["ip", "link", "show", link]).returncode == 0:
            shell(["ip", "link", "del", link])
            removed.append(f"link {link}")
    if workdir.exists():
        shell(["rm", "-rf", "--one-file-system", str(workdir)])
        removed.append(f"dir {workdir}")
    return removed


#: A link-layer address no host has: frames sent to it go nowhere (the bridge floods them, and
#: every host drops them).
NOWHERE = "02:39:39:00:00:01"


def cut(host: Host, target: Host, shell: Shell = sh) -> None:
    """Cut ``host`` off from ``target``: in the host's namespace, ``target``'s address now
    resolves to a link-layer address nobody has, so every packet it sends there is lost, on open
    connections too (they hang, as behind a dead switch port; nothing is refused). This
    machine's kernel has no tc classifier or action, nor netem, so ``tc`` cannot drop by
    address; the neighbour table can."""
    must(shell, ["ip", "netns", "exec", host.netns, "ip", "neigh", "replace", target.address,
                 "lladdr", NOWHERE, "dev", "eth0", "nud", "permanent"])  # fmt: skip


def mend(host: Host, target: Host, shell: Shell = sh) -> None:
    shell(["ip", "netns", "exec", host.netns, "ip", "neigh", "del", target.address, "dev", "eth0"])


@dataclass
class Process:
    """One program on one host, in a session of its own, logging to ``log``."""

    host: Host
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    cwd: Path | None = None
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        prefix = ["ip", "netns", "exec", self.host.netns]
        if self.user:
            prefix += ["runuser", "-u", self.user, "--"]
        self.popen = subprocess.Popen(
            [*prefix, *self.argv],
            env={**os.environ, **self.env},
            cwd=self.cwd,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def send(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        if self.popen is None:
            return
        self.send(sig)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)
            self.popen.wait(timeout=10)
        self.popen = None

    def reap(self) -> None:
        """After the host's processes were killed from outside: collect the exit status."""
        if self.popen is not None:
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.send(signal.SIGKILL)
            self.popen = None


def wait_until(what: str, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.25)
