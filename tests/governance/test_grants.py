"""Scoped approval grants (issue 36): given with an approval through the real decide path, matched
when a review is mirrored, used through ``services.decide`` once per use, refused when wider than
the call, on an edit, or where a rule forbids or caps them; stops, deadlines and races."""

from __future__ import annotations

import datetime
import threading
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.utils import timezone

from nitro_assistants import grant_rules
from nitro_assistants.grant_rules import Caps, GrantError, GrantForbiddenError
from nitro_assistants.models import (
    Decision,
    Event,
    Grant,
    Notification,
    Policy,
    Review,
    Stop,
    Thread,
)
from nitro_assistants.services import governance, grants, stops
from tests.governance.conftest import approve, mirrored, refund_pause, reviewer

pytestmark = pytest.mark.django_db


def granter(username: str = "gina", *groups: Group) -> User:
    user = reviewer(username, *groups)
    user.user_permissions.add(Permission.objects.get(codename="grant_approval"))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def refund_review_rule(db: None) -> Policy:
    """Refunds are reviewed by one person; their grants have at most 5 uses."""
    return Policy.objects.create(name="refunds", tool="refund_*", grant_max_uses=5)


def on_thread(thread: Thread, amount: float) -> Review:
    from nitro_assistants.models import Run
    from nitro_assistants.services.mirror import mirror_pending

    run = Run.objects.create(thread=thread, input={})
    review = mirror_pending(thread, run, refund_pause(amount))
    assert review is not None
    return Review.objects.select_related("thread").get(pk=review.pk)


def give(review: Review, user: User, **grant: Any) -> Decision:
    return grants.decide_with_grant(review.pk, user, approve(review), grant, via="admin")


def queued_grants(queued: list[Any]) -> list[int]:
    return [args[0] for name, args in queued if name == "nitro_assistants.apply_grant"]


# -- what a grant may say (pure) -------------------------------------------------------------------

CALL = {"id": "c1", "name": "refund_customer", "args": {"order_id": 7, "amount": 30, "cur": "USD"}}


ANY_CAPS = Caps()


def spec(caps: Caps = ANY_CAPS, **raw: Any) -> grant_rules.Spec:
    return grant_rules.clean_spec(raw, tool_calls=[CALL], approved=["c1"], caps=caps)


def test_a_grant_pins_every_argument_unless_narrowed_never_wider() -> None:
    given = spec(
        scope="thread", uses=2, args={"amount": {"max": 20}, "cur": {"in": ["USD", "EUR"]}}
    )
    assert given.tool == "refund_customer"
    assert given.constraints == {
        "order_id": {"eq": 7},
        "amount": {"max": 20},
        "cur": {"in": ["EUR", "USD"]},
    }
    covers = grant_rules.covers
    assert covers(given.constraints, {"order_id": 7, "amount": 20, "cur": "EUR"})
    assert not covers(given.constraints, {"order_id": 7, "amount": 21, "cur": "USD"})
    assert not covers(given.constraints, {"order_id": 7, "amount": -5, "cur": "USD"})
    assert not covers(given.constraints, {"order_id": 8, "amount": 5, "cur": "USD"})
    assert not covers(given.constraints, {"order_id": 7, "amount": "5", "cur": "USD"})
    assert not covers(given.constraints, {"order_id": True, "amount": 5, "cur": "USD"})
    assert not covers(given.constraints, {"order_id": 7, "amount": 5, "cur": "GBP"})
    assert not covers(given.constraints, {"order_id": 7, "amount": 5})  # an argument missing
    assert not covers(given.constraints, {"order_id": 7, "amount": 5, "cur": "USD", "x": 1})


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"scope": "thread", "uses": 1, "args": {"amount": {"max": 31}}}, "grant.args.amount"),
        ({"scope": "thread", "uses": 1, "args": {"amount": {"eq": 31}}}, "grant.args.amount"),
        ({"scope": "thread", "uses": 1, "args": {"cur": {"in": ["EUR"]}}}, "grant.args.cur"),
        ({"scope": "thread", "uses": 1, "args": {"cur": {"max": 3}}}, "grant.args.cur"),
        ({"scope": "thread", "uses": 1, "args": {"amount": {"max": -1}}}, "grant.args.amount"),
        ({"scope": "thread", "uses": 1, "args": {"nope": {"eq": 1}}}, "grant.args.nope"),
        ({"scope": "thread", "uses": 1, "args": {"amount": {"min": 1}}}, "grant.args.amount"),
        ({"scope": "world", "uses": 1}, "grant.scope"),
        ({"scope": "thread"}, "grant.uses"),
        ({"scope": "thread", "uses": 0}, "grant.uses"),
        ({"scope": "thread", "uses": True}, "grant.uses"),
        ({"scope": "thread", "duration": -5}, "grant.duration"),
        ({"scope": "thread", "uses": 1, "tool": "x"}, "grant.tool"),
        ({"scope": "thread", "uses": 1, "call": "other"}, "grant.call"),
    ],
)
def test_a_grant_wider_than_the_call_or_malformed_is_refused_on_its_field(
    raw: dict[str, Any], field: str
) -> None:
    with pytest.raises(GrantError) as refused:
        grant_rules.clean_spec(raw, tool_calls=[CALL], approved=["c1"], caps=Caps())
    assert refused.value.field == field


def test_a_rules_caps_and_no_grants_are_field_errors() -> None:
    with pytest.raises(GrantError) as refused:
        spec(Caps(allowed=False), scope="thread", uses=1)
    assert refused.value.field == "grant"
    with pytest.raises(GrantError) as refused:
        spec(Caps(uses=3), scope="thread", uses=4)
    assert refused.value.field == "grant.uses"
    with pytest.raises(GrantError) as refused:
        spec(Caps(uses=3), scope="thread", duration=60)  # a cap on uses needs a number of uses
    assert refused.value.field == "grant.uses"
    with pytest.raises(GrantError) as refused:
        spec(Caps(seconds=60), scope="thread", uses=1, duration=61)
    assert refused.value.field == "grant.duration"
    assert spec(Caps(uses=3, seconds=60), scope="thread", uses=3, duration=60).uses == 3


# -- given, then used -------------------------------------------------------------------------------


def test_a_grant_approves_the_next_matching_call_and_not_a_wider_one(
    django_capture_on_commit_callbacks: Any, queued: list[Any], refund_review_rule: Policy
) -> None:
    gina = granter()
    first = mirrored(30)
    assert queued_grants(queued) == []
    with django_capture_on_commit_callbacks(execute=True):
        decision = give(first, gina, scope="thread", uses=2, args={"amount": {"max": 25}})
    grant = Grant.objects.get()
    assert (grant.tool, grant.scope, grant.key, grant.uses_left) == (
        "refund_customer",
        "thread",
        str(first.thread_id),
        2,
    )
    assert grant.constraints == {"order_id": {"eq": 7}, "amount": {"max": 25}}
    assert (grant.review_id, grant.granted_by_id, grant.policy_id) == (
        first.pk,
        gina.pk,
        refund_review_rule.pk,
    )
    assert decision.decided_by_id == gina.pk and decision.grant_id is None
    assert Event.objects.filter(verb="grant_given", data__grant=grant.pk).exists()

    # Above the maximum: people decide it.
    with django_capture_on_commit_callbacks(execute=True):
        wider = on_thread(first.thread, 26)
    assert queued_grants(queued) == []
    assert governance_apply(wider) is None
    # Within it: approved by the grant, after commit, through services.decide.
    with django_capture_on_commit_callbacks(execute=True):
        covered = on_thread(first.thread, 25)
    assert queued_grants(queued) == [covered.pk]
    with django_capture_on_commit_callbacks(execute=True):
        record = grants.apply_grant(covered.pk)
    assert grants.apply_grant(covered.pk) is None  # delivered twice: used once
    assert record is not None
    assert (record.channel, record.grant_id, record.decided_by_id) == ("grant", grant.pk, None)
    assert record.reviewer_id == f"grant:{grant.pk}"
    assert "gina" in record.note
    assert record.tool_calls == [{"id": "call_0", "action": "approve"}]
    assert ("nitro_assistants.resume_thread", (record.pk,)) in queued
    data = Event.objects.filter(review=covered, verb="review_auto_decided").get().data
    assert (data["by"], data["grant"], data["granted_by"]) == ("grant", grant.pk, "gina")
    grant.refresh_from_db()
    assert (grant.uses, grant.uses_left, grant.state) == (1, 1, "live")
    # Another thread: not in the grant's scope.
    with django_capture_on_commit_callbacks(execute=True):
        elsewhere = mirrored(10)
    assert queued_grants(queued) == [covered.pk]
    assert grants.apply_grant(elsewhere.pk) is None
    # The wider one was never decided (the next pause of its thread replaced it).
    assert not Decision.objects.filter(review=wider).exists()


def governance_apply(review: Review) -> Decision | None:
    return grants.apply_grant(review.pk)


def test_uses_run_out_and_the_grant_stays_a_record(
    django_capture_on_commit_callbacks: Any, queued: list[Any], refund_review_rule: Policy
) -> None:
    gina = granter()
    first = mirrored(30)
    give(first, gina, scope="assistant", uses=1)
    one, two = mirrored(30), mirrored(30)
    assert grants.apply_grant(one.pk) is not None
    assert grants.apply_grant(two.pk) is None
    grant = Grant.objects.get()
    assert (grant.uses_left, grant.uses, grant.state) == (0, 1, "used_up")
    two.refresh_from_db()
    assert two.status == "pending"


def about(subject: str) -> Thread:
    thread = Thread.objects.create(assistant_key="walkthrough")
    Thread.objects.filter(pk=thread.pk).update(subject=subject)  # as THREAD_SUBJECT computes it
    thread.refresh_from_db()
    return thread


def test_a_subject_grant_covers_the_customers_other_threads(
    queued: list[Any], refund_review_rule: Policy, settings: Any
) -> None:
    gina = granter()
    with pytest.raises(GrantError) as refused:  # no THREAD_SUBJECT: a subject is a first message
        give(on_thread(about("Maria Lopez"), 30), gina, scope="subject", uses=1)
    assert refused.value.field == "grant.scope"
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "THREAD_SUBJECT": ["customer"]}
    with pytest.raises(GrantError):  # a subject cut short may be two customers'
        give(on_thread(about("A very long name…"), 30), gina, scope="subject", uses=1)
    maria, again, other = (about("Maria Lopez"), about("Maria Lopez"), about("Ann Smith"))
    give(on_thread(maria, 30), gina, scope="subject", uses=5, duration=3600)
    assert grants.apply_grant(on_thread(again, 30).pk) is not None
    assert grants.apply_grant(on_thread(other, 30).pk) is None
    with pytest.raises(GrantError) as refused:  # no subject to scope it to
        give(mirrored(30), gina, scope="subject", uses=1)
    assert refused.value.field == "grant.scope"


def test_an_expired_or_revoked_grant_decides_nothing(
    queued: list[Any], refund_review_rule: Policy
) -> None:
    gina = granter()
    give(mirrored(30), gina, scope="assistant", uses=3, duration=60)
    Grant.objects.update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    grants.grants_changed()
    assert grants.apply_grant(mirrored(30).pk) is None
    assert Grant.objects.get().state == "expired"
    expired = Grant.objects.get()
    give(mirrored(30), gina, scope="assistant", uses=3)
    live = Grant.objects.exclude(pk=expired.pk).get()
    assert grants.revoke(live, gina, "too broad")
    assert not grants.revoke(live, gina)  # once
    assert grants.apply_grant(mirrored(30).pk) is None
    live.refresh_from_db()
    assert (live.state, live.revoke_reason, live.revoked_by_id) == ("revoked", "too broad", gina.pk)


def test_an_edit_gives_no_grant_and_stores_nothing(
    queued: list[Any], refund_review_rule: Policy
) -> None:
    gina = granter()
    review = mirrored(30)
    body = approve(review)
    body["tool_calls"] = [{"id": "call_0", "action": "edit", "args": {"amount": 20}}]
    with pytest.raises(GrantError) as refused:
        grants.decide_with_grant(review.pk, gina, body, {"scope": "thread", "uses": 1}, via="admin")
    assert refused.value.field == "grant"
    assert not Decision.objects.exists() and not Grant.objects.exists()
    review.refresh_from_db()
    assert (review.status, review.revision) == ("pending", 1)


def test_rules_forbid_or_cap_grants_and_a_quorum_gives_none(
    queued: list[Any], refund_review_rule: Policy, finance: Group
) -> None:
    gina = granter("gina", finance)
    with pytest.raises(GrantError) as refused:
        give(mirrored(30), gina, scope="thread", uses=6)
    assert refused.value.field == "grant.uses"
    refund_review_rule.allow_grants = False
    refund_review_rule.save()
    with pytest.raises(GrantError) as refused:
        give(mirrored(30), gina, scope="thread", uses=1)
    assert refused.value.field == "grant"
    refund_review_rule.position = 5
    refund_review_rule.save()
    Policy.objects.create(name="quorum", position=1, tool="refund_*", approvals=2, group=finance)
    with pytest.raises(GrantError):
        give(mirrored(30), gina, scope="thread", uses=1)
    assert not Decision.objects.exists() and not Grant.objects.exists()


def test_a_grant_never_decides_where_a_rule_later_forbids_it(
    queued: list[Any], refund_review_rule: Policy
) -> None:
    gina = granter()
    give(mirrored(30), gina, scope="assistant", uses=5)
    refund_review_rule.grant_max_uses = 2  # the grant's 5 uses are more than the rule allows now
    refund_review_rule.save()
    assert grants.apply_grant(mirrored(30).pk) is None
    refund_review_rule.grant_max_uses = None
    refund_review_rule.save()
    assert grants.apply_grant(mirrored(30).pk) is not None


def test_giving_needs_the_permission_and_the_granter_must_still_may_decide(
    queued: list[Any], refund_review_rule: Policy
) -> None:
    plain = reviewer("plain")
    with pytest.raises(GrantForbiddenError):
        give(mirrored(30), plain, scope="thread", uses=1)
    assert not Decision.objects.exists()
    gina = granter()
    give(mirrored(30), gina, scope="assistant", uses=3)
    gina.is_active = False
    gina.save()
    assert grants.apply_grant(mirrored(30).pk) is None


def test_a_stop_in_force_freezes_what_a_grant_would_decide(
    queued: list[Any], refund_review_rule: Policy
) -> None:
    gina = granter()
    give(mirrored(30), gina, scope="assistant", uses=3)
    review = mirrored(30)
    stop = stops.stop(gina, scope="tool", tool="refund_customer", reason="wrong amounts")
    assert grants.apply_grant(review.pk) is None
    assert Grant.objects.get().uses == 0
    stops.resume(stop, gina, stage="all")
    assert grants.apply_grant(review.pk) is not None


def test_an_auto_approving_rule_is_left_to_its_policy(queued: list[Any]) -> None:
    gina = granter()
    Policy.objects.create(name="ok", tool="refund_*", action=Policy.Action.AUTO_APPROVE)
    with pytest.raises(GrantError):
        give(mirrored(30), gina, scope="thread", uses=1)


# -- races on PostgreSQL ------------------------------------------------------------------------


def race(*calls: Any) -> list[Any]:
    outcomes: list[Any] = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = calls[index]()
        except Exception as exc:  # the loser's refusal is the point
            outcomes[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return outcomes


@pytest.mark.postgresql("row locks")
@pytest.mark.django_db(transaction=True)
def test_two_reviews_racing_for_a_last_use_one_wins(
    queued: list[Any], refund_review_rule: Policy
) -> None:
    gina = granter()
    give(mirrored(30), gina, scope="assistant", uses=1)
    one, two = mirrored(30), mirrored(30)
    outcomes = race(lambda: grants.apply_grant(one.pk), lambda: grants.apply_grant(two.pk))
    assert sorted(type(o).__name__ for o in outcomes) == ["Decision", "NoneType"]
    assert Decision.objects.filter(channel="grant").count() == 1
    assert Grant.objects.get().uses == 1


@pytest.mark.postgresql("row locks")
@pytest.mark.django_db(transaction=True)
def test_a_deadline_a_grant_and_a_stop_racing_give_one_outcome(
    queued: list[Any], refund_review_rule: Policy
) -> None:
    refund_review_rule.deadline = datetime.timedelta(minutes=5)
    refund_review_rule.on_deadline = Policy.OnDeadline.REJECT
    refund_review_rule.save()
    gina = granter()
    give(mirrored(30), gina, scope="assistant", uses=5)
    later = timezone.now() + datetime.timedelta(minutes=6)
    for _ in range(3):
        review = mirrored(30)
        race(
            lambda r=review: grants.apply_grant(r.pk),
            lambda r=review: governance.apply_deadline(r.pk, now=later),
            lambda: stops.stop(gina, scope="tool", tool="refund_customer", reason="race"),
        )
        decisions = Decision.objects.filter(review=review)
        assert decisions.count() <= 1
        review.refresh_from_db()
        if decisions.exists():  # decided before the stop: by the grant or by the deadline
            assert decisions.get().channel in ("grant", "deadline")
            assert review.status == "decided"
        else:  # the stop came first: frozen, nothing decided it
            assert review.status == "pending"
        uses = Decision.objects.filter(channel="grant").count()
        assert Grant.objects.get().uses == uses  # a use is counted only with its decision
        for stop in Stop.objects.filter(resumed_at=None):
            stops.resume(stop, gina, stage="all")


def test_reviewers_are_told_of_a_covered_review_only_when_no_grant_decides_it(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    refund_review_rule: Policy,
    settings: Any,
) -> None:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "NOTIFY_DELAY": 0,
        "NOTIFIERS": {"email": {"BACKEND": "nitro_assistants.services.notifiers.EmailNotifier"}},
    }
    gina = granter()
    gina.email = "gina@example.com"
    gina.save()
    with django_capture_on_commit_callbacks(execute=True):
        give(mirrored(30), gina, scope="assistant", uses=1)
    with django_capture_on_commit_callbacks(execute=True):
        one = mirrored(30)
        two = mirrored(30)
    assert set(queued_grants(queued)) == {one.pk, two.pk}
    assert not Notification.objects.filter(review__in=[one, two]).exists()  # a grant will decide
    with django_capture_on_commit_callbacks(execute=True):
        assert grants.apply_grant(one.pk) is not None
    assert not Notification.objects.filter(review=one).exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert grants.apply_grant(two.pk) is None  # its last use went to the other
    assert Notification.objects.filter(review=two, kind="requested").exists()


def test_where_duties_are_always_separated_a_grant_never_approves_its_granters_own_run(
    queued: list[Any], refund_review_rule: Policy, settings: Any
) -> None:
    gina = granter()
    give(mirrored(30), gina, scope="assistant", uses=5)
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "SEPARATE_DUTIES": "always"}
    assert grants.apply_grant(mirrored(30, opened_by=gina).pk) is None
    assert grants.apply_grant(mirrored(30).pk) is not None


def test_a_granter_taken_out_of_the_rules_group_grants_nothing_more(
    queued: list[Any], finance: Group
) -> None:
    Policy.objects.create(name="finance refunds", tool="refund_*", group=finance)
    gina = granter("gina", finance)
    give(mirrored(30), gina, scope="assistant", uses=5)
    assert Grant.objects.get().group_id == finance.pk
    assert grants.apply_grant(mirrored(30).pk) is not None
    gina.groups.remove(finance)
    assert grants.apply_grant(mirrored(30).pk) is None
