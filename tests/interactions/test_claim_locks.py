"""Claims and the thread's other writers on PostgreSQL, each in its own connection: no
deadlock. A claim's row is locked before its event appends to the thread's audit chain, and
that event's foreign keys (to the thread, to the review) are checked with KEY SHARE locks: a
writer holding the thread or the review FOR UPDATE (rather than FOR NO KEY UPDATE), or holding
the chain's head while it waits for the claim, would wait for the claim's writer while it waits
for them, and PostgreSQL would abort one of the two ("deadlock detected": a 500, a failed task).

Each test holds, in the test's own connection, a row lock a real writer could hold a moment
longer, so that the two service calls meet at the point they would deadlock on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction

from nitro_assistants import services
from nitro_assistants.models import AuditChain, Claim, Event, Review, Run, Thread
from nitro_assistants.services import claims, runs
from nitro_assistants.testing import FakeAssistant, run_result
from tests.core.conftest import enqueued, wait_for
from tests.interactions.conftest import BLUEPRINT, QUESTIONS, REVISED, InteractionMaker, pause

__all__ = ["enqueued"]


pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("row locks and foreign-key checks; SQLite has neither"),
]


# -- a take-over racing a mirror that revises the interaction: no deadlock ---------------------


def _blocked() -> int:
    """How many other connections to this database wait for a lock (read afresh: inside a
    transaction, the activity view is otherwise read once)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])


def _started(results: dict[str, Any], name: str, job: Callable[[], Any]) -> threading.Thread:
    """``job`` running in a thread of its own (its own connection); its value or its exception
    lands in ``results[name]``."""

    def run() -> None:
        try:
            results[name] = job()
        except Exception as exc:
            results[name] = exc
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    return worker


def _meet(
    hold: Callable[[], Any],
    first: tuple[str, Callable[[], Any]],
    second: tuple[str, Callable[[], Any]],
    *,
    second_may_finish: bool = False,
) -> dict[str, Any]:
    """Hold a row lock in the test's connection (``hold``) while ``first`` starts and waits for
    it, then ``second`` starts and blocks too (or finishes, ``second_may_finish``); let go, and
    return what each returned. Neither may hang or raise: a deadlock would abort one."""
    results: dict[str, Any] = {}
    with transaction.atomic():
        hold()
        workers = [_started(results, *first)]
        wait_for(lambda: _blocked() >= 1, timeout=10, interval=0.05)
        workers.append(_started(results, *second))
        wait_for(
            lambda: (second_may_finish and second[0] in results) or _blocked() >= 2,
            timeout=10,
            interval=0.05,
        )
    for worker in workers:
        worker.join(30)
    assert not [w for w in workers if w.is_alive()]
    assert not [r for r in results.values() if isinstance(r, Exception)], results
    return results


def _mirror_revision(how: str, thread: Any, fake: FakeAssistant) -> Callable[[], Any]:
    """A real service call that mirrors the interaction's revision under the thread's lock:
    a run's outcome collected (``collect_turn``), or the thread synced (``sync_thread``)."""
    revised = pause("blueprint", REVISED)
    if how == "collect_turn":
        run = Run.objects.create(
            thread=thread,
            kind=Run.Kind.RUN,
            input={"messages": [{"role": "user", "content": "hi"}]},
            remote_run_id="remote-run",
            status=Run.Status.RUNNING,
        )
        fake.results.append(run_result(review=revised))
        return lambda: runs.collect_turn(run.pk)
    fake.pending = revised
    return lambda: services.sync_thread(thread.pk)


@pytest.mark.parametrize("how", ["collect_turn", "sync_thread"])
def test_a_take_over_while_the_thread_is_locked_for_a_revision_does_not_deadlock(
    interaction: InteractionMaker,
    jane: User,
    sam: User,
    fake: FakeAssistant,
    thread: Any,
    how: str,
) -> None:
    """The mirror locks the thread, then moves the claim (``_carry_claim``); a take-over holds
    the claim, then writes its event, whose foreign key to the thread is checked with a KEY
    SHARE lock. Were the thread locked FOR UPDATE, each would wait for the other: PostgreSQL
    would abort one ("deadlock detected"). FOR NO KEY UPDATE lets the key check through."""
    first = interaction("blueprint", BLUEPRINT)
    claims.claim_review(first, jane)
    _meet(
        # Another writer of the old revision, a moment longer: the mirror, holding the thread,
        # waits for it to supersede the revision (before it moves the claim). The take-over
        # then gets its claim, and writes its event (or waits for the thread).
        lambda: Review.objects.select_for_update(no_key=True).get(pk=first.pk),
        ("mirror", _mirror_revision(how, thread, fake)),
        ("take_over", lambda: claims.claim_review(first, sam, take_over=True)),
        second_may_finish=True,
    )
    second = Review.objects.get(thread=thread, revision=2)
    # The take-over committed first: Sam's claim is the one that moved.
    assert Claim.objects.get(review=second).user == sam
    assert list(Event.objects.filter(review=first, verb="review_taken_over")) != []


def test_a_take_over_while_a_sync_appends_to_the_chain_does_not_deadlock(
    interaction: InteractionMaker, jane: User, sam: User, fake: FakeAssistant, thread: Any
) -> None:
    """A sync appending the superseded revision's event (the chain's head locked) before it
    moves the claim waits for a take-over holding the claim, which waits for the chain's head:
    a deadlock. The sync writes its events last, as a run's mirror does."""
    first = interaction("blueprint", BLUEPRINT)
    claims.claim_review(first, jane)
    _meet(
        # Another writer of the thread's audit chain, a moment longer.
        lambda: AuditChain.objects.select_for_update().get(chain=str(thread.thread_id)),
        ("sync", _mirror_revision("sync_thread", thread, fake)),
        ("take_over", lambda: claims.claim_review(first, sam, take_over=True)),
        second_may_finish=True,
    )
    second = Review.objects.get(thread=thread, revision=2)
    assert Claim.objects.filter(review=second).exists()


def test_a_first_claim_while_a_new_message_supersedes_the_review_does_not_deadlock(
    interaction: InteractionMaker, jane: User, thread: Thread, enqueued: list[Any]
) -> None:
    """A first claim is one statement: the claim inserted, the chain's head locked, its event
    appended, then the keys checked (to the review, to the thread). A new message on the thread
    (``start_run``) locks the thread and the pending review, then appends its events: held
    FOR UPDATE, the claim's key checks would wait for it while it waits for the chain's head."""
    first = interaction("question", QUESTIONS)
    _meet(
        # Another writer of the thread's audit chain, a moment longer.
        lambda: AuditChain.objects.select_for_update().get(chain=str(thread.thread_id)),
        ("claim", lambda: claims.claim_review(first, jane)),
        ("message", lambda: services.start_run(thread, "Friday, please")),
    )
    assert Claim.objects.get(review=first).user == jane
    assert Review.objects.get(pk=first.pk).status == Review.Status.SUPERSEDED
    assert [name for name, _ in enqueued] == ["nitro_assistants.run_thread"]
