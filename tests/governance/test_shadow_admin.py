"""Shadow rules and replays in the admin: the agreement on the rule list, the rule's form and its
page of verdicts; the replay view; permissions and bad input; nothing written."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from nitro_assistants import services
from nitro_assistants.models import Policy
from tests.governance.conftest import approve, mirrored, reviewer
from tests.governance.test_admin import ADD, rule_form
from tests.governance.test_replay import snapshot
from tests.governance.test_shadow import edit, reject

pytestmark = pytest.mark.django_db

RULES = "/admin/nitro_assistants/policy/"
REPLAY = "/admin/nitro_assistants/policy/replay/"


@pytest.fixture
def trial(queued: list[Any]) -> dict[str, Any]:
    """A shadow rule that would approve refunds up to 50; four of them decided by bob: two
    approved (agree), one rejected and one edited (disagree); one pending."""
    rule = Policy.objects.create(
        name="small refunds go through (trial)",
        mode=Policy.Mode.SHADOW,
        tool="refund_*",
        conditions=[{"path": "amount", "op": "lte", "value": 50}],
        action=Policy.Action.AUTO_APPROVE,
    )
    bob = reviewer("bob")
    reviews = [mirrored(amount) for amount in (10, 20, 30, 40)]
    services.decide(reviews[0], bob, approve(reviews[0]), via="admin")
    services.decide(reviews[1], bob, approve(reviews[1]), via="admin")
    services.decide(reviews[2], bob, reject(reviews[2]), via="admin")
    services.decide(reviews[3], bob, edit(reviews[3], 45), via="admin")
    mirrored(15)
    return {"rule": rule, "reviews": reviews}


def viewer(*codenames: str) -> Client:
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def test_a_rule_is_put_in_the_shadow_from_its_form(editor: Client) -> None:
    response = editor.post(ADD, rule_form(mode="shadow"))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Policy.objects.get().mode == "shadow"
    response = editor.post(ADD, rule_form(name="other", mode="loud"))
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()


def test_the_rule_list_shows_each_shadow_rules_agreement(
    editor: Client, trial: dict[str, Any]
) -> None:
    Policy.objects.create(name="enforced one", tool="other_tool")
    page = editor.get(RULES).content.decode()
    rule = trial["rule"]
    assert re.search(
        rf'<a href="/admin/nitro_assistants/policy/{rule.pk}/agreement/" '
        r'class="nitro-agreement">50% · 2 of 4</a>',
        page,
    ), page
    assert 'id="nitro-replay-link"' in page
    form = editor.get(f"{RULES}{rule.pk}/change/").content.decode()
    assert "50% · 2 of 4" in form


def test_the_agreement_page_lists_the_verdicts_and_the_disagreements(
    editor: Client, trial: dict[str, Any]
) -> None:
    rule, reviews = trial["rule"], trial["reviews"]
    page = editor.get(f"{RULES}{rule.pk}/agreement/").content.decode()
    assert "50% · 2 of 4" in page
    listed = re.findall(r'href="/admin/nitro_assistants/review/(\d+)/review/"', page)
    assert sorted(map(int, listed)) == sorted(r.pk for r in reviews)
    page = editor.get(f"{RULES}{rule.pk}/agreement/?disagreed=1").content.decode()
    listed = re.findall(r'href="/admin/nitro_assistants/review/(\d+)/review/"', page)
    assert sorted(map(int, listed)) == sorted([reviews[2].pk, reviews[3].pk])
    assert "rejected" in page and "edited" in page
    assert editor.get(f"{RULES}999999/agreement/").status_code == 404
    assert viewer().get(f"{RULES}{rule.pk}/agreement/").status_code == 403


def test_the_replay_view_shows_what_would_change_and_writes_nothing(
    editor: Client, trial: dict[str, Any]
) -> None:
    rule, reviews = trial["rule"], trial["reviews"]
    enforced = Policy.objects.create(
        name="refunds refused", tool="refund_*", action="auto_reject", reason="no", enabled=False
    )
    form = editor.get(REPLAY).content.decode()
    # The enabled rules are ticked first; a disabled one is offered, not ticked.
    assert re.search(rf'value="{rule.pk}"[^>]*checked', form), form
    assert not re.search(rf'value="{enforced.pk}"[^>]*checked', form)
    before = snapshot()
    page = editor.post(REPLAY, {"rules": [str(rule.pk)], "last": "100"}).content.decode()
    assert snapshot() == before
    assert '<dd id="nitro-replay-changed">4</dd>' in page
    assert '<dd id="nitro-replay-then">100.0% (4)</dd>' in page
    assert '<dd id="nitro-replay-draft">50.0% (2)</dd>' in page
    listed = re.findall(r'href="/admin/nitro_assistants/review/(\d+)/review/"', page)
    assert sorted(map(int, listed)) == sorted(r.pk for r in reviews)
    # A pasted rule set instead of the ticked rules.
    pasted = '[{"name": "all refused", "tool": "refund_*", "action": "auto_reject", "reason": "x"}]'
    page = editor.post(REPLAY, {"rules_json": pasted, "last": "2"}).content.decode()
    assert '<dd id="nitro-replay-changed">2</dd>' in page
    assert "all refused" in page


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"rules_json": "[{", "last": "10"}, "This is not JSON"),
        ({"rules_json": '[{"acton": 1}]', "last": "10"}, "unknown field &#x27;acton&#x27;"),
        ({"rules_json": '[{"group": "Nobody"}]', "last": "10"}, "no group is named"),
        ({"rules": ["999999"], "last": "10"}, "Select a valid choice"),
        ({"last": "0"}, "greater than or equal to 1"),
        ({"last": "100000"}, "less than or equal to 10000"),
        ({"last": "many"}, "Enter a whole number"),
    ],
)
def test_a_bad_replay_is_a_form_error(
    editor: Client, trial: dict[str, Any], data: dict[str, Any], error: str
) -> None:
    before = snapshot()
    response = editor.post(REPLAY, data)
    assert response.status_code == 200
    page = response.content.decode()
    assert error in page, page
    assert 'id="nitro-replay-result"' not in page
    assert snapshot() == before


def test_the_replay_needs_the_permission_to_view_rules(
    trial: dict[str, Any], finance: Group
) -> None:
    nobody = viewer()
    assert nobody.get(REPLAY).status_code == 403
    assert nobody.post(REPLAY, {"last": "10"}).status_code == 403
    User.objects.filter(username="viewer").delete()
    assert viewer("view_policy").get(REPLAY).status_code == 200


def test_the_review_screen_shows_what_shadow_rules_would_have_done(
    queued: list[Any], refund_rules: dict[str, Policy], finance: Group
) -> None:
    Policy.objects.create(
        name="refuse large (trial)",
        mode=Policy.Mode.SHADOW,
        position=25,
        tool="refund_*",
        conditions=[{"path": "amount", "op": "gt", "value": 100}],
        action="auto_reject",
        reason="trial",
    )
    Policy.objects.create(
        name="mid refunds in Finance (trial)",
        mode=Policy.Mode.SHADOW,
        tool="refund_*",
        conditions=[{"path": "amount", "op": "gt", "value": 60}],
        approvals=3,
        group=finance,
    )
    client = Client()
    client.force_login(reviewer("alice", finance))
    large = mirrored(300)
    page = client.get(f"/admin/nitro_assistants/review/{large.pk}/review/").content.decode()
    assert "large refunds" in page  # the rule that acts
    shadow = re.search(r'<dd class="nitro-shadow">(.*?)</dd>', page, re.S)
    assert shadow, page
    text = re.sub(r"<[^>]+>", "", shadow.group(1))
    assert "auto_reject (refuse large (trial), v1)" in text
    assert "review · 3 · Finance (mid refunds in Finance (trial), v1)" in text
    assert "not applied" in text
    # Only a shadow rule would have handled it: no "Policy rule" with a blank name.
    mid = mirrored(80)
    page = client.get(f"/admin/nitro_assistants/review/{mid.pk}/review/").content.decode()
    assert "mid refunds in Finance (trial)" in page
    assert "Policy rule" not in page


def test_pasting_a_rule_set_needs_the_permission_to_write_rules(trial: dict[str, Any]) -> None:
    reader = viewer("view_policy")
    pasted = '[{"tool": "refund_*", "action": "auto_approve"}]'
    before = snapshot()
    page = reader.post(REPLAY, {"rules_json": pasted, "last": "10"}).content.decode()
    assert "needs the permission to add or change policy rules" in page
    assert 'id="nitro-replay-result"' not in page
    # Ticking existing rules is reading them: allowed.
    page = reader.post(REPLAY, {"rules": [str(trial["rule"].pk)], "last": "10"}).content.decode()
    assert 'id="nitro-replay-result"' in page
    assert snapshot() == before
