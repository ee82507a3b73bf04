"""Model content is text: hostile messages, tool names and arguments come out escaped on every
screen (the browser test checks that nothing runs; this one checks the markup, fast)."""

from __future__ import annotations

import pytest
from django.test import Client

from nitro_assistants.models import Decision
from nitro_assistants.services.audit import record_event
from tests.admin.conftest import make_reply_review, make_tool_review, review_url, stamp
from tests.factories import DeliveryFactory

pytestmark = pytest.mark.django_db

SCRIPT = "<script>window.__xss = 1</script>"
IMG = '"><img src=x onerror=alert(1)>'


def test_hostile_content_is_escaped_on_every_screen(superuser_client: Client) -> None:
    tool = make_tool_review(
        [
            {
                "id": "call_x",
                "name": f"lookup{IMG}",
                "args": {"note": SCRIPT, f"key{IMG}": IMG},
                "allowed_decisions": ["approve", "edit", "reject"],
            }
        ],
        ask=f"Hello {SCRIPT} {IMG}",
    )
    reply = make_reply_review(f"{SCRIPT} {IMG}")
    event = record_event(tool.thread, "review_requested", review=tool, note=SCRIPT, other=IMG)
    DeliveryFactory(thread=reply.thread, error=IMG, tool=SCRIPT, status="failed")
    superuser_client.post(
        review_url(reply), {**stamp(reply), "reply-action": "reject", "reply-message": IMG}
    )
    pages = [
        "/admin/nitro_assistants/review/",
        "/admin/nitro_assistants/review/?q=lookup",
        review_url(tool),
        review_url(reply),
        f"/admin/nitro_assistants/thread/{tool.thread_id}/change/",
        f"/admin/nitro_assistants/thread/{reply.thread_id}/change/",
        f"/admin/nitro_assistants/event/{event.pk}/change/",
        "/admin/nitro_assistants/delivery/",
        f"/admin/nitro_assistants/decision/{Decision.objects.get().pk}/change/",
    ]
    for url in pages:
        html = superuser_client.get(url).content.decode()
        assert SCRIPT not in html, url
        assert "<img src=x" not in html, url
        assert "&lt;script&gt;" in html or "&lt;img" in html or "&quot;&gt;&lt;img" in html, url
    bulk = superuser_client.post(
        "/admin/nitro_assistants/review/",
        {"action": "reject_selected", "_selected_action": [tool.pk, reply.pk]},
    ).content.decode()
    assert SCRIPT not in bulk and "<img src=x" not in bulk
    assert "lookup&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in bulk
