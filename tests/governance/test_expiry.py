"""Honest expiry (issue 36): a rule's deadline or the pause's own ``expiresAt`` ends a review
``expired``; the assistant is told so per kind, decisions after it are refused, and reviewers are
warned once before it lapses. Through the real mirror, decide and sweep paths."""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import threading
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test import Client
from django.utils import timezone

from nitro_assistants import rules, services, signals
from nitro_assistants.client import PendingReview
from nitro_assistants.client.results import Pause, ReplyDraft
from nitro_assistants.exceptions import ReviewExpiredError, ReviewNotPendingError
from nitro_assistants.models import (
    ApiKey,
    Decision,
    Event,
    Notification,
    Policy,
    Review,
    Run,
    Thread,
)
from nitro_assistants.services import governance, stops
from nitro_assistants.services.mirror import mirror_pending
from tests.admin.conftest import review_url, stamp
from tests.governance.conftest import approve, refund_pause, reviewer

pytestmark = pytest.mark.django_db


def at(minutes: float) -> datetime.datetime:
    return timezone.now() + datetime.timedelta(minutes=minutes)


def expiring_pause(amount: float, expires_at: Any) -> PendingReview:
    """A held refund whose interrupt value carries ``expiresAt`` (AG-UI 1.1)."""
    pause = refund_pause(amount)
    value = {
        "action_requests": [{"name": "refund_customer", "args": {"order_id": 7, "amount": amount}}],
        "review_configs": [{"action_name": "refund_customer"}],
        "expiresAt": expires_at,
    }
    return dataclasses.replace(pause, raw_interrupts=[{"id": pause.interrupt_id, "value": value}])


def mirror(pause: PendingReview) -> Review:
    thread = Thread.objects.create(assistant_key="walkthrough")
    run = Run.objects.create(thread=thread, input={})
    review = mirror_pending(thread, run, pause)
    assert review is not None
    return Review.objects.select_related("thread").get(pk=review.pk)


@pytest.fixture
def expire_rule() -> Policy:
    return Policy.objects.create(
        name="refunds expire",
        tool="refund_*",
        deadline=datetime.timedelta(minutes=30),
        on_deadline=Policy.OnDeadline.EXPIRE,
    )


def test_a_rules_deadline_expires_a_held_call_and_tells_the_assistant_it_was_rejected(
    django_capture_on_commit_callbacks: Any, queued: list[Any], expire_rule: Policy
) -> None:
    expired: list[dict[str, Any]] = []
    signals.review_expired.connect(lambda sender, **kw: expired.append(kw), weak=False)
    review = mirror(refund_pause(300))
    assert review.expires_at == review.handling.due_at

    assert governance.sweep_deadlines(now=at(10)) == {}  # not yet
    with django_capture_on_commit_callbacks(execute=True):
        assert governance.sweep_deadlines(now=at(31)) == {"expired": 1}
    assert governance.sweep_deadlines(now=at(32)) == {}  # once
    review.refresh_from_db()
    assert review.status == "expired" and review.closed_at is not None
    decision = Decision.objects.get(review=review)
    assert decision.reviewer_id == "expiry:refunds expire"
    assert decision.decided_by is None and decision.channel == "deadline"
    [call] = decision.tool_calls
    assert call["action"] == "reject" and call["message"].startswith("Expired unanswered")
    assert ("nitro_assistants.resume_thread", (decision.pk,)) in queued
    data = Event.objects.get(review=review, verb="review_expired").data
    assert data["rule"] == "refunds expire" and data["decision"] == decision.pk
    assert [kw["decision"] for kw in expired] == [decision]


def test_a_decision_or_dismissal_after_expiry_is_refused_as_expired(
    queued: list[Any], expire_rule: Policy
) -> None:
    review = mirror(refund_pause(300))
    body = approve(review)
    governance.sweep_deadlines(now=at(31))
    alice = reviewer("alice")
    with pytest.raises(ReviewExpiredError, match="expired unanswered"):
        services.decide(review.pk, alice, body, via="admin")
    with pytest.raises(ReviewExpiredError):
        services.dismiss(review.pk, alice, via="admin")
    key = ApiKey.generate(alice, "tests")[1]
    for action, payload in (("decide", body), ("dismiss", {})):
        response = Client().post(
            f"/nitro/api/reviews/{review.pk}/{action}",
            data=json.dumps(payload),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
        assert response.status_code == 409, response.content
        assert response.json()["code"] == "expired"
    assert Decision.objects.filter(review=review).count() == 1  # the expiry's only


def test_the_admin_says_plainly_that_the_review_expired(
    queued: list[Any], expire_rule: Policy
) -> None:
    review = mirror(refund_pause(300))
    admin = User.objects.create_superuser("boss", password="pw")
    client = Client()
    client.force_login(admin)
    url = review_url(review)
    shown = client.get(url)
    assert shown.status_code == 200
    assert "the assistant is then told nobody answered" in shown.content.decode()
    governance.sweep_deadlines(now=at(31))
    posted = client.post(url, {**stamp(review), "call-0-action": "approve"})
    assert posted.status_code == 409
    text = posted.content.decode()
    assert "expired unanswered" in text
    assert 'nitro-status-expired">expired<' in text
    queue = client.get("/admin/nitro_assistants/review/?status=expired")
    assert queue.status_code == 200
    assert "nitro-expired" in queue.content.decode()


def test_the_pauses_own_expires_at_wins_when_it_is_earlier(
    queued: list[Any], expire_rule: Policy
) -> None:
    soon = at(5).isoformat()  # before the rule's 30 minutes
    review = mirror(expiring_pause(300, soon))
    assert review.expires_at == datetime.datetime.fromisoformat(soon)
    assert governance.sweep_deadlines(now=at(6)) == {"expired": 1}
    review.refresh_from_db()
    assert review.status == "expired"
    decision = Decision.objects.get(review=review)
    assert soon in decision.tool_calls[0]["message"]


def test_a_rules_earlier_deadline_is_applied_as_the_rule_says(queued: list[Any]) -> None:
    Policy.objects.create(
        name="reject when late",
        tool="refund_*",
        deadline=datetime.timedelta(minutes=5),
        on_deadline=Policy.OnDeadline.REJECT,
    )
    review = mirror(expiring_pause(300, at(60).isoformat()))
    assert governance.sweep_deadlines(now=at(61)) == {"rejected": 1}
    review.refresh_from_db()
    assert review.status == "decided"
    assert Decision.objects.get(review=review).reviewer_id == "deadline:reject when late"


def test_a_pauses_expiry_without_any_rule_expires_it_too(queued: list[Any]) -> None:
    review = mirror(expiring_pause(300, "2031-01-01T10:00:00+02:00"))
    assert review.expires_at == datetime.datetime(2031, 1, 1, 8, tzinfo=datetime.UTC)
    later = datetime.datetime(2031, 1, 1, 8, 1, tzinfo=datetime.UTC)
    assert governance.sweep_deadlines(now=later) == {"expired": 1}
    assert Decision.objects.get(review=review).reviewer_id == "expiry"


@pytest.mark.parametrize(
    "value",
    ["2031-01-01T10:00:00", "next tuesday", 1893456000, {"at": "2031"}],
    ids=["no-offset", "not-a-date", "a-number", "an-object"],
)
def test_a_bad_expires_at_is_ignored_with_a_warning_and_the_rule_deadline_kept(
    queued: list[Any], expire_rule: Policy, caplog: pytest.LogCaptureFixture, value: Any
) -> None:
    with caplog.at_level(logging.WARNING, logger="nitro_assistants"):
        review = mirror(expiring_pause(300, value))
    assert "expiresAt" in caplog.text and "ignored" in caplog.text
    assert review.expires_at == review.handling.due_at  # the rule's 30 minutes


def test_an_escalation_deadline_may_expire_the_review(
    queued: list[Any], finance: Group, managers: Group
) -> None:
    Policy.objects.create(
        name="escalate then expire",
        tool="refund_*",
        group=finance,
        deadline=datetime.timedelta(minutes=5),
        on_deadline=Policy.OnDeadline.ESCALATE,
        escalate_to=managers,
        escalation_deadline=datetime.timedelta(minutes=10),
        on_escalation_deadline=Policy.AfterEscalation.EXPIRE,
    )
    review = mirror(refund_pause(300))
    assert review.expires_at is None
    # Managers have 10 minutes, within the warning's 15: warned in the same sweep.
    assert governance.sweep_deadlines(now=at(6)) == {"escalated": 1, "warned": 1}
    review.refresh_from_db()
    assert review.expires_at is not None
    assert governance.sweep_deadlines(now=at(20)) == {"expired": 1}
    review.refresh_from_db()
    assert review.status == "expired"


@pytest.fixture
def outbox(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "NOTIFY_DELAY": 0,
        "EXPIRY_WARNING_LEAD": 600,
        "NOTIFIERS": {"email": {"BACKEND": "nitro_assistants.services.notifiers.EmailNotifier"}},
    }


def test_reviewers_are_warned_once_before_it_lapses(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    outbox: None,
    finance: Group,
) -> None:
    Policy.objects.create(
        name="finance refunds expire",
        tool="refund_*",
        group=finance,
        deadline=datetime.timedelta(minutes=30),
        on_deadline=Policy.OnDeadline.EXPIRE,
    )
    alice = reviewer("alice", finance)
    outsider = reviewer("olga")
    alice.email, outsider.email = "alice@example.com", "olga@example.com"
    review = mirror(refund_pause(300))
    assert governance.sweep_deadlines(now=at(10)) == {}  # 20 minutes left: not yet
    with django_capture_on_commit_callbacks(execute=True):
        assert governance.sweep_deadlines(now=at(25)) == {"warned": 1}
    with django_capture_on_commit_callbacks(execute=True):
        assert governance.sweep_deadlines(now=at(26)) == {}  # once
    rows = Notification.objects.filter(review=review, kind="expiring")
    assert list(rows.values_list("user__username", flat=True)) == ["alice"]
    assert "expires soon unanswered" in rows.get().text
    assert Event.objects.filter(review=review, verb="review_expiring").count() == 1
    review.refresh_from_db()
    assert review.expiry_warned_at is not None


def test_no_warning_without_a_lead(
    queued: list[Any], outbox: None, settings: Any, expire_rule: Policy
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "EXPIRY_WARNING_LEAD": 0}
    mirror(refund_pause(300))
    assert governance.sweep_deadlines(now=at(25)) == {}


def stopper() -> User:
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="stop_assistants"))
    return User.objects.get(pk=user.pk)


def test_a_stop_in_force_keeps_a_review_from_expiring_until_it_is_resumed(
    queued: list[Any], expire_rule: Policy
) -> None:
    review = mirror(expiring_pause(300, at(5).isoformat()))
    ops = stopper()
    row = stops.stop(ops, scope="all", reason="incident 36")
    assert governance.sweep_deadlines(now=at(40)) == {"stopped": 2}  # the deadline and expiry
    review.refresh_from_db()
    assert review.status == "pending"
    assert not Decision.objects.filter(review=review).exists()
    stops.resume(row, ops, stage="reviews")
    assert governance.sweep_deadlines(now=at(40)) == {"expired": 1}


# -- what the assistant is told, per kind ---------------------------------------------------------

STAMP = "2031-01-01T08:00:00+00:00"


def test_a_reply_is_rejected_not_sent() -> None:
    pending = PendingReview(
        kind="reply",
        interrupt_id="i1",
        interrupt_ids=["i1"],
        reply=ReplyDraft(
            content="Hello",
            allowed_decisions=["approve", "edit", "reject"],
            description="",
            interrupt_id="i1",
            message_id="m1",
        ),
    )
    cleaned = rules.expired_answer(pending, STAMP)
    assert cleaned["reply"] == {"action": "reject", "message": rules.expiry_reason(STAMP)}


def test_a_call_that_allows_no_rejection_is_answered_in_the_tools_place() -> None:
    pending = refund_pause(10)
    pending.tool_calls[0]["allowed_decisions"] = ["approve", "respond"]  # a list inside
    [call] = rules.expired_answer(pending, STAMP)["tool_calls"]
    assert call["action"] == "respond" and STAMP in call["message"]


def test_a_plain_interrupt_and_an_agent_inbox_request_are_told_it_expired() -> None:
    plain = Pause(interrupt_id="a" * 32, kind="interrupt", value={"ask": "ok?"})
    inbox = Pause(
        interrupt_id="b" * 32,
        kind="inbox",
        value={},
        action_request={"action": "send", "args": {}},
        config={"allow_respond": False, "allow_ignore": True, "allow_accept": True},
    )
    pending = PendingReview(
        kind="interrupt",
        interrupt_id=plain.interrupt_id,
        interrupt_ids=[plain.interrupt_id, inbox.interrupt_id],
        mode="interrupt",
        pauses=[plain, inbox],
    )
    answers = rules.expired_answer(pending, STAMP)["answers"]
    assert answers[plain.interrupt_id] == {
        "expired": True,
        "expiredAt": STAMP,
        "reason": rules.expiry_reason(STAMP),
    }
    assert answers[inbox.interrupt_id] == {"type": "ignore", "args": None}


def test_a_question_is_answered_with_the_documented_no_answer() -> None:
    value = rules.expired_resume_value("expiry", STAMP)
    assert value["decision"] == "expired" and value["answers"] == []
    assert value["expired"] is True and value["expiredAt"] == STAMP


def test_a_typed_interaction_expires_through_the_sweep(queued: list[Any]) -> None:
    interaction = {
        "interactionId": "int-1",
        "kind": "question",
        "expiresAt": at(5).isoformat(),
        "questions": [{"questionId": "q1", "prompt": "Which day?", "type": "text"}],
    }
    iid = uuid.uuid4().hex
    pending = PendingReview(
        kind="question",
        interrupt_id=iid,
        interrupt_ids=[iid],
        interaction=interaction,
        raw_interrupts=[{"id": iid, "value": {"type": "interaction", "interaction": interaction}}],
    )
    review = mirror(pending)
    assert review.expires_at is not None
    assert governance.sweep_deadlines(now=at(6)) == {"expired": 1}
    decision = Decision.objects.get(review=review)
    assert decision.answer["decision"] == "expired" and decision.answer["answers"] == []
    review.refresh_from_db()
    assert review.status == "expired"


# -- the race: a person and the sweep ---------------------------------------------------------------


@pytest.mark.postgresql("row locks with SKIP LOCKED")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(5))
def test_a_persons_decision_and_the_expiry_sweep_racing_end_it_once(
    queued: list[Any], expire_rule: Policy, round_: int
) -> None:
    review = mirror(refund_pause(300))
    alice = reviewer(f"alice{round_}")
    body = approve(review)
    outcomes: dict[str, Any] = {}
    barrier = threading.Barrier(2)

    def person() -> None:
        barrier.wait()
        try:
            outcomes["person"] = services.decide(review.pk, alice, body, via="admin")
        except ReviewNotPendingError as exc:  # the loser's refusal is the point
            outcomes["person"] = exc
        finally:
            connection.close()

    def sweep() -> None:
        barrier.wait()
        try:
            outcomes["sweep"] = governance.sweep_deadlines(now=at(31))
        finally:
            connection.close()

    threads = [threading.Thread(target=person), threading.Thread(target=sweep)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    review.refresh_from_db()
    [decision] = Decision.objects.filter(review=review)
    if review.status == "expired":
        assert isinstance(outcomes["person"], ReviewExpiredError)
        assert decision.reviewer_id == "expiry:refunds expire"
    else:
        assert review.status == "decided"
        assert isinstance(outcomes["person"], Decision)
        assert decision.decided_by == alice
        # The sweep skipped the locked review, or found it decided: nothing of its own.
        assert outcomes["sweep"].get("expired", 0) == 0
        assert not Event.objects.filter(review=review, verb="review_expired").exists()


def test_only_an_expirys_rejection_reason_reaches_the_model() -> None:
    from nitro_assistants.client.review import build_resume

    pending = refund_pause(10)
    reason = rules.expiry_reason(STAMP)

    def sent(item: dict[str, Any]) -> dict[str, Any]:
        resume = build_resume(
            pending,
            reply=None,
            tool_calls=[{"id": "call_0", **item}],
            answer=None,
            reviewer_id="x",
            reviewed_at=STAMP,
        )
        return resume[pending.interrupt_id]["decisions"][0]

    expired = rules.expired_answer(pending, STAMP)["tool_calls"][0]
    assert sent(expired)["message"] == reason
    person = sent({"action": "reject", "message": "customer is a fraudster"})
    assert "message" not in person  # a person's reason stays in the metadata


@pytest.mark.postgresql("row locks with SKIP LOCKED")
@pytest.mark.django_db(transaction=True)
def test_a_decision_holding_the_lock_is_skipped_by_the_sweep_and_stands(
    queued: list[Any], expire_rule: Policy
) -> None:
    """Directed: the person's decision holds the review's lock (not committed yet) while the
    sweep runs; the sweep skips it, and the decision stands."""
    from django.db import transaction

    review = mirror(refund_pause(300))
    alice = reviewer("alice")
    body = approve(review)
    decided, swept = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def person() -> None:
        try:
            with transaction.atomic():
                outcome["person"] = services.decide(review.pk, alice, body, via="admin")
                decided.set()
                swept.wait(timeout=120)
        finally:
            decided.set()
            connection.close()

    thread = threading.Thread(target=person)
    thread.start()
    assert decided.wait(timeout=120)
    try:
        assert governance.sweep_deadlines(now=at(31)) == {}  # locked: skipped, not waited for
    finally:
        swept.set()
        thread.join(timeout=120)
    assert isinstance(outcome["person"], Decision)
    assert governance.sweep_deadlines(now=at(32)) == {}  # decided: nothing left to expire
    review.refresh_from_db()
    assert review.status == "decided"
    assert not Event.objects.filter(review=review, verb="review_expired").exists()


@pytest.mark.postgresql("row locks")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("on_deadline", ["expire", "reject"])
@pytest.mark.parametrize("round_", range(3))
def test_a_stop_and_the_deadline_sweep_racing_have_one_outcome(
    queued: list[Any], on_deadline: str, round_: int
) -> None:
    """Whichever commits first: the deadline's decision stands, or the stop froze the review
    and its deadline is left due, applied by the first sweep after the resume (never marked
    failed, never lost)."""
    Policy.objects.create(
        name="refunds lapse",
        tool="refund_*",
        deadline=datetime.timedelta(minutes=30),
        on_deadline=on_deadline,
    )
    done = {"expire": "expired", "reject": "rejected"}[on_deadline]
    review = mirror(refund_pause(300))
    ops = stopper()
    barrier = threading.Barrier(2)
    counts: dict[str, int] = {}
    made: list[Any] = []

    def stop() -> None:
        barrier.wait()
        try:
            made.append(stops.stop(ops, scope="all", reason=f"race {round_}"))
        finally:
            connection.close()

    def sweep() -> None:
        barrier.wait()
        try:
            counts.update(governance.sweep_deadlines(now=at(31)))
        finally:
            connection.close()

    threads = [threading.Thread(target=stop), threading.Thread(target=sweep)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    review.refresh_from_db()
    decisions = Decision.objects.filter(review=review).count()
    assert not Event.objects.filter(verb__in=["deadline_failed", "expiry_failed"]).exists()
    if review.status != "pending":  # the deadline committed before the stop froze it
        assert counts == {done: 1} and decisions == 1
        return
    # Frozen first: no deadline decided anything in its scope, and it is still due.
    assert decisions == 0 and set(counts) <= {"stopped"}
    stops.resume(made[0], ops, stage="reviews")
    assert governance.sweep_deadlines(now=at(32)) == {done: 1}


def test_an_expired_question_answers_409_expired_over_the_sessions_api(queued: list[Any]) -> None:
    opener = User.objects.create_user("opener", password="pw")
    interaction = {
        "interactionId": "int-9",
        "kind": "question",
        "expiresAt": at(5).isoformat(),
        "questions": [{"questionId": "q1", "prompt": "Which day?", "type": "text"}],
    }
    iid = uuid.uuid4().hex
    thread = Thread.objects.create(assistant_key="walkthrough", opened_by=opener)
    run = Run.objects.create(thread=thread, input={})
    pending = PendingReview(
        kind="question",
        interrupt_id=iid,
        interrupt_ids=[iid],
        interaction=interaction,
        raw_interrupts=[{"id": iid, "value": {"type": "interaction", "interaction": interaction}}],
    )
    review = mirror_pending(thread, run, pending)
    assert review is not None
    assert governance.sweep_deadlines(now=at(6)) == {"expired": 1}
    client = Client()
    client.force_login(opener)
    response = client.post(
        f"/nitro/api/sessions/{thread.thread_id}/interactions/int-9/decide",
        data=json.dumps(
            {
                "decision": "answer",
                "answers": [{"questionId": "q1", "text": "Tuesday"}],
                "revision": review.revision,
                "digest": review.digest,
            }
        ),
        content_type="application/json",
    )
    assert response.status_code == 409, response.content
    assert response.json()["code"] == "expired"


@pytest.mark.parametrize("on_deadline", ["expire", "reject"])
def test_a_stop_committed_after_the_sweep_asked_leaves_the_deadline_due(
    queued: list[Any], monkeypatch: pytest.MonkeyPatch, on_deadline: str
) -> None:
    """Directed: the sweep's own stop check saw no stop (it committed just after), and
    ``services.decide`` refuses the frozen review: counted ``stopped``, not ``failed``, and the
    deadline is applied after the resume."""
    Policy.objects.create(
        name="refunds lapse",
        tool="refund_*",
        deadline=datetime.timedelta(minutes=30),
        on_deadline=on_deadline,
    )
    review = mirror(refund_pause(300))
    ops = stopper()
    row = stops.stop(ops, scope="all", reason="late stop")
    real, asked = stops.stop_for_review, []

    def late(review: Review) -> Any:  # the sweep's own check runs before the stop committed
        asked.append(review.pk)
        return None if len(asked) == 1 else real(review)

    with monkeypatch.context() as patched:
        patched.setattr(governance.stops, "stop_for_review", late)
        assert set(governance.sweep_deadlines(now=at(31))) == {"stopped"}
    review.refresh_from_db()
    assert review.status == "pending" and review.handling.stage == "waiting"
    assert not Event.objects.filter(verb__in=["deadline_failed", "expiry_failed"]).exists()
    stops.resume(row, ops, stage="reviews")
    done = {"expire": "expired", "reject": "rejected"}[on_deadline]
    assert governance.sweep_deadlines(now=at(32)) == {done: 1}


def test_the_api_shows_when_a_review_expires(queued: list[Any], expire_rule: Policy) -> None:
    review = mirror(refund_pause(300))
    alice = reviewer("alice")
    key = ApiKey.generate(alice, "tests")[1]
    shown = (
        Client().get(f"/nitro/api/reviews/{review.pk}", HTTP_AUTHORIZATION=f"Bearer {key}").json()
    )
    assert review.expires_at is not None
    assert shown["expiresAt"] == review.expires_at.isoformat()
    assert shown["status"] == "pending"


def test_an_expired_reviews_slack_cards_are_updated(
    django_capture_on_commit_callbacks: Any,
    queued: list[Any],
    expire_rule: Policy,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from nitro_assistants import receivers

    if receivers.slack is None:
        pytest.skip("the slack extra is not installed")
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "SLACK": {"BOT_TOKEN": "x"}}
    ended: list[int] = []
    monkeypatch.setattr(receivers.slack, "review_ended", lambda review: ended.append(review.pk))
    review = mirror(refund_pause(300))
    with django_capture_on_commit_callbacks(execute=True):
        governance.sweep_deadlines(now=at(31))
    assert ended == [review.pk]


@pytest.mark.parametrize(
    ("value", "lead"),
    [
        (600, datetime.timedelta(minutes=10)),
        (datetime.timedelta(hours=1), datetime.timedelta(hours=1)),
        (0, None),
        (None, None),
    ],
)
def test_the_warning_lead_reads_seconds_or_a_timedelta(
    settings: Any, value: Any, lead: Any
) -> None:
    from nitro_assistants.conf import app_settings

    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "EXPIRY_WARNING_LEAD": value}
    found = app_settings.EXPIRY_WARNING_LEAD
    assert found == lead


def test_a_warning_lead_that_is_no_duration_is_a_clear_configuration_error(settings: Any) -> None:
    from nitro_assistants.conf import app_settings
    from nitro_assistants.exceptions import ConfigurationError

    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "EXPIRY_WARNING_LEAD": "15 min"}
    with pytest.raises(ConfigurationError, match="EXPIRY_WARNING_LEAD"):
        getattr(app_settings, "EXPIRY_WARNING_LEAD")  # noqa: B009 (read for its error)


def test_a_pause_that_allows_no_answer_saying_so_is_not_forced_and_not_retried(
    queued: list[Any], expire_rule: Policy, caplog: pytest.LogCaptureFixture
) -> None:
    pause = refund_pause(300)
    pause.tool_calls[0]["allowed_decisions"] = ["approve", "edit"]  # no reject, no respond
    review = mirror(pause)
    with caplog.at_level(logging.ERROR, logger="nitro_assistants"):
        assert governance.sweep_deadlines(now=at(31)) == {"failed": 1}
    assert "could not be expired" in caplog.text
    assert governance.sweep_deadlines(now=at(32)) == {}  # once, not every minute
    review.refresh_from_db()
    assert (review.status, review.expires_at) == ("pending", None)
    [failed] = Event.objects.filter(review=review, verb="expiry_failed")
    assert "allows neither reject nor respond" in failed.data["error"]
    assert not Decision.objects.filter(review=review).exists()
