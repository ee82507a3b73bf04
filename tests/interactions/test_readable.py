"""Review screens read as what is asked and what was answered, not as JSON: plans as numbered
steps with their inputs and fields, questions as their options, blueprints as their sections, an
edit as what the model proposed beside what the reviewer approved, and Markdown in descriptions
rendered safely. The browser test (tests/admin/test_browser.py) looks at the same screens."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from nitro_assistants.admin.content import render_markdown
from nitro_assistants.models import Review
from tests.interactions.conftest import BLUEPRINT, DAY_FIELD, QUESTIONS, plan, step

pytestmark = pytest.mark.django_db


def screen(review: Review) -> str:
    return f"/admin/nitro_assistants/review/{review.pk}/review/"


def post(client: Client, review: Review, data: dict[str, Any]) -> Any:
    stamp = {"interrupt_id": review.interrupt_id or "", "revision": review.revision}
    return client.post(screen(review), {**stamp, "digest": review.digest, **data})


def text_of(html: str) -> str:
    """The page's words, tags dropped and space collapsed, as a reader sees them."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def outside_details(html: str) -> str:
    return re.sub(r"<details.*?</details>", "", html, flags=re.S)


def test_markdown_is_rendered_with_html_escaped_and_links_safe() -> None:
    html = str(
        render_markdown(
            "**Move** it <script>alert(1)</script> <b>bold</b>\n\n"
            "[crm](https://crm.example/42) [bad](javascript:alert(1)) <https://x.example>\n\n"
            "![pixel](https://tracker.example/p.png)"
        )
    )
    assert "<strong>Move</strong>" in html
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html
    assert '<a href="https://crm.example/42" rel="noopener noreferrer">crm</a>' in html
    assert '<a href="https://x.example" rel="noopener noreferrer">' in html
    assert "javascript:" not in html.split("[bad]")[0] and 'href="javascript' not in html
    assert "<img" not in html  # images are off: no request to wherever a model points
    assert all("noopener noreferrer" in tag for tag in re.findall(r"<a [^>]*>", html))


def test_a_pending_plan_shows_numbered_steps_with_inputs_fields_and_markdown(
    admin_client: Client, interaction: Any
) -> None:
    review = interaction(
        "plan",
        plan(
            step(
                "s1",
                title="Move the visit",
                input={"day": "Tuesday", "customer": {"name": "Jane", "phone": "+1 555 0100"}},
                fields=[{**DAY_FIELD, "help": "The **new** day <script>x()</script>"}],
                warnings=["Costs a call-out fee"],
            ),
            step("s2", title="Text the customer", optional=True, dependsOn=["s1"]),
        ),
    )
    review.payload["interaction"]["summary"] = "See [the CRM](https://crm.example/42)"
    review.save(update_fields=["payload"])
    html = admin_client.get(screen(review)).content.decode()
    words = text_of(outside_details(html))
    assert "1. Move the visit test.ok" in words and "2. Text the customer test.ok" in words
    assert "after s1" in words and "Costs a call-out fee" in words
    assert re.search(r"<code>day</code></th><td><span class=\"nitro-text\">Tuesday", html)
    # A nested input is rows inside its row, not JSON.
    assert re.search(r"<code>customer</code></th><td><table class=\"nitro-kv\">", html)
    assert "<strong>new</strong>" in html and "<script>x()" not in html
    assert '<a href="https://crm.example/42" rel="noopener noreferrer">the CRM</a>' in html
    assert "&quot;stepId&quot;" not in html  # no raw JSON of the plan


def test_a_decided_plan_shows_what_was_asked_answered_who_and_the_edit_side_by_side(
    admin_client: Client,
    interaction: Any,
    registered_operations: Any,
    run_tasks_inline: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    review = interaction(
        "plan",
        plan(
            step("s1", title="Move the visit", input={"day": "Tuesday"}, fields=[DAY_FIELD]),
            step("s2", title="Text the customer", optional=True),
        ),
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = post(
            admin_client,
            review,
            {"interaction-decision": "approve", "step-0-field__day": "Friday", "step-1-run": ""},
        )
    assert response.status_code == 302
    # The proposed revision links to the one the edits made, where the decision is.
    first = admin_client.get(screen(review)).content.decode()
    edited = Review.objects.get(interaction_id=review.interaction_id, revision=2)
    assert f'href="{screen(edited)}"' in first and "made revision 2" in text_of(first)

    html = admin_client.get(screen(edited)).content.decode()
    words = text_of(outside_details(html))
    assert "What was asked, and what was answered" in words
    assert "1. Move the visit test.ok" in words
    assert "2. Text the customer test.ok turned off by the reviewer" in words
    assert "Who admin" in words and "Decided approve" in words
    assert "Submit decision" not in html
    side = html.split('class="nitro-side-by-side"')[1].split("</table>")[0]
    assert "Proposed by the assistant" in side and "Approved by the reviewer" in side
    assert re.search(
        r'<tr class="nitro-changed"><th scope="row"><code>day</code>.*?'
        r'nitro-proposed">\s*<span class="nitro-text">Tuesday</span>.*?'
        r'nitro-approved">\s*<span class="nitro-text">Friday</span>',
        side,
        re.S,
    )
    # The resume value as delivered is kept, collapsed, for whoever needs the exact JSON.
    delivered = html.split('class="nitro-long nitro-delivered"')[1].split("</details>")[0]
    assert "&quot;disabledSteps&quot;: [" in delivered


def test_a_decided_question_shows_the_options_chosen_and_the_text(
    admin_client: Client, interaction: Any, run_tasks_inline: Any
) -> None:
    options = [dict(option) for option in QUESTIONS[0]["options"]]
    options[1]["description"] = "Only *after* 3pm"
    questions = [{**QUESTIONS[0], "options": options}, QUESTIONS[1]]
    review = interaction("question", questions)
    pending = admin_client.get(screen(review)).content.decode()
    assert "Only <em>after</em> 3pm" in pending  # option descriptions, as Markdown
    post(
        admin_client,
        review,
        {"interaction-decision": "answer", "q-0-options": "fri", "q-1-text": "Ring first"},
    )
    html = admin_client.get(screen(review)).content.decode()
    words = text_of(outside_details(html))
    assert "Which day?" in words and "☐ Tuesday" in words and "☑ Friday chosen" in words
    assert "Anything else? (optional)" in words and "Answer: Ring first" in words
    assert "Decided answer" in words


def test_a_blueprint_reads_as_its_sections(admin_client: Client, interaction: Any) -> None:
    review = interaction("blueprint", {**BLUEPRINT, "trigger": {"type": "sms", "from": "+1 555"}})
    html = admin_client.get(screen(review)).content.decode()
    sections = re.findall(r'data-section="(\w+)"><h3>([^<]+)</h3>', html)
    assert [title for _key, title in sections][:4] == [
        "Trigger",
        "Agents",
        "Capabilities",
        "Outputs",
    ]
    assert ("costClass", "Cost class") in sections
    trigger = html.split('data-section="trigger"')[1].split("</section>")[0]
    assert "<code>from</code>" in trigger and "+1 555" in trigger
    assert "&quot;costClass&quot;" not in html
