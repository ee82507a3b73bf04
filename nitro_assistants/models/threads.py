from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from nitro_assistants import redaction_setting, subjects


class Thread(models.Model):
    """One conversation on the Assistants API, mirrored."""

    class Status(models.TextChoices):
        IDLE = "idle", _("idle")
        BUSY = "busy", _("busy")
        INTERRUPTED = "interrupted", _("interrupted")
        ERROR = "error", _("error")

    thread_id = models.UUIDField(
        _("remote thread id"), unique=True, default=uuid.uuid4, editable=False
    )
    assistant_key = models.CharField(_("assistant"), max_length=100, db_index=True)
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("opened by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IDLE)
    values = models.JSONField(_("state snapshot"), default=dict, blank=True)
    context = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(
        _("metadata"),
        default=dict,
        blank=True,
        help_text=_(
            "What the host said about the thread when it started it (start_run's metadata): "
            "also on the server's thread."
        ),
    )
    subject = models.CharField(
        _("about"),
        max_length=subjects.SUBJECT_LENGTH,
        blank=True,
        editable=False,
        help_text=_("Who and what the conversation is about (the THREAD_SUBJECT setting)."),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    synced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("thread")
        verbose_name_plural = _("threads")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "updated_at"], name="nitro_thread_status_idx"),
        ]

    def __str__(self) -> str:
        # What every list showing a thread (events, runs, deliveries) reads: who it is about,
        # redacted (REDACT) as everything a reviewer reads.
        if self.subject:
            return f"{redaction_setting.current().cut_text(self.subject)} ({self.short_id}…)"
        return f"{self.assistant_key} {self.thread_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        fields = self.prepare_save(kwargs.get("update_fields"))
        if fields is not None:
            kwargs["update_fields"] = fields
        super().save(*args, **kwargs)

    def prepare_save(self, fields: Any) -> set[str] | None:
        """What ``save`` does before writing (the service's queued writes call it too): the
        subject is computed whenever what it is computed from is written, so lists read a
        column instead of calling THREAD_SUBJECT per row. The fields to write (None: all)."""
        if fields is None or {"context", "values", "metadata"} & set(fields):
            self.subject = subjects.describe(self)
            if fields is not None:
                return {*fields, "subject"}
        return None if fields is None else set(fields)

    @property
    def short_id(self) -> str:
        """The first 8 characters of the remote id: what lists show beside the subject."""
        return str(self.thread_id)[:8]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list((self.values or {}).get("messages") or [])


class Run(models.Model):
    """A run or resume the app asked for. Its ``id`` is the idempotency key sent in the remote
    run's metadata (``nitro_run_id``), so a retried task finds the run instead of starting
    another."""

    class Kind(models.TextChoices):
        RUN = "run", _("run")
        RESUME = "resume", _("resume")

    class Status(models.TextChoices):
        QUEUED = "queued", _("queued")
        RUNNING = "running", _("running")
        SUCCEEDED = "succeeded", _("succeeded")
        INTERRUPTED = "interrupted", _("interrupted")
        FAILED = "failed", _("failed")

    FINISHED = (Status.SUCCEEDED, Status.INTERRUPTED, Status.FAILED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="runs")
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.RUN)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    remote_run_id = models.CharField(max_length=64, blank=True, db_index=True)
    input = models.JSONField(default=dict, blank=True)
    reply = models.TextField(blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["thread", "created_at"], name="nitro_run_thread_idx"),
            models.Index(
                fields=["created_at"],
                name="nitro_run_unfinished_idx",
                condition=models.Q(status__in=["queued", "running"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in self.FINISHED
