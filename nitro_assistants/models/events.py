from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models.reviews import Review
from nitro_assistants.models.threads import Run, Thread


class Event(models.Model):
    """Append-only audit log: a row is written once and never changed or deleted on its own.

    Most events are about a thread. Those about no thread (an API key created or revoked) have
    ``thread`` empty and say what they are about in ``data``."""

    thread = models.ForeignKey(
        Thread, null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    review = models.ForeignKey(
        Review, null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    verb = models.CharField(max_length=40)
    data = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("event")
        verbose_name_plural = _("events")
        ordering = ["at", "pk"]
        indexes = [
            models.Index(fields=["thread", "at"], name="nitro_event_thread_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.verb} at {self.at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise NitroAssistantsError("Events are append-only: an Event cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise NitroAssistantsError("Events are append-only: an Event cannot be deleted.")
