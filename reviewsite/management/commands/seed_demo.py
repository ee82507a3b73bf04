"""Seed the demo: an admin login, a second reviewer in Finance, the appointment the
conversations are about, example policy rules (docs/governance.md), conversations waiting on
each kind of review, and three the rules handle: a small refund approved at once, a large one
waiting for two approvals, a cancellation whose deadline passes and is escalated, and a deposit
refund that expires unanswered (the assistant is told so); and a scoped approval grant: the
admin approves a move with a grant, and the grant approves the next move inside it.

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
from django.contrib.auth.models import Group, Permission
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from nitro_assistants import services
from nitro_assistants.models import Delivery, Grant, Policy, Review, ReviewHandling, Run, Thread
from nitro_assistants.rules import approve_everything
from nitro_assistants.services import governance, grants
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
#: The cancellation rule's deadline: short so that the seed shows it passing (think hours).
CANCEL_DEADLINE = datetime.timedelta(seconds=5)
#: The deposit refunds' deadline, after which they expire unanswered (as short, for the same reason).
DEPOSIT_DEADLINE = datetime.timedelta(seconds=5)


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


def seeded_pending() -> list[Review]:
    """The reviews the seed leaves waiting, kind by kind: what it prints and what the demo check
    counts in the queue (one query for both, so that the two numbers agree)."""
    return list(Review.objects.filter(status=Review.Status.PENDING).order_by("kind", "pk"))


def example_rules() -> list[Policy]:
    """Rules that show each kind of handling: approved at once, refused at once, two approvals
    by a group, a deadline that escalates, a rule on a reply's text, and a rule in the shadow
    (tried, never acting). The seeded refunds and
    cancellation meet them; ask the assistant to move an appointment to Wednesday or Saturday to
    see the others."""
    dispatch, _ = Group.objects.get_or_create(name="Dispatch")
    managers, _ = Group.objects.get_or_create(name="Managers")
    finance, _ = Group.objects.get_or_create(name="Finance")
    rules: list[dict[str, Any]] = [
        {
            "name": "Deposit refunds expire unanswered",
            "position": 4,
            "tool": "refund",
            "conditions": [{"path": "reason", "op": "eq", "value": "deposit"}],
            "deadline": DEPOSIT_DEADLINE,
            "on_deadline": Policy.OnDeadline.EXPIRE,
        },
        {
            "name": "Small refunds go through",
            "position": 5,
            "tool": "refund",
            "conditions": [{"path": "amount", "op": "lte", "value": 50}],
            "action": Policy.Action.AUTO_APPROVE,
        },
        {
            "name": "Large refunds need two people in Finance",
            "position": 6,
            "tool": "refund",
            "conditions": [{"path": "amount", "op": "gt", "value": 50}],
            "approvals": 2,
            "group": finance,
            "priority": 5,
        },
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
            "name": "Cancellations need two dispatchers (then a manager)",
            "position": 30,
            "tool": "cancel_*",
            "approvals": 2,
            "group": dispatch,
            "priority": 5,
            "deadline": CANCEL_DEADLINE,
            "on_deadline": Policy.OnDeadline.ESCALATE,
            "escalate_to": managers,
            # None: once escalated, the review stays with Managers, flagged overdue.
            "escalation_deadline": None,
            "on_escalation_deadline": Policy.AfterEscalation.NOTHING,
        },
        {
            "name": "Replies about refunds need two approvals",
            "position": 40,
            "kind": "reply",
            "conditions": [{"path": "content", "op": "matches", "value": "(?i)refund"}],
            "approvals": 2,
        },
        {
            # In the shadow: tried on every reply, never acting; the rule list shows how often
            # people agreed (the two replies the seed approves: 100% · 2 of 2).
            "name": "Replies go through (trial)",
            "position": 45,
            "mode": Policy.Mode.SHADOW,
            "kind": "reply",
            "action": Policy.Action.AUTO_APPROVE,
        },
    ]
    return [
        Policy.objects.update_or_create(name=rule.pop("name"), defaults=rule)[0] for rule in rules
    ]


def finance_reviewer(username: str, password: str) -> Any:
    """A staff member of Finance who may see and decide reviews (not a superuser): the large
    refund's second approver."""
    user, _ = get_user_model().objects.get_or_create(
        username=username, defaults={"email": f"{username}@example.com"}
    )
    user.is_staff = True
    user.set_password(password)
    user.save()
    user.groups.add(Group.objects.get(name="Finance"))
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="nitro_assistants",
            codename__in=["view_review", "decide_review", "view_thread", "view_event"],
        )
    )
    return user


#: Who writes in by SMS, as the gateway knows them (the conversations the governance rules meet).
SMS_CUSTOMERS = {
    script.SMALL_REFUND: ("Maria Lopez", "+1 555 0142"),
    script.LARGE_REFUND: ("Tom Becker", "+1 555 0187"),
    script.CANCEL: ("Aisha Khan", "+1 555 0119"),
    script.DEPOSIT_REFUND: ("Lena Park", "+1 555 0164"),
}
#: Who asks for the moves a grant covers: the first one's approval gives it, the second one is
#: approved by it (two customers: the grant covers the assistant's conversations, not one).
GRANT_CUSTOMERS = {
    script.MOVE_THURSDAY: ("Priya Shah", "+1 555 0131"),
    script.MOVE_FRIDAY: ("Jonas Weber", "+1 555 0153"),
}
#: The grant the admin gives with the Thursday move (docs/governance.md#grants): moves of
#: appointment 42 to Thursday or Friday at 10:00, in any of the assistant's conversations, 3 times.
GRANT = {"scope": "assistant", "uses": 3, "args": {"day": {"in": ["Thursday", "Friday"]}}}
GRANT_TOOL = "reschedule_appointment"


def sms(text: str, customers: dict[str, tuple[str, str]]) -> Run:
    """A customer's message, as an SMS gateway would start it (no site user): whoever reviews
    it may approve it (separation of duties, docs/governance.md#quorum). The gateway says who is
    writing (the thread's metadata): the queue shows them by name and number (THREAD_SUBJECT in
    reviewsite/settings.py) and its search finds them."""
    customer, phone = customers[text]
    return services.start_run(
        ASSISTANT,
        [{"role": "user", "content": text}],
        metadata={"customer": customer, "phone": phone},
    )


def seed_grant(admin: Any, timeout: float) -> Grant:
    """The admin approves the Thursday move with :data:`GRANT`, as on its review screen; then
    the Friday move comes in, and the grant approves it (the task ``nitro_assistants.apply_grant``:
    in this process without a broker, on the worker with one). Returns once both threads wait on
    their reply to the customer."""
    # Seeded again into the same database: the last seed's grant would approve the Thursday move
    # at once, and nobody could give this one. Revoked, it stays on the Grant list as a record.
    for earlier in Grant.objects.filter(
        revoked_at__isnull=True, granted_by=admin, tool=GRANT_TOOL
    ).values_list("pk", flat=True):
        grants.revoke(earlier, admin, reason="the demo was seeded again")
    given = sms(script.MOVE_THURSDAY, GRANT_CUSTOMERS)
    wait_for(
        "the Thursday move's review",
        lambda: Review.objects.filter(
            thread=given.thread_id, kind=Review.Kind.TOOL_CALLS, status=Review.Status.PENDING
        ).exists(),
        timeout,
    )
    held = Review.objects.get(thread=given.thread_id, status=Review.Status.PENDING)
    grants.decide_with_grant(
        held, admin, approve_everything(held.kind, held.tool_calls), GRANT, via="admin"
    )
    grant = Grant.objects.get(review=held)
    covered = sms(script.MOVE_FRIDAY, GRANT_CUSTOMERS)
    wait_for(
        "the Friday move's approval by the grant",
        lambda: Review.objects.filter(thread=covered.thread_id, decision__grant=grant).exists(),
        timeout,
    )
    threads = [given.thread_id, covered.thread_id]
    wait_for(
        "the two moves' replies",
        lambda: (
            Review.objects.filter(
                thread__in=threads, kind=Review.Kind.REPLY, status=Review.Status.PENDING
            ).count()
            == len(threads)
        ),
        timeout,
    )
    grant.refresh_from_db()  # its use, counted since it was given
    return grant


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
        finance = finance_reviewer("finance", password)

        def converse(text: str) -> Run:
            return services.start_run(ASSISTANT, [{"role": "user", "content": text}], user=admin)

        runs = [
            converse(text)
            for text in (script.MOVE, script.CONFIRM, script.ASK_DAY, script.ASK_PLAN)
        ]
        # One conversation settled and delivered, one whose delivery failed.
        settling = [converse(script.DELIVERED), converse(script.FAILED)]
        # The customers' messages the rules meet, by SMS.
        governed = {text: sms(text, SMS_CUSTOMERS) for text in SMS_CUSTOMERS}
        pks = [run.pk for run in runs + settling + list(governed.values())]
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

        # The small refund: the rule approves it, the refund runs, the thread waits on its reply.
        small = governed[script.SMALL_REFUND].thread_id
        wait_for(
            "the small refund's approval by its rule",
            lambda: Review.objects.filter(
                thread=small, kind=Review.Kind.REPLY, status=Review.Status.PENDING
            ).exists(),
            timeout,
        )
        # The cancellation's deadline passes; the sweep (the beat's, every minute, or this one)
        # escalates it to Managers, once.
        # The deposit refund expires unanswered at its rule's deadline, in the same sweep: the
        # assistant is told nobody answered (the refund is rejected with that reason).
        cancel = governed[script.CANCEL].thread_id
        deposit = governed[script.DEPOSIT_REFUND].thread_id
        due = [
            h.due_at
            for h in ReviewHandling.objects.filter(review__thread__in=[cancel, deposit])
            if h.due_at is not None
        ]
        time.sleep(max(0.0, *((d - timezone.now()).total_seconds() for d in due)) + 0.1)
        governance.sweep_deadlines()
        wait_for(
            "the cancellation's escalation",
            lambda: ReviewHandling.objects.filter(
                review__thread=cancel, escalated_at__isnull=False
            ).exists(),
            timeout,
        )
        wait_for(
            "the deposit refund's expiry told to the assistant",
            lambda: Review.objects.filter(
                thread=deposit,
                status=Review.Status.EXPIRED,
                decision__outcome="applied",
            ).exists(),
            timeout,
        )

        # Last, so that no review seeded above is mirrored while the grant is live.
        grant = seed_grant(admin, timeout)

        kinds = [review.kind for review in seeded_pending()]
        outcomes = sorted(Delivery.objects.values_list("status", flat=True))
        self.stdout.write(f"seeded: {len(kinds)} pending reviews ({', '.join(kinds)})")
        self.stdout.write(f"deliveries: {', '.join(outcomes)}")
        self.stdout.write(f"policy rules: {', '.join(rule.name for rule in rules)}")
        self.stdout.write(
            f"grant #{grant.pk}: {grant.tool} ({grant.scope}), used {grant.uses} of {grant.max_uses}"
        )
        self.stdout.write(f"login: {admin.get_username()} / {password}")
        self.stdout.write(f"finance login: {finance.get_username()} / {password}")
