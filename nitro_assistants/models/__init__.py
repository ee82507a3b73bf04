"""The local, queryable mirror of remote threads and the audit trail of what the app did."""

from __future__ import annotations

from nitro_assistants.models.channels import SlackCard, SlackRequest, SlackUser
from nitro_assistants.models.claims import Assignment, Claim
from nitro_assistants.models.deliveries import Delivery
from nitro_assistants.models.events import AuditChain, Event
from nitro_assistants.models.grants import Grant
from nitro_assistants.models.interactions import ApiKey, StepResult
from nitro_assistants.models.notifications import Notification, NotificationPreference
from nitro_assistants.models.policies import Approval, Policy, ReviewHandling
from nitro_assistants.models.reviews import Decision, Review
from nitro_assistants.models.stops import Stop
from nitro_assistants.models.threads import Run, Thread

__all__ = [
    "ApiKey",
    "Approval",
    "Assignment",
    "AuditChain",
    "Claim",
    "Decision",
    "Delivery",
    "Event",
    "Grant",
    "Notification",
    "NotificationPreference",
    "Policy",
    "Review",
    "ReviewHandling",
    "Run",
    "SlackCard",
    "SlackRequest",
    "SlackUser",
    "StepResult",
    "Stop",
    "Thread",
]
