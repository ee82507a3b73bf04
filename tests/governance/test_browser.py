"""Governance in a real browser (Playwright driving Debian's chromium, as
tests/admin/test_browser.py): Enter in a field of the policy rule form saves the rule, the Dry run
button, first on the page, runs only when clicked; conditions added with the builder are saved as
the JSON they stand for; a quorum review approved twice by the same person says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from nitro_assistants.models import Approval, Policy
from tests.admin.test_browser import CHROMIUM, browser, shot, static_root
from tests.governance.conftest import mirrored, reviewer

__all__ = ["browser", "static_root"]

pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]

ADD = "/admin/nitro_assistants/policy/add/"


@pytest.fixture
def window(browser: Any, static_root: Path) -> Iterator[Any]:
    """A browser window 1280 px wide, nobody logged in."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def log_in(page: Any, live_server: Any, username: str, then: str) -> None:
    page.goto(f"{live_server.url}/admin/login/?next={then}")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{then}")


@pytest.fixture
def page(window: Any, live_server: Any) -> Any:
    """A superuser, logged in, on the form that adds a policy rule."""
    User.objects.create_superuser("ruler", "ruler@example.com", "pw")
    log_in(window, live_server, "ruler", ADD)
    return window


def fill_rule(page: Any, name: str) -> None:
    page.fill("#id_name", name)
    page.fill("#id_tool", "refund_*")
    page.fill("#id_conditions", '[{"path": "amount", "op": "gt", "value": 100}]')
    page.fill("#id_approvals", "2")


def test_enter_in_a_field_of_the_rule_form_saves_the_rule(page: Any, live_server: Any) -> None:
    fill_rule(page, "Large refunds")
    shot(page, "policy-rule-form")
    with page.expect_navigation():
        page.press("#id_name", "Enter")
    # Saved, as the Save button saves: back on the list, the rule there (no dry run shown).
    assert page.url.endswith("/admin/nitro_assistants/policy/"), page.url
    assert page.locator(".messagelist .success").count() == 1
    rule = Policy.objects.get()
    assert (rule.name, rule.tool, rule.approvals) == ("Large refunds", "refund_*", 2)
    assert page.locator(".nitro-default-submit").count() == 0  # it is the form's alone


def test_the_dry_run_runs_when_its_button_is_clicked(page: Any) -> None:
    fill_rule(page, "Tried only")
    with page.expect_navigation():
        page.click(".nitro-dry-run input[name=_dry_run]")
    assert page.locator(".nitro-dry-run-summary").count() == 1
    shot(page, "policy-rule-dry-run")
    assert not Policy.objects.exists()
    # Enter in the dry run's own field saves too: one default for the whole form.
    with page.expect_navigation():
        page.press("#id__dry_run_last", "Enter")
    assert Policy.objects.filter(name="Tried only").exists()


def test_a_condition_added_with_the_builder_is_saved_as_its_json(
    page: Any, live_server: Any
) -> None:
    """Rows of path, operator and value write the conditions' JSON, which is what is saved and
    validated (issue 40, item 14); Enter in a row still saves, the dry run is beside the rows."""
    builder = page.locator(".nitro-conditions-builder")
    builder.wait_for(state="visible", timeout=15_000)
    page.fill("#id_name", "Large refunds")
    page.fill("#id_tool", "refund_*")
    page.click(".nitro-add-condition")
    row = builder.locator("tbody tr").last
    row.locator(".nitro-condition-path").fill("amount")
    row.locator(".nitro-condition-op").select_option("gt")
    row.locator(".nitro-condition-value").fill("100")
    page.click(".nitro-add-condition")
    row = builder.locator("tbody tr").last
    row.locator(".nitro-condition-path").fill("currency")
    row.locator(".nitro-condition-op").select_option("in")
    row.locator(".nitro-condition-value").fill('["EUR", "USD"]')
    page.click(".nitro-add-condition")
    row = builder.locator("tbody tr").last
    row.locator(".nitro-condition-path").fill("note")
    row.locator(".nitro-condition-value").fill("urgent")
    row.locator(".nitro-remove-condition").click()  # and one taken back
    assert builder.locator("tbody tr").count() == 2
    assert builder.locator("input[name=_dry_run]").count() == 1  # the dry run beside the rows
    for width in (1280, 1400):
        page.set_viewport_size({"width": width, "height": 900})
        shot(page, f"policy-condition-builder-{width}")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        label, rows = (
            page.locator(selector).bounding_box()
            for selector in ("label[for=id_conditions]", ".nitro-conditions-rows")
        )
        assert label["x"] + label["width"] <= rows["x"]  # the label, then the rows beside it
    expected = [
        {"path": "amount", "op": "gt", "value": 100},
        {"path": "currency", "op": "in", "value": ["EUR", "USD"]},
    ]
    assert json.loads(page.input_value("#id_conditions")) == expected  # the JSON is in view
    with page.expect_navigation():
        row = builder.locator("tbody tr").first
        row.locator(".nitro-condition-value").press("Enter")  # Enter saves, as elsewhere
    assert page.url.endswith("/admin/nitro_assistants/policy/"), page.url
    rule = Policy.objects.get()
    assert rule.conditions == expected

    # Opened again, the rows are drawn from the saved JSON; the JSON edited by hand redraws them.
    page.goto(f"{live_server.url}/admin/nitro_assistants/policy/{rule.pk}/change/")
    builder.wait_for(state="visible", timeout=15_000)
    assert builder.locator(".nitro-condition-path").evaluate_all(
        "inputs => inputs.map(input => input.value)"
    ) == ["amount", "currency"]
    assert builder.locator(".nitro-condition-value").first.input_value() == "100"
    page.fill("#id_conditions", '[{"path": "amount", "op": "lte", "value": "50"}]')
    assert builder.locator("tbody tr").count() == 1
    assert builder.locator(".nitro-condition-op").input_value() == "lte"
    assert builder.locator(".nitro-condition-value").input_value() == '"50"'  # a text, kept so
    page.fill("#id_conditions", '{"not": "a list"}')  # more than rows show: the JSON rules
    assert builder.locator("tbody tr").count() == 0
    assert builder.locator(".nitro-conditions-note").is_visible()
    with page.expect_navigation():
        page.click("input[name=_save]:not(.nitro-default-submit)")
    assert page.locator(".errorlist").first.is_visible()  # refused by the server, as typed
    rule.refresh_from_db()
    assert rule.conditions == expected


def test_the_dry_run_beside_the_builder_tries_the_rows_as_written(page: Any) -> None:
    page.locator(".nitro-conditions-builder").wait_for(state="visible", timeout=15_000)
    page.fill("#id_name", "Tried from the rows")
    page.click(".nitro-add-condition")
    page.fill(".nitro-condition-path", "amount")
    page.select_option(".nitro-condition-op", "gte")
    page.fill(".nitro-condition-value", "10")
    with page.expect_navigation():
        page.click(".nitro-conditions-builder input[name=_dry_run]")
    assert page.url.endswith("#nitro-dry-run"), page.url  # opened on the results
    assert page.locator(".nitro-dry-run-summary").count() == 1
    assert json.loads(page.input_value("#id_conditions")) == [
        {"path": "amount", "op": "gte", "value": 10}
    ]
    assert page.locator(".nitro-condition-path").input_value() == "amount"  # rows redrawn
    assert not Policy.objects.exists()


def test_approving_a_quorum_review_again_says_so(
    window: Any, live_server: Any, queued: list[Any], refund_rules: dict[str, Policy], finance: Any
) -> None:
    review = mirrored(300)
    reviewer("alice", finance)
    screen = f"/admin/nitro_assistants/review/{review.pk}/review/"
    log_in(window, live_server, "alice", screen)
    window.check('input[name="call-0-action"][value="approve"]')
    with window.expect_navigation():
        window.click("input[name=_decide]")
    assert "Your approval of review" in window.locator(".messagelist").inner_text()
    window.goto(f"{live_server.url}{screen}")  # the screen again: the same content, a new form
    window.check('input[name="call-0-action"][value="approve"]')
    with window.expect_navigation():
        window.click("input[name=_decide]")
    told = window.locator(".messagelist").inner_text()
    shot(window, "quorum-approved-again")
    assert f"You had already approved review #{review.pk}" in told, told
    assert "1 of 2 approvals · waiting for someone in Finance" in told
    assert Approval.objects.filter(review=review).count() == 1


def test_a_screen_opened_before_a_quorum_edit_says_the_review_changed(
    window: Any, live_server: Any, queued: list[Any], refund_rules: dict[str, Policy], finance: Any
) -> None:
    from nitro_assistants import services
    from tests.governance.conftest import approve

    review = mirrored(300)
    alice = reviewer("alice", finance)
    reviewer("bob", finance)
    screen = f"/admin/nitro_assistants/review/{review.pk}/review/"
    log_in(window, live_server, "bob", screen)  # bob reads amount 300
    edit = {"tool_calls": [{"id": "call_0", "action": "edit", "args": {"amount": 250}}]}
    shown = approve(review)
    services.decide(
        review.pk, alice, {**edit, "revision": shown["revision"], "digest": shown["digest"]}
    )
    window.check('input[name="call-0-action"][value="approve"]')  # bob touches nothing else
    with window.expect_navigation():
        window.click("input[name=_decide]")
    shot(window, "quorum-stale-after-edit")
    told = window.locator(".nitro-stale").inner_text()
    assert f"review #{review.pk} changed since you opened it" in told, told
    assert "not waiting on a review" not in told  # it waits on this one, as it is now
    assert "but chose Approve" not in window.content()
    assert window.input_value("#id_call-0-arg__amount") == "250"  # the screen as it is now
