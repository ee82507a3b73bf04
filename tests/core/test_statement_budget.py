"""The SQL statements a review flow costs, per service call (issue 21's budget).

The flow of bench/flow_cost.py part 1, against the FakeAssistant: a new thread's run pauses on a
held ``reschedule_appointment`` call, a review rule (the call needs a member of Staff) handles
it, a staff reviewer opens it in the admin (which claims it) and approves it through the admin's
form path, and the resume is applied. Every statement counts (BEGIN, COMMIT, SAVEPOINTs): the
services run in real transactions here, as in a worker and a request. A change that adds a
statement to a call fails here; one that removes statements lowers the budget with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nitro_assistants import services
from nitro_assistants.models import Claim, Decision, Event, Grant, Policy, Review, Run
from nitro_assistants.services import chain_verify, claims
from nitro_assistants.services.decisions import DECIDE_PERMISSION
from nitro_assistants.services.grants import live_grants
from nitro_assistants.services.policy_enforcement import ruleset
from nitro_assistants.testing import FakeAssistant, run_result
from tests.core.conftest import tool_review

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("the budget is PostgreSQL's: the chain's heads move inside its insert"),
]

#: Statements per call without a shared cache. What each one is, in order, is in the docstring
#: of the test.
BUDGET = {
    "start_run": 1,
    "execute_run": 9,
    "claim_review": 1,
    "decide": 4,
    "execute_resume": 7,
}
#: With the shared cache a deployment names in ``LIVE_CACHE``: the rules' stamp is read there
#: instead of with the thread's lock, which costs no statement of its own either way.
SHARED_BUDGET = BUDGET


def counted(name: str, call: Callable[[], Any], spent: dict[str, list[str]]) -> Any:
    with CaptureQueriesContext(connection) as queries:
        result = call()
    spent[name] = [q["sql"] for q in queries.captured_queries]
    return result


@pytest.mark.parametrize("granted", [False, True], ids=["no grant", "a grant elsewhere"])
@pytest.mark.parametrize("live_cache", [None, "live"], ids=["per-process cache", "shared cache"])
def test_a_governed_flow_stays_within_its_statement_budget(
    fake_assistant: FakeAssistant,
    enqueued: list[Any],
    settings: Any,
    live_cache: str | None,
    granted: bool,
) -> None:
    """start_run: one statement: the thread, its run, its two events and its chain's head, whose
    thread INSERT selects nothing while a stop refuses the run (issue 36).

    A stop check rides on execute_run's and decide's locked reads (an ``Exists`` annotation):
    they spend nothing more for it.

    execute_run (9): the claim, committed before the server is called, without a transaction:
    the attempt counted (``QuerySet.update()``, a compare-and-set on the run's status and
    attempts), the run read with its thread, ``run_started`` appended (the thread was marked busy
    by start_run's statement). Then BEGIN, the run locked (held while the server runs), and once the server
    answered: the thread locked (which also takes the id of the review the run may pause on,
    from the reviews' sequence, and, without a shared cache, the rules' stamp; with one, it is
    read there), its open reviews read (an ordinary query after the lock, which sees what the
    lock's previous holder committed), the events with the review's and the handling's inserts
    and the thread's and the run's updates, COMMIT.

    claim_review: the claim inserted with its event (one statement).

    decide: BEGIN, the review locked (with its thread, decision, handling and its group, the
    reviewer's group membership and the id its decision will have), one statement that writes
    the decision, the resume run, the review's status and their events, COMMIT (issue 34
    walked back issue 21's compare-and-set: one locked path asks every question of the rules).

    execute_resume (7): the attempt counted; BEGIN, the decision locked (with its run, review
    and thread), the thread locked, the open reviews read (before the resume's own writes,
    the review it applies left out), the events with the decision's, the review's, the
    thread's and the run's updates, COMMIT.

    Issue 35 walked back issue 21's hand-written ``run_started`` statement (it also took the
    id of the review the run may pause on, which now costs the review's own INSERT) and the
    ``xmin`` freshness read (the open reviews rode on the statement that locked the thread):
    from 19 statements a flow (18 with the shared cache) to 26 (25); the review's id taken with
    the thread's lock (its INSERT rides on the events' statement) brought it to 25 (24); the
    resume's open reviews read before its writes and the rules' stamp read with the thread's
    lock, to 23 with or without the shared cache; the stop check inside start_run's statement
    and the claim counted by a compare-and-set instead of under a lock in a transaction of its
    own, to 22."""
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "LIVE_CACHE": live_cache}
    budget = SHARED_BUDGET if live_cache else BUDGET
    staff = Group.objects.create(name="Staff")
    staff.permissions.add(Permission.objects.get(codename="decide_review"))
    reviewer = get_user_model().objects.create_user("reviewer", is_staff=True)
    reviewer.groups.add(staff)
    Policy.objects.create(
        name="Rescheduling is for staff", tool="reschedule_appointment", group=staff
    )
    if granted:  # a live grant of the same assistant for another tool: checked, not matched
        Grant.objects.create(
            scope="assistant",
            key="walkthrough",
            assistant_key="walkthrough",
            tool="refund",
            constraints={"amount": {"max": 20}},
            max_uses=3,
            uses_left=3,
            granted_at=timezone.now(),
        )
    ruleset()  # compiled once per change of the rules, as a running worker has them
    live_grants()  # the same for the live grants: the flow checks them, and none covers its call
    fake_assistant.results = [run_result(tool_review()), run_result(reply="Moved to Tuesday")]
    spent: dict[str, list[str]] = {}

    run = counted(
        "start_run", lambda: services.start_run("walkthrough", "Move me to Tuesday"), spent
    )
    counted("execute_run", lambda: services.execute_run(run.pk), spent)
    # The review screen (GET): the review as the admin reads it, claimed for the request's user.
    review = Review.objects.select_related("thread", "decision").get(run=run)
    assert review.handling.policy_id is not None  # the rule matched
    opener = get_user_model().objects.get(pk=reviewer.pk)
    counted("claim_review", lambda: claims.claim_review(review, opener), spent)
    # The decide POST: the request's user, whose permissions the view checked before deciding.
    user = get_user_model().objects.get(pk=reviewer.pk)
    assert user.has_perm(DECIDE_PERMISSION)
    decision = {
        "tool_calls": [{"id": call["id"], "action": "approve"} for call in review.tool_calls],
        "note": "",
        "revision": review.revision,
        "digest": review.digest,
        "interrupt_id": review.interrupt_id,
    }
    record = counted(
        "decide", lambda: services.decide(review.pk, user, decision, via="admin"), spent
    )
    counted("execute_resume", lambda: services.execute_resume(record.pk), spent)

    # The flow happened as the admin takes it: claimed by the reviewer, decided by them, applied.
    assert Claim.objects.get(review=review).user_id == reviewer.pk
    record = Decision.objects.get(pk=record.pk)
    assert (record.decided_by_id, record.outcome) == (reviewer.pk, Decision.Outcome.APPLIED)
    assert Run.objects.get(pk=run.pk).status == Run.Status.INTERRUPTED
    assert {"policy_matched", "review_claimed", "review_decided", "decision_recorded"} <= set(
        Event.objects.values_list("verb", flat=True)
    )
    assert (
        chain_verify.verify().ok
    )  # every statement that wrote events linked them as hashchain.link_hash
    over = {
        name: "\n".join(f"  {sql[:160]}" for sql in statements)
        for name, statements in spent.items()
        if len(statements) > budget[name]
    }
    assert not over, "over budget:\n" + "\n".join(
        f"{name} ({len(spent[name])} > {budget[name]}):\n{text}" for name, text in over.items()
    )
    assert {name: len(statements) for name, statements in spent.items()} == budget
    assert Grant.objects.get().uses == 0 if granted else True  # no grant matched the call
