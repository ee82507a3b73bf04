"""The stop button (issue 36): new runs refused, running runs cancelled, pending reviews frozen
on every way a review ends, staged resume, the banner, the API's 409, the command, the audit."""

from __future__ import annotations

import datetime
import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from nitro_assistants import services, signals
from nitro_assistants.exceptions import (
    InvalidArgumentError,
    ReviewsStoppedError,
    RunError,
    RunsStoppedError,
)
from nitro_assistants.models import ApiKey, Event, Policy, Review, Run, Stop, Thread
from nitro_assistants.services import governance, stops
from nitro_assistants.testing import FakeAssistant, fake_assistants
from tests.governance.conftest import approve, mirrored, reviewer

pytestmark = pytest.mark.django_db


@pytest.fixture
def fake_assistant() -> Iterator[FakeAssistant]:
    with fake_assistants() as fake:
        yield fake


def stopper(username: str = "ops") -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="stop_assistants"))
    return User.objects.get(pk=user.pk)


def decider(username: str = "dana") -> User:
    user = reviewer(username)
    user.user_permissions.add(Permission.objects.get(codename="decide_review"))
    return User.objects.get(pk=user.pk)


def test_a_stop_freezes_every_way_a_review_ends_with_who_what_and_why(
    fake_assistant: FakeAssistant,
) -> None:
    review = mirrored(30)
    ops = stopper()
    stops.stop(ops, scope="assistant", assistant="walkthrough", reason="refunds look wrong")

    with pytest.raises(ReviewsStoppedError) as refused:
        services.decide(review, decider(), approve(review), via="admin")
    message = str(refused.value)
    assert "Assistant 'walkthrough' stopped by ops" in message
    assert "ops" in message and "refunds look wrong" in message
    with pytest.raises(ReviewsStoppedError):
        services.decide(review, None, approve(review))  # the host's own code too
    with pytest.raises(ReviewsStoppedError):
        services.dismiss(review, None)
    assert fake_assistant.called("dismiss") == []
    review.refresh_from_db()
    assert review.status == "pending"


def test_another_assistants_review_is_not_frozen(fake_assistant: FakeAssistant) -> None:
    review = mirrored(30)
    stops.stop(stopper(), scope="assistant", assistant="refunds", reason="x")
    stops.stop(stopper("ops2"), scope="tool", tool="send_sms", reason="x")
    assert services.decide(review, None, approve(review)).review == review


def test_a_tools_stop_freezes_the_reviews_holding_a_call_to_it() -> None:
    review = mirrored(30)
    stops.stop(stopper(), scope="tool", tool="refund_customer", reason="bad tool")
    with pytest.raises(ReviewsStoppedError, match="Tool 'refund_customer' stopped"):
        services.decide(review, None, approve(review))
    # A tool's stop refuses no run: a run names no tool.
    assert stops.stop_for_run(review.thread, "walkthrough") is None


def test_no_rule_or_deadline_decides_a_frozen_review(refund_rules: dict[str, Policy]) -> None:
    auto = mirrored(30)  # "small refunds" approves it at once
    due = mirrored(300)  # reviewed by people, with a deadline
    stops.stop(stopper(), scope="all", reason="incident 12")

    assert governance.apply_policy(auto.pk) is None
    later = timezone.now() + datetime.timedelta(days=30)
    assert governance.sweep_deadlines(now=later).get("stopped", 0) >= 1
    for review in (auto, due):
        review.refresh_from_db()
        assert review.status == "pending"
    assert not Event.objects.filter(verb="review_auto_decided").exists()


def test_a_staged_resume_lets_reviews_be_decided_then_runs_start(
    fake_assistant: FakeAssistant, django_capture_on_commit_callbacks: Any
) -> None:
    review = mirrored(30)
    ops = stopper()
    row = stops.stop(ops, scope="thread", thread=review.thread, reason="customer complained")
    with pytest.raises(RunsStoppedError, match="customer complained"):
        services.start_run(review.thread, "hello")
    assert (
        not Run.objects.filter(thread=review.thread, kind="run").exclude(pk=review.run_id).exists()
    )

    sent: list[dict[str, Any]] = []
    signals.resumed.connect(lambda sender, **kw: sent.append(kw), weak=False, dispatch_uid="t")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            stops.resume(row, ops, stage="reviews")
        assert services.decide(review, None, approve(review)).review == review
        with pytest.raises(RunsStoppedError):
            services.start_run(review.thread, "hello")
        with django_capture_on_commit_callbacks(execute=True):
            stops.resume(row, ops, stage="all")
            stops.resume(row, ops, stage="all")  # twice: nothing more
    finally:
        signals.resumed.disconnect(dispatch_uid="t")
    assert services.start_run(review.thread, "hello").kind == "run"
    assert [kw["stage"] for kw in sent] == ["reviews", "all"]
    row.refresh_from_db()
    assert row.resumed_by == ops and row.reviews_resumed_at and row.resumed_at
    verbs = list(Event.objects.filter(thread=review.thread).values_list("verb", flat=True))
    assert "assistants_stopped" in verbs
    assert verbs.count("assistants_resumed") == 2


def test_a_stop_of_everything_refuses_a_new_thread(fake_assistant: FakeAssistant) -> None:
    stops.stop(stopper(), scope="all", reason="all hands")
    with pytest.raises(RunsStoppedError, match="All assistants stopped by ops"):
        services.start_run("walkthrough", "hello")
    assert not Thread.objects.exists()


def test_a_run_queued_before_the_stop_is_never_sent(fake_assistant: FakeAssistant) -> None:
    run = services.start_run("walkthrough", "hello")
    stops.stop(stopper(), scope="assistant", assistant="walkthrough", reason="hold on")
    run = services.execute_run(run.pk)
    assert run.status == "failed" and "hold on" in run.error
    assert fake_assistant.called("run") == []


def test_running_runs_are_cancelled_and_a_failed_cancel_keeps_the_stop(
    fake_assistant: FakeAssistant, django_capture_on_commit_callbacks: Any
) -> None:
    threads = [Thread.objects.create(assistant_key="walkthrough") for _ in range(2)]
    for n, thread in enumerate(threads):
        Run.objects.create(thread=thread, status="running", remote_run_id=f"remote-{n}")
    fake_assistant.fail_next("cancel_run", RunError("502 Bad Gateway", transient=True))
    sent: list[dict[str, Any]] = []
    signals.stopped.connect(lambda sender, **kw: sent.append(kw), weak=False, dispatch_uid="t")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            row = stops.stop(stopper(), scope="all", reason="incident")
            assert fake_assistant.called("cancel_run") == []  # not before the stop commits
    finally:
        signals.stopped.disconnect(dispatch_uid="t")
    assert [c["run_id"] for c in fake_assistant.called("cancel_run")] == ["remote-0", "remote-1"]
    row.refresh_from_db()
    assert row.cancelled_runs == ["remote-1"]
    assert row.cancel_failures == [{"run": "remote-0", "error": "502 Bad Gateway"}]
    assert row.in_force
    assert sent[0]["failures"] == row.cancel_failures
    assert Event.objects.filter(verb="stop_cancel_failed", thread=threads[0]).exists()
    assert Event.objects.filter(verb="run_cancelled", thread=threads[1]).exists()


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"scope": "everything"}, "Invalid stop scope"),
        ({"scope": "assistant"}, "needs the assistant"),
        ({"scope": "tool"}, "needs the tool"),
        ({"scope": "thread"}, "needs the thread"),
        ({"scope": "all", "reason": "  "}, "needs a reason"),
    ],
)
def test_a_bad_stop_is_refused(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidArgumentError, match=problem):
        stops.stop(None, **{"reason": "r", **fields})
    assert not Stop.objects.exists()


def test_the_api_answers_409_with_the_stop(client: Client, fake_assistant: FakeAssistant) -> None:
    review = mirrored(30)
    user = decider()
    key = ApiKey.generate(user, "tests")[1]
    stops.stop(stopper(), scope="all", reason="incident 7")
    response = client.post(
        f"/nitro/api/reviews/{review.pk}/decide",
        data=json.dumps(approve(review)),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    body = response.json()
    assert response.status_code == 409, body
    assert body["code"] == "conflict" and "incident 7" in body["message"]
    review.refresh_from_db()
    assert review.status == "pending"


def test_the_admin_stops_shows_a_banner_and_resumes_in_stages(
    fake_assistant: FakeAssistant,
) -> None:
    ops = stopper()
    ops.user_permissions.add(Permission.objects.get(codename="view_review"))
    browser = Client()
    browser.force_login(ops)
    assert "nitro-stop-banner" not in browser.get("/admin/").content.decode()

    response = browser.post(
        "/admin/nitro_assistants/stop/add/", {"scope": "assistant", "reason": "x"}
    )
    assert response.status_code == 200
    assert "needs the assistant" in response.content.decode()
    response = browser.post(
        "/admin/nitro_assistants/stop/add/",
        {"scope": "assistant", "assistant": "walkthrough", "reason": "refunds look wrong"},
    )
    assert response.status_code == 302
    row = Stop.objects.get()
    assert row.stopped_by == ops

    for page in ("/admin/", "/admin/nitro_assistants/review/"):
        html = browser.get(page).content.decode()
        assert "nitro-stop-banner" in html and "refunds look wrong" in html

    changelist = "/admin/nitro_assistants/stop/"
    browser.post(changelist, {"action": "resume_reviews", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.reviews_resumed_at is not None and row.in_force
    assert "new runs still refused" in browser.get("/admin/").content.decode()
    browser.post(changelist, {"action": "resume_all", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert not row.in_force
    assert "nitro-stop-banner" not in browser.get("/admin/").content.decode()


def test_stopping_needs_the_permission() -> None:
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    response = browser.post(
        "/admin/nitro_assistants/stop/add/", {"scope": "all", "reason": "no right"}
    )
    assert response.status_code == 403
    assert not Stop.objects.exists()


def test_the_command_stops_lists_and_resumes(fake_assistant: FakeAssistant) -> None:
    stopper("ops")
    out = io.StringIO()
    call_command(
        "nitro_assistants_stop",
        "stop",
        "--tool",
        "refund_customer",
        "--reason",
        "r1",
        "--as",
        "ops",
        stdout=out,
    )
    row = Stop.objects.get()
    assert row.stopped_by_name == "ops" and row.tool == "refund_customer"
    out = io.StringIO()
    call_command("nitro_assistants_stop", "list", stdout=out)
    assert "Tool 'refund_customer' stopped by ops" in out.getvalue()
    call_command("nitro_assistants_stop", "resume", str(row.pk), "--reviews-only", stdout=out)
    row.refresh_from_db()
    assert row.reviews_resumed_at and row.in_force
    call_command("nitro_assistants_stop", "resume", str(row.pk), stdout=out)
    row.refresh_from_db()
    assert not row.in_force
    User.objects.create_user("nobody")
    with pytest.raises(CommandError, match="lacks"):
        call_command("nitro_assistants_stop", "stop", "--all", "--reason", "x", "--as", "nobody")
    with pytest.raises(CommandError, match="No thread"):
        call_command("nitro_assistants_stop", "stop", "--thread", "not-a-uuid", "--reason", "x")


def test_a_frozen_review_is_still_listed_pending() -> None:
    review = mirrored(30)
    stops.stop(None, scope="all", reason="x")
    assert Review.objects.filter(pk=review.pk, status="pending").exists()


@pytest.mark.postgresql("row locks")
@pytest.mark.django_db(transaction=True)
def test_two_racing_resumes_resume_once() -> None:
    row = stops.stop(stopper(), scope="all", reason="racing")
    barrier = threading.Barrier(2)

    def resume() -> None:
        barrier.wait()
        try:
            stops.resume(row.pk, None, stage="all")
        finally:
            connection.close()

    racers = [threading.Thread(target=resume) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert Event.objects.filter(verb="assistants_resumed").count() == 1
    assert not Stop.objects.get(pk=row.pk).in_force


@pytest.mark.postgresql("row locks")
@pytest.mark.django_db(transaction=True)
def test_a_decision_racing_a_stop_is_recorded_before_it_or_refused() -> None:
    reviews = [mirrored(30) for _ in range(20)]
    barrier = threading.Barrier(2)
    refused: list[int] = []

    def decide_all() -> None:
        barrier.wait()
        try:
            for review in reviews:
                try:
                    services.decide(review, None, approve(review))
                except ReviewsStoppedError:
                    refused.append(review.pk)
        finally:
            connection.close()

    def stop_all() -> None:
        barrier.wait()
        try:
            stops.stop(None, scope="all", reason="race")
        finally:
            connection.close()

    racers = [threading.Thread(target=decide_all), threading.Thread(target=stop_all)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    # Every review has one outcome: decided (before the stop committed) or still pending.
    for review in reviews:
        review.refresh_from_db()
        assert (review.status == "pending") == (review.pk in refused), review.status
    # Once the stop was seen, every later review was refused: decisions never resume after it.
    decided = [r.pk for r in reviews if r.pk not in refused]
    assert decided == [r.pk for r in reviews[: len(decided)]]


def test_a_tools_stop_freezes_an_agent_inbox_request_for_it() -> None:
    thread = Thread.objects.create(assistant_key="inbox")
    review = Review.objects.create(
        thread=thread,
        kind="inbox",
        interrupt_ids=["i1"],
        payload={
            "pauses": [
                {
                    "interrupt_id": "i1",
                    "kind": "inbox",
                    "value": None,
                    "action_request": {"action": "send_refund", "args": {"amount": 5}},
                }
            ]
        },
    )
    assert stops.stop_for_review(review) is None
    row = stops.stop(None, scope="tool", tool="send_refund", reason="x")
    assert stops.stop_for_review(review) == row
    with pytest.raises(ReviewsStoppedError):
        services.decide(review, None, {"revision": review.revision, "digest": review.digest})


def test_the_banner_shows_on_djangos_own_admin_site_too(rf: Any) -> None:
    """A project that keeps ``django.contrib.admin``'s site (no StopBannerMixin, so no
    ``nitro_stops`` in the page's context) still gets the banner: the app's base_site.html reads
    the stops itself, for signed-in staff only."""
    from django.contrib.admin import AdminSite
    from django.contrib.auth.models import AnonymousUser
    from django.template.loader import render_to_string

    site = AdminSite()  # Django's own, as a project that keeps django.contrib.admin has it

    ops = stopper()
    stops.stop(ops, scope="assistant", assistant="walkthrough", reason="refunds look wrong")
    request = rf.get("/admin/")
    request.user = ops
    context = site.each_context(request)
    assert "nitro_stops" not in context  # Django's own site: nothing of ours in it
    html = render_to_string("admin/base_site.html", context, request=request)
    assert "nitro-stop-banner" in html and "refunds look wrong" in html
    assert 'href="/admin/nitro_assistants/stop/"' in html
    request.user = AnonymousUser()
    html = render_to_string("admin/base_site.html", site.each_context(request), request)
    assert "nitro-stop-banner" not in html  # the login page tells nobody
