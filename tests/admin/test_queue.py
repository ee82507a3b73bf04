"""The review queue (changelist): columns, order, filters, search and a flat query count."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nitro_assistants.models import Review
from tests.admin.conftest import make_reply_review, make_tool_review, review_url
from tests.factories import DeliveryFactory, ReviewFactory

pytestmark = pytest.mark.django_db
QUEUE = "/admin/nitro_assistants/review/"


def shown(response: Any) -> list[int]:
    return [review.pk for review in response.context["cl"].result_list]


def aged(review: Review, **delta: float) -> Review:
    Review.objects.filter(pk=review.pk).update(
        requested_at=timezone.now() - datetime.timedelta(**delta)
    )
    review.refresh_from_db()
    return review


def test_columns_show_what_is_held(reviewer_client: Client) -> None:
    tool = aged(make_tool_review(), minutes=30)
    reply = make_reply_review("Done! See you Tuesday at 10.\nBye")
    DeliveryFactory(thread=tool.thread, status="failed")
    response = reviewer_client.get(QUEUE)
    assert response.status_code == 200
    html = response.content.decode()
    for header in (
        "About",
        "Assistant",
        "Kind",
        "What is held",
        "Age",
        "Status",
        "Delivery",
    ):
        assert f">{header}<" in html or f">{header}</a>" in html, header
    # The call and its arguments (in the order the database keeps them: PostgreSQL's jsonb
    # sorts keys, SQLite keeps the assistant's order).
    held = re.search(r'<a class="nitro-held" href="[^"]*">(reschedule_appointment\(.*?)</a>', html)
    assert held, html
    for arg in ("&quot;appointment_id&quot;: 42", "&quot;day&quot;: &quot;Tuesday&quot;"):
        assert arg in held.group(1)
    assert "Done! See you Tuesday at 10.</a>" in html  # the reply's first line only
    assert "Bye" not in html
    assert '<td class="field-age">30 min</td>' in html
    assert f'href="{review_url(tool)}"' in html and f'href="{review_url(reply)}"' in html
    assert str(tool.thread.thread_id)[:8] in html
    assert '<td class="field-delivery">failed</td>' in html
    assert (
        f'<input type="checkbox" name="_selected_action" value="{tool.pk}" class="action-select" '
        f'aria-label="Select this object for an action - review #{tool.pk}">'
    ) in html


def test_oldest_pending_first_and_pending_by_default(reviewer_client: Client) -> None:
    newest = make_tool_review()
    oldest = aged(make_reply_review(), hours=3)
    middle = aged(make_tool_review(), hours=1)
    decided = aged(make_tool_review(status=Review.Status.APPLIED), days=2)
    assert shown(reviewer_client.get(QUEUE)) == [oldest.pk, middle.pk, newest.pk]
    everything = shown(reviewer_client.get(QUEUE, {"status": "all"}))
    assert everything == [oldest.pk, middle.pk, newest.pk, decided.pk]  # pending first
    assert shown(reviewer_client.get(QUEUE, {"status": "applied"})) == [decided.pk]


def test_filters(reviewer_client: Client) -> None:
    fresh = make_tool_review()
    hour = aged(make_reply_review(), minutes=20)
    day = aged(make_tool_review(assistant_key="tools"), hours=5)
    old = aged(make_tool_review(), days=3)
    DeliveryFactory(thread=hour.thread, status="delivered")
    DeliveryFactory(thread=day.thread, status="pending")
    DeliveryFactory(
        thread=old.thread,
        status="delivered",
        first_seen_at=timezone.now() - datetime.timedelta(days=1),
    )
    DeliveryFactory(thread=old.thread, status="failed")  # the latest one counts

    def only(**query: str) -> set[int]:
        return set(shown(reviewer_client.get(QUEUE, query)))

    assert only(kind="reply") == {hour.pk}
    assert only(kind="tool_calls") == {fresh.pk, day.pk, old.pk}
    assert only(assistant="tools") == {day.pk}
    assert only(age="5m") == {fresh.pk}
    assert only(age="1h") == {fresh.pk, hour.pk}
    assert only(age="1d") == {fresh.pk, hour.pk, day.pk}
    assert only(age="older") == {old.pk}
    assert only(delivery="delivered") == {hour.pk}
    assert only(delivery="pending") == {day.pk}
    assert only(delivery="failed") == {old.pk}
    assert only(delivery="none") == {fresh.pk}
    html = reviewer_client.get(QUEUE).content.decode()
    for label in (
        "under 5 minutes",
        "under 1 hour",
        "under 1 day",
        "older than 1 day",
        "no delivery",
    ):
        assert label in html


def test_search_by_thread_id_tool_name_and_text(reviewer_client: Client) -> None:
    tool = make_tool_review()
    other = make_tool_review(
        [
            {
                "id": "c9",
                "name": "cancel_appointment",
                "args": {"appointment_id": 7},
                "allowed_decisions": ["approve", "reject"],
            }
        ]
    )
    reply = make_reply_review("Your parcel ships on Friday")

    def found(term: str) -> set[int]:
        return set(shown(reviewer_client.get(QUEUE, {"q": term})))

    assert found(str(tool.thread.thread_id)) == {tool.pk}
    assert found(str(tool.thread.thread_id)[:8]) == {tool.pk}  # as the queue shows it
    assert found("cancel_appointment") == {other.pk}
    assert found("PARCEL ships") == {reply.pk}
    # Every customer asked for Tuesday: message text is searched too (tests/admin/test_subjects.py).
    assert found("Tuesday") == {tool.pk, other.pk, reply.pk}
    assert found("nothing like this") == set()


def _queue_queries(client: Client) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(QUEUE, {"status": "all"})
    assert response.status_code == 200
    return len(queries)


@pytest.mark.parametrize("client_fixture", ["reviewer_client", "superuser_client"])
def test_query_count_is_flat(request: pytest.FixtureRequest, client_fixture: str) -> None:
    client = request.getfixturevalue(client_fixture)
    review = make_tool_review()
    DeliveryFactory(thread=review.thread)
    one = _queue_queries(client)
    for index in range(99):
        if index % 2:
            extra = make_reply_review()
        else:
            extra = make_tool_review(
                status=Review.Status.APPLIED if index % 3 else Review.Status.PENDING
            )
        DeliveryFactory(thread=extra.thread, status=["pending", "delivered", "failed"][index % 3])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("nitro_assistants.admin.reviews.ReviewAdmin.list_per_page", 100)
        hundred = _queue_queries(client)
        response = client.get(QUEUE, {"status": "all"})
    assert len(response.context["cl"].result_list) == 100
    assert one == hundred
    assert hundred <= 10


def test_queue_page_of_many_decided_rows_renders(reviewer_client: Client) -> None:
    ReviewFactory.create_batch(3, status=Review.Status.SUPERSEDED)
    response = reviewer_client.get(QUEUE, {"status": "superseded"})
    assert len(shown(response)) == 3
    assert "Metrics" in response.content.decode()


def _status_filter(page: str) -> list[str]:
    """The status filter's choices, as the queue's sidebar lists them."""
    import re

    section = page.split("By status", 1)[1].split("</details>", 1)[0]
    return re.findall(r"(?:\?|&amp;)status=([a-z_]+)", section)


def test_the_status_filter_lists_the_statuses_of_the_kind_filtered(
    reviewer_client: Client,
) -> None:
    ReviewFactory()
    every = _status_filter(reviewer_client.get("/admin/nitro_assistants/review/").content.decode())
    assert {"decided", "applied", "answered", "executing", "completed"} <= set(every)
    tools = _status_filter(
        reviewer_client.get(
            "/admin/nitro_assistants/review/?kind__exact=tool_calls"
        ).content.decode()
    )
    assert set(tools) == {
        "pending",
        "decided",
        "applied",
        "failed",
        "superseded",
        "dismissed",
        "expired",
        "all",
    }
    plans = _status_filter(
        reviewer_client.get("/admin/nitro_assistants/review/?kind__exact=plan").content.decode()
    )
    assert "executing" in plans and "completed" in plans
    assert "decided" not in plans and "applied" not in plans


def test_with_no_kind_filtered_the_statuses_of_each_lifecycle_are_listed_apart(
    reviewer_client: Client,
) -> None:
    """Twelve statuses of two lifecycles (issue 40, item 10): those every kind can be in first,
    then the tool-call / reply / pause ones and the interaction ones under their headings."""
    import re

    page = reviewer_client.get("/admin/nitro_assistants/review/").content.decode()
    section = page.split("By status", 1)[1].split("</details>", 1)[0]
    heads = re.split(r'<li class="nitro-filter-group"><span>([^<]+)</span>', section)
    assert heads[1::2] == ["Tool calls, replies and pauses", "Questions, blueprints and plans"]
    listed = [re.findall(r"(?:\?|&amp;)status=([a-z_]+)", part) for part in heads[0::2]]
    assert listed == [
        ["pending", "failed", "superseded", "dismissed", "expired"],
        ["decided", "applied"],
        [
            "answered",
            "accepted",
            "revision_requested",
            "cancelled",
            "executing",
            "completed",
            "all",
        ],
    ]
    # One kind filtered: its lifecycle's statuses, no headings.
    plans = reviewer_client.get("/admin/nitro_assistants/review/?kind__exact=plan")
    section = plans.content.decode().split("By status", 1)[1].split("</details>", 1)[0]
    assert "nitro-filter-group" not in section


def test_a_long_call_in_the_queue_keeps_its_ellipsis_not_a_dangling_colon() -> None:
    """The demo's $480 refund read `refund("amount": 480, ..., "appointment_id":)`: the cut
    object's "…" was taken for its closing brace."""
    from nitro_assistants.admin.conversation import held_summary

    review = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "refund",
                "args": {"amount": 480, "reason": "water damage", "appointment_id": 42},
                "allowed_decisions": ["approve", "reject"],
            }
        ]
    )
    summary = held_summary(review)
    assert summary.startswith('refund("amount": 480') and summary.endswith("…)")
    short = make_tool_review()
    assert held_summary(short) == (
        'reschedule_appointment("appointment_id": 42, "day": "Tuesday", "time": "10:00")'
    )
