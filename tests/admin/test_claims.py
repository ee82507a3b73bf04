"""Claims, assignments, "next review", the live endpoint and the index count, through the admin
as reviewers use them (the Django test client on the real views and services)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from nitro_assistants import services
from nitro_assistants.checks import check_settings
from nitro_assistants.client.results import PendingReview, ReplyDraft
from nitro_assistants.models import Assignment, Claim, Event, Review
from nitro_assistants.services import claims
from nitro_assistants.services.mirror import mirror_pending
from tests.admin.conftest import (
    VIEW_PERMISSIONS,
    _client,
    _staff,
    make_reply_review,
    make_tool_review,
    review_url,
    stamp,
)
from tests.factories import DeliveryFactory, ThreadFactory

pytestmark = pytest.mark.django_db

QUEUE = reverse("admin:nitro_assistants_review_changelist")
LIVE = reverse("admin:nitro_assistants_review_live")
NEXT = reverse("admin:nitro_assistants_review_next")


def claim_url(review: Review) -> str:
    return reverse("admin:nitro_assistants_review_claim", args=[review.pk])


@pytest.fixture
def jane(django_user_model: Any) -> Any:
    user = _staff(django_user_model, "jane", [*VIEW_PERMISSIONS, "decide_review"])
    user.first_name, user.last_name = "Jane", "Doe"
    user.save()
    return user


@pytest.fixture
def jane_client(jane: Any) -> Client:
    return _client(jane)


def holder(review: Review) -> Any:
    return Claim.objects.get(review=review).user


# -- claims ------------------------------------------------------------------------------------


def test_opening_a_review_claims_it_and_others_see_who_has_it(
    reviewer_client: Client, reviewer: Any, jane_client: Client, jane: Any
) -> None:
    review = make_tool_review()
    assert jane_client.get(review_url(review)).status_code == 200
    assert holder(review) == jane
    assert Event.objects.filter(review=review, verb="review_claimed", actor=jane).count() == 1

    page = reviewer_client.get(review_url(review)).content.decode()
    assert holder(review) == jane  # opening someone else's live claim does not take it
    assert "<strong>Jane Doe</strong> has this review" in page
    assert 'value="take_over"' in page
    assert 'id="nitro-take-over" class="nitro-take-over">' in page  # shown, not hidden

    queue = reviewer_client.get(QUEUE).content.decode()
    assert "Jane · 0 min" in queue


def test_a_looker_opening_a_review_claims_nothing(looker_client: Client) -> None:
    review = make_tool_review()
    assert looker_client.get(review_url(review)).status_code == 200
    assert not Claim.objects.filter(review=review).exists()


def test_a_lapsed_claim_is_free_and_a_renewal_extends_it(
    reviewer_client: Client, reviewer: Any, jane_client: Client, jane: Any
) -> None:
    review = make_tool_review()
    jane_client.get(review_url(review))
    Claim.objects.filter(review=review).update(expires_at=timezone.now() - datetime.timedelta(1))
    reviewer_client.get(review_url(review))  # Jane closed her tab long ago
    assert holder(review) == reviewer
    before = Claim.objects.get(review=review).expires_at
    body = reviewer_client.post(claim_url(review), {"action": "renew"}).json()
    assert body["claim"]["user"] == reviewer.pk
    assert Claim.objects.get(review=review).expires_at > before


def test_take_over_is_explicit_and_recorded(
    reviewer_client: Client, reviewer: Any, jane_client: Client, jane: Any
) -> None:
    review = make_tool_review()
    jane_client.get(review_url(review))
    # Renewing is not taking over: Jane keeps it.
    assert (
        reviewer_client.post(claim_url(review), {"action": "renew"}).json()["claim"]["user"]
        == jane.pk
    )
    response = reviewer_client.post(claim_url(review), {"action": "take_over"})
    assert response.status_code == 302
    assert holder(review) == reviewer
    event = Event.objects.get(review=review, verb="review_taken_over")
    assert event.actor == reviewer and event.data["previous"] == "jane"
    # Jane's screen renews: it is no longer hers, and it says whose it is.
    body = jane_client.post(claim_url(review), {"action": "renew"}).json()
    assert body["claim"]["user"] == reviewer.pk


def test_release_frees_the_review(reviewer_client: Client, jane_client: Client, jane: Any) -> None:
    review = make_tool_review()
    jane_client.get(review_url(review))
    jane_client.post(claim_url(review), {"action": "release"})
    assert not Claim.objects.get(review=review).active()
    assert "Jane Doe ·" not in reviewer_client.get(QUEUE).content.decode()


def test_someone_elses_claim_does_not_block_a_decision(
    reviewer_client: Client, reviewer: Any, jane_client: Client
) -> None:
    review = make_tool_review()
    jane_client.get(review_url(review))
    response = reviewer_client.post(
        review_url(review),
        {**stamp(review), "call-0-action": "approve", "_decide": "1"},
    )
    assert response.status_code == 302
    review.refresh_from_db()
    assert review.status == Review.Status.DECIDED
    assert review.decision.decided_by == reviewer


def test_claim_endpoint_needs_the_decide_permission(looker_client: Client) -> None:
    review = make_tool_review()
    assert looker_client.post(claim_url(review), {"action": "take_over"}).status_code == 403
    assert looker_client.get(claim_url(review)).status_code == 405
    assert not Claim.objects.exists()


def test_claim_filters(reviewer_client: Client, reviewer: Any, jane: Any) -> None:
    mine, theirs, free = make_tool_review(), make_tool_review(), make_reply_review()
    claims.claim_review(mine, reviewer)
    claims.claim_review(theirs, jane)

    def shown(value: str) -> set[int]:
        response = reviewer_client.get(QUEUE, {"claim": value})
        return {r.pk for r in response.context["cl"].result_list}

    assert shown("mine") == {mine.pk}
    assert shown("others") == {theirs.pk}
    assert shown("unclaimed") == {free.pk}


# -- assignment ---------------------------------------------------------------------------------


def test_assigned_to_me_or_my_groups_is_the_default_for_reviewers_with_assignments(
    reviewer_client: Client, reviewer: Any, jane: Any
) -> None:
    team = Group.objects.create(name="Billing")
    reviewer.groups.add(team)
    to_me, to_team, to_jane, nobody = (make_tool_review() for _ in range(4))
    claims.assign_review(to_me, reviewer)
    claims.assign_review(to_team, team)
    claims.assign_review(to_jane, jane)

    response = reviewer_client.get(QUEUE)
    assert {r.pk for r in response.context["cl"].result_list} == {to_me.pk, to_team.pk}
    page = response.content.decode()
    assert "for Billing" in page and "To me or my groups" in page
    everything = reviewer_client.get(QUEUE, {"assigned": "any"}).context["cl"].result_list
    assert {r.pk for r in everything} == {to_me.pk, to_team.pk, to_jane.pk, nobody.pk}
    # Jane has one assignment; a reviewer with none sees the whole queue by default.
    Assignment.objects.filter(user=jane).delete()
    assert len(_client(jane).get(QUEUE).context["cl"].result_list) == 4


def test_assigning_needs_its_permission_and_is_recorded(
    reviewer_client: Client, reviewer: Any, jane: Any
) -> None:
    review = make_tool_review()
    url = reverse("admin:nitro_assistants_review_assign", args=[review.pk])
    assert reviewer_client.post(url, {"user": jane.pk}).status_code == 403
    reviewer.user_permissions.add(Permission.objects.get(codename="assign_review"))
    assert "nitro-assign" in _client(reviewer).get(review_url(review)).content.decode()
    assert _client(reviewer).post(url, {"user": jane.pk}).status_code == 302
    assert Assignment.objects.get(review=review).user == jane
    event = Event.objects.get(review=review, verb="review_assigned")
    assert event.actor == reviewer and event.data["user"] == "jane"
    team = Group.objects.create(name="Night shift")
    _client(reviewer).post(url, {"group": team.pk})
    assert Assignment.objects.get(review=review).group == team  # replaced, not added
    response = _client(reviewer).post(url, {"group": team.pk, "user": jane.pk}, follow=True)
    assert "not both" in response.content.decode()
    assert Assignment.objects.get(review=review).group == team


def route_to_billing(review: Review) -> Any:
    """An ASSIGN_REVIEW rule of a host project: replies go to the billing team."""
    if review.kind == Review.Kind.REPLY:
        return Group.objects.get_or_create(name="Billing")[0]
    return None


def pause(kind: str, content: str = "Your refund is on its way.") -> PendingReview:
    """What the client reports for a thread paused on a reply draft (``content``) or on one
    tool call."""
    interrupt_id = uuid.uuid4().hex
    if kind == "reply":
        return PendingReview(
            kind="reply",
            interrupt_id=interrupt_id,
            interrupt_ids=[interrupt_id],
            tool_calls=[],
            reply=ReplyDraft(
                content=content,
                allowed_decisions=["approve"],
                description=None,
                interrupt_id=interrupt_id,
                message_id="m1",
            ),
        )
    call = {"id": "c1", "name": "refund", "args": {}, "allowed_decisions": ["approve"]}
    return PendingReview(
        kind="tool_calls",
        interrupt_id=interrupt_id,
        interrupt_ids=[interrupt_id],
        tool_calls=[call],
    )


def test_the_host_projects_rule_assigns_new_reviews(
    settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "ASSIGN_REVIEW": "tests.admin.test_claims.route_to_billing",
    }
    with django_capture_on_commit_callbacks(execute=True):
        reply = mirror_pending(ThreadFactory(), None, pause("reply"))
        tool = mirror_pending(ThreadFactory(), None, pause("tool_calls"))
    assert reply is not None and tool is not None
    assert Assignment.objects.get(review=reply).group.name == "Billing"
    assert Event.objects.filter(review=reply, verb="review_assigned", actor=None).exists()
    assert not Assignment.objects.filter(review=tool).exists()


def broken_rule(review: Review) -> Any:
    raise LookupError("the CRM is down")


def test_a_failing_rule_leaves_the_review_unassigned_in_the_queue(
    settings: Any, django_capture_on_commit_callbacks: Any, caplog: Any
) -> None:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "ASSIGN_REVIEW": "tests.admin.test_claims.broken_rule",
    }
    with django_capture_on_commit_callbacks(execute=True):
        review = mirror_pending(ThreadFactory(), None, pause("reply"))
    assert review is not None and review.status == Review.Status.PENDING
    assert not Assignment.objects.exists()
    assert "the CRM is down" in caplog.text


# -- next review --------------------------------------------------------------------------------


def test_next_review_is_the_oldest_free_one_claimed_for_me(
    reviewer_client: Client, reviewer: Any, jane: Any
) -> None:
    oldest, older, newer = (make_tool_review() for _ in range(3))
    for minutes, review in ((30, oldest), (20, older), (10, newer)):
        Review.objects.filter(pk=review.pk).update(
            requested_at=timezone.now() - datetime.timedelta(minutes=minutes)
        )
    claims.claim_review(oldest, jane)  # Jane is on it
    response = reviewer_client.get(NEXT)
    assert response.status_code == 302
    assert response["Location"] == review_url(older)
    assert holder(older) == reviewer
    # Decided it: the review screen's "next" goes on to the one after.
    page = reviewer_client.get(review_url(older)).content.decode()
    assert f"{NEXT}?after={older.pk}" in page
    assert reviewer_client.get(NEXT, {"after": older.pk})["Location"] == review_url(newer)


def test_next_review_from_the_queue_keeps_its_filters_and_order(
    reviewer_client: Client, reviewer: Any
) -> None:
    tool = make_tool_review()
    reply_old, reply_new = make_reply_review("old"), make_reply_review("new")
    Review.objects.filter(pk=reply_old.pk).update(
        requested_at=timezone.now() - datetime.timedelta(hours=1)
    )
    queue = reviewer_client.get(QUEUE, {"kind__exact": "reply", "o": "-5"}).content.decode()
    assert f"{NEXT}?kind__exact=reply&amp;o=-5" in queue
    response = reviewer_client.get(NEXT, {"kind__exact": "reply", "o": "-5"})  # newest first
    assert response["Location"].startswith(review_url(reply_new) + "?_changelist_filters=")
    page = reviewer_client.get(response["Location"]).content.decode()
    assert f"{NEXT}?kind__exact=reply&amp;o=-5" in page
    nxt = reviewer_client.get(NEXT, {"kind__exact": "reply", "o": "-5"})
    assert nxt["Location"].startswith(review_url(reply_new))  # still mine, still first
    assert holder(reply_new) == reviewer and not Claim.objects.filter(review=tool).exists()


def test_no_next_review_says_so_on_the_queue(reviewer_client: Client, jane: Any) -> None:
    claims.claim_review(make_tool_review(), jane)
    response = reviewer_client.get(NEXT, follow=True)
    assert response.redirect_chain[-1][0] == QUEUE
    assert "No more reviews are waiting for you." in response.content.decode()


# -- the live endpoint --------------------------------------------------------------------------


def ours(queries: Any) -> list[str]:
    """The statements the endpoint itself ran (not the session's and the user's)."""
    return [q["sql"] for q in queries.captured_queries if "nitro_assistants_" in q["sql"]]


def test_live_endpoint_answers_304_in_one_statement_when_nothing_changed(
    reviewer_client: Client, jane: Any
) -> None:
    first, second = make_tool_review(), make_reply_review()
    ids = f"{first.pk},{second.pk}"
    with CaptureQueriesContext(connection) as queries:
        response = reviewer_client.get(LIVE, {"ids": ids})
    assert response.status_code == 200
    assert len(ours(queries)) == 2
    body = response.json()
    assert body["pending"] == 2 and body["newest"] == second.pk
    assert body["rows"][str(first.pk)] == {
        "status": "pending",
        "status_label": "pending",
        "claim": None,
        "assigned": "",
    }
    tag = response["ETag"]
    with CaptureQueriesContext(connection) as queries:
        again = reviewer_client.get(LIVE, {"ids": ids}, HTTP_IF_NONE_MATCH=tag)
    assert again.status_code == 304 and again.content == b""
    assert len(ours(queries)) == 1

    claims.claim_review(first, jane)  # a claim changes it
    changed = reviewer_client.get(LIVE, {"ids": ids}, HTTP_IF_NONE_MATCH=tag)
    assert changed.status_code == 200
    claim = changed.json()["rows"][str(first.pk)]["claim"]
    assert claim["name"] == "Jane Doe" and claim["user"] == jane.pk
    tag = changed["ETag"]

    review = Review.objects.get(pk=second.pk)
    services.decide(review, jane, {"reply": {"action": "approve"}})  # so does a decision
    decided = reviewer_client.get(LIVE, {"ids": ids}, HTTP_IF_NONE_MATCH=tag).json()
    assert decided["rows"][str(second.pk)]["status"] == "decided"
    assert decided["pending"] == 1


def test_live_endpoint_reports_a_decisions_outcome_and_the_next_pause(
    reviewer_client: Client, reviewer: Any
) -> None:
    review = make_tool_review()
    decision = services.decide(
        Review.objects.get(pk=review.pk),
        reviewer,
        {"tool_calls": [{"id": "call_1", "action": "approve"}]},
    )
    url = {"review": review.pk}
    state = reviewer_client.get(LIVE, url).json()["review"]
    assert (state["status"], state["outcome"], state["next"]) == ("decided", "pending", None)
    services.fail_resume(decision.pk, "the assistant refused the resume")
    state = reviewer_client.get(LIVE, url).json()["review"]
    assert (state["status"], state["outcome_label"]) == ("failed", "failed")
    assert state["error"] == "the assistant refused the resume"
    following = make_reply_review("Anything else?")
    Review.objects.filter(pk=following.pk).update(thread=review.thread)
    state = reviewer_client.get(LIVE, url).json()["review"]
    assert state["next"]["pk"] == following.pk and state["next"]["summary"] == "Anything else?"
    assert state["next"]["url"] == review_url(following)


def test_live_endpoint_counts_only_what_the_user_may_decide(
    looker_client: Client, reviewer_client: Client
) -> None:
    make_tool_review()
    assert reviewer_client.get(LIVE).json()["pending"] == 1
    assert looker_client.get(LIVE).json()["pending"] == 0
    assert reviewer_client.get(LIVE, {"review": "x"}).status_code == 400
    assert Client().get(LIVE).status_code == 302  # to the login page


def test_index_and_sidebar_show_the_pending_count(
    reviewer_client: Client, looker_client: Client
) -> None:
    make_tool_review(), make_reply_review()
    index = reviewer_client.get(reverse("admin:index")).content.decode()
    assert 'data-nitro-count style="' in index
    assert 'title="2 reviews waiting for you">2</span>' in index
    sidebar = reviewer_client.get(QUEUE).content.decode()
    assert 'title="2 reviews waiting for you">2</span>' in sidebar.split('id="nav-sidebar"')[1]
    looker = looker_client.get(reverse("admin:index")).content.decode()
    assert 'hidden title="0 reviews waiting for you">0</span>' in looker


# -- the queue's cost with the new columns ------------------------------------------------------


def test_queue_query_count_is_flat_with_claims_and_assignments(
    reviewer_client: Client, reviewer: Any, jane: Any
) -> None:
    team = Group.objects.create(name="Billing")

    def add(index: int) -> None:
        review = make_tool_review() if index % 2 else make_reply_review()
        DeliveryFactory(thread=review.thread)
        claims.claim_review(review, (reviewer, jane)[index % 2])
        claims.assign_review(review, (team, jane, reviewer)[index % 3])

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            response = reviewer_client.get(QUEUE, {"status": "all", "assigned": "any"})
        assert response.status_code == 200
        return len(queries)

    add(0)
    one = count()
    for index in range(1, 100):
        add(index)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("nitro_assistants.admin.reviews.ReviewAdmin.list_per_page", 100)
        hundred = count()
        page = reviewer_client.get(QUEUE, {"status": "all", "assigned": "any"})
    assert len(page.context["cl"].result_list) == 100
    assert "Jane · 0 min" in page.content.decode()
    assert one == hundred <= 10


# -- after a decision -----------------------------------------------------------------------


def test_with_next_after_decision_a_decision_opens_the_next_review(
    settings: Any, reviewer_client: Client, reviewer: Any
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "NEXT_AFTER_DECISION": True}
    first, second = make_tool_review(), make_reply_review("Second in line.")
    opened = reviewer_client.get(NEXT, {"kind__exact": "tool_calls"})
    assert opened["Location"].startswith(review_url(first) + "?_changelist_filters=")
    response = reviewer_client.post(
        opened["Location"], {**stamp(first), "call-0-action": "approve", "_decide": "1"}
    )
    assert (
        response["Location"] == f"{NEXT}?kind__exact=tool_calls&after={first.pk}&decided={first.pk}"
    )
    # No other tool-call review waits: back to the filtered queue.
    assert (
        reviewer_client.get(response["Location"])["Location"] == f"{QUEUE}?kind__exact=tool_calls"
    )

    third = make_tool_review()
    response = reviewer_client.post(
        review_url(third), {**stamp(third), "call-0-action": "approve", "_decide": "1"}
    )
    assert response["Location"] == f"{NEXT}?after={third.pk}&decided={third.pk}"
    landed = reviewer_client.get(response["Location"])["Location"]
    assert landed == f"{review_url(second)}?decided={third.pk}"
    page = reviewer_client.get(landed).content.decode()
    assert f'data-live-url="{LIVE}?review={third.pk}"' in page
    assert f'Your decision on <a href="{review_url(third)}">review #{third.pk}</a>' in page
    assert holder(second) == reviewer


def test_without_it_a_decision_stays_on_its_review(reviewer_client: Client) -> None:
    review = make_tool_review()
    response = reviewer_client.post(
        review_url(review), {**stamp(review), "call-0-action": "approve", "_decide": "1"}
    )
    assert response["Location"] == review_url(review)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"ASSIGN_REVIEW": "tests.admin.test_claims.no_such_rule"}, "nitro_assistants.E011"),
        ({"ASSIGN_REVIEW": "tests.admin.test_claims.QUEUE"}, "nitro_assistants.E011"),
        ({"CLAIM_MINUTES": 0}, "nitro_assistants.E012"),
        ({"LIVE_POLL_SECONDS": "soon"}, "nitro_assistants.E012"),
        ({"ASSIGN_REVIEW": "tests.admin.test_claims.route_to_billing"}, None),
    ],
)
def test_inbox_settings_are_checked(settings: Any, config: dict[str, Any], expected: Any) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, **config}
    inbox = {"nitro_assistants.E011", "nitro_assistants.E012"}  # (E008 depends on the Celery app)
    assert [m.id for m in check_settings() if m.id in inbox] == ([expected] if expected else [])


@pytest.mark.parametrize(
    "query",
    [
        {"ids": "1,99999999999999999999999999,x,,-3"},
        {"review": "99999999999999999999999999"},
        {"review": "\u0661\u0662"},  # digits, but not ASCII ones
    ],
)
def test_live_endpoint_takes_odd_ids_without_failing(reviewer_client: Client, query: Any) -> None:
    response = reviewer_client.get(LIVE, query)
    if "review" in query:  # one review, named by something that is no review id
        assert response.status_code == 400
        assert response.json() == {"error": "review must be a review id"}
    else:  # the rows that are ids are reported; the rest are left out
        assert response.status_code == 200
        assert response.json()["rows"] == {}


def test_next_and_claim_take_odd_ids_without_failing(reviewer_client: Client) -> None:
    make_tool_review()
    assert reviewer_client.get(NEXT, {"after": "99999999999999999999999999"}).status_code == 302
    huge = reverse("admin:nitro_assistants_review_claim", args=["99999999999999999999999999"])
    assert reviewer_client.post(huge, {"action": "renew"}).status_code == 404
    assert (
        reviewer_client.post(claim_url(make_tool_review()), {"action": "steal"}).status_code == 400
    )
