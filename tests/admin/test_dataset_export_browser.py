"""The dataset export as a person does it, in a real browser (Playwright driving Debian's
chromium, as tests/admin/test_browser.py): tick a decided review in the queue, pick "Export
dataset…", choose the format, and the file that downloads holds the edit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from nitro_assistants.models import Decision, Review
from tests.admin.conftest import VIEW_PERMISSIONS, make_tool_review
from tests.admin.test_browser import CHROMIUM, browser, shot, static_root

__all__ = ["browser", "static_root"]

playwright_api = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture
def page(
    browser: Any, live_server: Any, django_user_model: Any, static_root: Path
) -> Iterator[Any]:
    user = django_user_model.objects.create_user("exporter", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="nitro_assistants",
            codename__in=[*VIEW_PERMISSIONS, "export_dataset"],
        )
    )
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/nitro_assistants/review/")
    page.fill("#id_username", "exporter")
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/nitro_assistants/review/")
    yield page
    context.close()


def test_a_person_exports_an_edited_call_as_an_openai_line(page: Any, live_server: Any) -> None:
    review = make_tool_review()
    Review.objects.filter(pk=review.pk).update(status=Review.Status.DECIDED)
    Decision.objects.create(
        review=review,
        reviewer_id="alice",
        decided_at=review.requested_at,
        tool_calls=[{"id": "call_1", "action": "edit", "args": {"day": "Thursday"}}],
    )
    page.goto(f"{live_server.url}/admin/nitro_assistants/review/?status=all")
    page.check(f"input.action-select[value='{review.pk}']")
    page.select_option("select[name=action]", "export_dataset")
    page.click("button[name=index]")
    page.wait_for_selector("input[name=format][value=openai]")
    assert "Export these" in page.content() or "Export this review" in page.content()
    page.check("input[name=format][value=openai]")
    shot(page, "export_dataset")
    with page.expect_download() as download_info:
        page.click("input[type=submit][value=Download]")
    path = download_info.value.path()
    [line] = [json.loads(text) for text in Path(path).read_text().splitlines()]
    [call] = line["messages"][-1]["tool_calls"]
    assert json.loads(call["function"]["arguments"])["day"] == "Thursday"
    assert download_info.value.suggested_filename.startswith("reviews-openai-")
