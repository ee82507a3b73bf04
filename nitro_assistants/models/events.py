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
    # The hash chain (nitro_assistants.hashchain): the event's place in its thread's chain (or the
    # installation's, for events about no thread), the hash it follows and its own. ``actor_ref``
    # is the actor's pk as written: the hash covers it, so deleting the user (``actor`` becomes
    # empty) leaves the evidence whole while pointing the event at someone else does not.
    seq = models.PositiveBigIntegerField(null=True, blank=True, editable=False)
    prev_hash = models.CharField(max_length=64, blank=True, editable=False)
    hash = models.CharField(max_length=64, blank=True, editable=False)
    actor_ref = models.CharField(max_length=64, blank=True, editable=False)

    class Meta:
        verbose_name = _("event")
        verbose_name_plural = _("events")
        ordering = ["at", "pk"]
        indexes = [
            models.Index(fields=["thread", "at"], name="nitro_event_thread_idx"),
        ]
        constraints = [
            # One event per place in a chain: two writers can never both take seq n.
            models.UniqueConstraint(
                fields=["thread", "seq"],
                condition=models.Q(thread__isnull=False, seq__isnull=False),
                name="nitro_event_thread_chain",
            ),
            models.UniqueConstraint(
                fields=["seq"],
                condition=models.Q(thread__isnull=True, seq__isnull=False),
                name="nitro_event_installation_chain",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.verb} at {self.at:%Y-%m-%d %H:%M:%S}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise NitroAssistantsError("Events are append-only: an Event cannot be changed.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise NitroAssistantsError("Events are append-only: an Event cannot be deleted.")


class AuditChain(models.Model):
    """The head of one hash chain: its last ``seq`` and hash. Writers lock this row to append
    (no fork, no gap); the walk checks the chain ends here (no missing tail). ``chain`` is the
    thread's remote id, or ``installation``; no foreign key, so the head outlives a thread
    deleted with its events, and the walk reports them missing."""

    chain = models.CharField(max_length=64, unique=True)
    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("audit chain")
        verbose_name_plural = _("audit chains")
        ordering = ["chain"]

    def __str__(self) -> str:
        return f"chain {self.chain} at seq {self.seq}"
