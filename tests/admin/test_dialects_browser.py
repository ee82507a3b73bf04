"""Pauses of graphs of their own decided in the admin in a real browser (chromium), on the real
LangGraph server with Celery eager (tests/graphs/dialects.py, docs/protocol.md §9)."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from nitro_assistants import services
from nitro_assistants.models import Decision, Event, Review, Thread
from tests.admin.test_browser import browser, page, real_server, shot, static_root

__all__ = ["browser", "page", "real_server", "static_root"]  # fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.server]


def start(graph: str) -> Review:
    run = services.start_run(graph, "Hi")
    thread = Thread.objects.get(pk=run.thread_id)
    return Review.objects.get(thread=thread, status=Review.Status.PENDING)


def open_review(page: Any, live_server: Any, review: Review) -> None:
    page.goto(f"{live_server.url}/admin/nitro_assistants/review/{review.pk}/review/")


def submit(page: Any) -> None:
    page.click("form.nitro-decide input[name='_decide']")
    page.wait_for_load_state()


def test_an_agent_inbox_edit_in_the_browser(page: Any, live_server: Any, real_server: Any) -> None:
    review = start("inbox")
    open_review(page, live_server, review)
    pause = page.locator("fieldset.nitro-pause")
    assert "### Refund request" in pause.locator(".nitro-description").inner_text()
    # Only what config allows is offered: accept is not.
    offered = page.locator("input[name='pause-0-type']")
    assert [offered.nth(i).get_attribute("value") for i in range(offered.count())] == [
        "",
        "edit",
        "response",
        "ignore",
    ]
    shot(page, "inbox_review")
    page.check("input[name='pause-0-type'][value='edit']")
    page.fill("input[name='pause-0-arg_amount']", "20.5")
    submit(page)
    decision = Decision.objects.get(review=review)
    assert decision.outcome == "applied", decision.error
    assert decision.run is not None and decision.run.reply == "refund sent: order 1234 amount 20.5"
    assert decision.answer == {
        "answers": {
            review.interrupt_id: {
                "type": "edit",
                "args": {"action": "send_refund", "args": {"order_id": 1234, "amount": 20.5}},
            }
        }
    }


def test_a_blank_response_is_refused_on_the_page_and_nothing_stored(
    page: Any, live_server: Any, real_server: Any
) -> None:
    review = start("inbox")
    open_review(page, live_server, review)
    page.check("input[name='pause-0-type'][value='response']")
    submit(page)
    assert (
        "the text of the response"
        in page.locator(".errorlist, .nitro-field-errors").first.inner_text()
    )
    assert not Decision.objects.filter(review=review).exists()
    page.check("input[name='pause-0-type'][value='response']")
    page.fill("textarea[name='pause-0-response']", "Ask for the receipt")
    submit(page)
    decision = Decision.objects.get(review=review)
    assert decision.run is not None and decision.run.reply == "noted: Ask for the receipt"


def test_parallel_pauses_answered_one_then_the_other(
    page: Any, live_server: Any, real_server: Any
) -> None:
    review = start("parallel")
    _left, right = review.interrupt_ids
    open_review(page, live_server, review)
    assert page.locator("fieldset.nitro-pause").count() == 2
    assert "Left branch: proceed?" in page.locator("fieldset.nitro-pause").first.inner_text()
    page.fill("textarea[name='pause-0-text']", "yes")
    submit(page)
    rest = Review.objects.get(thread=review.thread, status=Review.Status.PENDING)
    assert rest.interrupt_ids == [right]
    open_review(page, live_server, rest)
    assert page.locator("fieldset.nitro-pause").count() == 1
    page.fill("textarea[name='pause-0-json']", '{"size": "M"}')
    submit(page)
    decision = Decision.objects.get(review=rest)
    assert decision.run is not None and decision.run.reply == "left='yes' right={'size': 'M'}"


def test_a_response_schema_makes_the_form(page: Any, live_server: Any, real_server: Any) -> None:
    review = start("schema")
    open_review(page, live_server, review)
    assert page.locator("select[name='pause-0-prop_size'] option").all_inner_texts() == [
        "—",
        "S",
        "M",
        "L",
    ]
    assert page.locator("input[name='pause-0-prop_quantity']").get_attribute("type") == "number"
    page.select_option("select[name='pause-0-prop_size']", label="L")
    submit(page)  # no quantity: the schema requires it
    assert "'quantity' is a required property" in page.content()
    page.select_option("select[name='pause-0-prop_size']", label="L")
    page.fill("input[name='pause-0-prop_quantity']", "2")
    submit(page)
    decision = Decision.objects.get(review=review)
    assert decision.run is not None and decision.run.reply == "ordered 2 x L"


def test_dismiss_in_the_browser(page: Any, live_server: Any, real_server: Any) -> None:
    review = start("plain_interrupt")
    open_review(page, live_server, review)
    assert "Approve a refund of $50?" in page.locator("pre.nitro-value").inner_text()
    page.click("form.nitro-dismiss input[name='_dismiss']")
    page.wait_for_load_state()
    review.refresh_from_db()
    assert review.status == "dismissed"
    assert Event.objects.filter(review=review, verb="review_dismissed").exists()
    assert page.locator("form.nitro-decide").count() == 0


def test_a_stuck_thread_is_shown_failed_with_the_graph_error(
    page: Any, live_server: Any, real_server: Any
) -> None:
    review = start("inbox")
    url = f"{real_server.url}/threads/{review.thread.thread_id}/runs/wait"
    body = {
        "assistant_id": "inbox",
        "command": {"resume": {review.interrupt_id: [{"type": "accept"}]}},
    }
    requests.post(url, json=body, timeout=30)
    services.sync_thread(review.thread)
    review.refresh_from_db()
    assert review.status == "failed"
    open_review(page, live_server, review)
    assert "accept is not allowed" in page.locator(".nitro-stuck").inner_text()
    assert page.locator("form.nitro-decide").count() == 0
    shot(page, "stuck_review")
    page.click("form.nitro-dismiss input[name='_dismiss']")
    page.wait_for_load_state()
    review.refresh_from_db()
    assert review.status == "dismissed"
