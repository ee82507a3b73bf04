"""Every decision records where it was made, on the decision and in its audit event."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from nitro_assistants import rules, services
from nitro_assistants.models import Decision, Event, Policy
from nitro_assistants.services import governance
from nitro_assistants.services import policy_enforcement as policies
from tests.admin.conftest import make_tool_review
from tests.channels.conftest import make_reviewer

pytestmark = pytest.mark.django_db


def approve(review: Any) -> dict[str, Any]:
    return {
        **rules.approve_everything(review.kind, review.tool_calls),
        "revision": review.revision,
        "digest": review.digest,
    }


@pytest.mark.parametrize("via", ["admin", "api", "slack", "email", None])
def test_a_person_s_decision_records_its_channel(django_user_model: Any, via: Any) -> None:
    jane = make_reviewer(django_user_model, "jane")
    review = make_tool_review()
    decision = services.decide(review, jane, approve(review), via=via)
    expected = via or ""
    assert Decision.objects.get(pk=decision.pk).channel == expected
    assert Event.objects.get(review=review, verb="review_decided").data["channel"] == expected


def test_a_policy_rule_s_decision_records_policy() -> None:
    Policy.objects.create(
        name="moves go through",
        position=10,
        tool="reschedule_*",
        action=Policy.Action.AUTO_APPROVE,
    )
    review = make_tool_review()
    policies.review_mirrored(review)
    decision = governance.apply_policy(review.pk)
    assert decision is not None
    assert decision.channel == "policy"
    assert Event.objects.get(review=review, verb="review_decided").data["channel"] == "policy"


def test_the_decisions_list_shows_and_filters_by_channel(django_user_model: Any) -> None:
    root = django_user_model.objects.create_superuser("root", password="pw")
    for via in ("slack", "email", "admin"):
        review = make_tool_review()
        services.decide(review, root, approve(review), via=via)
    client = Client()
    client.force_login(root)
    listing = client.get("/admin/nitro_assistants/decision/", {"channel__exact": "slack"})
    assert listing.status_code == 200
    shown = listing.context["cl"].result_list
    assert [d.channel for d in shown] == ["slack"]
    assert "e-mail reply" in client.get("/admin/nitro_assistants/decision/").content.decode()
