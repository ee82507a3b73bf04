"""Typed interactions' own records: what each approved plan step did, and the API keys the
decide API accepts."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from nitro_assistants.models.reviews import Review

#: Every API key starts with this, so a leaked one is easy to recognise (and to scan for).
API_KEY_PREFIX = "nak_"


def hash_api_key(secret: str) -> str:
    """SHA-256 of a key: keys are 32 random bytes, so a fast hash is enough (no password KDF)."""
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiKey(models.Model):
    """A key for the decide API, created in the admin for one user. Only its hash is stored: the
    key itself is shown once, when it is created."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="nitro_api_keys"
    )
    name = models.CharField(max_length=100, help_text=_("What the key is for."))
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    hashed_key = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("API key")
        verbose_name_plural = _("API keys")
        ordering = ["-created_at"]
        # ``add_apikey`` creates keys for oneself; a key acts as its user, so creating one for
        # somebody else is a permission of its own (superusers have it).
        permissions = [("add_apikey_for_others", _("Can add API keys for other users"))]

    def __str__(self) -> str:
        return f"{self.name} ({API_KEY_PREFIX}{self.prefix}…)"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    def set_new_key(self) -> str:
        """Give this (unsaved) row a fresh key; returns the key, which is never shown again."""
        self.prefix = secrets.token_hex(6)
        secret = f"{API_KEY_PREFIX}{self.prefix}_{secrets.token_urlsafe(32)}"
        self.hashed_key = hash_api_key(secret)
        return secret

    @classmethod
    def generate(cls, user: Any, name: str) -> tuple[ApiKey, str]:
        """Create a key for ``user``; returns the row and the key, which is never shown again.
        Writes no audit event and checks nobody's permission: people creating keys go through
        :func:`nitro_assistants.services.api_keys.create_api_key`."""
        key = cls(user=user, name=name)
        secret = key.set_new_key()
        key.save()
        return key, secret

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(self.hashed_key, hash_api_key(secret))

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


class StepResult(models.Model):
    """What one enabled step of an approved plan did (docs/protocol.md §8)."""

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        RUNNING = "running", _("running")
        COMPLETED = "completed", _("completed")
        FAILED = "failed", _("failed")
        SKIPPED = "skipped", _("skipped")

    FINISHED = (Status.COMPLETED, Status.FAILED, Status.SKIPPED)

    review = models.ForeignKey(Review, on_delete=models.CASCADE, related_name="step_results")
    step_id = models.CharField(max_length=128)
    position = models.PositiveIntegerField(default=0)
    action = models.CharField(max_length=200)
    depends_on = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    message = models.TextField(blank=True)
    link = models.CharField(max_length=2000, blank=True)
    resource_id = models.CharField(max_length=200, blank=True)
    resource_kind = models.CharField(max_length=100, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("plan step result")
        verbose_name_plural = _("plan step results")
        ordering = ["review", "position"]
        constraints = [
            models.UniqueConstraint(fields=["review", "step_id"], name="nitro_one_result_per_step"),
        ]

    def __str__(self) -> str:
        return f"step {self.step_id} of review #{self.review_id} ({self.status})"

    def as_dict(self) -> dict[str, Any]:
        """The step's report, as the API shows it."""
        return {
            "stepId": self.step_id,
            "status": self.status,
            "message": self.message or None,
            "link": self.link or None,
            "resourceId": self.resource_id or None,
            "resourceKind": self.resource_kind or None,
        }
