"""The admin in a real browser (Playwright driving Debian's chromium; never a downloaded one)
against pytest-django's live server: the whole review round trip on the real LangGraph server
with Celery eager, and hostile model content shown as text on every screen."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nitro_assistants import services
from nitro_assistants.models import Delivery, Review, Thread
from nitro_assistants.services.audit import record_event
from tests.admin.conftest import make_reply_review, make_tool_review
from tests.factories import DeliveryFactory

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
SCRIPT = "<script>window.__xss = 1</script>"
IMG = '"><img src=x onerror="window.__xss = 2; alert(2)">'

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are
    # still synchronous and safe.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with playwright_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                ],
            )
            yield browser
            browser.close()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@pytest.fixture
def static_root(settings: Any, tmp_path: Path) -> Path:
    """The live server serves ``STATIC_URL`` from ``STATIC_ROOT`` (the test settings install no
    staticfiles app): link the admin's and the app's static files there, so pages get their CSS."""
    import django.contrib.admin

    import nitro_assistants

    for package, name in ((django.contrib.admin, "admin"), (nitro_assistants, "nitro_assistants")):
        (tmp_path / name).symlink_to(Path(package.__file__).parent / "static" / name)
    settings.STATIC_ROOT = str(tmp_path)
    return tmp_path


@pytest.fixture
def page(browser: Any, live_server: Any, reviewer: Any, static_root: Path) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1500, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.dialogs = []  # type: ignore[attr-defined]

    def on_dialog(dialog: Any) -> None:
        page.dialogs.append(dialog.message)  # type: ignore[attr-defined]
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/nitro_assistants/review/")
    page.fill("#id_username", reviewer.username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/nitro_assistants/review/")
    yield page
    context.close()


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.fixture
def real_server(settings: Any, langgraph_server: Any) -> Iterator[Any]:
    """The real LangGraph server, and Celery running tasks eagerly in whichever thread (the
    live server's too) enqueues them."""
    from tests.celery_app import app

    # Read the app's configuration before changing any setting: Celery loads it from Django's
    # settings lazily, once, so loading it after the change would keep the whole session eager.
    before = {key: app.conf[key] for key in ("task_always_eager", "task_eager_propagates")}
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "BASE_URL": langgraph_server.url}
    settings.CELERY_TASK_ALWAYS_EAGER = True
    app.conf.update(task_always_eager=True, task_eager_propagates=True)
    app.set_default()  # the live server's thread has no current app of its own
    yield langgraph_server
    app.conf.update(before)


@pytest.mark.server
def test_review_round_trip_on_the_real_server(
    page: Any, live_server: Any, real_server: Any
) -> None:
    run = services.start_run("walkthrough", "Can I move my appointment to Tuesday?")
    thread = Thread.objects.get(pk=run.thread_id)
    review = Review.objects.get(thread=thread, status=Review.Status.PENDING)
    assert review.kind == Review.Kind.TOOL_CALLS
    make_reply_review("Your parcel ships on Friday.")  # a second item in the queue

    page.goto(f"{live_server.url}/admin/nitro_assistants/review/")
    assert page.locator("#result_list tbody tr").count() == 2
    shot(page, "queue")

    page.click(f'a.nitro-held[href$="/review/{review.pk}/review/"]')
    page.wait_for_selector("fieldset.nitro-call-form")
    assert (
        page.locator(".nitro-msg.nitro-human")
        .first.inner_text()
        .endswith("Can I move my appointment to Tuesday?")
    )
    held_args = page.locator(".nitro-held-msg table.nitro-kv tr", has_text="day")
    assert held_args.locator("td").inner_text() == "Tuesday"  # arguments as key/value rows
    shot(page, "tool_call_review")

    page.check("input[name='call-0-action'][value='edit']")
    page.fill("input[name='call-0-arg__day']", "Thursday")
    page.click("input[name='_decide']")
    page.wait_for_selector("text=Decision recorded on review")
    # The resume ran (eagerly) and the thread moved on to its reply draft.
    moved_on = page.locator(".nitro-now").inner_text()
    assert "waits on: reply" in moved_on
    assert "OUTCOME\napplied" in page.locator(".nitro-decision").inner_text()
    review.refresh_from_db()
    assert review.status == Review.Status.APPLIED
    reply = Review.objects.get(thread=thread, status=Review.Status.PENDING)
    assert reply.kind == Review.Kind.REPLY
    # The tool ran with the edited argument; its result is in the draft.
    assert "Appointment 42 moved to Thursday at 10:00" in reply.reply["content"]

    page.click(".nitro-now a")
    page.wait_for_selector("fieldset.nitro-reply-form")
    shot(page, "reply_review")
    page.check("input[name='reply-action'][value='edit']")
    page.fill("textarea[name='reply-content']", "Moved to Thursday at 10:00. See you then!")
    page.click("input[name='_decide']")
    page.wait_for_selector("text=Decision recorded on review")
    assert (
        "Moved to Thursday at 10:00. See you then!" in page.locator(".nitro-decision").inner_text()
    )
    shot(page, "decided_review")
    reply.refresh_from_db()
    assert reply.status == Review.Status.APPLIED
    thread.refresh_from_db()
    assert thread.status == Thread.Status.IDLE
    assert thread.messages[-1]["content"] == "Moved to Thursday at 10:00. See you then!"
    delivery = Delivery.objects.get(thread=thread)
    assert delivery.status == Delivery.Status.DELIVERED
    assert delivery.content == "Moved to Thursday at 10:00. See you then!"

    page.goto(f"{live_server.url}/admin/nitro_assistants/thread/{thread.pk}/change/")
    conversation = page.locator(".nitro-conversation").inner_text()
    assert "Moved to Thursday at 10:00. See you then!" in conversation
    assert "delivery: delivered" in conversation.lower()
    shot(page, "thread")

    page.goto(f"{live_server.url}/admin/nitro_assistants/review/metrics/")
    assert page.locator("svg[role=img]").count() >= 3
    shot(page, "metrics")
    assert page.dialogs == []  # type: ignore[attr-defined]


def hostile_reviews() -> tuple[Review, Review, int]:
    name = f"lookup{IMG}"
    tool = make_tool_review(
        [
            {
                "id": "call_x",
                "name": name,
                "args": {"note": SCRIPT, f"key{IMG}": IMG},
                "allowed_decisions": ["approve", "edit", "reject"],
            }
        ],
        ask=f"Hello {SCRIPT} and {IMG}",
    )
    reply = make_reply_review(f"{SCRIPT} draft {IMG}")
    event = record_event(tool.thread, "review_requested", review=tool, note=SCRIPT, other=IMG)
    DeliveryFactory(thread=reply.thread, status="failed", error=f"gateway {SCRIPT} {IMG}", tool=IMG)
    return tool, reply, event.pk


def assert_inert(page: Any, *, shown: bool = True) -> None:
    assert page.evaluate("window.__xss") is None
    assert page.dialogs == []  # type: ignore[attr-defined]
    assert page.locator("img[src=x]").count() == 0
    if shown:
        body = page.locator("#content").inner_text()
        assert SCRIPT in body or IMG in body


def test_hostile_content_is_shown_as_text_everywhere(page: Any, live_server: Any) -> None:
    tool, reply, event = hostile_reviews()
    base = live_server.url
    for path in [
        "/admin/nitro_assistants/review/",
        f"/admin/nitro_assistants/review/{tool.pk}/review/",
        f"/admin/nitro_assistants/review/{reply.pk}/review/",
        f"/admin/nitro_assistants/thread/{tool.thread_id}/change/",
        f"/admin/nitro_assistants/thread/{reply.thread_id}/change/",
        f"/admin/nitro_assistants/event/{event}/change/",
        "/admin/nitro_assistants/delivery/",
    ]:
        page.goto(base + path)
        assert_inert(page)
    # The edit form shows hostile argument values inside inputs, as values.
    page.goto(f"{base}/admin/nitro_assistants/review/{tool.pk}/review/")
    assert (
        page.input_value("textarea[name='call-0-arg__note'], input[name='call-0-arg__note']")
        == SCRIPT
    )
    # A decision made on hostile content, shown read-only.
    page.check("input[name='call-0-action'][value='reject']")
    page.fill("textarea[name='call-0-message']", f"no {IMG}")
    page.click("input[name='_decide']")
    page.wait_for_selector(".nitro-decision")
    assert_inert(page)
    # The bulk-reject intermediate page lists the hostile summaries.
    page.goto(f"{base}/admin/nitro_assistants/review/?status=all")
    page.check(f"input[name='_selected_action'][value='{reply.pk}']")
    page.select_option("select[name='action']", "reject_selected")
    page.click("button[name='index']")
    page.wait_for_selector("textarea[name='reason']")
    assert_inert(page)
    page.goto(f"{base}/admin/nitro_assistants/review/metrics/")
    assert_inert(page, shown=False)
    page.goto(f"{base}/admin/nitro_assistants/event/")
    assert_inert(page, shown=False)


# -- deciding in the browser: changed arguments, one-click approve, bulk approve -----------------

NOTE = "Please ring first.\nThe door code is 42."


def test_a_changed_argument_is_refused_on_approve_and_sent_on_edit(
    page: Any, live_server: Any
) -> None:
    from nitro_assistants.models import Decision

    calls = [
        {
            "id": "call_1",
            "name": "reschedule_appointment",
            "args": {"appointment_id": 42, "day": "Tuesday", "note": NOTE},
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
        }
    ]
    review = make_tool_review(calls)
    page.goto(f"{live_server.url}/admin/nitro_assistants/review/{review.pk}/review/")
    approve = page.locator("input[name='_approve']")
    assert approve.input_value() == "Approve"
    shot(page, "tool_call_review_one_click")
    page.fill("input[name='call-0-arg__day']", "Thursday")
    approve.click()
    page.wait_for_selector(".nitro-call-form .errorlist")
    error = page.locator(".nitro-call-form .errorlist").first.inner_text()
    assert "You changed `day` but chose Approve" in error
    assert page.input_value("input[name='call-0-arg__day']") == "Thursday"  # nothing lost
    shot(page, "tool_call_changed_on_approve")
    assert not Decision.objects.exists()

    page.check("input[name='call-0-action'][value='edit']")
    page.click("input[name='_decide']")
    page.wait_for_selector("text=Decision recorded on review")
    # The untouched multi-line note (sent back by the browser with CRLF) is not "changed".
    assert Decision.objects.get(review=review).tool_calls == [
        {
            "id": "call_1",
            "action": "edit",
            "args": {"appointment_id": 42, "day": "Thursday", "note": NOTE},
        }
    ]


def test_one_click_approve_of_an_untouched_call_and_send_as_drafted(
    page: Any, live_server: Any
) -> None:
    from nitro_assistants.models import Decision

    tool = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "leave_note",
                "args": {"note": NOTE},
                "allowed_decisions": ["approve", "edit", "reject"],
            }
        ]
    )
    reply = make_reply_review("Moved to Tuesday.\nSee you then!")
    page.goto(f"{live_server.url}/admin/nitro_assistants/review/{tool.pk}/review/")
    page.click("input[name='_approve']")
    page.wait_for_selector("text=Decision recorded on review")
    assert Decision.objects.get(review=tool).tool_calls == [{"id": "call_1", "action": "approve"}]

    page.goto(f"{live_server.url}/admin/nitro_assistants/review/{reply.pk}/review/")
    send = page.locator("input[name='_approve']")
    assert send.input_value() == "Send as drafted"
    shot(page, "reply_review_one_click")
    send.click()
    page.wait_for_selector("text=Decision recorded on review")
    assert Decision.objects.get(review=reply).reply == {"action": "approve"}


def test_bulk_approve_asks_for_confirmation_first(page: Any, live_server: Any) -> None:
    from nitro_assistants.models import Decision

    reviews = [make_tool_review(), make_reply_review("Your parcel ships on Friday.")]
    page.goto(f"{live_server.url}/admin/nitro_assistants/review/")
    for review in reviews:
        page.check(f"input[name='_selected_action'][value='{review.pk}']")
    page.select_option("select[name='action']", "approve_selected")
    page.click("button[name='index']")
    page.wait_for_selector("text=Approve these 2 reviews?")
    assert not Decision.objects.exists()
    listed = page.locator(".nitro-bulk-list").inner_text()
    assert "reschedule_appointment" in listed and "Your parcel ships on Friday." in listed
    shot(page, "bulk_approve_confirmation")
    page.click("input[value='Yes, approve them']")
    page.wait_for_selector("text=2 reviews approved.")
    assert {d.review_id for d in Decision.objects.all()} == {r.pk for r in reviews}
