"""Shadow rules and replays in a real browser (Playwright driving Debian's chromium): a rule put
in the shadow from its form, its agreement on the rule list followed to its verdicts and to the
reviews it disagreed on, and a replay of a pasted rule set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from nitro_assistants import services
from nitro_assistants.models import Policy
from tests.admin.test_browser import CHROMIUM, browser, static_root
from tests.governance.conftest import approve, mirrored, reviewer
from tests.governance.test_browser import fill_rule, page, window
from tests.governance.test_shadow import reject

__all__ = ["browser", "page", "static_root", "window"]

pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


def test_a_shadow_rules_agreement_shows_and_leads_to_its_disagreements(
    page: Any, live_server: Any, queued: list[Any]
) -> None:
    fill_rule(page, "Large refunds go through (trial)")
    page.select_option("#id_mode", "shadow")
    page.select_option("#id_action", "auto_approve")
    with page.expect_navigation():
        page.press("#id_name", "Enter")  # saves, as the Save button does
    rule = Policy.objects.get()
    assert rule.mode == "shadow"

    bob = reviewer("bob")
    agreed, disagreed = mirrored(300), mirrored(400)
    services.decide(agreed, bob, approve(agreed), via="admin")
    services.decide(disagreed, bob, reject(disagreed), via="admin")
    mirrored(20)  # not a match: no verdict

    page.goto(f"{live_server.url}/admin/nitro_assistants/policy/")
    link = page.locator("#result_list td.field-does a.nitro-agreement")
    assert link.inner_text() == "50% · 1 of 2"
    assert "shadow · 50% · 1 of 2" in page.locator("#result_list td.field-does").inner_text()
    # In the action's column: the list still fits a window 1280 px wide, with no sideways scroll.
    assert page.evaluate("window.innerWidth") == 1280
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.locator(".results").evaluate("box => box.scrollWidth <= box.clientWidth + 1")
    with page.expect_navigation():
        link.click()
    assert page.locator("#nitro-agreement-summary").inner_text() == "50% · 1 of 2"
    assert page.locator("#nitro-agreement-rows tbody tr").count() == 2
    with page.expect_navigation():
        page.click("#nitro-disagreed-link")
    rows = page.locator("#nitro-agreement-rows tbody tr")
    assert rows.count() == 1
    assert f"#{disagreed.pk}" in rows.inner_text() and "rejected" in rows.inner_text()
    with page.expect_navigation():
        rows.locator("a").first.click()
    assert page.url.endswith(f"/admin/nitro_assistants/review/{disagreed.pk}/review/")


def test_a_pasted_rule_set_is_replayed(page: Any, live_server: Any, queued: list[Any]) -> None:
    bob = reviewer("bob")
    for amount in (30, 300):
        review = mirrored(amount)
        services.decide(review, bob, approve(review), via="admin")
    page.goto(f"{live_server.url}/admin/nitro_assistants/policy/")
    with page.expect_navigation():
        page.click("#nitro-replay-link")
    page.fill(
        "#id_rules_json",
        '[{"name": "small ones", "tool": "refund_*", "action": "auto_approve",'
        ' "conditions": [{"path": "amount", "op": "lt", "value": 100}]}]',
    )
    with page.expect_navigation():
        page.click("input[name=_replay]")
    assert page.locator("#nitro-replay-changed").inner_text() == "1"
    assert page.locator("#nitro-replay-draft").inner_text() == "100.0% (2)"
    row = page.locator("#nitro-replay-rows tbody tr")
    assert row.count() == 1 and "small ones" in row.inner_text()
    # A draft the matcher cannot use: the error on the field, the JSON kept.
    page.fill("#id_rules_json", '[{"action": "auto_reject"}]')
    with page.expect_navigation():
        page.click("input[name=_replay]")
    assert "Say why" in page.locator(".errorlist").inner_text()
    assert page.locator("#nitro-replay-result").count() == 0
    assert User.objects.filter(username="ruler").exists()
