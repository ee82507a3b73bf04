"""factory-boy factories for the Django models."""

from __future__ import annotations

import uuid

import factory
from django.utils import timezone

from nitro_assistants.models import Decision, Delivery, Review, Run, Thread


class ThreadFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Thread

    thread_id = factory.LazyFunction(uuid.uuid4)
    assistant_key = "walkthrough"


class RunFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Run

    thread = factory.SubFactory(ThreadFactory)
    input = factory.LazyFunction(lambda: {"messages": [{"role": "user", "content": "hi"}]})


def _tool_calls() -> dict[str, object]:
    return {
        "tool_calls": [
            {
                "previous_message_id": "m1",
                "id": "call_1",
                "name": "reschedule_appointment",
                "args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"},
                "allowed_decisions": ["approve", "edit", "reject", "respond"],
            }
        ],
        "reply": None,
    }


class ReviewFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Review

    thread = factory.SubFactory(ThreadFactory)
    kind = Review.Kind.TOOL_CALLS
    interrupt_ids = factory.LazyFunction(lambda: [uuid.uuid4().hex])
    payload = factory.LazyFunction(_tool_calls)

    class Params:
        reply = factory.Trait(
            kind=Review.Kind.REPLY,
            payload=factory.LazyAttribute(
                lambda o: {
                    "tool_calls": [],
                    "reply": {
                        "content": "See you Tuesday at 10.",
                        "allowed_decisions": ["approve", "edit", "reject"],
                        "description": "Review this SMS",
                        "interrupt_id": o.interrupt_ids[0],
                        "message_id": "ai-2",
                    },
                }
            ),
        )


class DecisionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Decision

    review = factory.SubFactory(ReviewFactory, status=Review.Status.DECIDED)
    reviewer_id = "alice"
    decided_at = factory.LazyFunction(timezone.now)


class DeliveryFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Delivery

    thread = factory.SubFactory(ThreadFactory)
    message_id = factory.Sequence(lambda n: f"msg-{n}")
    tool = "send_sms"
    status = Delivery.Status.PENDING
    first_seen_at = factory.LazyFunction(timezone.now)
