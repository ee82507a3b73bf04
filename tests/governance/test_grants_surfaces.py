"""Grants in the admin and the decide API (issue 36): given with an approval on the review screen
and in the decide body, refused on the field at fault with nothing stored, listed, filtered and
revoked; records never edited or deleted."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from nitro_assistants.models import ApiKey, Decision, Grant, Policy, Review
from nitro_assistants.services import grants
from tests.governance.conftest import approve, mirrored, reviewer
from tests.governance.test_admin import ADD, rule_form

pytestmark = pytest.mark.django_db


def granter(username: str = "gina") -> User:
    user = reviewer(username)
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["grant_approval", "view_grant"])
    )
    return User.objects.get(pk=user.pk)


@pytest.fixture
def rule(db: None) -> Policy:
    return Policy.objects.create(name="refunds", tool="refund_*", grant_max_uses=5)


def screen(review: Review) -> str:
    return f"/admin/nitro_assistants/review/{review.pk}/review/"


def posted(review: Review, **grant: Any) -> dict[str, Any]:
    shown = approve(review)
    return {
        "call-0-action": "approve",
        "revision": shown["revision"],
        "digest": shown["digest"],
        **{f"grant-{name}": value for name, value in grant.items()},
    }


# -- the admin --------------------------------------------------------------------------------------


def test_the_review_screen_gives_a_grant_with_the_approval(queued: list[Any], rule: Policy) -> None:
    client = Client()
    client.force_login(granter())
    review = mirrored(30)
    page = client.get(screen(review)).content.decode()
    assert 'name="grant-scope"' in page
    # No narrowing yet: a blank box, not the JSON "null".
    assert re.search(r'<textarea name="grant-args"[^>]*>\s*</textarea>', page), page
    response = client.post(
        screen(review),
        posted(review, scope="thread", uses="2", args='{"amount": {"max": 20}}'),
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    grant = Grant.objects.get()
    assert (grant.scope, grant.max_uses, grant.constraints["amount"]) == ("thread", 2, {"max": 20})
    assert Decision.objects.get(review=review).decided_by.username == "gina"
    # The decided review says which grant its approval gave, linked to the grant's page.
    decided = client.get(screen(review)).content.decode()
    assert f'/admin/nitro_assistants/grant/{grant.pk}/change/">grant #{grant.pk}</a>' in decided


def test_a_wider_grant_is_a_field_error_on_the_screen_and_nothing_is_stored(
    queued: list[Any], rule: Policy
) -> None:
    client = Client()
    client.force_login(granter())
    review = mirrored(30)
    response = client.post(
        screen(review), posted(review, scope="thread", uses="2", args='{"amount": {"max": 99}}')
    )
    assert response.status_code == 400
    form = response.context["form"].grant_form
    assert "above the 30 approved" in str(form.errors["args"])
    response = client.post(screen(review), posted(review, scope="thread", uses="9"))
    assert response.status_code == 400
    assert "at most 5 uses" in str(response.context["form"].grant_form.errors["uses"])
    assert not Decision.objects.exists() and not Grant.objects.exists()


def test_without_the_permission_the_screen_offers_no_grant_and_refuses_one(
    queued: list[Any], rule: Policy
) -> None:
    client = Client()
    client.force_login(reviewer("plain"))
    review = mirrored(30)
    assert 'name="grant-scope"' not in client.get(screen(review)).content.decode()
    response = client.post(screen(review), posted(review, scope="thread", uses="1"))
    assert response.status_code == 403
    assert not Decision.objects.exists() and not Grant.objects.exists()


def test_the_grant_list_filters_and_revokes_and_keeps_records(
    queued: list[Any], rule: Policy
) -> None:
    gina = granter()
    for _ in range(2):
        review = mirrored(30)
        grants.decide_with_grant(
            review.pk, gina, approve(review), {"scope": "thread", "uses": 1}, via="admin"
        )
    first, second = Grant.objects.order_by("pk")
    client = Client()
    client.force_login(gina)
    listing = "/admin/nitro_assistants/grant/"
    assert client.get(listing).status_code == 200
    response = client.post(
        listing, {"action": "revoke_selected", "_selected_action": [first.pk]}, follow=True
    )
    assert "1 grant revoked." in response.content.decode()
    first.refresh_from_db()
    assert first.state == "revoked" and first.revoked_by_id == gina.pk
    revoked = client.get(listing, {"state": "revoked"})
    assert [g.pk for g in revoked.context["cl"].result_list] == [first.pk]
    live = client.get(listing, {"state": "live"})
    assert [g.pk for g in live.context["cl"].result_list] == [second.pk]
    page = client.get(f"{listing}{first.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert client.post(f"{listing}{first.pk}/delete/").status_code == 403
    assert client.get(f"{listing}add/").status_code == 403


# -- the API ----------------------------------------------------------------------------------------


class Api:
    def __init__(self, user: User) -> None:
        self.client = Client()
        self.key = ApiKey.generate(user, "tests")[1]

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(
            f"/nitro/api/{path}", params, HTTP_AUTHORIZATION=f"Bearer {self.key}"
        )

    def post(self, path: str, body: Any) -> Any:
        return self.client.post(
            f"/nitro/api/{path}",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.key}",
        )


def test_the_decide_api_gives_lists_and_revokes_grants(queued: list[Any], rule: Policy) -> None:
    api = Api(granter())
    review = mirrored(30)
    body = {**approve(review), "grant": {"scope": "assistant", "uses": 3, "duration": 3600}}
    response = api.post(f"reviews/{review.pk}/decide", body)
    assert response.status_code == 200, response.json()
    grant = Grant.objects.get()
    listed = api.get("grants", state="live").json()
    assert [item["id"] for item in listed["items"]] == [grant.pk]
    item = listed["items"][0]
    assert (item["scope"], item["tool"], item["usesLeft"], item["grantedBy"]) == (
        "assistant",
        "refund_customer",
        3,
        "gina",
    )
    assert item["args"] == {"order_id": {"eq": 7}, "amount": {"eq": 30}}
    assert api.get("grants", state="revoked").json()["items"] == []
    assert api.get("grants", state="nope").status_code == 400
    revoked = api.post(f"grants/{grant.pk}/revoke", {"reason": "enough"})
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    assert api.post(f"grants/{grant.pk}/revoke", {}).status_code == 409
    assert api.get("grants/999999").status_code == 404


@pytest.mark.parametrize(
    ("grant", "field"),
    [
        ({"scope": "thread", "uses": 1, "args": {"amount": {"max": 31}}}, "grant.args.amount"),
        ({"scope": "thread", "uses": 6}, "grant.uses"),
        ({"scope": "galaxy", "uses": 1}, "grant.scope"),
        ("yes", "grant"),
    ],
)
def test_a_bad_grant_over_the_api_is_a_400_naming_it_and_stores_nothing(
    queued: list[Any], rule: Policy, grant: Any, field: str
) -> None:
    api = Api(granter())
    review = mirrored(30)
    response = api.post(f"reviews/{review.pk}/decide", {**approve(review), "grant": grant})
    assert response.status_code == 400, response.json()
    assert response.json()["details"]["field"] == field
    assert not Decision.objects.exists() and not Grant.objects.exists()


def test_a_grant_on_an_edit_over_the_api_is_refused(queued: list[Any], rule: Policy) -> None:
    api = Api(granter())
    review = mirrored(30)
    body = {
        **approve(review),
        "tool_calls": [{"id": "call_0", "action": "edit", "args": {"amount": 10}}],
        "grant": {"scope": "thread", "uses": 1},
    }
    response = api.post(f"reviews/{review.pk}/decide", body)
    assert response.status_code == 400
    assert response.json()["details"]["field"] == "grant"
    assert not Decision.objects.exists()


def test_without_the_permission_the_api_refuses_grants_with_a_403(
    queued: list[Any], rule: Policy
) -> None:
    api = Api(reviewer("plain"))
    review = mirrored(30)
    body = {**approve(review), "grant": {"scope": "thread", "uses": 1}}
    response = api.post(f"reviews/{review.pk}/decide", body)
    assert response.status_code == 403 and response.json()["details"]["field"] == "grant"
    assert not Decision.objects.exists()
    assert api.get("grants").status_code == 403


def test_a_grants_pinned_secrets_are_redacted_where_reviewers_read_them(
    queued: list[Any], rule: Policy, settings: Any
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "REDACT": True}
    gina = granter()
    Grant.objects.create(
        scope="assistant",
        key="walkthrough",
        assistant_key="walkthrough",
        tool="refund_customer",
        constraints={"email": {"eq": "maria.lopez@example.com"}, "amount": {"max": 20}},
        max_uses=1,
        uses_left=1,
        granted_by=gina,
        granted_at=timezone.now(),
    )
    listed = Api(gina).get("grants").json()["items"][0]
    assert "maria.lopez@example.com" not in json.dumps(listed)
    assert listed["args"]["amount"] == {"max": 20}
    assert "redacted" in json.dumps(listed["args"]["email"])
    client = Client()
    client.force_login(gina)
    page = client.get("/admin/nitro_assistants/grant/").content.decode()
    assert "maria.lopez@example.com" not in page


def test_a_rules_grant_caps_are_edited_in_its_form_and_bad_ones_refused_on_their_field(
    editor: Client,
) -> None:
    form = rule_form(approvals="1", allow_grants="on", grant_max_uses="3")
    response = editor.post(ADD, {**form, "grant_max_duration": "01:00:00"})
    assert response.status_code == 302, response.content.decode()[:2000]
    rule = Policy.objects.get()
    assert (rule.allow_grants, rule.grant_max_uses) == (True, 3)
    assert rule.compiled().handling.grant_max_seconds == 3600
    for field, value in (("grant_max_uses", "0"), ("grant_max_duration", "00:00:00")):
        refused = editor.post(ADD, {**form, "name": f"bad {field}", field: value})
        assert refused.status_code == 200
        assert field in refused.context["adminform"].form.errors
    assert Policy.objects.count() == 1


def test_a_review_a_grant_decided_names_the_grant_and_its_granter(
    queued: list[Any], rule: Policy
) -> None:
    gina = granter()
    first = mirrored(30)
    grants.decide_with_grant(
        first.pk, gina, approve(first), {"scope": "assistant", "uses": 1}, via="admin"
    )
    covered = mirrored(30)
    decision = grants.apply_grant(covered.pk)
    assert decision is not None
    client = Client()
    client.force_login(reviewer("rita"))
    page = client.get(screen(covered)).content.decode()
    # Nobody's name as who decided, the grant linked to its page, and who gave it.
    grant_url = reverse("admin:nitro_assistants_grant_change", args=[decision.grant_id])
    assert "a grant (nobody was asked)" in page
    assert f'<a href="{grant_url}">#{decision.grant_id}</a>, given by gina' in page
