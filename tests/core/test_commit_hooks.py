"""``services.commit_hooks``: work asked for any number of times in a transaction runs once, after
its commit, and never when the transaction (or the savepoint that asked) rolls back. It keeps
its own record, not Django's private list of callbacks (issue 35)."""

from __future__ import annotations

import pytest
from django.db import transaction

from nitro_assistants.services import commit_hooks

pytestmark = pytest.mark.django_db(transaction=True)


def asked_then_rolled_back(work: Calls) -> None:
    """Ask for ``work`` in an atomic block that then raises (a savepoint, or the transaction)."""
    with transaction.atomic():
        commit_hooks.once(work)
        raise RuntimeError


class Calls:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> None:
        self.n += 1


def test_asked_three_times_it_runs_once_after_the_commit() -> None:
    work = Calls()
    with transaction.atomic():
        for _ in range(3):
            commit_hooks.once(work)
        assert commit_hooks.waiting(work)
        assert work.n == 0
    assert work.n == 1
    assert not commit_hooks.waiting(work)
    with transaction.atomic():  # the next transaction asks again
        commit_hooks.once(work)
    assert work.n == 2


def test_outside_a_transaction_it_runs_at_once() -> None:
    work = Calls()
    commit_hooks.once(work)
    commit_hooks.once(work)
    assert work.n == 2
    assert not commit_hooks.waiting(work)


def test_a_rolled_back_savepoint_forgets_it_and_it_can_be_asked_again() -> None:
    work = Calls()
    with transaction.atomic():
        with pytest.raises(RuntimeError):
            asked_then_rolled_back(work)
        assert not commit_hooks.waiting(work)  # Django dropped it with the savepoint
        commit_hooks.once(work)
        assert commit_hooks.waiting(work)
    assert work.n == 1


def test_a_rolled_back_transaction_never_runs_it() -> None:
    work = Calls()
    with pytest.raises(RuntimeError):
        asked_then_rolled_back(work)
    assert work.n == 0
    assert not commit_hooks.waiting(work)
    with transaction.atomic():
        commit_hooks.once(work)
    assert work.n == 1
