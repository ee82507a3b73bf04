from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from nitro_assistants.models.threads import Run, Thread


class Delivery(models.Model):
    """The delivery stamp of one reply message (docs/protocol.md §7), as last seen.

    ``alerted_at`` is set when the signal for the current status has been sent; the sweep only reads
    rows where it is null (a partial index), so the index holds the rows that may still need one.
    """

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        DELIVERED = "delivered", _("delivered")
        FAILED = "failed", _("failed")

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="deliveries")
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    message_id = models.CharField(max_length=128)
    content = models.TextField(blank=True)
    tool = models.CharField(max_length=100, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    result = models.JSONField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    first_seen_at = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)
    alerted_at = models.DateTimeField(null=True, blank=True)
    alerted_status = models.CharField(max_length=16, blank=True)

    class Meta:
        verbose_name = _("delivery")
        verbose_name_plural = _("deliveries")
        ordering = ["-first_seen_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "message_id"], name="nitro_assistants_one_delivery_per_message"
            ),
        ]
        indexes = [
            models.Index(
                fields=["status", "first_seen_at"],
                name="nitro_delivery_unalerted_idx",
                condition=models.Q(alerted_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"delivery of {self.message_id} ({self.status})"
