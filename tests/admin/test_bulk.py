"""Bulk approve and reject: each item through services.decide, refused one by one, counted."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from nitro_assistants.models import Decision, Review
from tests.admin.conftest import make_reply_review, make_tool_review
from tests.factories import ReviewFactory

pytestmark = pytest.mark.django_db
QUEUE = "/admin/nitro_assistants/review/"


def texts(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def mixed() -> dict[str, Review]:
    return {
        "tool": make_tool_review(),
        "reply": make_reply_review(),
        "decided": make_tool_review(status=Review.Status.DECIDED),
        "superseded": make_reply_review(status=Review.Status.SUPERSEDED),
        "question": ReviewFactory(
            kind=Review.Kind.QUESTION, payload={"interaction": {"title": "?"}}
        ),
        "no_approve": make_tool_review(
            [
                {
                    "id": "c1",
                    "name": "cancel_appointment",
                    "args": {"appointment_id": 1},
                    "allowed_decisions": ["reject"],
                }
            ]
        ),
    }


def select(reviews: dict[str, Review]) -> list[int]:
    return [review.pk for review in reviews.values()]


def test_bulk_approve_applies_what_it_can_and_refuses_the_rest_one_by_one(
    reviewer_client: Client, reviewer: Any
) -> None:
    reviews = mixed()
    response = reviewer_client.post(
        QUEUE,
        {"action": "approve_selected", "_selected_action": select(reviews), "post": "yes"},
        follow=True,
    )
    assert response.status_code == 200
    decided = {d.review_id: d for d in Decision.objects.all()}
    assert set(decided) == {reviews["tool"].pk, reviews["reply"].pk}
    assert decided[reviews["tool"].pk].tool_calls == [{"id": "call_1", "action": "approve"}]
    assert decided[reviews["reply"].pk].reply == {"action": "approve"}
    assert all(d.decided_by == reviewer for d in decided.values())
    messages = texts(response)
    assert "2 reviews approved." in messages
    assert "4 reviews refused." in messages
    assert (
        f"Review #{reviews['decided'].pk} refused: Review #{reviews['decided'].pk} was already decided."
        in messages
    )
    assert any(
        m.startswith(f"Review #{reviews['superseded'].pk} refused:") and "superseded" in m
        for m in messages
    )
    assert (
        f"Review #{reviews['question'].pk} refused: A question review is decided on its own screen."
        in messages
    )
    assert any(
        m.startswith(f"Review #{reviews['no_approve'].pk} refused: Invalid review action `approve`")
        for m in messages
    )


def test_singular_summary(reviewer_client: Client) -> None:
    review = make_tool_review()
    response = reviewer_client.post(
        QUEUE,
        {"action": "approve_selected", "_selected_action": [review.pk], "post": "yes"},
        follow=True,
    )
    assert "1 review approved." in texts(response)


def test_bulk_approve_asks_for_confirmation_listing_what_each_approves(
    reviewer_client: Client,
) -> None:
    reviews = mixed()
    data = {"action": "approve_selected", "_selected_action": select(reviews)}
    page = reviewer_client.post(QUEUE, data)
    assert page.status_code == 200
    assert not Decision.objects.exists()  # nothing is approved by the first click
    html = page.content.decode()
    assert "Approve these 6 reviews?" in html
    assert html.count('name="_selected_action"') == 6
    assert '<input type="hidden" name="action" value="approve_selected">' in html
    assert '<input type="hidden" name="post" value="yes">' in html
    assert "reschedule_appointment" in html and "Done! See you Tuesday at 10." in html
    # What will not go through is said before anything is decided.
    assert "(will be refused: it is decided)" in html
    assert "(will be refused: A question review is decided on its own screen.)" in html
    assert "(will be refused: cancel_appointment cannot be approved)" in html
    tool_line = next(line for line in html.splitlines() if f"#{reviews['tool'].pk} " in line)
    assert "will be refused" not in tool_line

    done = reviewer_client.post(QUEUE, {**data, "post": "yes"}, follow=True)
    assert set(Decision.objects.values_list("review_id", flat=True)) == {
        reviews["tool"].pk,
        reviews["reply"].pk,
    }
    assert "2 reviews approved." in texts(done)


def test_the_approve_confirmation_carries_what_the_queue_showed(reviewer_client: Client) -> None:
    """The queue posts each ticked row's revision and digest; the confirmation page posts them
    on, so the decision is still checked against what the queue showed."""
    review = make_tool_review()
    stamp = f"{review.revision}:{review.digest}"
    data = {
        "action": "approve_selected",
        "_selected_action": [review.pk],
        f"nitro-shown-{review.pk}": stamp,
    }
    page = reviewer_client.post(QUEUE, data).content.decode()
    assert f'<input type="hidden" name="nitro-shown-{review.pk}" value="{stamp}">' in page
    assert not Decision.objects.exists()


def test_bulk_approve_across_every_page_of_the_filter(reviewer_client: Client) -> None:
    reviews = [make_tool_review() for _ in range(3)]
    data = {
        "action": "approve_selected",
        "_selected_action": [reviews[0].pk],
        "select_across": "1",
        "index": "0",
    }
    page = reviewer_client.post(QUEUE, data)
    html = page.content.decode()
    assert "Approve these 3 reviews?" in html
    assert '<input type="hidden" name="select_across" value="1">' in html
    assert not Decision.objects.exists()
    done = reviewer_client.post(QUEUE, {**data, "post": "yes"}, follow=True)
    assert set(Decision.objects.values_list("review_id", flat=True)) == {r.pk for r in reviews}
    assert "3 reviews approved." in texts(done)


def test_bulk_reject_asks_one_reason_on_an_intermediate_page(reviewer_client: Client) -> None:
    reviews = {
        "tool": make_tool_review(),
        "reply": make_reply_review(),
        "decided": make_tool_review(status="applied"),
    }
    data = {"action": "reject_selected", "_selected_action": select(reviews)}
    page = reviewer_client.post(QUEUE, data)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Reject these 3 reviews?" in html
    assert 'name="reason"' in html
    assert html.count('name="_selected_action"') == 3
    assert not Decision.objects.exists()

    missing = reviewer_client.post(QUEUE, {**data, "post": "yes", "reason": "  "})
    assert missing.status_code == 200
    assert (
        "This field is required." in missing.content.decode()
        or "Say why" in missing.content.decode()
    )
    assert not Decision.objects.exists()

    done = reviewer_client.post(
        QUEUE, {**data, "post": "yes", "reason": "Spam thread."}, follow=True
    )
    decided = {d.review_id: d for d in Decision.objects.all()}
    assert set(decided) == {reviews["tool"].pk, reviews["reply"].pk}
    assert decided[reviews["tool"].pk].tool_calls == [
        {"id": "call_1", "action": "reject", "message": "Spam thread."}
    ]
    assert decided[reviews["reply"].pk].reply == {"action": "reject", "message": "Spam thread."}
    assert {d.note for d in decided.values()} == {"Spam thread."}
    messages = texts(done)
    assert "2 reviews rejected." in messages
    assert "1 review refused." in messages


def test_bulk_reject_across_every_page_of_the_filter(reviewer_client: Client) -> None:
    reviews = [make_tool_review() for _ in range(3)]
    make_tool_review(status=Review.Status.APPLIED)  # not in the pending queue: left alone
    data = {
        "action": "reject_selected",
        "_selected_action": [reviews[0].pk],
        "select_across": "1",
        "index": "0",
    }
    page = reviewer_client.post(QUEUE, data)
    html = page.content.decode()
    assert "Reject these 3 reviews?" in html
    assert '<input type="hidden" name="select_across" value="1">' in html
    done = reviewer_client.post(QUEUE, {**data, "post": "yes", "reason": "Spam."}, follow=True)
    assert set(Decision.objects.values_list("review_id", flat=True)) == {r.pk for r in reviews}
    assert "3 reviews rejected." in texts(done)


#: Ticked ids that are no primary key: not a number, a float, padded, underscored, a digit that
#: is not ASCII, past the largest key, zero, negative, a NUL.
NOT_IDS = ["abc", "1e3", " 1", "1 ", "1_0", "²", "99999999999999999999", "0", "-1", "\x00"]


@pytest.mark.parametrize("bad", NOT_IDS)
@pytest.mark.parametrize(
    "posted",
    [
        {"action": "approve_selected"},  # the confirmation page
        {"action": "approve_selected", "post": "yes"},
        {"action": "reject_selected"},
        {"action": "reject_selected", "post": "yes", "reason": "Not today"},
        {"action": "export_audit_csv"},
    ],
    ids=["approve-confirm", "approve", "reject-ask", "reject", "export"],
)
def test_a_ticked_id_that_is_no_pk_is_a_400_and_decides_nothing(
    reviewer_client: Client, posted: dict[str, str], bad: str
) -> None:
    good = make_tool_review()
    response = reviewer_client.post(QUEUE, {**posted, "_selected_action": [str(good.pk), bad]})
    assert response.status_code == 400
    page = response.content.decode()
    assert "is not the id of any review: nothing was done." in page
    good.refresh_from_db()
    assert good.status == Review.Status.PENDING
    assert not Decision.objects.exists()


@pytest.mark.parametrize(
    ("path", "action"),
    [
        ("thread", "sync_selected"),
        ("apikey", "revoke"),
        ("policy", "delete_selected"),
        ("notificationpreference", "delete_selected"),
    ],
)
def test_a_ticked_id_that_is_no_pk_is_a_400_on_the_apps_other_lists(
    superuser_client: Client, path: str, action: str
) -> None:
    response = superuser_client.post(
        f"/admin/nitro_assistants/{path}/", {"action": action, "_selected_action": ["abc"]}
    )
    assert response.status_code == 400
