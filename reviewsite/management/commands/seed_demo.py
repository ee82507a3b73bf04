"""Seed the demo: an admin login, the appointment the conversations are about, example policy
rules (docs/governance.md), and conversations waiting on each kind of review.

Runs go through Celery: eagerly in this process without a broker, or on the demo's worker with
one. Either way the command waits until each conversation has settled (its review is there, the
approved replies delivered or failed), so what it prints is what the admin shows.
"""

from __future__ import annotations

import datetime
import secrets
import time
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from nitro_assistants import services
from nitro_assistants.models import Delivery, Policy, Review, Run, Thread
from reviewsite.agent import script
from reviewsite.models import Appointment

ASSISTANT = "virtual-confirmation"
# The demo assistant's tools and plan name appointment 42 (nitro_assistants.agent.testing).
APPOINTMENT = {
    "pk": 42,
    "customer": "Dana Whitfield",
    "phone": "+1 555 0100",
    "technician": "Sam Ortiz",
    "technician_phone": "+1 555 0199",
    "day": "Monday",
    "time": "09:00",
}


def wait_for(what: str, settled: Callable[[], bool], timeout: float) -> None:
    """Return once ``settled()`` holds; a worker that does not get there in ``timeout`` seconds
    is an error that says what did not happen."""
    deadline = time.monotonic() + timeout
    while not settled():
        if time.monotonic() > deadline:
            raise CommandError(
                f"{what} did not happen in {timeout:.0f}s: is the Celery worker running? "
                "(the demo's logs are in var/demo/)"
            )
        time.sleep(0.2)


def example_rules() -> list[Policy]:
    """Rules that show each kind of handling: approved at once, refused at once, two approvals
    by a group with a deadline that escalates and then rejects, and a rule on a reply's text.
    None of them matches the seeded conversations, which wait for one person as before; ask the
    assistant to move an appointment to Wednesday or Saturday, or to cancel one, to see them."""
    dispatch, _ = Group.objects.get_or_create(name="Dispatch")
    managers, _ = Group.objects.get_or_create(name="Managers")
    rules: list[dict[str, Any]] = [
        {
            "name": "Weekend moves are refused",
            "position": 10,
            "tool": "reschedule_appointment",
            "conditions": [{"path": "day", "op": "in", "value": ["Saturday", "Sunday"]}],
            "action": Policy.Action.AUTO_REJECT,
            "reason": "We are closed at weekends: offer a weekday instead.",
        },
        {
            "name": "Wednesday moves go through",
            "position": 20,
            "tool": "reschedule_appointment",
            "conditions": [{"path": "day", "op": "eq", "value": "Wednesday"}],
            "action": Policy.Action.AUTO_APPROVE,
        },
        {
            "name": "Cancellations need two dispatchers",
            "position": 30,
            "tool": "cancel_*",
            "approvals": 2,
            "group": dispatch,
            "priority": 5,
            "deadline": datetime.timedelta(hours=4),
            "on_deadline": Policy.OnDeadline.ESCALATE,
            "escalate_to": managers,
            "escalation_deadline": datetime.timedelta(hours=1),
            "on_escalation_deadline": Policy.AfterEscalation.REJECT,
        },
        {
            "name": "Replies about refunds need two approvals",
            "position": 40,
            "kind": "reply",
            "conditions": [{"path": "content", "op": "matches", "value": "(?i)refund"}],
            "approvals": 2,
        },
    ]
    return [
        Policy.objects.update_or_create(name=rule.pop("name"), defaults=rule)[0] for rule in rules
    ]


class Command(BaseCommand):
    help = "Create the demo admin user and conversations that wait on each kind of review."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default="")
        parser.add_argument(
            "--timeout",
            type=float,
            default=120.0,
            help="Seconds to wait for the runs to settle (with a broker, on the worker).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        password = options["password"] or secrets.token_urlsafe(9)
        timeout = options["timeout"]
        admin, _ = User.objects.get_or_create(
            username=options["username"], defaults={"email": "admin@example.com"}
        )
        admin.is_staff = admin.is_superuser = True
        admin.set_password(password)
        admin.save()
        fields = dict(APPOINTMENT)
        Appointment.objects.update_or_create(pk=fields.pop("pk"), defaults=fields)
        rules = example_rules()

        def converse(text: str) -> Run:
            return services.start_run(ASSISTANT, [{"role": "user", "content": text}], user=admin)

        runs = [
            converse(text)
            for text in (script.MOVE, script.CONFIRM, script.ASK_DAY, script.ASK_PLAN)
        ]
        # One conversation settled and delivered, one whose delivery failed.
        settling = [converse(script.DELIVERED), converse(script.FAILED)]
        pks = [run.pk for run in runs + settling]
        wait_for(
            f"the {len(pks)} seeded runs finishing",
            lambda: not Run.objects.filter(pk__in=pks).exclude(status__in=Run.FINISHED).exists(),
            timeout,
        )
        threads = [run.thread_id for run in settling]
        for thread in Thread.objects.filter(pk__in=threads):
            review = Review.objects.filter(thread=thread, status=Review.Status.PENDING).first()
            if review is None or review.kind != Review.Kind.REPLY:
                raise CommandError(f"thread {thread.pk} does not wait on its reply")
            services.decide(review, admin, {"reply": {"action": "approve"}})
        wait_for(
            "the approved replies' deliveries settling",
            lambda: (
                Delivery.objects.filter(thread__in=threads)
                .exclude(status=Delivery.Status.PENDING)
                .values("thread")
                .distinct()
                .count()
                == len(threads)
            ),
            timeout,
        )

        pending = Review.objects.filter(status=Review.Status.PENDING)
        kinds = sorted(pending.values_list("kind", flat=True))
        outcomes = sorted(Delivery.objects.values_list("status", flat=True))
        self.stdout.write(f"seeded: {len(kinds)} pending reviews ({', '.join(kinds)})")
        self.stdout.write(f"deliveries: {', '.join(outcomes)}")
        self.stdout.write(f"policy rules: {', '.join(rule.name for rule in rules)}")
        self.stdout.write(f"login: {admin.get_username()} / {password}")
