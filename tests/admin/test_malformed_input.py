"""Ids in the URL that are no primary key, and query strings that name nothing, on the admin's own
views: a 404 or a 400 that says why, never a 500 from the lookup (PostgreSQL refuses a NUL in
text; ``abc`` is no integer). Staff who may not look at reviews get a 403 before any lookup."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from nitro_assistants.models import Decision
from tests.admin.conftest import make_tool_review

pytestmark = pytest.mark.django_db

ADMIN = "/admin/nitro_assistants"
#: As sent on the wire: ``%00`` is a NUL, ``..%2F..`` reaches the view as ``../..``.
MALFORMED = ["abc", "1.0", "%00", "..%2F..", "1%00", "99999999999999999999"]


@pytest.fixture
def bare_staff_client(django_user_model: Any) -> Client:
    """Staff with no permission at all on the app's models."""
    user = django_user_model.objects.create_user("bare", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def review_table_queries(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "nitro_assistants_review" in q["sql"]]


@pytest.mark.parametrize("object_id", MALFORMED)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "review/{}/review/"),
        ("post", "review/{}/review/"),
        ("get", "review/{}/change/"),
        ("post", "thread/{}/sync/"),
    ],
)
def test_an_id_that_is_no_pk_is_a_404(
    superuser_client: Client, method: str, path: str, object_id: str
) -> None:
    make_tool_review()
    response = getattr(superuser_client, method)(f"{ADMIN}/{path.format(object_id)}")
    assert response.status_code == 404
    assert not Decision.objects.exists()


def test_a_pk_that_matches_nothing_is_a_404(reviewer_client: Client) -> None:
    review = make_tool_review()
    missing = review.pk + 1000
    assert reviewer_client.get(f"{ADMIN}/review/{missing}/review/").status_code == 404
    assert reviewer_client.get(f"{ADMIN}/review/{missing}/change/").status_code == 404
    assert (
        reviewer_client.post(f"{ADMIN}/thread/{review.thread_id + 1000}/sync/").status_code == 404
    )
    assert reviewer_client.get(f"{ADMIN}/review/{review.pk}/change/").status_code == 302


@pytest.mark.parametrize("path", ["review/{}/change/", "review/{}/review/"])
def test_staff_who_may_not_look_get_a_403_before_any_lookup(
    bare_staff_client: Client, path: str
) -> None:
    """The same 403 for a review that exists, one that does not and an id that is no pk: the
    answer says nothing about which ids exist, and no query reads the reviews."""
    review = make_tool_review()
    for object_id in [str(review.pk), str(review.pk + 1000), *MALFORMED]:
        with CaptureQueriesContext(connection) as queries:
            response = bare_staff_client.get(f"{ADMIN}/{path.format(object_id)}")
        assert response.status_code == 403, object_id
        assert review_table_queries(queries) == [], object_id
    post = bare_staff_client.post(f"{ADMIN}/{path.format(review.pk)}", {"call-0-action": "approve"})
    assert post.status_code == 403
    assert not Decision.objects.exists()


@pytest.mark.parametrize(
    "query",
    [
        "review/?status=%00",
        "review/?status=pending%00",
        "review/?kind__exact=%00",
        "review/?assistant=walkthrough%00",
        "review/?q=%00",
        "review/?%00=1",
        "thread/?status__exact=%00",
        "run/?kind__exact=%00",
        "delivery/?status__exact=%00",
    ],
)
def test_a_nul_in_a_changelist_query_is_a_400_that_says_so(
    superuser_client: Client, query: str
) -> None:
    make_tool_review()
    response = superuser_client.get(f"{ADMIN}/{query}")
    assert response.status_code == 400
    html = response.content.decode()
    assert "A query parameter holds a NUL character." in html
    assert f'href="{ADMIN}/{query.split("/")[0]}/"' in html  # a way back to the whole list


def test_an_unknown_queue_status_is_a_400_naming_the_statuses(reviewer_client: Client) -> None:
    make_tool_review()
    response = reviewer_client.get(f"{ADMIN}/review/?status=pendng")
    assert response.status_code == 400
    html = response.content.decode()
    assert "Unknown status &#x27;pendng&#x27;; one of: pending, " in html
    assert ", all." in html
    for status in ("pending", "decided", "all"):
        assert reviewer_client.get(f"{ADMIN}/review/?status={status}").status_code == 200


def test_staff_who_may_not_look_get_a_403_for_a_bad_query_too(bare_staff_client: Client) -> None:
    assert bare_staff_client.get(f"{ADMIN}/review/?status=%00").status_code == 403
    assert bare_staff_client.get(f"{ADMIN}/review/?status=pendng").status_code == 403
