"""The review screen's governance panel in Debian's chromium (issue 34): whose approval lapsed,
and a rule that failed closed, read as a reviewer reads them, at 1280 and 1400 px."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from nitro_assistants import services
from nitro_assistants.models import Policy
from tests.admin.test_browser import CHROMIUM, SCREENSHOTS, browser, static_root
from tests.governance.conftest import approve, mirrored, reviewer

__all__ = ["browser", "static_root"]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.mark.parametrize("width", [1280, 1400])
def test_the_panel_says_whose_approval_lapsed_and_which_rule_failed_closed(
    browser: Any,
    live_server: Any,
    static_root: Path,
    queued: list[Any],
    refund_rules: dict[str, Policy],
    finance: Group,
    width: int,
) -> None:
    Policy.objects.filter(name="huge refunds").delete()  # the string then fails closed to "large"
    review = mirrored("300")  # type: ignore[arg-type]  # the model sent the amount as a text
    alice, bob = reviewer("alice", finance), reviewer("bob", finance)
    services.decide(review, alice, approve(review), via="admin")
    User.objects.filter(pk=alice.pk).update(is_active=False)

    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", bob.username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    page.goto(f"{live_server.url}/admin/nitro_assistants/review/{review.pk}/review/")
    panel = page.locator(".nitro-governance")
    assert panel.locator(".nitro-lapsed").inner_text() == "alice's approval lapsed (deactivated)"
    unsure = panel.locator(".nitro-unsure").inner_text()
    assert "amount gt 100 cannot be evaluated" in unsure and '"300"' in unsure
    assert "0 of 2 approvals" in panel.locator(".nitro-quorum").inner_text()
    # Nothing of the panel overflows the page sideways.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"governance_lapsed_{width}.png"), full_page=True)
    context.close()
