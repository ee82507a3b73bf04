"""Governance in a real browser (Playwright driving Debian's chromium, as
tests/admin/test_browser.py): Enter in a field of the policy rule form saves the rule, the Dry run
button, first on the page, runs only when clicked; a quorum review approved twice by the same
person says so."""

from __future__ import annotations

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
        page.click("input[name=_dry_run]")
    assert page.locator(".nitro-dry-run-summary").count() == 1
    shot(page, "policy-rule-dry-run")
    assert not Policy.objects.exists()
    # Enter in the dry run's own field saves too: one default for the whole form.
    with page.expect_navigation():
        page.press("#id__dry_run_last", "Enter")
    assert Policy.objects.filter(name="Tried only").exists()


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
