"""Approve never drops a change in silence: an argument or a reply changed on the form and then
approved is refused, naming what changed (the reviewer chooses Edit, or puts it back); a message
typed for a decision that sends none is refused too. And the one-click approve buttons.

The POSTs are built from the page as a browser sends it (every field the form draws, textareas
with CRLF line breaks), so "unchanged" means what a reviewer who touched nothing sends."""

from __future__ import annotations

import html as htmllib
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client

from nitro_assistants.models import Decision, Review
from tests.admin.conftest import make_reply_review, make_tool_review, review_url

pytestmark = pytest.mark.django_db

MULTILINE = "Line one\nLine two"
CALLS = [
    {
        "id": "call_1",
        "name": "reschedule_appointment",
        "args": {"appointment_id": 42, "day": "Tuesday", "note": MULTILINE, "slot": {"h": 10}},
        "allowed_decisions": ["approve", "edit", "reject", "respond"],
    },
    {
        "id": "call_2",
        "name": "notify_customer",
        "args": {"text": "Moved to Tuesday", "urgent": False},
        "allowed_decisions": ["approve", "edit", "reject"],
    },
]


class FormFields(HTMLParser):
    """What a browser submits for the page's decision form: text, hidden and number inputs,
    checked radios, selected options, textareas (line breaks as CRLF); no submit buttons."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.data: dict[str, str] = {}
        self.in_form = False
        self.textarea: str | None = None
        self.select: str | None = None
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and "nitro-decide" in a.get("class", ""):
            self.in_form = True
        if not self.in_form:
            return
        if tag == "input" and a.get("type") not in ("submit", "checkbox") and "name" in a:
            if a.get("type") != "radio" or "checked" in a:
                self.data[a["name"]] = a.get("value", "")
        elif tag == "textarea":
            self.textarea, self.text = a["name"], ""
        elif tag == "select":
            self.select = a["name"]
        elif tag == "option" and self.select and "selected" in a:
            self.data[self.select] = a.get("value", "")

    def handle_data(self, data: str) -> None:
        if self.textarea is not None:
            self.text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.in_form = False
        elif tag == "textarea" and self.textarea is not None:
            text = self.text.removeprefix("\n")  # the parser drops the newline after <textarea>
            self.data[self.textarea] = text.replace("\r\n", "\n").replace("\n", "\r\n")
            self.textarea = None
        elif tag == "select":
            self.select = None


def as_rendered(client: Client, review: Review) -> dict[str, str]:
    response = client.get(review_url(review))
    assert response.status_code == 200
    parser = FormFields()
    parser.feed(response.content.decode())
    assert "interrupt_id" in parser.data and "digest" in parser.data
    return parser.data


def page_text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def refused(response: Any, review: Review, *texts: str) -> str:
    assert response.status_code == 400
    shown = page_text(response)
    for text in texts:
        assert text in shown, text
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert not Decision.objects.exists()
    return shown


# -- tool calls ---------------------------------------------------------------------------------


def test_an_untouched_form_approves_with_every_argument_as_proposed(
    reviewer_client: Client,
) -> None:
    review = make_tool_review(CALLS)
    data = as_rendered(reviewer_client, review)
    assert data["call-0-arg__note"] == "Line one\r\nLine two"  # as a browser sends a textarea
    data.update({"call-0-action": "approve", "call-1-action": "approve"})
    assert reviewer_client.post(review_url(review), data).status_code == 302
    assert Decision.objects.get(review=review).tool_calls == [
        {"id": "call_1", "action": "approve"},
        {"id": "call_2", "action": "approve"},
    ]


def test_a_changed_argument_with_approve_is_refused_naming_it_and_kept_on_the_form(
    reviewer_client: Client,
) -> None:
    review = make_tool_review(CALLS)
    data = as_rendered(reviewer_client, review)
    data.update(
        {
            "call-0-action": "approve",
            "call-0-arg__day": "Thursday",
            "call-0-arg__slot": '{"h": 11}',
            "call-1-action": "approve",
        }
    )
    response = reviewer_client.post(review_url(review), data)
    shown = refused(
        response,
        review,
        "You changed `day`, `slot` but chose Approve, which runs the call with the assistant's "
        "arguments. Choose Edit to send your change",
    )
    assert 'value="Thursday"' in shown  # what the reviewer typed is still there
    assert response.context["form"].calls[1].errors == {}  # the untouched call is not blamed

    data["call-0-action"] = "edit"  # the reviewer picks Edit: the change is sent
    assert reviewer_client.post(review_url(review), data).status_code == 302
    # The form posts the changed arguments; the decision holds the whole call (issue 34).
    assert Decision.objects.get(review=review).tool_calls[0] == {
        "id": "call_1",
        "action": "edit",
        "args": {
            "appointment_id": 42,
            "day": "Thursday",
            "note": "Line one\nLine two",
            "slot": {"h": 11},
        },
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [("arg__appointment_id", "43"), ("arg__note", "Line one\r\nLine 2"), ("arg__urgent", "true")],
)
def test_each_argument_type_counts_as_changed(
    reviewer_client: Client, field: str, value: str
) -> None:
    review = make_tool_review(CALLS)
    data = as_rendered(reviewer_client, review)
    index = 1 if field == "arg__urgent" else 0
    data.update({"call-0-action": "approve", "call-1-action": "approve"})
    data[f"call-{index}-{field}"] = value
    refused(
        reviewer_client.post(review_url(review), data),
        review,
        f"You changed `{field.removeprefix('arg__')}` but chose Approve",
    )


def test_an_edited_multiline_argument_is_sent_with_the_models_line_breaks(
    reviewer_client: Client,
) -> None:
    review = make_tool_review(CALLS)
    data = as_rendered(reviewer_client, review)
    data.update(
        {
            "call-0-action": "edit",
            "call-0-arg__note": "Line one\r\nLine two\r\nLine three",
            "call-1-action": "approve",
        }
    )
    assert reviewer_client.post(review_url(review), data).status_code == 302
    assert Decision.objects.get(review=review).tool_calls[0]["args"] == {
        **CALLS[0]["args"],
        "note": "Line one\nLine two\nLine three",
    }


def test_an_untouched_multiline_argument_chosen_edit_is_nothing_changed(
    reviewer_client: Client,
) -> None:
    review = make_tool_review(CALLS[:1])
    data = as_rendered(reviewer_client, review)
    data["call-0-action"] = "edit"
    refused(
        reviewer_client.post(review_url(review), data),
        review,
        "Nothing was changed: edit an argument, or approve the call.",
    )


def test_arguments_posted_for_a_call_that_cannot_be_edited_are_refused_on_approve(
    reviewer_client: Client,
) -> None:
    review = make_tool_review([{**CALLS[1], "allowed_decisions": ["approve", "reject"]}])
    data = as_rendered(reviewer_client, review)
    assert not any("arg__" in name for name in data)  # the form draws no argument fields
    data.update({"call-0-action": "approve", "call-0-arg__text": "Something else"})
    refused(
        reviewer_client.post(review_url(review), data),
        review,
        "This call cannot be edited (it allows approve, reject), so `text` cannot be changed",
    )


@pytest.mark.parametrize("action", ["approve", "edit"])
def test_a_message_with_a_decision_that_sends_none_is_refused(
    reviewer_client: Client, action: str
) -> None:
    review = make_tool_review(CALLS[1:])
    data = as_rendered(reviewer_client, review)
    data.update({"call-0-action": action, "call-0-message": "Looks fine to me"})
    if action == "edit":
        data["call-0-arg__text"] = "Moved to Thursday"
    refused(
        reviewer_client.post(review_url(review), data),
        review,
        f"A reason or response is sent only with Reject or Respond: clear it to {action} the call.",
    )


# -- replies --------------------------------------------------------------------------------------


def test_a_changed_reply_with_approve_is_refused_and_an_untouched_one_is_sent(
    reviewer_client: Client,
) -> None:
    review = make_reply_review("Done!\nSee you Tuesday at 10.")
    data = as_rendered(reviewer_client, review)
    assert data["reply-content"] == "Done!\r\nSee you Tuesday at 10."
    changed = {**data, "reply-action": "approve", "reply-content": "Done! See you Thursday."}
    shown = refused(
        reviewer_client.post(review_url(review), changed),
        review,
        "You changed the reply but chose Approve, which sends the draft as it is. Choose Edit",
    )
    assert "Done! See you Thursday." in shown
    untouched = {**data, "reply-action": "approve"}
    assert reviewer_client.post(review_url(review), untouched).status_code == 302
    assert Decision.objects.get(review=review).reply == {"action": "approve"}


def test_an_edited_reply_is_sent_with_the_drafts_line_breaks(reviewer_client: Client) -> None:
    review = make_reply_review("Done!\nSee you Tuesday at 10.")
    data = as_rendered(reviewer_client, review)
    data.update({"reply-action": "edit", "reply-content": "Done!\r\nSee you Thursday at 10."})
    assert reviewer_client.post(review_url(review), data).status_code == 302
    assert Decision.objects.get(review=review).reply == {
        "action": "edit",
        "content": "Done!\nSee you Thursday at 10.",
    }
    other = make_reply_review("Done!\nSee you Tuesday at 10.")
    same = {**as_rendered(reviewer_client, other), "reply-action": "edit"}
    refused_page = reviewer_client.post(review_url(other), same)
    assert refused_page.status_code == 400
    assert "Nothing was changed: edit the text, or approve it." in page_text(refused_page)


def test_a_reply_that_cannot_be_edited_has_no_text_box_and_refuses_a_posted_change(
    reviewer_client: Client,
) -> None:
    review = make_reply_review()
    review.payload["reply"]["allowed_decisions"] = ["approve", "reject"]
    review.save()
    data = as_rendered(reviewer_client, review)
    assert "reply-content" not in data
    data.update({"reply-action": "approve", "reply-content": "Something else"})
    response = reviewer_client.post(review_url(review), data)
    assert response.status_code == 400
    assert "This reply cannot be edited (it allows approve, reject)" in page_text(response)
    assert not Decision.objects.exists()


def test_a_reason_with_approve_on_a_reply_is_refused(reviewer_client: Client) -> None:
    review = make_reply_review()
    data = {**as_rendered(reviewer_client, review), "reply-action": "approve"}
    data["reply-message"] = "Nice tone"
    refused(
        reviewer_client.post(review_url(review), data),
        review,
        "A reason is recorded only with Reject: clear it to approve the reply.",
    )


# -- one-click approve ------------------------------------------------------------------------------


def test_one_click_approve_decides_every_held_call(reviewer_client: Client, reviewer: Any) -> None:
    review = make_tool_review(CALLS)
    page = reviewer_client.get(review_url(review)).content.decode()
    assert 'name="_approve" value="Approve all"' in page
    data = as_rendered(reviewer_client, review)
    assert "call-0-action" not in data  # no radio chosen: one click is all it takes
    response = reviewer_client.post(review_url(review), {**data, "_approve": "Approve all"})
    assert response.status_code == 302
    decision = Decision.objects.get(review=review)
    assert decision.tool_calls == [
        {"id": "call_1", "action": "approve"},
        {"id": "call_2", "action": "approve"},
    ]
    assert decision.decided_by == reviewer


def test_one_click_approve_wins_over_a_chosen_radio_but_not_over_a_changed_argument(
    reviewer_client: Client,
) -> None:
    review = make_tool_review(CALLS[:1])
    page = reviewer_client.get(review_url(review)).content.decode()
    assert 'name="_approve" value="Approve"' in page
    data = {**as_rendered(reviewer_client, review), "_approve": "Approve"}
    changed = {**data, "call-0-action": "edit", "call-0-arg__day": "Friday"}
    refused(reviewer_client.post(review_url(review), changed), review, "You changed `day`")
    response = reviewer_client.post(review_url(review), {**data, "call-0-action": "reject"})
    assert response.status_code == 302
    assert Decision.objects.get(review=review).tool_calls == [{"id": "call_1", "action": "approve"}]


def test_no_one_click_approve_when_a_call_does_not_allow_it(reviewer_client: Client) -> None:
    review = make_tool_review([CALLS[0], {**CALLS[1], "allowed_decisions": ["edit", "reject"]}])
    assert 'name="_approve"' not in reviewer_client.get(review_url(review)).content.decode()
    data = {**as_rendered(reviewer_client, review), "_approve": "Approve all"}
    data.update({"call-0-action": "reject", "call-0-message": "No", "call-1-action": "reject"})
    data["call-1-message"] = "No"
    # A posted button the page did not draw does nothing of its own: the radios decide.
    assert reviewer_client.post(review_url(review), data).status_code == 302
    assert [c["action"] for c in Decision.objects.get(review=review).tool_calls] == [
        "reject",
        "reject",
    ]


def test_send_as_drafted_approves_a_reply_in_one_click(reviewer_client: Client) -> None:
    review = make_reply_review("Done!\nSee you Tuesday at 10.")
    page = reviewer_client.get(review_url(review)).content.decode()
    assert 'name="_approve" value="Send as drafted"' in page
    data = {**as_rendered(reviewer_client, review), "_approve": "Send as drafted"}
    assert reviewer_client.post(review_url(review), data).status_code == 302
    assert Decision.objects.get(review=review).reply == {"action": "approve"}


def test_a_looker_gets_no_buttons_and_a_one_click_post_is_403(
    looker_client: Client, reviewer_client: Client
) -> None:
    review = make_reply_review()
    assert 'name="_approve"' not in looker_client.get(review_url(review)).content.decode()
    data = {**as_rendered(reviewer_client, review), "_approve": "Send as drafted"}
    assert looker_client.post(review_url(review), data).status_code == 403
    assert not Decision.objects.exists()
