"""Page titles say what the page is ("Reviews waiting"), never Django's "Select review to view"."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.admin.conftest import make_reply_review, make_tool_review, review_url

pytestmark = pytest.mark.django_db
ADMIN = "/admin/nitro_assistants"


def heading(html: str) -> str:
    found = re.search(r"<h1[^>]*>(.*?)</h1>", html, re.S)
    assert found, html
    return found.group(1).strip()


@pytest.mark.parametrize(
    ("path", "title"),
    [
        ("/review/", "Reviews waiting"),
        ("/review/?status=pending", "Reviews waiting"),
        ("/review/?status=all", "Reviews"),
        ("/review/?status=applied", "Reviews"),
        ("/thread/", "Threads"),
        ("/event/", "Events"),
        ("/delivery/", "Deliveries"),
        ("/decision/", "Decisions"),
        ("/run/", "Runs"),
    ],
)
def test_lists_are_named_for_what_they_list(
    superuser_client: Client, path: str, title: str
) -> None:
    html = superuser_client.get(ADMIN + path).content.decode()
    assert heading(html) == title
    assert f"<title>{title} |" in html
    assert "to view" not in html and "to change" not in html


def test_a_review_screen_says_what_to_do_and_what_it_is_about(superuser_client: Client) -> None:
    tool = make_tool_review()
    html = superuser_client.get(review_url(tool)).content.decode()
    assert heading(html) == f"Decide review #{tool.pk} (tool calls)"
    assert "<h2>Can I move my appointment to Tuesday?</h2>" in html
    reply = make_reply_review(status="applied")
    html = superuser_client.get(review_url(reply)).content.decode()
    assert heading(html) == f"Review #{reply.pk} (reply), applied"
