"""Notifications: the outbox of what reviewers are to be told, and who turned them off."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from nitro_assistants.models.reviews import Review
from nitro_assistants.models.threads import Thread


class Notification(models.Model):
    """One thing to tell one reviewer (or a shared channel, ``user`` empty) on one channel.
    Rows are sent in batches: one message per reviewer per channel per ``NOTIFY_INTERVAL``,
    listing every row not sent yet. A row that could not be sent keeps its ``error``."""

    class Kind(models.TextChoices):
        REQUESTED = "requested", _("review requested")
        ESCALATED = "escalated", _("review escalated")
        OVERDUE = "overdue", _("review overdue")
        EXPIRING = "expiring", _("review about to expire")
        DELIVERY_FAILED = "delivery_failed", _("delivery failed")

    class Status(models.TextChoices):
        QUEUED = "queued", _("queued")
        SENT = "sent", _("sent")
        FAILED = "failed", _("failed")

    channel = models.CharField(max_length=64)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    kind = models.CharField(max_length=24, choices=Kind.choices)
    review = models.ForeignKey(
        Review, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    thread = models.ForeignKey(
        Thread, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    text = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)

    class Meta:
        verbose_name = _("notification")
        verbose_name_plural = _("notifications")
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["channel", "user", "status"], name="nitro_notification_outbox"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} for {self.user_id or 'the channel'} on {self.channel}"


class NotificationPreference(models.Model):
    """A reviewer's choice: told of reviews waiting for them, or not."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="nitro_notifications"
    )
    enabled = models.BooleanField(
        _("send me notifications"),
        default=True,
        help_text=_("Untick to get no e-mail (or other personal message) about reviews."),
    )

    class Meta:
        verbose_name = _("notification preference")
        verbose_name_plural = _("notification preferences")

    def __str__(self) -> str:
        return f"notifications of user #{self.user_id}: {'on' if self.enabled else 'off'}"
