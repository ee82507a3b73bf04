"""bench/cluster's pure parts: its arguments, its fault plan, its ledger and figures, and a
teardown that can run any number of times. The cluster itself needs root and minutes, and never
runs here (docs/scale.md)."""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.cluster import hosts, ledger
from bench.cluster.run import FAULTS, fault_plan, main, parse_args


def test_the_arguments_have_the_real_runs_defaults() -> None:
    args = parse_args([])
    assert (args.minutes, args.rates, args.faults, args.teardown) == (
        10.0,
        [1.0, 10.0],
        True,
        False,
    )
    assert parse_args(["--minutes", "2", "--rates", "1", "--no-faults"]).rates == [1.0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--minutes", "0.1"], "--minutes: from 0.5 to 120"),
        (["--minutes", "600"], "--minutes: from 0.5 to 120"),
        (["--rates", "1,ten"], "--rates: `1,ten` is not a comma-separated list of numbers"),
        (["--rates", "0"], "--rates: each from just above 0 to 20"),
        (["--reviewers", "1"], "--reviewers: from 2 to 500"),
        (["--drain", "0"], "--drain: from 0.5 to 60"),
    ],
)
def test_bad_arguments_are_refused_with_what_is_wrong(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_without_root_it_says_so_and_touches_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    monkeypatch.setattr(hosts, "teardown", lambda *a, **k: pytest.fail("teardown ran"))
    assert main(["--teardown"]) == 2
    assert "needs root" in capsys.readouterr().err


def test_the_faults_come_after_a_quiet_quarter_in_order_within_the_time() -> None:
    plan = fault_plan(600)
    assert [name for _, name in plan] == list(FAULTS)
    assert plan[0][0] == 150
    assert all(a < b for (a, _), (b, _) in itertools.pairwise(plan))
    assert plan[-1][0] < 600


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert ledger.percentile(values, 50) == 50
    assert ledger.percentile(values, 99) == 99
    assert ledger.percentile([3.0], 99) == 3.0
    assert ledger.percentile([], 50) is None


def test_recovery_is_the_first_window_back_within_the_goal() -> None:
    slow = [ledger.Sample(100 + i, 0.5) for i in range(20)]  # the 20 s after the fault
    fast = [ledger.Sample(120 + i, 0.05) for i in range(60)]
    assert ledger.recovery(slow + fast, since=100, goal=0.091) == 20
    assert ledger.recovery(slow, since=100, goal=0.091) is None
    # Too few posts in a window say nothing: two fast ones do not count as back.
    sparse = [ledger.Sample(100, 0.05), ledger.Sample(101, 0.05)]
    assert ledger.recovery(sparse, since=100, goal=0.091) is None


def _run(status: str, **metadata: str) -> dict[str, object]:
    # As GET /threads/{id}/runs shows it: the thread's metadata (with its first run's key)
    # merged into every later run's.
    return {"status": status, "metadata": metadata, "kwargs": {"config": {"metadata": metadata}}}


FIRST = "11111111-1111-1111-1111-111111111111"
DECIDED = {"reviewer_id": "alice", "reviewed_at": "2026-12-04T20:00:00+00:00"}


def _ledger(**changes: object) -> ledger.Ledger:
    rows: dict[str, object] = {
        "decisions": [{"review": 7, "thread": "t", "outcome": "applied", "match": DECIDED}],
        "server_runs": {
            "t": [
                _run("success", nitro_run_id=FIRST, **DECIDED),
                _run("success", nitro_run_id=FIRST),
            ]
        },
        "mirror_runs": [
            {"id": FIRST, "thread": "t", "kind": "run", "status": "interrupted"},
            {"id": "r2", "thread": "t", "kind": "resume", "status": "succeeded"},
        ],
        "pending": [],
        "live_interrupts": {},
        "messages": {"t": (["h1", "a1"], ["h1", "a1"])},
        "audit_ok": True,
    }
    return ledger.compute(**(rows | changes))  # type: ignore[arg-type]


def test_a_decision_and_a_run_each_applied_once_balance() -> None:
    # The resume inherits the first run's key from the thread: it is not the first run again.
    result = _ledger()
    assert (result.applied, result.lost, result.doubled, result.ok) == (1, [], [], True)


def test_a_decision_the_server_never_ran_is_lost() -> None:
    result = _ledger(server_runs={"t": [_run("success", nitro_run_id=FIRST)]})
    assert (result.lost, result.waiting, result.ok) == ([7], [], False)
    # Still waiting in the mirror when the drain ended: late, and still not balanced.
    late = [{"review": 7, "thread": "t", "outcome": "pending", "match": DECIDED}]
    waiting = _ledger(decisions=late, server_runs={"t": [_run("success", nitro_run_id=FIRST)]})
    assert (waiting.lost, waiting.waiting, waiting.ok) == ([7], [7], False)
    # Nor does a resume that errored count as applied.
    errored = _ledger(
        server_runs={"t": [_run("error", **DECIDED), _run("success", nitro_run_id=FIRST)]}
    )
    assert errored.lost == [7]


def test_a_decision_or_a_run_the_server_ran_twice_is_doubled() -> None:
    twice = [
        _run("success", **DECIDED),
        _run("success", **DECIDED),
        _run("success", nitro_run_id=FIRST),
    ]
    assert _ledger(server_runs={"t": twice}).doubled == [7]
    started_twice = [_run("success", **DECIDED), _run("success", nitro_run_id=FIRST)] * 2
    assert f"run {FIRST}" in _ledger(server_runs={"t": started_twice}).doubled


def test_a_superseded_decision_is_not_expected_on_the_server() -> None:
    superseded = [{"review": 7, "thread": "t", "outcome": "superseded", "match": DECIDED}]
    result = _ledger(decisions=superseded, server_runs={"t": [_run("success", nitro_run_id=FIRST)]})
    assert (result.lost, result.ok) == ([], True)


def test_pending_reviews_stuck_runs_divergence_and_the_audit_fail_the_ledger() -> None:
    pending = [{"review": 9, "thread": "t", "interrupt_ids": ["i1"]}]
    assert _ledger(pending=pending, live_interrupts={"t": ["i1"]}).ok
    assert _ledger(pending=pending, live_interrupts={"t": ["i2"]}).orphaned == [9]
    assert _ledger(pending=pending).orphaned == [9]
    running = [{"id": "r3", "thread": "t", "kind": "resume", "status": "running"}]
    assert _ledger(mirror_runs=running).stuck == ["r3"]
    assert _ledger(messages={"t": (["h1"], ["h1", "a1"])}).diverged == ["t"]
    assert not _ledger(audit_ok=False).ok


class FakeMachine:
    """The namespaces and links ``ip`` would see, changed by the commands teardown sends."""

    def __init__(self, namespaces: set[str], links: set[str]) -> None:
        self.namespaces, self.links = namespaces, links
        self.commands: list[list[str]] = []

    def __call__(self, command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = list(command)
        self.commands.append(argv)
        ok, out = True, ""
        if argv[:3] == ["ip", "netns", "list"]:
            out = "".join(f"{ns} (id: 1)\n" for ns in sorted(self.namespaces))
        elif argv[:3] == ["ip", "netns", "pids"]:
            ok = argv[3] in self.namespaces
        elif argv[:3] == ["ip", "netns", "del"]:
            ok = argv[3] in self.namespaces
            self.namespaces.discard(argv[3])
        elif argv[:3] == ["ip", "link", "show"]:
            ok = argv[3] in self.links
        elif argv[:3] == ["ip", "link", "del"]:
            ok = argv[3] in self.links
            self.links.discard(argv[3])
            if argv[3] == hosts.BRIDGE:
                self.links -= {h.veth for h in hosts.HOSTS}
        elif argv[0] == "rm":
            subprocess.run(argv, check=True)
        return subprocess.CompletedProcess(argv, 0 if ok else 1, out, "" if ok else "not found")


def test_teardown_removes_what_is_left_and_then_nothing(tmp_path: Path) -> None:
    workdir = tmp_path / "cluster"
    (workdir / "pg").mkdir(parents=True)
    machine = FakeMachine(
        {hosts.DB.netns, hosts.WORKERS[1].netns, "someone-elses"},
        {hosts.BRIDGE, hosts.DB.veth, "eth0"},
    )
    removed = hosts.teardown(machine, workdir, wait=0)
    assert removed == [
        f"netns {hosts.DB.netns}",
        f"netns {hosts.WORKERS[1].netns}",
        f"link {hosts.DB.veth}",
        f"link {hosts.BRIDGE}",
        f"dir {workdir}",
    ]
    assert machine.namespaces == {"someone-elses"} and machine.links == {"eth0"}
    assert not workdir.exists()
    machine.commands.clear()
    assert hosts.teardown(machine, workdir, wait=0) == []
    assert not [c for c in machine.commands if "del" in c or c[0] == "rm"]


def test_a_hosts_cpu_is_the_sum_of_its_processes_user_and_system_time(tmp_path: Path) -> None:
    import os

    tick = os.sysconf("SC_CLK_TCK")
    # proc(5): pid (comm) state ppid ... utime stime cutime cstime (the 14th to 17th fields);
    # a command may hold spaces and parentheses.
    for pid, comm, times in ((11, "celery", (3, 1, 0, 0)), (12, "a (b) c", (10, 2, 5, 1))):
        (tmp_path / str(pid)).mkdir()
        fields = ["S", "1", *["0"] * 9, *map(str, (t * tick for t in times)), "20", "0"]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")

    def shell(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        assert list(command) == ["ip", "netns", "pids", hosts.WORKERS[0].netns]
        return subprocess.CompletedProcess(command, 0, "11\n12\n13\n", "")  # 13 has exited

    assert hosts.cpu_seconds(hosts.WORKERS[0], shell, proc=tmp_path) == 3 + 1 + 10 + 2 + 5 + 1


def test_a_reviewer_who_approved_in_a_conversation_is_not_sent_its_next_review() -> None:
    """Whoever approved a held call requested the run that paused on the reply; a rule asking
    for two approvals refuses that person the reply (separation of duties), so the simulated
    team hands it to someone else, as a real one would."""
    import random

    from bench.cluster.load import Reviewers

    keys = [("poller", "k0"), ("ana", "k1"), ("ben", "k2"), ("cy", "k3")]
    team = Reviewers("http://web", keys)
    team._approvers["session-1"] = {"ana", "ben"}
    team._approvers[7] = {"cy"}
    rng = random.Random(0)
    assert {team._reviewer(rng, 8, "session-1")[0] for _ in range(50)} == {"cy"}
    assert {team._reviewer(rng, 7, "")[0] for _ in range(50)} == {"ana", "ben"}
    # Everyone excluded: anyone (the server then says who may not), never the poller.
    team._approvers["session-2"] = {"ana", "ben", "cy"}
    assert team._reviewer(rng, 9, "session-2")[0] in {"ana", "ben", "cy"}
