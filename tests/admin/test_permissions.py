"""Who may look and who may decide: anonymous, staff without the permission, a reviewer (with
``nitro_assistants.decide_review``), a superuser. CSRF on every POST."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from nitro_assistants.models import Decision, Review
from tests.admin.conftest import make_tool_review, review_url, stamp

pytestmark = pytest.mark.django_db
QUEUE = "/admin/nitro_assistants/review/"
METRICS = "/admin/nitro_assistants/review/metrics/"


def approve(client: Client, review: Review) -> Any:
    return client.post(review_url(review), {**stamp(review), "call-0-action": "approve"})


def bulk_approve(client: Client, review: Review) -> Any:
    """The confirmed bulk approve (the second POST, from its confirmation page)."""
    data = {"action": "approve_selected", "_selected_action": [review.pk], "post": "yes"}
    return client.post(QUEUE, data)


def test_anonymous_is_sent_to_the_login_page() -> None:
    client = Client()
    review = make_tool_review()
    for url in (QUEUE, METRICS, review_url(review)):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")
    assert approve(client, review).status_code == 302
    assert bulk_approve(client, review).status_code == 302
    sync = client.post(f"/admin/nitro_assistants/thread/{review.thread_id}/sync/")
    assert sync.status_code == 302
    assert not Decision.objects.exists()


def test_staff_without_the_permission_can_look_but_not_decide(looker_client: Client) -> None:
    review = make_tool_review()
    queue = looker_client.get(QUEUE)
    assert queue.status_code == 200
    assert "approve_selected" not in queue.content.decode()  # no bulk actions offered
    assert looker_client.get(METRICS).status_code == 200
    screen = looker_client.get(review_url(review))
    assert screen.status_code == 200
    html = screen.content.decode()
    assert "Submit decision" not in html
    assert 'name="call-0-action"' not in html
    assert "You can look at this review but not decide it." in html
    assert "reschedule_appointment" in html  # the held call is still shown
    assert approve(looker_client, review).status_code == 403
    assert bulk_approve(looker_client, review).status_code == 403
    thread_page = looker_client.get(f"/admin/nitro_assistants/thread/{review.thread_id}/change/")
    assert thread_page.status_code == 200
    assert "Sync from server" not in thread_page.content.decode()
    sync = looker_client.post(f"/admin/nitro_assistants/thread/{review.thread_id}/sync/")
    assert sync.status_code == 403
    assert not Decision.objects.exists()
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING


def test_staff_without_any_permission_cannot_look(django_user_model: Any) -> None:
    user = django_user_model.objects.create_user("nobody", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    review = make_tool_review()
    assert client.get(QUEUE).status_code == 403
    assert client.get(review_url(review)).status_code == 403
    assert client.get(METRICS).status_code == 403
    assert approve(client, review).status_code == 403


@pytest.mark.parametrize("client_fixture", ["reviewer_client", "superuser_client"])
def test_reviewers_and_superusers_decide(
    request: pytest.FixtureRequest, client_fixture: str
) -> None:
    client: Client = request.getfixturevalue(client_fixture)
    review = make_tool_review()
    html = client.get(review_url(review)).content.decode()
    assert "Submit decision" in html
    assert "approve_selected" in client.get(QUEUE).content.decode()
    assert approve(client, review).status_code == 302
    assert Decision.objects.get().review == review
    other = make_tool_review()
    bulk_approve(client, other)
    assert Decision.objects.filter(review=other).exists()


def test_every_post_needs_a_csrf_token(reviewer: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    review = make_tool_review()
    assert approve(client, review).status_code == 403
    assert bulk_approve(client, review).status_code == 403
    assert (
        client.post(f"/admin/nitro_assistants/thread/{review.thread_id}/sync/").status_code == 403
    )
    assert not Decision.objects.exists()
    # With the token the page rendered, the same POST goes through.
    page = client.get(review_url(review))
    token = page.context["csrf_token"]
    response = client.post(
        review_url(review),
        {**stamp(review), "call-0-action": "approve", "csrfmiddlewaretoken": str(token)},
    )
    assert response.status_code == 302
    assert Decision.objects.filter(review=review).exists()


def test_machine_written_records_cannot_be_added_changed_or_deleted(
    superuser_client: Client,
) -> None:
    review = make_tool_review()
    for model in ("thread", "run", "review", "decision", "delivery", "event"):
        assert superuser_client.get(f"/admin/nitro_assistants/{model}/add/").status_code == 403
    assert (
        superuser_client.post(
            f"/admin/nitro_assistants/thread/{review.thread_id}/delete/"
        ).status_code
        == 403
    )
    assert (
        superuser_client.post(f"/admin/nitro_assistants/review/{review.pk}/delete/").status_code
        == 403
    )
    page = superuser_client.get(
        f"/admin/nitro_assistants/thread/{review.thread_id}/change/"
    ).content.decode()
    assert 'name="_save"' not in page
    response = superuser_client.post(
        f"/admin/nitro_assistants/thread/{review.thread_id}/change/", {"assistant_key": "hacked"}
    )
    assert response.status_code == 403
    review.thread.refresh_from_db()
    assert review.thread.assistant_key == "walkthrough"
