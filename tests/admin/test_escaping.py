"""Model content is text: hostile messages, tool names and arguments come out escaped on every
screen (the browser test checks that nothing runs; this one checks the markup, fast)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from nitro_assistants.models import Decision, Review
from nitro_assistants.services.audit import record_event
from tests.admin.conftest import make_reply_review, make_tool_review, review_url, stamp
from tests.factories import DeliveryFactory, ReviewFactory

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


MARKDOWN_ATTACKS = (
    f"**Note** {SCRIPT} [click](javascript:window.__xss=3) [crm](https://crm.example/1) "
    f"![x](https://tracker.example/p.png) {IMG}"
)


def hostile_interactions() -> list[Review]:
    """A plan, a question and a blueprint whose every text (titles, summaries, descriptions,
    inputs, field help, option labels, section values) is hostile."""
    plan = {
        "steps": [
            {
                "stepId": f"s1{IMG}",
                "title": f"Step {SCRIPT}",
                "action": f"crm.{IMG}",
                "input": {f"key{IMG}": SCRIPT, "nested": {"deep": IMG}},
                "enabled": True,
                "optional": True,
                "dependsOn": [IMG],
                "warnings": [SCRIPT],
                "fields": [
                    {
                        "name": "day",
                        "label": f"Day {IMG}",
                        "options": [SCRIPT, "Friday"],
                        "help": MARKDOWN_ATTACKS,
                    }
                ],
            }
        ],
        "prerequisites": [SCRIPT],
    }
    question = [
        {
            "questionId": "q1",
            "prompt": f"Which {SCRIPT}?",
            "input": "single_select",
            "options": [{"optionId": "a", "label": IMG, "description": MARKDOWN_ATTACKS}],
        }
    ]
    blueprint = {"trigger": {"type": SCRIPT}, "agents": [IMG], f"extra{IMG}": MARKDOWN_ATTACKS}
    made = []
    for kind, key, content in (
        ("plan", "plan", plan),
        ("question", "questions", question),
        ("blueprint", "blueprint", blueprint),
    ):
        made.append(
            ReviewFactory(
                kind=kind,
                interaction_id=f"i-{kind}",
                payload={
                    "interaction": {
                        "interactionId": f"i-{kind}",
                        "kind": kind,
                        "title": f"Title {SCRIPT}",
                        "summary": MARKDOWN_ATTACKS,
                        key: content,
                    }
                },
            )
        )
    return made


def assert_markdown_inert(html: str, url: str) -> None:
    assert SCRIPT not in html, url
    assert "<img" not in html, url
    assert 'href="javascript' not in html.lower(), url
    assert "<strong>Note</strong>" in html, url  # the Markdown was rendered, not dropped
    for tag in re.findall(r'<a [^>]*href="https://crm\.example/1"[^>]*>', html):
        assert 'rel="noopener noreferrer"' in tag, (url, tag)
    assert re.search(r'<a [^>]*href="https://crm\.example/1"', html), url


def test_markdown_in_descriptions_is_rendered_safely(superuser_client: Client) -> None:
    reply = make_reply_review("Fine.")
    reply.payload["reply"]["description"] = MARKDOWN_ATTACKS
    reply.save(update_fields=["payload"])
    for review in [reply, *hostile_interactions()]:
        url = review_url(review)
        response = superuser_client.get(url)
        assert response.status_code == 200, url
        assert_markdown_inert(response.content.decode(), url)


def test_hostile_interactions_are_text_once_decided(superuser_client: Client) -> None:
    for review in hostile_interactions():
        Review.objects.filter(pk=review.pk).update(status=Review.Status.CANCELLED)
        Decision.objects.create(
            review=review,
            reviewer_id="root",
            decided_at=timezone.now(),
            answer={
                "decision": "cancel",
                "note": SCRIPT,
                "answers": [{"questionId": "q1", "text": IMG}],
            },
            note=SCRIPT,
        )
        html = superuser_client.get(review_url(review)).content.decode()
        assert_markdown_inert(html, review.kind)
        assert "&lt;script&gt;" in html
