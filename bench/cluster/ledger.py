"""The cluster's figures and its ledger, computed from plain rows (no Django, no network), so that
tests/bench can hold them to fixtures.

The ledger sets the server's record (each thread's runs, its state) against the mirror's (the
decisions, their resume runs, the reviews left pending): a decision applied on the server twice,
or never, is the one thing a fault must not cause.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The metadata key that carries the mirror's ``Run`` id to the server (services.runs.RUN_KEY).
RUN_KEY = "nitro_run_id"
#: Statuses of a server run that did its work (a resume run that reached them applied its decision).
DONE = {"success", "interrupted"}


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (``q`` in 0..100) of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Sample:
    """One decision, timed: posted at ``at`` (wall clock, s); ``latency`` is post → applied
    minus the server's own time for the resume, in seconds."""

    at: float
    latency: float


def recovery(
    samples: Sequence[Sample],
    since: float,
    goal: float,
    window: float = 30.0,
    step: float = 5.0,
    until: float | None = None,
) -> float | None:
    """Seconds from ``since`` (a fault's end) to the start of the first ``window`` of posts whose
    p99 latency is within ``goal`` again; None when no such window starts before ``until`` (or
    before the last post). A window with fewer than 5 posts says nothing and is skipped."""
    last = max((s.at for s in samples), default=since)
    end = last if until is None else min(until, last)
    start = since
    while start + window <= end + step:
        inside = [s.latency for s in samples if start <= s.at < start + window]
        if len(inside) >= 5:
            p99 = percentile(inside, 99)
            assert p99 is not None
            if p99 <= goal:
                return start - since
        start += step
    return None


@dataclass
class Ledger:
    decisions: int = 0
    applied: int = 0
    #: Decisions (and first runs) the mirror holds that the server never ran to the end.
    lost: list[Any] = field(default_factory=list)
    #: Of ``lost``, the decisions the mirror still has waiting to be applied (the drain ended
    #: first): late, not gone; they still fail the ledger.
    waiting: list[Any] = field(default_factory=list)
    #: Decisions (and first runs) the server ran to the end more than once.
    doubled: list[Any] = field(default_factory=list)
    #: Pending reviews whose pause the server no longer holds.
    orphaned: list[Any] = field(default_factory=list)
    #: Runs of the mirror still queued or running after the drain.
    stuck: list[Any] = field(default_factory=list)
    #: Threads whose mirrored messages differ from the server's state.
    diverged: list[Any] = field(default_factory=list)
    audit_ok: bool | None = None

    @property
    def ok(self) -> bool:
        return not (self.lost or self.doubled or self.orphaned or self.stuck or self.diverged) and (
            self.audit_ok is not False
        )

    def lines(self) -> list[str]:
        def show(name: str, items: list[Any]) -> str:
            head = ", ".join(str(i) for i in items[:5]) + (" …" if len(items) > 5 else "")
            return f"  {name:<36} {len(items)}" + (f"  ({head})" if items else "")

        return [
            f"  decisions recorded                   {self.decisions}",
            f"  applied on the server exactly once   {self.applied}",
            show("not applied on the server", self.lost),
            show("  of which still waiting (late)", self.waiting),
            show("doubled (applied twice or more)", self.doubled),
            show("pending without a live pause", self.orphaned),
            show("runs stuck (queued/running)", self.stuck),
            show("threads mirror ≠ server", self.diverged),
            "  audit chains verify                  "
            + {True: "yes", False: "NO", None: "not checked"}[self.audit_ok],
        ]


def _metadata(run: Mapping[str, Any]) -> dict[str, Any]:
    """A server run's metadata: what the request sent, over what the server merged in (the
    thread's metadata, which keeps the first run's key)."""
    merged = dict(((run.get("kwargs") or {}).get("config") or {}).get("metadata") or {})
    merged.update(run.get("metadata") or {})
    return merged


def compute(
    *,
    decisions: Sequence[Mapping[str, Any]],
    server_runs: Mapping[str, Iterable[Mapping[str, Any]]],
    mirror_runs: Sequence[Mapping[str, Any]],
    pending: Sequence[Mapping[str, Any]],
    live_interrupts: Mapping[str, Iterable[str]],
    messages: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    audit_ok: bool | None = None,
) -> Ledger:
    """The ledger.

    - ``decisions``: the mirror's decisions, ``{"review", "thread", "outcome", "match"}``:
      ``match`` is the metadata that names the decision's resume on the server (what
      ``services.reviews`` looks for before sending it again: the reviewer and the time of the
      decision); a superseded decision is not expected there.
    - ``server_runs``: per thread, the server's runs (``GET /threads/{id}/runs``).
    - ``mirror_runs``: every mirror run, ``{"id", "thread", "kind", "status"}``; a first run
      (``kind`` "run") is named on the server by its id in ``nitro_run_id``.
    - ``pending``: the mirror's pending reviews, ``{"review", "thread", "interrupt_ids"}``.
    - ``live_interrupts``: per thread, the interrupt ids the server's state holds now.
    - ``messages``: per thread, (the mirror's message ids, the server's).
    """
    done = {
        thread: [_metadata(run) for run in runs if run.get("status") in DONE]
        for thread, runs in server_runs.items()
    }
    ledger = Ledger(decisions=len(decisions), audit_ok=audit_ok)
    for decision in decisions:
        if decision.get("outcome") == "superseded":  # the thread moved on: nothing to apply
            continue
        match = {k: str(v) for k, v in decision["match"].items()}
        seen = sum(
            all(str(meta.get(k)) == v for k, v in match.items())
            for meta in done.get(str(decision["thread"]), [])
        )
        if seen == 0:
            ledger.lost.append(decision["review"])
            if decision.get("outcome") == "pending":
                ledger.waiting.append(decision["review"])
        elif seen == 1:
            ledger.applied += 1
        else:
            ledger.doubled.append(decision["review"])
    for run in mirror_runs:
        if run["kind"] != "run" or run["status"] not in ("succeeded", "interrupted"):
            continue
        seen = sum(
            str(meta.get(RUN_KEY)) == str(run["id"]) and "reviewer_id" not in meta
            for meta in done.get(str(run["thread"]), [])
        )
        if seen == 0:
            ledger.lost.append(f"run {run['id']}")
        elif seen > 1:
            ledger.doubled.append(f"run {run['id']}")
    for review in pending:
        live = set(live_interrupts.get(str(review["thread"]), ()))
        if not live or not set(review["interrupt_ids"] or ()) <= live:
            ledger.orphaned.append(review["review"])
    ledger.stuck = [run["id"] for run in mirror_runs if run["status"] in ("queued", "running")]
    ledger.diverged = sorted(
        thread for thread, (mirror, server) in messages.items() if list(mirror) != list(server)
    )
    return ledger
