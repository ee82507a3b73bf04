"""Deciders racing on real Postgres, each thread with its own connection: one decision wins per
review (the review row is locked; the others get ``ReviewNotPendingError`` and store nothing)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from nitro_assistants import services, tasks
from nitro_assistants.exceptions import ReviewNotPendingError
from nitro_assistants.models import Decision, Event, Review, Run
from tests.factories import ReviewFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("deciders race on row locks (select_for_update); SQLite has none"),
]

DECIDERS = 16
ROUNDS = 10
BULK = 8
ACTIONS = [
    {"tool_calls": [{"id": "call_1", "action": "approve"}]},
    {"tool_calls": [{"id": "call_1", "action": "reject", "message": "no"}]},
    {"tool_calls": [{"id": "call_1", "action": "edit", "args": {"day": "Friday"}}]},
    {"tool_calls": [{"id": "call_1", "action": "respond", "message": "call me"}]},
]


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Decision pks whose resume was enqueued (after commit), instead of sending them."""
    sent: list[int] = []
    lock = threading.Lock()

    def delay(decision_pk: int) -> None:
        with lock:
            sent.append(decision_pk)

    monkeypatch.setattr(tasks.resume_thread, "delay", delay)
    return sent


def race(*jobs: Callable[[], Any]) -> list[Any]:
    """Run ``jobs`` in threads released together; each returns its value or its exception."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = jobs[i]()
        except Exception as exc:
            results[i] = exc
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results


def users(count: int, prefix: str) -> list[Any]:
    User = get_user_model()
    return [User.objects.create_user(f"{prefix}{i}", is_staff=True) for i in range(count)]


def test_sixteen_concurrent_deciders_one_wins(enqueued: list[int]) -> None:
    review = ReviewFactory()
    deciders = users(DECIDERS, "reviewer")

    def decide(i: int) -> Callable[[], Decision]:
        return lambda: services.decide(review, deciders[i], ACTIONS[i % len(ACTIONS)])

    results = race(*(decide(i) for i in range(DECIDERS)))

    won = [r for r in results if isinstance(r, Decision)]
    lost = [r for r in results if isinstance(r, ReviewNotPendingError)]
    assert len(won) == 1, results
    assert len(lost) == DECIDERS - 1, results
    decision = Decision.objects.get(review=review)
    assert decision.pk == won[0].pk
    winner = next(i for i, r in enumerate(results) if isinstance(r, Decision))
    assert decision.decided_by == deciders[winner]
    assert (
        decision.tool_calls[0]["action"]
        == ACTIONS[winner % len(ACTIONS)]["tool_calls"][0]["action"]
    )
    review.refresh_from_db()
    assert review.status == Review.Status.DECIDED
    assert Run.objects.filter(thread=review.thread, kind="resume").count() == 1
    assert Event.objects.filter(review=review, verb="review_decided").count() == 1
    assert enqueued == [decision.pk]


def test_bulk_decision_racing_a_single_decision(enqueued: list[int]) -> None:
    bulk_user, single_user = users(2, "racer")
    wins: Counter[str] = Counter()
    for round_ in range(ROUNDS):
        reviews = [ReviewFactory() for _ in range(BULK)]
        at = round_ % 3  # the bulk reaches it at once, or one or two decisions later
        raced = reviews[at]

        def bulk(reviews: list[Review] = reviews) -> list[str]:
            outcomes = []
            for review in reviews:
                try:
                    services.decide(review, bulk_user, ACTIONS[0])
                    outcomes.append("decided")
                except ReviewNotPendingError:
                    outcomes.append("refused")
            return outcomes

        def single(raced: Review = raced) -> Decision:
            return services.decide(raced, single_user, ACTIONS[1])

        bulk_outcomes, single_outcome = race(bulk, single)
        assert isinstance(bulk_outcomes, list), bulk_outcomes
        for review, outcome in zip(reviews, bulk_outcomes, strict=True):
            decisions = list(Decision.objects.filter(review=review))
            assert len(decisions) == 1  # exactly one decision per review, whoever won
            if review.pk != raced.pk:
                assert outcome == "decided"
                assert decisions[0].decided_by == bulk_user
        raced_decision = Decision.objects.get(review=raced)
        if isinstance(single_outcome, Decision):
            assert bulk_outcomes[at] == "refused"
            assert raced_decision.decided_by == single_user
            wins["single"] += 1
        else:
            assert isinstance(single_outcome, ReviewNotPendingError), single_outcome
            assert bulk_outcomes[at] == "decided"
            assert raced_decision.decided_by == bulk_user
            wins["bulk"] += 1
    assert sum(wins.values()) == ROUNDS
    assert Decision.objects.count() == ROUNDS * BULK
    assert sorted(enqueued) == sorted(Decision.objects.values_list("pk", flat=True))
    print(f"raced review won by: {dict(wins)}")
