"""Seed the demo: an admin login and conversations waiting on each kind of review."""

from __future__ import annotations

import json
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from nitro_assistants import services
from nitro_assistants.models import Review, Thread

ASSISTANT = "virtual-confirmation"
QUESTION = {
    "kind": "question",
    "title": "Which day suits the customer?",
    "summary": "The customer asked to move their cleaning but named no day.",
    "interaction_id": "demo-day-question",
    "content": [
        {
            "questionId": "day",
            "prompt": "Which day should I offer?",
            "input": "single_select",
            "options": [
                {"optionId": "tue", "label": "Tuesday", "description": "10:00 is free"},
                {"optionId": "fri", "label": "Friday", "description": "15:30 is free"},
            ],
            "allowOther": True,
        }
    ],
}
PLAN = {
    "kind": "plan",
    "title": "Move the appointment and tell the technician",
    "summary": "Two changes in the CRM.",
    "interaction_id": "demo-plan",
    "content": {
        "steps": [
            {
                "stepId": "reschedule",
                "title": "Reschedule appointment 42",
                "action": "crm.reschedule",
                "input": {"appointment_id": 42, "day": "Tuesday"},
                "fields": [{"name": "day", "label": "Day", "widget": "text", "required": True}],
            },
            {
                "stepId": "notify",
                "title": "Notify the technician",
                "action": "crm.notify",
                "optional": True,
                "dependsOn": ["reschedule"],
            },
        ]
    },
}


class Command(BaseCommand):
    help = "Create the demo admin user and conversations that wait on each kind of review."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        password = options["password"] or secrets.token_urlsafe(9)
        admin, _ = User.objects.get_or_create(
            username=options["username"], defaults={"email": "admin@example.com"}
        )
        admin.is_staff = admin.is_superuser = True
        admin.set_password(password)
        admin.save()

        def converse(text: str) -> Thread:
            run = services.start_run(ASSISTANT, [{"role": "user", "content": text}], user=admin)
            return Thread.objects.get(pk=run.thread_id)

        converse("Can I move my appointment to Tuesday?")
        converse("reply: Thanks for confirming! See you Monday at 9am.")
        converse("ask: " + json.dumps(QUESTION))
        converse("ask: " + json.dumps(PLAN))

        # One conversation settled and delivered, one whose delivery failed.
        for text in ("reply: You're all set for Wednesday at 2pm.", "reply: Reminder FAIL test"):
            thread = converse(text)
            review = Review.objects.filter(thread=thread, status=Review.Status.PENDING).first()
            if review is not None and review.kind == Review.Kind.REPLY:
                services.decide(review, admin, {"reply": {"action": "approve"}})

        pending = Review.objects.filter(status=Review.Status.PENDING)
        kinds = sorted(pending.values_list("kind", flat=True))
        self.stdout.write(f"seeded: {len(kinds)} pending reviews ({', '.join(kinds)})")
        self.stdout.write(f"login: {admin.get_username()} / {password}")
