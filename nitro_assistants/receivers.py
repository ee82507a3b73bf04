"""The app's own receivers: they keep the audit trail readable in logs, hand new reviews to the
host project's assignment rule, tell reviewers what waits for them
(:mod:`nitro_assistants.services.notifications`, which never raises) and tell every process
that the policy rules changed (:func:`nitro_assistants.services.policy_enforcement.rules_changed`: a
rule saved or deleted, in the admin or anywhere else, or a group a rule names saved). Host apps
connect theirs to :mod:`nitro_assistants.signals` the same way."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.models import Group
from django.db.models.signals import post_delete, post_save

from nitro_assistants import signals
from nitro_assistants.conf import app_settings
from nitro_assistants.models import Policy
from nitro_assistants.services import inbound_mail, notifications, policy_enforcement
from nitro_assistants.services.claims import assign_by_rule

try:  # the optional extra [slack]
    from nitro_assistants.services import slack
except ImportError:  # pragma: no cover - the extra is installed wherever the tests run
    slack = None  # type: ignore[assignment]
try:  # the optional extra [email]
    from anymail.signals import inbound as anymail_inbound
except ImportError:  # pragma: no cover - the extra is installed wherever the tests run
    anymail_inbound = None

logger = logging.getLogger("nitro_assistants")


def log_run_failed(sender: Any, run: Any, thread: Any, error: str, **kwargs: Any) -> None:
    logger.warning("Run %s on thread %s failed: %s", run.pk, thread.thread_id, error)


def log_delivery_failed(sender: Any, delivery: Any, thread: Any, error: str, **kwargs: Any) -> None:
    logger.warning(
        "Delivery of message %s on thread %s failed: %s",
        delivery.message_id,
        thread.thread_id,
        error,
    )


def log_delivery_pending(
    sender: Any, delivery: Any, thread: Any, pending_for: float, **kwargs: Any
) -> None:
    logger.warning(
        "Delivery of message %s on thread %s still pending after %ds",
        delivery.message_id,
        thread.thread_id,
        pending_for,
    )


def assign_requested_review(sender: Any, review: Any, **kwargs: Any) -> None:
    """A new review goes to whom the host project's ``ASSIGN_REVIEW`` rule says."""
    assign_by_rule(review)


def notify_review_requested(sender: Any, review: Any, **kwargs: Any) -> None:
    if app_settings.NOTIFIERS and notifications.review_needs_people(review):
        notifications.notify("requested", review=review)


def notify_review_escalated(sender: Any, review: Any, **kwargs: Any) -> None:
    notifications.notify("escalated", review=review)


def notify_delivery_failed(sender: Any, delivery: Any, thread: Any, **kwargs: Any) -> None:
    notifications.delivery_failed(thread)


def update_slack_cards(sender: Any, review: Any, **kwargs: Any) -> None:
    """A review ended (decided, superseded, dismissed, failed, expired): its Slack cards say so."""
    if slack is not None and app_settings.SLACK_ENABLED:
        slack.review_ended(review)


def decide_by_reply(sender: Any, event: Any, esp_name: str, **kwargs: Any) -> None:
    """An e-mail came in through django-anymail's inbound webhook: a reply to a notification
    decides its review (``INBOUND_EMAIL`` set), or is refused with an answer saying why."""
    if app_settings.INBOUND_EMAIL_ENABLED and getattr(event, "message", None) is not None:
        outcome = inbound_mail.receive(event.message)
        logger.info("E-mail reply through %s: %s", esp_name, outcome)


def policy_rules_written(sender: Any, using: str, **kwargs: Any) -> None:
    """A rule saved or deleted, or a group saved (a rule compiles its group's name in): the
    rules are compiled again everywhere once the transaction commits."""
    policy_enforcement.rules_changed(using)


def connect() -> None:
    post_save.connect(
        policy_rules_written, sender=Policy, dispatch_uid="nitro_assistants.policy_saved"
    )
    post_delete.connect(
        policy_rules_written, sender=Policy, dispatch_uid="nitro_assistants.policy_deleted"
    )
    post_save.connect(
        policy_rules_written, sender=Group, dispatch_uid="nitro_assistants.policy_group_saved"
    )
    signals.review_requested.connect(
        assign_requested_review, dispatch_uid="nitro_assistants.assign_requested_review"
    )
    signals.run_failed.connect(log_run_failed, dispatch_uid="nitro_assistants.log_run_failed")
    signals.delivery_failed.connect(
        log_delivery_failed, dispatch_uid="nitro_assistants.log_delivery_failed"
    )
    signals.delivery_pending.connect(
        log_delivery_pending, dispatch_uid="nitro_assistants.log_delivery_pending"
    )
    signals.review_requested.connect(
        notify_review_requested, dispatch_uid="nitro_assistants.notify_review_requested"
    )
    signals.review_escalated.connect(
        notify_review_escalated, dispatch_uid="nitro_assistants.notify_review_escalated"
    )
    signals.delivery_failed.connect(
        notify_delivery_failed, dispatch_uid="nitro_assistants.notify_delivery_failed"
    )
    signals.review_decided.connect(
        update_slack_cards, dispatch_uid="nitro_assistants.update_slack_cards_decided"
    )
    signals.review_superseded.connect(
        update_slack_cards, dispatch_uid="nitro_assistants.update_slack_cards_superseded"
    )
    signals.review_failed.connect(
        update_slack_cards, dispatch_uid="nitro_assistants.update_slack_cards_failed"
    )
    signals.review_expired.connect(
        update_slack_cards, dispatch_uid="nitro_assistants.update_slack_cards_expired"
    )
    if anymail_inbound is not None:
        anymail_inbound.connect(decide_by_reply, dispatch_uid="nitro_assistants.decide_by_reply")
