"""Reviewers racing for the same review on real PostgreSQL, each thread with its own
connection: sixteen opening the review screen at once end with one claim (and one
``review_claimed`` event); sixteen assigning at once leave one assignment."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from nitro_assistants.models import Assignment, Claim, Event
from nitro_assistants.services import claims
from tests.admin.conftest import make_tool_review, review_url
from tests.reliability.test_concurrent_decisions import race, users

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("reviewers race on row locks (select_for_update); SQLite has none"),
]

REVIEWERS = 16


def reviewers(prefix: str) -> list[Any]:
    found = users(REVIEWERS, prefix)
    perms = Permission.objects.filter(
        content_type__app_label="nitro_assistants", codename__in=["view_review", "decide_review"]
    )
    for user in found:
        user.user_permissions.set(perms)
    return found


def test_sixteen_reviewers_opening_the_same_review_one_claim() -> None:
    review = make_tool_review()
    clients = []
    for user in reviewers("opener"):
        client = Client()
        client.force_login(user)
        clients.append(client)
    url = review_url(review)
    results = race(*(lambda c=c: c.get(url).status_code for c in clients))
    assert results == [200] * REVIEWERS
    claim = Claim.objects.get(review=review)
    assert claim.active()
    assert Event.objects.filter(review=review, verb="review_claimed").count() == 1
    assert Event.objects.get(review=review, verb="review_claimed").actor == claim.user
    assert not Event.objects.filter(review=review, verb="review_taken_over").exists()


def test_sixteen_take_overs_at_once_leave_one_holder_and_an_event_each() -> None:
    review = make_tool_review()
    people = reviewers("taker")
    results = race(*(lambda u=u: claims.claim_review(review, u, take_over=True) for u in people))
    assert not [r for r in results if isinstance(r, Exception)]
    claim = Claim.objects.get(review=review)
    # One first claim, then each other take-over in turn: the last one holds it.
    assert Event.objects.filter(review=review, verb="review_claimed").count() == 1
    assert Event.objects.filter(review=review, verb="review_taken_over").count() == REVIEWERS - 1
    last = Event.objects.filter(review=review).order_by("-pk").first()
    assert last is not None and last.actor == claim.user


def test_sixteen_assigners_at_once_leave_one_assignment() -> None:
    review = make_tool_review()
    teams = [Group.objects.create(name=f"team {i}") for i in range(REVIEWERS)]
    results = race(*(lambda t=t: claims.assign_review(review, t) for t in teams))
    assert not [r for r in results if isinstance(r, Exception)]
    assert Assignment.objects.filter(review=review).count() == 1
    assert Event.objects.filter(review=review, verb="review_assigned").count() == REVIEWERS
