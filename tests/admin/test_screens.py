"""Thread, delivery, event and metrics screens."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone

from nitro_assistants.admin import metrics
from nitro_assistants.exceptions import ThreadStateError
from nitro_assistants.models import Decision, Event, Review, Run
from nitro_assistants.services.audit import record_event
from nitro_assistants.testing import FakeAssistant, fake_assistants
from tests.admin.conftest import make_reply_review, make_tool_review
from tests.factories import DecisionFactory, DeliveryFactory, RunFactory

pytestmark = pytest.mark.django_db


def thread_url(review: Review) -> str:
    return f"/admin/nitro_assistants/thread/{review.thread_id}/change/"


def test_thread_page_shows_conversation_runs_reviews_deliveries_and_events(
    reviewer_client: Client,
) -> None:
    review = make_tool_review()
    RunFactory(thread=review.thread, status=Run.Status.INTERRUPTED, remote_run_id="remote-1")
    DeliveryFactory(thread=review.thread, message_id="ai-9", status="failed", error="gateway down")
    record_event(review.thread, "review_requested", review=review, kind="tool_calls")
    response = reviewer_client.get(thread_url(review))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="nitro-msg nitro-human"' in html
    assert "Can I move my appointment to Tuesday?" in html
    assert "remote-1" in html  # runs
    assert f"#{review.pk}</a>" in html  # reviews, linking to the review screen
    assert "gateway down" in html  # deliveries
    assert "review_requested" in html  # audit events
    assert "Sync from server" in html


def test_sync_from_server_mirrors_the_thread(reviewer_client: Client) -> None:
    review = make_tool_review()
    messages = [
        *review.thread.messages,
        {"type": "tool", "id": "t1", "name": "reschedule_appointment", "content": "moved"},
        {"type": "ai", "id": "a2", "content": "Done! moved"},
    ]
    with fake_assistants(FakeAssistant(state={"values": {"messages": messages}, "next": []})):
        response = reviewer_client.post(
            f"/admin/nitro_assistants/thread/{review.thread_id}/sync/", follow=True
        )
    assert "Thread synced from the server." in [str(m) for m in get_messages(response.wsgi_request)]
    review.refresh_from_db()
    assert review.status == Review.Status.SUPERSEDED  # the pause vanished on the server
    assert review.thread.messages[-1]["content"] == "Done! moved"
    assert "Done! moved" in response.content.decode()


def test_sync_action_reports_failures(reviewer_client: Client) -> None:
    review = make_tool_review()
    down = FakeAssistant(raises={"thread_state": ThreadStateError("Server answered 500: boom")})
    with fake_assistants(down):
        response = reviewer_client.post(
            "/admin/nitro_assistants/thread/",
            {"action": "sync_selected", "_selected_action": [review.thread_id]},
            follow=True,
        )
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert messages == [
        f"Could not sync thread {review.thread.thread_id}: Server answered 500: boom"
    ]
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING


def test_sync_needs_post(reviewer_client: Client) -> None:
    review = make_tool_review()
    response = reviewer_client.get(f"/admin/nitro_assistants/thread/{review.thread_id}/sync/")
    assert response.status_code == 405


def test_deliveries_failed_then_stuck_pending_first(reviewer_client: Client) -> None:
    now = timezone.now()
    delivered = DeliveryFactory(status="delivered", first_seen_at=now - datetime.timedelta(hours=5))
    fresh = DeliveryFactory(status="pending", first_seen_at=now)
    stuck = DeliveryFactory(status="pending", first_seen_at=now - datetime.timedelta(hours=1))
    failed = DeliveryFactory(status="failed", first_seen_at=now - datetime.timedelta(minutes=1))
    response = reviewer_client.get("/admin/nitro_assistants/delivery/")
    assert [d.pk for d in response.context["cl"].result_list] == [
        failed.pk,
        stuck.pk,
        fresh.pk,
        delivered.pk,
    ]
    stuck_only = reviewer_client.get("/admin/nitro_assistants/delivery/", {"stuck": "yes"})
    assert [d.pk for d in stuck_only.context["cl"].result_list] == [stuck.pk]
    by_status = reviewer_client.get(
        "/admin/nitro_assistants/delivery/", {"status__exact": "failed"}
    )
    assert [d.pk for d in by_status.context["cl"].result_list] == [failed.pk]
    DeliveryFactory(status="failed", tool="send_email")
    by_tool = reviewer_client.get("/admin/nitro_assistants/delivery/", {"tool": "send_email"})
    assert [d.tool for d in by_tool.context["cl"].result_list] == ["send_email"]


def test_events_are_read_only(superuser_client: Client) -> None:
    review = make_tool_review()
    event = record_event(review.thread, "review_requested", review=review, kind="tool_calls")
    listing = superuser_client.get("/admin/nitro_assistants/event/")
    assert listing.status_code == 200
    assert "review_requested" in listing.content.decode()
    page = superuser_client.get(f"/admin/nitro_assistants/event/{event.pk}/change/")
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    assert (
        superuser_client.post(f"/admin/nitro_assistants/event/{event.pk}/change/", {}).status_code
        == 403
    )
    assert (
        superuser_client.post(
            f"/admin/nitro_assistants/event/{event.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )
    assert Event.objects.filter(pk=event.pk).exists()
    assert "delete_selected" not in listing.content.decode()


def test_metrics_page_shows_the_figures_and_svg_charts(reviewer_client: Client) -> None:
    now = timezone.now()
    make_tool_review()
    make_tool_review()
    make_reply_review()
    for minutes, tool_calls, reply, channel in [
        (
            2,
            [{"id": "a", "action": "approve"}, {"id": "b", "action": "edit", "args": {}}],
            None,
            "slack",
        ),
        (4, None, {"action": "reject", "message": "no"}, "email"),
        (10, [{"id": "c", "action": "respond", "message": "done"}], None, "admin"),
    ]:
        decision = DecisionFactory(
            tool_calls=tool_calls,
            reply=reply,
            decided_at=now,
            review__status="applied",
            channel=channel,
        )
        Review.objects.filter(pk=decision.review_id).update(
            requested_at=now - datetime.timedelta(minutes=minutes)
        )
    DeliveryFactory(status="delivered")
    DeliveryFactory(status="failed")
    response = reviewer_client.get("/admin/nitro_assistants/review/metrics/")
    assert response.status_code == 200
    metrics = response.context["metrics"]
    assert metrics["pending_total"] == 3
    assert metrics["median_all"] == "4.0 min"
    assert metrics["decisions_total"] == 3
    assert metrics["rates"] == {"approve": 25.0, "edit": 25.0, "reject": 25.0, "respond": 25.0}
    assert metrics["channels"] == {
        "code": 0,
        "admin": 1,
        "api": 0,
        "slack": 1,
        "email": 1,
        "policy": 0,
        "grant": 0,
        "deadline": 0,
    }
    html = response.content.decode()
    assert html.count("<svg viewBox=") == 5
    for title in (
        "Pending reviews by kind",
        "Median time to decision per day",
        "Decisions by action",
        "Decisions by channel",
        "Delivery outcomes per day",
    ):
        assert title in html
    assert "<script" not in html.split('id="content-main"')[1]  # no chart library, no network
    assert Decision.objects.count() == 3


def decided_after(minutes: float, at: datetime.datetime) -> Decision:
    decision = DecisionFactory(reply={"action": "approve"}, decided_at=at)
    Review.objects.filter(pk=decision.review_id).update(
        requested_at=at - datetime.timedelta(minutes=minutes)
    )
    return decision


def test_median_time_to_decision_per_day_and_overall(
    reviewer_client: Client, django_assert_max_num_queries: Any
) -> None:
    """The median of an even count is the mean of the two middle values (as PostgreSQL's
    ``percentile_cont(0.5)``), on every database; days outside the window do not count."""
    now = timezone.now().replace(hour=12)
    yesterday = now - datetime.timedelta(days=1)
    for minutes in (7, 1, 5, 3):
        decided_after(minutes, yesterday)
    for minutes in (10, 2):
        decided_after(minutes, now)
    decided_after(500, now - datetime.timedelta(days=30))
    recent = Decision.objects.filter(decided_at__gte=now - datetime.timedelta(days=14))
    with django_assert_max_num_queries(1):
        overall = metrics.medians(recent)
    assert overall == {None: datetime.timedelta(minutes=4)}  # of 1 2 3 5 7 10
    with django_assert_max_num_queries(1):
        per_day = metrics.medians(recent, by_day=True)
    assert per_day == {
        yesterday.date(): datetime.timedelta(minutes=4),  # of 1 3 5 7
        now.date(): datetime.timedelta(minutes=6),  # of 2 10
    }
    decided_after(4.5, now)
    assert metrics.medians(recent, by_day=True)[now.date()] == datetime.timedelta(minutes=4.5)

    response = reviewer_client.get("/admin/nitro_assistants/review/metrics/")
    assert response.status_code == 200
    assert response.context["metrics"]["median_all"] == "4.5 min"  # of 1 2 3 4.5 5 7 10
    chart = response.context["metrics"]["charts"][1]
    assert [bar.shown for bar in chart.bars] == ["4.0 min", "4.5 min"]


def test_metrics_page_with_no_data(reviewer_client: Client) -> None:
    response = reviewer_client.get("/admin/nitro_assistants/review/metrics/")
    assert response.status_code == 200
    assert response.content.decode().count("No data in this period.") == 5


def test_every_list_and_detail_page_renders(superuser_client: Client) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    review = make_tool_review()
    run = RunFactory(thread=review.thread)
    decision = DecisionFactory(review=make_reply_review(status="decided"))
    delivery = DeliveryFactory(thread=review.thread)
    event = record_event(review.thread, "run_requested", run=run)
    pages = {
        "thread": review.thread_id,
        "run": run.pk,
        "decision": decision.pk,
        "delivery": delivery.pk,
        "event": event.pk,
    }
    for model, pk in pages.items():
        with CaptureQueriesContext(connection) as queries:
            listing = superuser_client.get(f"/admin/nitro_assistants/{model}/")
        assert listing.status_code == 200, model
        assert len(queries) <= 12, (model, len(queries))
        assert (
            superuser_client.get(f"/admin/nitro_assistants/{model}/{pk}/change/").status_code == 200
        )
    assert superuser_client.get("/admin/nitro_assistants/").status_code == 200


def test_a_form_without_its_stamp_is_refused(reviewer_client: Client) -> None:
    review = make_tool_review()
    response = reviewer_client.post(
        f"/admin/nitro_assistants/review/{review.pk}/review/", {"call-0-action": "approve"}
    )
    assert response.status_code == 409
    assert not Decision.objects.exists()
