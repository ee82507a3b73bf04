"""The example site's answer to nitro_assistants' delivery signals: log it and email the admins.

A reply the platform could not deliver (or that stays pending) never reached the customer:
someone has to follow up by hand.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.mail import mail_admins
from django.dispatch import receiver

from nitro_assistants.signals import delivery_failed, delivery_pending

logger = logging.getLogger("reviewsite")


@receiver(delivery_failed, dispatch_uid="reviewsite.delivery_failed")
def alert_failed_delivery(sender: Any, delivery: Any, **kwargs: Any) -> None:
    subject = f"Reply not delivered on thread {delivery.thread.thread_id}"
    body = f"{delivery.tool or 'The delivery tool'} failed after {delivery.attempts} attempts: {delivery.error}"
    logger.error("%s: %s", subject, body)
    mail_admins(subject, body, fail_silently=True)


@receiver(delivery_pending, dispatch_uid="reviewsite.delivery_pending")
def alert_stuck_delivery(sender: Any, delivery: Any, **kwargs: Any) -> None:
    subject = f"Reply still pending on thread {delivery.thread.thread_id}"
    body = "Delivery never recorded an outcome: treat the reply as not sent."
    logger.warning("%s: %s", subject, body)
    mail_admins(subject, body, fail_silently=True)
