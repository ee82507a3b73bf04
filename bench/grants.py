"""Scoped approval grants: matching a review against 10,000 live grants together with the policy
rules' evaluation with 1,000 rules (median and p99 per review; goal ≤ 1 ms together).

    .venv/bin/python bench/grants.py [--grants 10000] [--rules 1000] [--reviews 5000]

Timed on what a process keeps between changes: the compiled grant set
(:class:`nitro_assistants.grant_rules.GrantSet`, bucketed by scope, key and tool) and the compiled
rule set, as ``services.mirror`` uses them when a review is mirrored (no SQL: their stamps ride
on the thread's lock or sit in the shared cache). Beside it, a naive peer measured in the same
run: every grant tried in turn. Pure Python, no database.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.policies import ASSISTANTS, make_reviews, make_rules, p99  # noqa: E402
from nitro_assistants import grant_rules, policy_rules  # noqa: E402

THREADS = 5000
SUBJECTS = 2000


def make_grants(count: int, rng: random.Random) -> list[grant_rules.Grant]:
    """Grants as a busy project might hold them: most for one thread, some for a customer, a few
    for an assistant; each for one tool, with an amount narrowed to a maximum and an order pinned."""
    grants = []
    for i in range(count):
        share = i % 10
        if share < 6:
            scope, key = grant_rules.THREAD, str(rng.randint(1, THREADS))
        elif share < 9:
            scope, key = grant_rules.SUBJECT, f"customer {rng.randint(1, SUBJECTS)}"
        else:
            scope, key = grant_rules.ASSISTANT, rng.choice(ASSISTANTS)
        grants.append(
            grant_rules.Grant(
                id=i + 1,
                scope=scope,
                key=key,
                tool=f"tool_{rng.randint(0, 399)}",
                constraints={
                    "amount": {"max": rng.randint(0, 1000)},
                    "order": {"in": [f"ORD-{rng.randint(0, 99)}" for _ in range(3)]},
                },
                expires_at=None if i % 2 else time.time() + 3600,
                uses=rng.choice([None, 5, 10]),
                seconds=None,
            )
        )
    return grants


def keys(rng: random.Random, assistant: str) -> dict[str, str]:
    return {
        grant_rules.THREAD: str(rng.randint(1, THREADS)),
        grant_rules.SUBJECT: f"customer {rng.randint(1, SUBJECTS)}",
        grant_rules.ASSISTANT: assistant,
    }


def naive(
    grants: list[grant_rules.Grant], where: dict[str, str], calls: list[dict[str, Any]], now: float
) -> Any:
    found = {}
    for call in calls:
        for grant in grants:
            if (
                grant.key == where.get(grant.scope)
                and grant.tool == call["name"]
                and (grant.expires_at is None or grant.expires_at > now)
                and grant_rules.covers(grant.constraints, call["args"])
            ):
                found[call["id"]] = grant
                break
        else:
            return None
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grants", type=int, default=10_000)
    parser.add_argument("--rules", type=int, default=1000)
    parser.add_argument("--reviews", type=int, default=5000)
    options = parser.parse_args()
    rng = random.Random(36)
    grants = make_grants(options.grants, rng)
    rules = make_rules(options.rules, rng)
    reviews = [
        (assistant, calls, keys(rng, assistant))
        for assistant, calls in make_reviews(options.reviews, rng)
    ]
    for index in range(0, len(reviews), 5):  # one in five asks for what a grant covers
        grant = rng.choice(grants)
        assistant, _, where = reviews[index]
        where = {**where, grant.scope: grant.key}
        args = {
            "amount": rng.randint(0, grant.constraints["amount"]["max"]),
            "order": rng.choice(grant.constraints["order"]["in"]),
        }
        reviews[index] = (assistant, [{"id": "c0", "name": grant.tool, "args": args}], where)
    started = time.perf_counter()
    grant_set = grant_rules.GrantSet(grants)
    rule_set = policy_rules.RuleSet(rules)
    compile_ms = (time.perf_counter() - started) * 1000
    now = time.time()
    caps = grant_rules.Caps()

    def both(assistant: str, calls: list[dict[str, Any]], where: dict[str, str]) -> Any:
        handling = rule_set.handling(assistant, "tool_calls", calls)
        if handling.grants:
            return grant_set.match(where, calls, now, caps)
        return None

    def timed(function: Any) -> list[float]:
        times = []
        for assistant, calls, where in reviews:
            begun = time.perf_counter()
            function(assistant, calls, where)
            times.append((time.perf_counter() - begun) * 1000)
        return times

    timed(both)  # a running process has met these tools before: the rules' candidates are kept
    together = timed(both)
    matching = timed(lambda a, c, w: grant_set.match(w, c, now, caps))
    peer = timed(lambda a, c, w: naive(grants, w, c, now))
    matched = sum(grant_set.match(w, c, now, caps) is not None for _, c, w in reviews)
    same = sum(
        (grant_set.match(w, c, now, caps) is None) == (naive(grants, w, c, now) is None)
        for _, c, w in reviews[:500]
    )
    med = statistics.median(together)
    print(
        f"| {options.grants:,} live grants, {options.rules:,} rules, "
        f"{len(reviews):,} reviews | median | p99 |"
    )
    print("|---|---|---|")
    print(
        f"| grant matching (compiled grant set) | {statistics.median(matching):.4f} ms | {p99(matching):.4f} ms |"
    )
    print(f"| rules and grants together, per review | {med:.4f} ms | {p99(together):.4f} ms |")
    print(
        f"| naive loop over the grants (peer) | {statistics.median(peer):.4f} ms | {p99(peer):.4f} ms |"
    )
    print()
    print(
        f"- compiling both sets: {compile_ms:.1f} ms (once per change); {matched} of "
        f"{len(reviews):,} reviews covered by a grant; the same answer as the naive loop for "
        f"{same} of 500"
    )
    print(
        f"- together: median **{med:.4f} ms**, p99 **{p99(together):.4f} ms** per review "
        f"(goal ≤ 1 ms: {'met' if p99(together) <= 1 else 'missed'}); no SQL statement on the way"
    )


if __name__ == "__main__":
    main()
