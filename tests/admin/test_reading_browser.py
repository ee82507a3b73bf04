"""The review screens in a real browser (Playwright driving Debian's chromium, as
tests/admin/test_browser.py): deciding by keyboard, decided plans and questions that read as what
was asked and answered, an edit side by side, Markdown that never runs, and no page wider than a
1280 px window. Screenshots of the decided plan and of the edit go to docs/screenshots."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import transaction

from nitro_assistants import operations, services
from nitro_assistants.client import PendingReview
from nitro_assistants.models import Decision, Review, Thread
from nitro_assistants.services.audit import record_event
from nitro_assistants.services.claims import assign_review, claim_review
from nitro_assistants.services.mirror import mirror_pending
from tests.admin.conftest import MOVE_ARGS, make_reply_review, make_tool_review
from tests.admin.test_browser import CHROMIUM, browser, shot, static_root
from tests.factories import DeliveryFactory, RunFactory, ThreadFactory

__all__ = ["browser", "static_root"]

playwright_api = pytest.importorskip("playwright.sync_api")

DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
CUSTOMER = {"customer": {"name": "Jane Doe"}, "phone": "+1 555 0100", "order_id": 1234}

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture
def subjects(settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {
        **settings.NITRO_ASSISTANTS,
        "THREAD_SUBJECT": ["customer.name", "phone", ("order", "order_id")],
    }


@pytest.fixture
def page(
    browser: Any, live_server: Any, reviewer: Any, static_root: Path, subjects: None
) -> Iterator[Any]:
    """A reviewer, logged in, in a window 1280 px wide."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.dialogs = []  # type: ignore[attr-defined]

    def on_dialog(dialog: Any) -> None:
        page.dialogs.append(dialog.message)  # type: ignore[attr-defined]
        dialog.dismiss()

    page.on("dialog", on_dialog)
    errors: list[str] = []  # a script error on any page (the keyboard's, say) fails the test
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "response",
        # (The site has no favicon: a browser asking for one is no fault of a page.)
        lambda r: (
            errors.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None
        ),
    )
    page.goto(f"{live_server.url}/admin/login/?next=/admin/nitro_assistants/review/")
    page.fill("#id_username", reviewer.username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/nitro_assistants/review/")
    yield page
    context.close()
    assert errors == []


@pytest.fixture
def crm_operations() -> Iterator[None]:
    @operations.operation("crm.move_visit")
    def move_visit(input: dict[str, Any], user: Any) -> dict[str, Any]:
        return {"message": "moved"}

    @operations.operation("crm.text_customer")
    def text_customer(input: dict[str, Any], user: Any) -> dict[str, Any]:
        return {"message": "sent"}

    yield
    operations.unregister("crm.move_visit")
    operations.unregister("crm.text_customer")


def screen(live_server: Any, review: Review) -> str:
    return f"{live_server.url}/admin/nitro_assistants/review/{review.pk}/review/"


def doc_shot(page: Any, name: str, selector: str = "#content") -> None:
    """A screenshot for docs/admin.md: the page's content, as a reviewer sees it."""
    DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(selector).screenshot(path=str(DOCS_SCREENSHOTS / f"{name}.png"))


def ask(kind: str, content: Any, *, title: str, summary: str, context: Any = None) -> Review:
    """A pause on a typed interaction, mirrored as a real run's would be."""
    thread = ThreadFactory(
        assistant_key="interactions",
        context=context or CUSTOMER,
        status=Thread.Status.INTERRUPTED,
        values={"messages": [{"type": "human", "id": "h1", "content": "My boiler is leaking."}]},
    )
    interrupt_id = uuid.uuid4().hex
    key = {"question": "questions", "blueprint": "blueprint", "plan": "plan"}[kind]
    pending = PendingReview(
        kind=kind,
        interrupt_id=interrupt_id,
        interrupt_ids=[interrupt_id],
        interaction={
            "interactionId": f"{kind}-1",
            "kind": kind,
            "title": title,
            "summary": summary,
            key: content,
        },
        mode="interaction",
    )
    with transaction.atomic():
        review = mirror_pending(Thread.objects.select_for_update().get(pk=thread.pk), None, pending)
    assert review is not None
    return review


VISIT_PLAN = {
    "steps": [
        {
            "stepId": "move",
            "title": "Move the engineer's visit",
            "action": "crm.move_visit",
            "input": {"visit_id": 881, "day": "Tuesday", "window": "08:00-12:00"},
            "enabled": True,
            "optional": False,
            "dependsOn": [],
            "costClass": "low",
            "warnings": ["The customer pays a call-out fee after two moves."],
            "fields": [
                {
                    "name": "day",
                    "label": "Day",
                    "widget": "select",
                    "options": ["Tuesday", "Thursday", "Friday"],
                    "required": True,
                    "help": "The customer asked for **any weekday** after Monday.",
                }
            ],
        },
        {
            "stepId": "text",
            "title": "Text the customer the new time",
            "action": "crm.text_customer",
            "input": {"to": "+1 555 0100", "template": "visit_moved"},
            "enabled": True,
            "optional": True,
            "dependsOn": ["move"],
            "costClass": "low",
            "warnings": [],
            "fields": [],
        },
    ],
    "prerequisites": [],
}


def overflow(page: Any) -> dict[str, int]:
    """How much wider than the window the page is (0: nothing overflows), and the widest
    element's tag and class, to say what to fix."""
    return page.evaluate(
        """() => {
            const root = document.documentElement;
            let widest = null, right = 0;
            for (const el of document.querySelectorAll('body *')) {
                const r = el.getBoundingClientRect();
                if (r.width && r.right > right + 1) { right = r.right; widest = el; }
            }
            const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
            let node, text = '';
            while ((node = walker.nextNode())) {
                const range = document.createRange(); range.selectNodeContents(node);
                const r = range.getBoundingClientRect();
                if (r.right > root.clientWidth + 1 && !node.parentElement.closest('.visually-hidden')) {
                    text = node.parentElement.tagName + '.' + node.parentElement.className + ': ' + node.textContent.slice(0, 40);
                    break;
                }
            }
            // A scrolling box (the changelist's results, an inline) hides what is past its edge.
            let hidden = 0, scroller = '';
            for (const el of document.querySelectorAll('#content *')) {
                const style = getComputedStyle(el);
                if (!['auto', 'scroll'].includes(style.overflowX) || !el.clientWidth) continue;
                if (el.scrollWidth - el.clientWidth > hidden) {
                    hidden = el.scrollWidth - el.clientWidth;
                    scroller = el.tagName + '.' + el.className;
                }
            }
            const columns = Array.from(document.querySelectorAll('#result_list thead th')).map(
                th => th.className.replace('sortable', '').trim() + ':' + Math.round(th.getBoundingClientRect().width));
            return {
                columns: columns.join(' '),
                hidden: hidden, scroller: scroller,
                text: text,
                excess: root.scrollWidth - root.clientWidth,
                right: Math.round(right), width: root.clientWidth,
                widest: widest ? widest.tagName + '.' + widest.className + ' in ' + (widest.parentElement ? widest.parentElement.tagName + '.' + widest.parentElement.className : '') : '',
            };
        }"""
    )


# -- keyboard ---------------------------------------------------------------------------------


def test_tool_calls_are_edited_rejected_and_approved_by_keys(page: Any, live_server: Any) -> None:
    edit = make_tool_review()
    page.goto(screen(live_server, edit))
    help_panel = page.locator("#nitro-keys-help")
    assert page.locator("#nitro-keys-toggle").is_visible()  # the visible "?" help
    assert help_panel.is_hidden()
    page.keyboard.press("?")
    assert help_panel.is_visible() and "Ctrl + Enter" in help_panel.inner_text()
    doc_shot(page, "review_keyboard")
    page.keyboard.press("Escape")
    assert help_panel.is_hidden()

    page.keyboard.press("e")
    assert page.is_checked("input[name='call-0-action'][value='edit']")
    focused = page.evaluate("document.activeElement.name")
    assert focused.startswith("call-0-arg__")  # straight to the first argument
    page.fill("input[name='call-0-arg__day']", "Thursday")
    page.keyboard.press("a")  # a letter typed in a field is text, never a decision
    assert page.input_value("input[name='call-0-arg__day']") == "Thursdaya"
    assert not Decision.objects.filter(review=edit).exists()
    page.fill("input[name='call-0-arg__day']", "Thursday")
    page.keyboard.press("Control+Enter")  # submits from inside the field
    page.wait_for_selector("text=Decision recorded on review")
    assert Decision.objects.get(review=edit).tool_calls == [
        {
            "id": "call_1",
            "action": "edit",
            "args": {**MOVE_ARGS, "day": "Thursday"},
        }
    ]

    reject = make_tool_review()
    page.goto(screen(live_server, reject))
    page.keyboard.press("r")
    assert page.is_checked("input[name='call-0-action'][value='reject']")
    assert page.evaluate("document.activeElement.name") == "call-0-message"
    page.keyboard.type("Not on a Sunday, and never after 6pm")
    assert not Decision.objects.filter(review=reject).exists()  # the letters stayed text
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("text=Decision recorded on review")
    assert Decision.objects.get(review=reject).tool_calls == [
        {"id": "call_1", "action": "reject", "message": "Not on a Sunday, and never after 6pm"}
    ]

    approve = make_tool_review()
    page.goto(screen(live_server, approve))
    page.keyboard.press("a")  # the common decision is one key
    page.wait_for_selector("text=Decision recorded on review")
    assert Decision.objects.get(review=approve).tool_calls == [
        {"id": "call_1", "action": "approve"}
    ]
    assert page.dialogs == []  # type: ignore[attr-defined]


def test_several_calls_respond_and_a_reply_sent_as_drafted_by_keys(
    page: Any, live_server: Any
) -> None:
    calls = [
        {
            "id": f"call_{n}",
            "name": name,
            "args": {"appointment_id": 42},
            "allowed_decisions": ["approve", "reject", "respond"],
        }
        for n, name in ((1, "lookup_appointment"), (2, "cancel_appointment"))
    ]
    review = make_tool_review(calls)
    page.goto(screen(live_server, review))
    page.keyboard.press("a")  # "Approve all": one key for every held call
    page.wait_for_selector("text=Decision recorded on review")
    assert Decision.objects.get(review=review).actions == ["approve", "approve"]

    mixed = make_tool_review(calls)
    page.goto(screen(live_server, mixed))
    page.keyboard.press("s")  # respond to the first call
    page.keyboard.type("Appointment 42 is on Tuesday at 10:00.")
    page.keyboard.press("Escape")  # leave the field: letters are keys again
    page.keyboard.press("j")
    assert "nitro-current" in (
        page.locator("fieldset.nitro-call-form").nth(1).get_attribute("class") or ""
    )
    page.keyboard.press("r")
    assert page.evaluate("document.activeElement.name") == "call-1-message"
    page.keyboard.type("The customer did not ask to cancel.")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("text=Decision recorded on review")
    assert Decision.objects.get(review=mixed).tool_calls == [
        {"id": "call_1", "action": "respond", "message": "Appointment 42 is on Tuesday at 10:00."},
        {"id": "call_2", "action": "reject", "message": "The customer did not ask to cancel."},
    ]

    reply = make_reply_review("Moved to Tuesday.\nSee you then!")
    page.goto(screen(live_server, reply))
    assert "a" in page.locator("#nitro-keys-help").inner_text()
    page.keyboard.press("a")  # Send as drafted
    page.wait_for_selector("text=Decision recorded on review")
    assert Decision.objects.get(review=reply).reply == {"action": "approve"}


def test_a_plan_is_sent_back_by_keys(page: Any, live_server: Any, crm_operations: None) -> None:
    review = ask("plan", VISIT_PLAN, title="Move the visit", summary="Because she asked.")
    page.goto(screen(live_server, review))
    shot(page, "plan_review")
    page.keyboard.press("r")
    assert page.is_checked("input[name='interaction-decision'][value='request_revision']")
    assert page.evaluate("document.activeElement.name") == "interaction-note"
    page.keyboard.type("Ask her which weekday first.")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("text=Decision recorded on review")
    review.refresh_from_db()
    assert review.status == Review.Status.REVISION_REQUESTED
    assert Decision.objects.get(review=review).answer["note"] == "Ask her which weekday first."


# -- readable once decided ----------------------------------------------------------------------


def test_a_decided_plan_reads_as_steps_with_the_edit_side_by_side(
    page: Any, live_server: Any, reviewer: Any, crm_operations: None
) -> None:
    review = ask(
        "plan",
        VISIT_PLAN,
        title="Move Jane's boiler repair",
        summary="Jane wrote that she is **away on Tuesday**; see [the ticket](https://crm.example/t/1234).",
    )
    page.goto(screen(live_server, review))
    page.select_option("select[name='step-0-field__day']", "Thursday")
    page.uncheck("input[name='step-1-run']")
    page.check("input[name='interaction-decision'][value='approve']")
    page.click("input[name='_decide']")
    page.wait_for_selector("text=Decision recorded on review")
    page.click(".nitro-edited-as a")  # to the revision the edits made, where the decision is
    page.wait_for_selector(".nitro-decision")

    asked = page.locator(".nitro-asked")
    steps = asked.locator("ol.nitro-plan > li")
    assert steps.count() == 2
    first = steps.nth(0).inner_text()
    assert first.startswith("1. Move the engineer's visit")
    assert "The customer pays a call-out fee" in first
    assert "visit_id\n881" in first or "visit_id\t881" in first
    second = steps.nth(1).inner_text()
    assert "turned off by the reviewer" in second
    side = steps.nth(0).locator("table.nitro-side-by-side")
    changed = side.locator("tr.nitro-changed")
    assert changed.locator("td.nitro-proposed").inner_text() == "Tuesday"
    assert changed.locator("td.nitro-approved").inner_text() == "Thursday"
    decision = page.locator(".nitro-decision").inner_text()
    assert "WHO\nreviewer" in decision and "DECIDED\nAPPROVE" in decision
    # The JSON as delivered is there, collapsed.
    assert page.locator("details.nitro-delivered").get_attribute("open") is None
    link = page.locator(".nitro-md a", has_text="the ticket")
    assert link.get_attribute("rel") == "noopener noreferrer"
    assert overflow(page)["excess"] == 0, overflow(page)
    doc_shot(page, "decided_plan")


def test_a_decided_question_reads_as_its_options_with_the_answer(
    page: Any, live_server: Any
) -> None:
    questions = [
        {
            "questionId": "day",
            "prompt": "Which day suits Jane?",
            "input": "single_select",
            "options": [
                {"optionId": "thu", "label": "Thursday", "description": "Morning slots only"},
                {"optionId": "fri", "label": "Friday", "description": "*Any* time"},
            ],
            "allowOther": False,
            "multiple": False,
            "optional": False,
        },
        {
            "questionId": "note",
            "prompt": "Anything for the engineer?",
            "input": "text",
            "options": [],
            "optional": True,
        },
    ]
    review = ask("question", questions, title="When can we come?", summary="Two questions.")
    page.goto(screen(live_server, review))
    page.check("input[name='q-0-options'][value='fri']")
    page.fill("textarea[name='q-1-text']", "The dog is friendly.")
    page.keyboard.press("Escape")
    page.keyboard.press("a")  # Answer
    assert page.is_checked("input[name='interaction-decision'][value='answer']")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector(".nitro-decision")
    asked = page.locator(".nitro-asked").inner_text()
    assert "Which day suits Jane?" in asked
    chosen = page.locator("ul.nitro-options li.nitro-chosen")
    assert chosen.count() == 1 and chosen.inner_text().startswith("☑ Friday")
    assert "Answer: The dog is friendly." in asked
    assert page.locator(".nitro-md em", has_text="Any").count() == 1
    shot(page, "decided_question")
    assert overflow(page)["excess"] == 0, overflow(page)


def test_an_edit_shows_what_was_proposed_beside_what_was_approved(
    page: Any, live_server: Any
) -> None:
    review = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "reschedule_appointment",
                "args": {
                    "appointment_id": 42,
                    "day": "Tuesday",
                    "time": "10:00",
                    "note": "Ring the bell twice; the side gate is open until noon.",
                },
                "allowed_decisions": ["approve", "edit", "reject", "respond"],
            }
        ]
    )
    review.thread.context = CUSTOMER
    review.thread.save()
    page.goto(screen(live_server, review))
    page.check("input[name='call-0-action'][value='edit']")
    page.fill("input[name='call-0-arg__day']", "Thursday")
    page.fill("input[name='call-0-arg__time']", "14:30")
    page.click("input[name='_decide']")
    page.wait_for_selector(".nitro-decision")
    side = page.locator(".nitro-decision table.nitro-side-by-side")
    rows = {
        row.locator("th").inner_text().split()[0]: (
            row.locator("td.nitro-proposed").inner_text(),
            row.locator("td.nitro-approved").inner_text(),
            "nitro-changed" in (row.get_attribute("class") or ""),
        )
        for row in side.locator("tbody tr").all()
    }
    assert rows["day"] == ("Tuesday", "Thursday", True)
    assert rows["time"] == ("10:00", "14:30", True)
    assert rows["appointment_id"] == ("42", "42", False)
    assert page.locator("h2", has_text="Jane Doe · +1 555 0100 · order 1234").count() == 1
    assert overflow(page)["excess"] == 0, overflow(page)
    doc_shot(page, "edit_side_by_side")


# -- safety and width ---------------------------------------------------------------------------


def test_markdown_never_runs_in_the_browser(page: Any, live_server: Any) -> None:
    hostile = (
        '<script>window.__xss = 1</script> <img src=x onerror="window.__xss = 2"> '
        "[click me](javascript:window.__xss=3) [ok](https://crm.example/1)"
    )
    reply = make_reply_review("Fine.")
    reply.payload["reply"]["description"] = hostile
    reply.save(update_fields=["payload"])
    plan = ask("plan", VISIT_PLAN, title="Plan", summary=hostile)
    for review in (reply, plan):
        page.goto(screen(live_server, review))
        assert page.evaluate("window.__xss") is None
        assert page.locator("img[src=x]").count() == 0
        assert page.locator("a[href^='javascript']").count() == 0
        for link in page.locator(".nitro-md a").all():
            assert link.get_attribute("rel") == "noopener noreferrer"
        assert page.locator(".nitro-md a[href='https://crm.example/1']").count() == 1
        page.locator(".nitro-md", has_text="click me").first.click()
        assert page.evaluate("window.__xss") is None
    assert page.dialogs == []  # type: ignore[attr-defined]


def test_nothing_overflows_at_1280_px(
    page: Any, live_server: Any, reviewer: Any, crm_operations: None, django_user_model: Any
) -> None:
    long_word = "x" * 400
    long_text = " ".join(["A customer who writes a great deal about the boiler."] * 60)
    tool = make_tool_review(
        [
            {
                "id": "call_1",
                "name": f"update_ticket_{long_word[:60]}",
                "args": {
                    "ticket": 1234,
                    "body": long_text,
                    "url": f"https://crm.example/{long_word}",
                    "nested": {"deep": {"deeper": [long_word, {"k": long_word}]}},
                },
                "allowed_decisions": ["approve", "edit", "reject"],
            }
        ],
        ask=long_text + " " + long_word,
    )
    record_event(tool.thread, "review_requested", review=tool, blob=long_word, text=long_text)
    DeliveryFactory(thread=tool.thread, status="failed", error=long_word, tool=long_word[:90])
    RunFactory(thread=tool.thread, error=long_text + long_word)
    plan = ask("plan", VISIT_PLAN, title=long_word, summary=long_text)
    services.decide(plan, reviewer, {"decision": "cancel", "note": long_word}, via="admin")
    # A claimed and assigned row (the queue's "who" column) is the widest a row gets.
    colleague = django_user_model.objects.create_user("jacqueline.montgomery-smith", is_staff=True)
    claim_review(tool, colleague)
    assign_review(tool, Group.objects.create(name="Billing and accounts, second line"), by=None)
    pages = [
        "/admin/nitro_assistants/review/",
        "/admin/nitro_assistants/review/?status=all",
        f"/admin/nitro_assistants/review/{tool.pk}/review/",
        f"/admin/nitro_assistants/review/{plan.pk}/review/",
        "/admin/nitro_assistants/thread/",
        f"/admin/nitro_assistants/thread/{tool.thread_id}/change/",
        "/admin/nitro_assistants/event/",
        "/admin/nitro_assistants/run/",
        "/admin/nitro_assistants/decision/",
        "/admin/nitro_assistants/delivery/",
    ]
    event = tool.thread.events.get(verb="review_requested")
    pages.append(f"/admin/nitro_assistants/event/{event.pk}/change/")
    for index, path in enumerate(pages):
        page.goto(live_server.url + path)
        shot(page, f"width_1280_{index}")
        measured = overflow(page)
        assert measured["excess"] == 0, (path, measured)
        assert measured["hidden"] == 0, (path, measured)
