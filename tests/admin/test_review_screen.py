"""The review screen: the conversation up to what is held, every decision form, every validation
error, stale forms, and the read-only record of decided and superseded reviews."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from nitro_assistants.models import Decision, Event, Review, Thread
from tests.admin.conftest import make_reply_review, make_tool_review, review_url, stamp
from tests.factories import ReviewFactory

pytestmark = pytest.mark.django_db


def post_call(client: Client, review: Review, **fields: Any) -> Any:
    """POST the tool-call form of ``review``'s first call; ``fields`` are its fields."""
    data = {**stamp(review), **{f"call-0-{k}": v for k, v in fields.items()}}
    return client.post(review_url(review), data)


def post_reply(client: Client, review: Review, **fields: Any) -> Any:
    data = {**stamp(review), **{f"reply-{k}": v for k, v in fields.items()}}
    return client.post(review_url(review), data)


def test_conversation_is_cut_at_the_held_call_with_roles_and_formatted_args(
    reviewer_client: Client,
) -> None:
    review = make_tool_review()
    # The snapshot moved on after the pause: later messages are not part of this review.
    review.thread.values["messages"].append(
        {"type": "tool", "id": "t1", "name": "reschedule_appointment", "content": "LATER-RESULT"}
    )
    review.thread.save()
    response = reviewer_client.get(review_url(review))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="nitro-msg nitro-human"' in html
    assert 'class="nitro-msg nitro-ai nitro-held-msg"' in html
    assert "LATER-RESULT" not in html
    assert "held for review" in html
    # The held call's arguments as key/value rows, not JSON.
    assert (
        '<tr><th scope="row"><code>appointment_id</code></th>'
        '<td><span class="nitro-text">42</span></td></tr>'
    ) in html
    # The form carries what it was rendered from.
    assert f'name="interrupt_id" value="{review.interrupt_id}"' in html
    assert 'name="revision" value="1"' in html
    assert f'name="digest" value="{stamp(review)["digest"]}"' in html


def test_tool_message_roles_are_distinct(reviewer_client: Client) -> None:
    review = make_tool_review()
    messages = review.thread.values["messages"]
    earlier = [
        {"type": "human", "id": "h0", "content": "Where is my appointment?"},
        {
            "type": "ai",
            "id": "a0",
            "content": "",
            "tool_calls": [
                {"id": "c0", "name": "lookup_appointment", "args": {"appointment_id": 42}}
            ],
        },
        {
            "type": "tool",
            "id": "t0",
            "name": "lookup_appointment",
            "tool_call_id": "c0",
            "content": "Monday at 09:00",
        },
    ]
    review.thread.values["messages"] = earlier + messages
    review.thread.save()
    html = reviewer_client.get(review_url(review)).content.decode()
    assert 'class="nitro-msg nitro-tool"' in html
    assert "Monday at 09:00" in html
    assert (
        html.index("Where is my appointment?")
        < html.index("Monday at 09:00")
        < html.index("Can I move my appointment to Tuesday?")
    )


def test_only_allowed_decisions_are_offered() -> None:
    from nitro_assistants.admin.forms import decision_form_for

    review = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "cancel_appointment",
                "args": {"appointment_id": 42},
                "allowed_decisions": ["approve", "reject"],
            }
        ]
    )
    form = decision_form_for(review)
    call = form.calls[0]  # type: ignore[attr-defined]
    assert [value for value, _label in call.fields["action"].choices] == ["approve", "reject"]
    assert call.argument_fields == []  # no edit allowed: no argument fields


def test_approve_a_tool_call(reviewer_client: Client, reviewer: Any) -> None:
    review = make_tool_review()
    response = post_call(reviewer_client, review, action="approve")
    assert response.status_code == 302
    assert response["Location"] == review_url(review)
    decision = Decision.objects.get(review=review)
    assert decision.tool_calls == [{"id": "call_1", "action": "approve"}]
    assert decision.decided_by == reviewer
    assert decision.reviewer_id == "reviewer"
    review.refresh_from_db()
    assert review.status == Review.Status.DECIDED
    assert Event.objects.filter(review=review, verb="review_decided", actor=reviewer).exists()


def test_edit_one_argument_keeps_its_type_and_sends_the_whole_call(
    reviewer_client: Client,
) -> None:
    review = make_tool_review()
    response = post_call(
        reviewer_client,
        review,
        action="edit",
        arg__appointment_id="42",
        arg__day="Thursday",
        arg__time="10:00",
    )
    assert response.status_code == 302
    decision = Decision.objects.get(review=review)
    assert decision.tool_calls == [
        {
            "id": "call_1",
            "action": "edit",
            "args": {"appointment_id": 42, "day": "Thursday", "time": "10:00"},
        }
    ]


def test_edit_an_integer_argument(reviewer_client: Client) -> None:
    review = make_tool_review()
    post_call(
        reviewer_client,
        review,
        action="edit",
        arg__appointment_id="43",
        arg__day="Tuesday",
        arg__time="10:00",
    )
    assert Decision.objects.get(review=review).tool_calls[0]["args"] == {
        "appointment_id": 43,
        "day": "Tuesday",
        "time": "10:00",
    }


def test_edit_nested_and_boolean_arguments() -> None:
    from nitro_assistants.admin.forms import decision_form_for

    review = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "notify",
                "args": {"channels": ["sms"], "options": {"urgent": False}, "dry_run": True},
                "allowed_decisions": ["approve", "edit"],
            }
        ]
    )
    data = {
        "call-0-action": "edit",
        "call-0-arg__channels": '["sms", "email"]',
        "call-0-arg__options": '{"urgent": false}',
        "call-0-arg__dry_run": "false",
    }
    form = decision_form_for(review, data)
    assert form.is_valid()
    assert form.decision()["tool_calls"] == [
        {"id": "call_1", "action": "edit", "args": {"channels": ["sms", "email"], "dry_run": False}}
    ]
    bad = decision_form_for(review, {**data, "call-0-arg__options": '["not", "an", "object"]'})
    assert not bad.is_valid()
    assert bad.calls[0].errors["arg__options"] == ["Enter a JSON object, as the assistant gave."]  # type: ignore[attr-defined]
    missing = decision_form_for(review, {**data, "call-0-arg__dry_run": ""})
    assert not missing.is_valid()
    assert missing.calls[0].errors["arg__dry_run"] == ["This argument needs a value."]  # type: ignore[attr-defined]
    broken = decision_form_for(review, {**data, "call-0-arg__channels": "[sms"})
    assert not broken.is_valid()
    assert "arg__channels" in broken.calls[0].errors  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fields", "field", "error"),
    [
        ({}, "action", "This field is required."),
        (
            {"action": "veto"},
            "action",
            "Select a valid choice. veto is not one of the available choices.",
        ),
        ({"action": "reject"}, "message", "Say why the call is rejected."),
        ({"action": "reject", "message": "   "}, "message", "Say why the call is rejected."),
        ({"action": "respond"}, "message", "Write the result the assistant should see instead."),
        (
            {
                "action": "edit",
                "arg__appointment_id": "forty-two",
                "arg__day": "Tuesday",
                "arg__time": "10:00",
            },
            "arg__appointment_id",
            "Enter a whole number.",
        ),
        (
            {"action": "edit", "arg__appointment_id": "42", "arg__day": "", "arg__time": "10:00"},
            "arg__day",
            "This argument needs a value.",
        ),
        (
            {
                "action": "edit",
                "arg__appointment_id": "",
                "arg__day": "Friday",
                "arg__time": "10:00",
            },
            "arg__appointment_id",
            "This argument needs a value.",
        ),
        (
            {
                "action": "edit",
                "arg__appointment_id": "42",
                "arg__day": "Tuesday",
                "arg__time": "10:00",
            },
            "__all__",
            "Nothing was changed: edit an argument, or approve the call.",
        ),
    ],
)
def test_tool_call_validation_errors(
    reviewer_client: Client, fields: dict[str, str], field: str, error: str
) -> None:
    review = make_tool_review()
    response = post_call(reviewer_client, review, **fields)
    assert response.status_code == 400
    form = response.context["form"].calls[0]
    assert form.errors[field] == [error]
    assert error.replace("'", "&#x27;") in response.content.decode()
    assert not Decision.objects.exists()
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING


def test_unknown_argument_posted_is_ignored_not_sent(reviewer_client: Client) -> None:
    review = make_tool_review()
    post_call(
        reviewer_client,
        review,
        action="edit",
        arg__appointment_id="42",
        arg__day="Friday",
        arg__time="10:00",
        arg__injected="1",
    )
    assert Decision.objects.get(review=review).tool_calls[0]["args"] == {
        "appointment_id": 42,
        "day": "Friday",
        "time": "10:00",
    }


def test_disallowed_decision_is_refused(reviewer_client: Client) -> None:
    review = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "cancel_appointment",
                "args": {"appointment_id": 42},
                "allowed_decisions": ["approve", "reject"],
            }
        ]
    )
    response = post_call(reviewer_client, review, action="edit", arg__appointment_id="7")
    assert response.status_code == 400
    assert "edit is not one of the available choices" in response.content.decode()
    assert not Decision.objects.exists()


def test_respond_and_reject_carry_their_message(reviewer_client: Client) -> None:
    review = make_tool_review()
    post_call(reviewer_client, review, action="respond", message="Moved by phone already.")
    assert Decision.objects.get(review=review).tool_calls == [
        {"id": "call_1", "action": "respond", "message": "Moved by phone already."}
    ]
    other = make_tool_review()
    post_call(reviewer_client, other, action="reject", message="Customer asked for Friday.")
    decision = Decision.objects.get(review=other)
    assert decision.tool_calls == [
        {"id": "call_1", "action": "reject", "message": "Customer asked for Friday."}
    ]
    assert decision.note == "Customer asked for Friday."


def test_several_held_calls_get_one_decision_each(reviewer_client: Client) -> None:
    review = make_tool_review(
        [
            {
                "id": "call_a",
                "name": "reschedule_appointment",
                "args": {"appointment_id": 1, "day": "Monday", "time": "09:00"},
                "allowed_decisions": ["approve", "edit", "reject"],
            },
            {
                "id": "call_b",
                "name": "cancel_appointment",
                "args": {"appointment_id": 2},
                "allowed_decisions": ["approve", "reject"],
            },
        ]
    )
    html = reviewer_client.get(review_url(review)).content.decode()
    assert html.count('class="module nitro-call-form"') == 2
    data = {
        **stamp(review),
        "call-0-action": "edit",
        "call-0-arg__appointment_id": "1",
        "call-0-arg__day": "Monday",
        "call-0-arg__time": "11:00",
        "call-1-action": "reject",
        "call-1-message": "Keep it.",
    }
    response = reviewer_client.post(review_url(review), data)
    assert response.status_code == 302
    assert Decision.objects.get(review=review).tool_calls == [
        {
            "id": "call_a",
            "action": "edit",
            "args": {"appointment_id": 1, "day": "Monday", "time": "11:00"},
        },
        {"id": "call_b", "action": "reject", "message": "Keep it."},
    ]
    # One call left undecided: nothing is stored.
    again = make_tool_review(review.tool_calls)
    response = reviewer_client.post(review_url(again), {**stamp(again), "call-0-action": "approve"})
    assert response.status_code == 400
    assert not Decision.objects.filter(review=again).exists()


def test_reply_review_shows_the_draft_and_its_three_decisions(reviewer_client: Client) -> None:
    review = make_reply_review("Done! See you Tuesday at 10.")
    html = reviewer_client.get(review_url(review)).content.decode()
    assert "Review this SMS before it is sent" in html
    assert html.count("Done! See you Tuesday at 10.") == 2  # the draft and the textarea
    assert 'value="approve"' in html and 'value="edit"' in html and 'value="reject"' in html
    assert 'value="respond"' not in html


def test_reply_approve_edit_reject(reviewer_client: Client) -> None:
    approve = make_reply_review()
    assert post_reply(reviewer_client, approve, action="approve").status_code == 302
    assert Decision.objects.get(review=approve).reply == {"action": "approve"}

    edit = make_reply_review()
    response = post_reply(reviewer_client, edit, action="edit", content="See you Thursday at 3.")
    assert response.status_code == 302
    assert Decision.objects.get(review=edit).reply == {
        "action": "edit",
        "content": "See you Thursday at 3.",
    }

    reject = make_reply_review()
    post_reply(reviewer_client, reject, action="reject", message="Wrong tone.")
    decision = Decision.objects.get(review=reject)
    assert decision.reply == {"action": "reject", "message": "Wrong tone."}
    assert decision.note == "Wrong tone."


@pytest.mark.parametrize(
    ("fields", "field", "error"),
    [
        ({}, "action", "This field is required."),
        (
            {"action": "respond"},
            "action",
            "Select a valid choice. respond is not one of the available choices.",
        ),
        ({"action": "edit", "content": "  \n "}, "content", "The edited reply cannot be empty."),
        (
            {"action": "edit", "content": "Done! See you Tuesday at 10."},
            "content",
            "Nothing was changed: edit the text, or approve it.",
        ),
        ({"action": "reject", "message": ""}, "message", "Say why the reply is rejected."),
    ],
)
def test_reply_validation_errors(
    reviewer_client: Client, fields: dict[str, str], field: str, error: str
) -> None:
    review = make_reply_review()
    response = post_reply(reviewer_client, review, **fields)
    assert response.status_code == 400
    assert response.context["form"].form.errors[field] == [error]
    assert not Decision.objects.exists()


@pytest.mark.parametrize("tampered", ["interrupt_id", "revision", "digest"])
def test_a_form_rendered_from_another_pause_is_refused(
    reviewer_client: Client, tampered: str
) -> None:
    review = make_tool_review()
    data = {**stamp(review), "call-0-action": "approve"}
    data[tampered] = {"interrupt_id": "0" * 32, "revision": 2, "digest": "f" * 64}[tampered]
    response = reviewer_client.post(review_url(review), data)
    assert response.status_code == 409
    assert "This form is out of date" in response.content.decode()
    assert "Nothing was applied." in response.content.decode()
    assert not Decision.objects.exists()


def test_stale_form_shows_what_the_thread_waits_on_now(
    reviewer_client: Client, django_user_model: Any
) -> None:
    review = make_tool_review()
    rendered = stamp(review)
    # Meanwhile the thread moved on: the pause was superseded by a reply draft.
    Review.objects.filter(pk=review.pk).update(status=Review.Status.SUPERSEDED)
    current = ReviewFactory(
        thread=review.thread,
        reply=True,
        payload={
            "tool_calls": [],
            "reply": {
                "content": "Moved!\nSecond line",
                "allowed_decisions": ["approve"],
                "message_id": "x",
            },
        },
    )
    response = reviewer_client.post(review_url(review), {**rendered, "call-0-action": "approve"})
    assert response.status_code == 409
    html = response.content.decode()
    assert "This form is out of date" in html
    assert f'href="{review_url(current)}"' in html
    assert f"reply #{current.pk}</a> — Moved!" in html
    assert "Submit decision" not in html
    assert not Decision.objects.exists()


def test_second_reviewer_with_the_same_form_is_refused(
    reviewer_client: Client, superuser_client: Client
) -> None:
    review = make_tool_review()
    rendered = stamp(review)
    assert post_call(superuser_client, review, action="approve").status_code == 302
    response = reviewer_client.post(
        review_url(review), {**rendered, "call-0-action": "reject", "call-0-message": "no"}
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert "This form is out of date" in html
    assert "The thread is not waiting on a review now" in html
    decision = Decision.objects.get()
    assert decision.tool_calls == [{"id": "call_1", "action": "approve"}]


def test_decided_review_is_read_only_with_who_what_when_why(
    reviewer_client: Client, superuser_client: Client
) -> None:
    review = make_tool_review()
    post_call(superuser_client, review, action="reject", message="Customer changed their mind.")
    response = reviewer_client.get(review_url(review))
    html = response.content.decode()
    assert response.status_code == 200
    assert '<form method="post" class="nitro-decide"' not in html
    assert "Submit decision" not in html
    decision = Decision.objects.get()
    assert "<dt>Who</dt><dd>root</dd>" in html
    assert "nitro-action-reject" in html
    assert "Customer changed their mind." in html
    assert "<dt>When</dt>" in html
    assert response.context["decision"] == decision


def test_edited_decision_shows_the_edited_arguments(superuser_client: Client) -> None:
    review = make_tool_review()
    post_call(
        superuser_client,
        review,
        action="edit",
        arg__appointment_id="42",
        arg__day="Friday",
        arg__time="10:00",
    )
    html = superuser_client.get(review_url(review)).content.decode()
    assert "nitro-action-edit" in html
    # What the model proposed beside what the reviewer approved, the changed argument marked.
    decided = html.split('class="nitro-side-by-side"')[1].split("</table>")[0]
    rows = re.findall(r'<tr class="(nitro-\w+)"><th scope="row"><code>(\w+)</code>', decided)
    # (In the order the database keeps the arguments: PostgreSQL's jsonb sorts keys.)
    assert dict((name, marked) for marked, name in rows) == {
        "appointment_id": "nitro-same",
        "day": "nitro-changed",
        "time": "nitro-same",
    }
    changed = decided.split("<code>day</code>")[1]
    assert re.search(
        r'nitro-proposed">\s*<span class="nitro-text">Tuesday</span>.*'
        r'nitro-approved">\s*<span class="nitro-text">Friday</span>',
        changed,
        re.S,
    )


def test_superseded_review_is_read_only_with_the_reason(reviewer_client: Client) -> None:
    from nitro_assistants.services.mirror import supersede

    review = make_tool_review()
    supersede(review, reason="new_message")
    html = reviewer_client.get(review_url(review)).content.decode()
    assert "Superseded" in html
    assert "new_message" in html
    assert "Submit decision" not in html


def test_service_refusal_is_shown_on_the_form(
    reviewer_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nitro_assistants import services
    from nitro_assistants.exceptions import ThreadResumptionError

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise ThreadResumptionError("Tool call `call_1` is decided twice.")

    monkeypatch.setattr(services, "decide", refuse)
    review = make_tool_review()
    response = post_call(reviewer_client, review, action="approve")
    assert response.status_code == 400
    assert "Tool call `call_1` is decided twice." in response.content.decode()


def test_typed_interaction_kinds_are_shown_with_their_form(reviewer_client: Client) -> None:
    # The forms themselves are tested in tests/interactions/test_admin_forms.py.
    review = ReviewFactory(
        kind=Review.Kind.QUESTION,
        thread__status=Thread.Status.INTERRUPTED,
        payload={"interaction": {"interactionId": "i1", "kind": "question", "title": "Pick a day"}},
    )
    response = reviewer_client.get(review_url(review))
    html = response.content.decode()
    assert response.status_code == 200
    assert "Pick a day" in html
    assert "Submit decision" in html


def test_change_url_redirects_to_the_review_screen(reviewer_client: Client) -> None:
    review = make_tool_review()
    response = reviewer_client.get(f"/admin/nitro_assistants/review/{review.pk}/change/")
    assert response.status_code == 302
    assert response["Location"] == review_url(review)


def test_a_kind_without_a_decision_form_cannot_be_posted(
    reviewer_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nitro_assistants.admin.forms import DECISION_FORMS

    monkeypatch.delitem(DECISION_FORMS, Review.Kind.PLAN)
    review = ReviewFactory(
        kind=Review.Kind.PLAN,
        payload={"interaction": {"interactionId": "p1", "kind": "plan", "title": "Plan"}},
    )
    response = reviewer_client.post(review_url(review), {**stamp(review), "anything": "1"})
    assert response.status_code == 400
    assert "A plan review cannot be decided here yet." in response.content.decode()
    assert not Decision.objects.exists()


def test_float_and_null_arguments() -> None:
    from nitro_assistants.admin.forms import decision_form_for

    review = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "refund",
                "args": {"amount": 12.5, "memo": None},
                "allowed_decisions": ["edit"],
            }
        ]
    )
    form = decision_form_for(
        review, {"call-0-action": "edit", "call-0-arg__amount": "10", "call-0-arg__memo": "null"}
    )
    assert form.is_valid()
    assert form.decision()["tool_calls"] == [
        {"id": "call_1", "action": "edit", "args": {"amount": 10.0}}
    ]
    memo = decision_form_for(
        review,
        {"call-0-action": "edit", "call-0-arg__amount": "12.5", "call-0-arg__memo": '"late"'},
    )
    assert memo.is_valid()
    assert memo.decision()["tool_calls"][0]["args"] == {"memo": "late"}
    bad = decision_form_for(
        review, {"call-0-action": "edit", "call-0-arg__amount": "ten", "call-0-arg__memo": "null"}
    )
    assert not bad.is_valid()
    assert bad.calls[0].errors["arg__amount"] == ["Enter a number."]  # type: ignore[attr-defined]


def test_long_content_collapses_to_its_first_line(reviewer_client: Client) -> None:
    report = "Boiler service report\n" + "\n".join(f"line {n}: pressure ok" for n in range(40))
    review = make_tool_review(
        [
            {
                "id": "call_1",
                "name": "file_report",
                "args": {"report": report, "ticket": 1234},
                "allowed_decisions": ["approve", "reject"],
            }
        ]
    )
    messages = review.thread.values["messages"]
    messages.insert(1, {"type": "tool", "id": "t0", "name": "fetch_report", "content": report * 3})
    review.thread.save()
    html = reviewer_client.get(review_url(review)).content.decode()
    collapsed = re.findall(r'<details class="nitro-long"[^>]*><summary>([^<]*)', html)
    # The long tool result, and the long argument both in the conversation and in the form (a
    # call that cannot be edited shows its arguments as rows); short values stay open.
    assert collapsed.count("Boiler service report ") == 3, collapsed
    assert '<code>ticket</code></th><td><span class="nitro-text">1234</span>' in html
    assert "<summary>Can I move my appointment" not in html
