"""Question and plan screens: the conversation above the form does not repeat what the form draws,
the ``ask_reader`` call that asked it and the JSON it was answered with (issue 40, item 8)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from nitro_assistants.admin.conversation import held_conversation
from nitro_assistants.client import PendingReview
from nitro_assistants.models import Review, Thread
from nitro_assistants.services.mirror import mirror_pending
from tests.factories import ThreadFactory

pytestmark = pytest.mark.django_db

QUESTIONS = [
    {
        "questionId": "day",
        "prompt": "Which day suits the customer?",
        "input": "single_select",
        "options": [
            {"optionId": "mon", "label": "Monday"},
            {"optionId": "fri", "label": "Friday"},
        ],
        "allowOther": False,
        "multiple": False,
        "optional": False,
    }
]
PLAN = {
    "steps": [
        {
            "stepId": "call",
            "title": "Call the customer",
            "action": "crm.call",
            "input": {"phone": "+1 555 0100"},
            "enabled": True,
            "optional": False,
            "dependsOn": [],
        }
    ]
}


def asked(kind: str, content: Any, *, answered: dict[str, Any] | None = None) -> Review:
    """A pause on ``kind`` raised by ``ask_reader``, mirrored as a real run's is: the AI message
    making the call, then (once answered and resumed) its JSON result and what the AI said."""
    args = {"kind": kind, "title": f"About the {kind}", "content": content, "interaction_id": kind}
    messages: list[dict[str, Any]] = [
        {"type": "human", "id": "h1", "content": "My boiler is leaking."},
        # An earlier, different question and its answer stay: the form does not draw them.
        {
            "type": "ai",
            "id": "a0",
            "content": "",
            "tool_calls": [
                {"id": "call_0", "name": "ask_reader", "args": {**args, "title": "Earlier"}}
            ],
        },
        {
            "type": "tool",
            "id": "t0",
            "tool_call_id": "call_0",
            "name": "ask_reader",
            "content": '{"decision": "cancel"}',
        },
        {
            "type": "ai",
            "id": "a1",
            "content": "I need your input.",
            "tool_calls": [{"id": "call_1", "name": "ask_reader", "args": args}],
        },
    ]
    if answered is not None:
        messages += [
            {
                "type": "tool",
                "id": "t1",
                "tool_call_id": "call_1",
                "name": "ask_reader",
                "content": json.dumps(answered),
            },
            {"type": "ai", "id": "a2", "content": "Thanks, booked."},
        ]
    thread = ThreadFactory(
        assistant_key="interactions",
        status=Thread.Status.INTERRUPTED,
        values={"messages": messages},
    )
    key = {"question": "questions", "plan": "plan"}[kind]
    interrupt_id = uuid.uuid4().hex
    pending = PendingReview(
        kind=kind,
        interrupt_id=interrupt_id,
        interrupt_ids=[interrupt_id],
        interaction={"interactionId": kind, "kind": kind, "title": args["title"], key: content},
        mode="interaction",
    )
    with transaction.atomic():
        review = mirror_pending(Thread.objects.select_for_update().get(pk=thread.pk), None, pending)
    assert review is not None
    return review


@pytest.mark.parametrize(("kind", "content"), [("question", QUESTIONS), ("plan", PLAN)])
def test_the_call_that_asked_and_its_result_are_not_shown_above_the_form(
    kind: str, content: Any, reviewer_client: Client
) -> None:
    review = asked(kind, content, answered={"decision": "cancel", "note": "ANSWER-JSON"})
    shown = held_conversation(review)
    assert [message.id for message in shown] == ["h1", "a0", "t0", "a1", "a2"]
    said = next(message for message in shown if message.id == "a1")
    assert said.text == "I need your input." and said.tool_calls == []  # the words stay
    assert [call.id for message in shown for call in message.tool_calls] == ["call_0"]

    page = reviewer_client.get(f"/admin/nitro_assistants/review/{review.pk}/review/")
    assert page.status_code == 200
    conversation = page.content.decode().split('class="nitro-conversation"', 1)[1]
    conversation = conversation.split("</div>\n</div>", 1)[0]  # up to the conversation's end
    assert "ANSWER-JSON" not in conversation
    assert "I need your input." in conversation and "Thanks, booked." in conversation


def test_a_pending_question_hides_a_call_with_nothing_else_to_say() -> None:
    review = asked("question", QUESTIONS)
    review.thread.values["messages"][3]["content"] = ""
    review.thread.save()
    assert [message.id for message in held_conversation(review)] == ["h1", "a0", "t0"]


def test_tool_call_reviews_keep_their_calls() -> None:
    from tests.admin.conftest import make_tool_review

    review = make_tool_review()
    assert [call.name for m in held_conversation(review) for call in m.tool_calls]
