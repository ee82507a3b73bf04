"""The queue, the policy rule list, a thread and the example site's SMS outbox in a real browser
(Playwright driving Debian's chromium, as tests/admin/test_browser.py) at 1280 and 1400 px, as
the demo fills them (issue 40, item 9): no page wider than its window, and names and times each
on one line, not broken mid-word ("virtual-confirmatio|n") or wrapped onto four lines."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group

from nitro_assistants.models import Policy
from nitro_assistants.services.audit import record_event
from tests.admin.conftest import make_reply_review, make_tool_review
from tests.admin.test_browser import CHROMIUM, browser, shot, static_root

__all__ = ["browser", "static_root"]

playwright_api = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]

ASSISTANT = "virtual-confirmation"  # the demo's assistant, the name the queue broke
WIDTHS = (1280, 1400)

# How many lines the text of each element found runs over: the distinct tops (to 4 px) of the
# boxes of its text.
LINES = """elements => elements.map(element => {
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  const tops = [];
  while (walker.nextNode()) {
    if (!walker.currentNode.textContent.trim()) continue;
    const range = document.createRange();
    range.selectNodeContents(walker.currentNode);
    for (const rect of range.getClientRects()) {
      if (rect.width > 0 && !tops.some(top => Math.abs(top - rect.top) < 4)) tops.push(rect.top);
    }
  }
  return tops.length;
})"""


@pytest.fixture
def demo_site(settings: Any) -> None:
    """The demo's assistant configured, and the example site's outbox page served."""
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "DEFINITIONS": {
            **settings.NITRO_ASSISTANTS["DEFINITIONS"],
            ASSISTANT: {"api_key": "test-key", "assistant_id": ASSISTANT},
        },
    }


@pytest.fixture
def window(browser: Any, live_server: Any, superuser: Any, static_root: Path) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", superuser.username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    yield page
    context.close()


def fits(page: Any, name: str, one_line: str, *, from_width: int = WIDTHS[0]) -> None:
    """At each width: a screenshot, no sideways scroll, and each ``one_line`` element on one
    (from ``from_width``)."""
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_function(f"window.innerWidth === {width}", timeout=15_000)
        shot(page, f"{name}-{width}")
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), (
            name,
            width,
            page.evaluate("document.documentElement.scrollWidth"),
        )
        # Nor a list scrolled sideways inside its box (the admin's .results scrolls on its own).
        hidden = page.locator(".results, .inline-group").evaluate_all(
            "boxes => boxes.filter(box => box.scrollWidth > box.clientWidth + 1).length"
        )
        assert hidden == 0, (name, width, hidden)
        if width < from_width:
            continue
        elements = page.locator(one_line)
        assert elements.count() >= 1, one_line
        lines = elements.evaluate_all(LINES)
        assert lines and set(lines) == {1}, (name, width, one_line, lines)


def test_the_queue_keeps_names_whole(window: Any, live_server: Any, demo_site: None) -> None:
    for day in ("Tuesday", "Wednesday", "Thursday"):
        make_tool_review(assistant_key=ASSISTANT, ask=f"Can I move my appointment to {day}?")
    make_reply_review("Thanks for confirming! See you Monday at 9am.")
    window.goto(f"{live_server.url}/admin/nitro_assistants/review/")
    # Below 1400 px an assistant's name may break at its hyphen, never inside a word.
    fits(window, "wide-queue", "#result_list td.field-assistant", from_width=1400)
    # The status filter, its lifecycles apart (item 10), in the same screenshots.
    assert window.locator("#changelist-filter .nitro-filter-group").count() == 2


def test_the_policy_rule_list_fits_its_window(window: Any, live_server: Any) -> None:
    finance = Group.objects.create(name="Finance")
    dispatch = Group.objects.create(name="Dispatch")
    Policy.objects.create(
        name="Large refunds need two people in Finance",
        position=6,
        tool="refund",
        conditions=[{"path": "amount", "op": "gt", "value": 50}],
        approvals=2,
        group=finance,
    )
    Policy.objects.create(
        name="Weekend moves are refused",
        position=10,
        tool="reschedule_appointment",
        conditions=[{"path": "day", "op": "in", "value": ["Saturday", "Sunday"]}],
        action=Policy.Action.AUTO_REJECT,
        reason="We are closed at weekends: offer a weekday instead.",
    )
    Policy.objects.create(
        name="Cancellations need two dispatchers (then a manager)",
        position=30,
        tool="cancel_*",
        assistant=ASSISTANT,
        approvals=2,
        group=dispatch,
        deadline=datetime.timedelta(hours=2),
        on_deadline=Policy.OnDeadline.ESCALATE,
        escalate_to=Group.objects.create(name="Managers"),
    )
    window.goto(f"{live_server.url}/admin/nitro_assistants/policy/")
    fits(window, "wide-policy-rules", "#result_list td.field-matches .nitro-name")


def test_a_threads_event_times_stay_on_one_line(window: Any, live_server: Any) -> None:
    review = make_tool_review(assistant_key=ASSISTANT)
    for verb in ("review_requested", "review_claimed", "review_decided", "resume_enqueued"):
        record_event(review.thread, verb, review=review, data={"note": "x" * 40})
    window.goto(f"{live_server.url}/admin/nitro_assistants/thread/{review.thread_id}/change/")
    fits(window, "wide-thread", "td.field-at")


@pytest.mark.urls("reviewsite.urls")
def test_the_outbox_shows_times_as_the_admin_does(
    window: Any, live_server: Any, settings: Any, tmp_path: Path
) -> None:
    settings.DEMO_OUTBOX = str(tmp_path / "outbox.jsonl")
    root = Path(__file__).resolve().parents[2]
    settings.TEMPLATES = [
        {
            **settings.TEMPLATES[0],
            "DIRS": [*settings.TEMPLATES[0].get("DIRS", []), root / "reviewsite" / "templates"],
        }
    ]
    with open(settings.DEMO_OUTBOX, "w", encoding="utf-8") as outbox:
        for at, content in (
            ("2026-12-04T17:31:08.123456+00:00", "Thanks for confirming! See you Monday at 9am."),
            ("2026-12-04T17:32:40.654321+00:00", "Done: you're booked for Tuesday at 10:00."),
        ):
            outbox.write(json.dumps({"at": at, "to": "+1 555 0100", "content": content}) + "\n")
        outbox.write(json.dumps({"at": "yesterday", "to": "+1 555 0100", "content": "?"}) + "\n")
    window.goto(f"{live_server.url}/outbox/")
    times = window.locator("td.nitro-outbox-at").all_inner_texts()
    assert times[0] == "yesterday"  # what is not a time is shown as written
    assert times[1:] == ["Dec. 4, 2026, 5:32 p.m.", "Dec. 4, 2026, 5:31 p.m."], times
    fits(window, "wide-outbox", "td.nitro-outbox-at")


@pytest.mark.parametrize("kind", ["question", "plan"])
def test_question_and_plan_screens_show_no_ask_reader_call(
    window: Any, live_server: Any, kind: str
) -> None:
    """Item 8 as a reader sees it: the conversation above the form, without the call that asked
    and its JSON result (tests/admin/test_interaction_conversation.py holds the rule)."""
    from tests.admin.test_interaction_conversation import PLAN, QUESTIONS, asked

    review = asked(
        kind,
        QUESTIONS if kind == "question" else PLAN,
        answered={"decision": "cancel", "note": "ANSWER-JSON"},
    )
    window.goto(f"{live_server.url}/admin/nitro_assistants/review/{review.pk}/review/")
    conversation = window.locator(".nitro-conversation").inner_text()
    assert "I need your input." in conversation and "Thanks, booked." in conversation
    assert "ANSWER-JSON" not in conversation
    assert window.locator(".nitro-conversation .nitro-call").count() == 1  # the earlier one
    fits(window, f"wide-{kind}-screen", ".nitro-conversation .nitro-who")
