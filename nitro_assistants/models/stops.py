"""The stop button: a record of staff stopping all assistants, one assistant, one tool or one
thread, and of resuming (services/stops.py changes these rows; nothing else does)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from nitro_assistants.models.threads import Thread


class Stop(models.Model):
    """One stop. In force for reviews until ``reviews_resumed_at``, for new runs until
    ``resumed_at`` (a staged resume sets the first, then the second; a full resume both). The
    row stays as the record once resumed."""

    class Scope(models.TextChoices):
        ALL = "all", _("all assistants")
        ASSISTANT = "assistant", _("one assistant")
        TOOL = "tool", _("one tool")
        THREAD = "thread", _("one thread")

    scope = models.CharField(max_length=16, choices=Scope.choices)
    assistant = models.CharField(
        max_length=100, blank=True, help_text=_("The assistant key (scope: one assistant).")
    )
    tool = models.CharField(
        max_length=200, blank=True, help_text=_("The tool's name (scope: one tool).")
    )
    thread = models.ForeignKey(
        Thread,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="stops",
        help_text=_("The thread (scope: one thread)."),
    )
    reason = models.TextField()
    stopped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    stopped_by_name = models.CharField(max_length=150, blank=True)
    stopped_at = models.DateTimeField(auto_now_add=True)
    #: Runs this stop cancelled on the server, and the cancels that failed (``{"run", "error"}``).
    cancelled_runs = models.JSONField(default=list, blank=True)
    cancel_failures = models.JSONField(default=list, blank=True)
    reviews_resumed_at = models.DateTimeField(null=True, blank=True)
    resumed_at = models.DateTimeField(null=True, blank=True)
    resumed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        verbose_name = _("stop")
        verbose_name_plural = _("stops")
        ordering = ["-stopped_at"]
        permissions = [("stop_assistants", _("Can stop and resume assistants"))]
        indexes = [
            models.Index(
                fields=["scope"],
                name="nitro_stop_in_force_idx",
                condition=models.Q(resumed_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"{self.target} stopped by {self.stopped_by_name or 'the system'}"

    @property
    def target(self) -> str:
        """What is stopped, in words."""
        if self.scope == self.Scope.ASSISTANT:
            return f"assistant {self.assistant!r}"
        if self.scope == self.Scope.TOOL:
            return f"tool {self.tool!r}"
        if self.scope == self.Scope.THREAD:
            return f"thread {self.thread.thread_id if self.thread else '?'}"
        return "all assistants"

    @property
    def in_force(self) -> bool:
        return self.resumed_at is None

    @property
    def explanation(self) -> str:
        """Who stopped what and why: the message a refused decision or run carries."""
        return (
            f"{self.target[0].upper()}{self.target[1:]} stopped by "
            f"{self.stopped_by_name or 'the system'} at {self.stopped_at:%Y-%m-%d %H:%M} UTC: "
            f"{self.reason}"
        )
