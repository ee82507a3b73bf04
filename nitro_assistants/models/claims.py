"""Who is working on a review: a reviewer's claim (a lease that expires unless renewed) and the
person or group a review is assigned to. Both are about the review, never part of its state:
neither one blocks :func:`nitro_assistants.services.decide`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from nitro_assistants.models.reviews import Review


class Claim(models.Model):
    """One row per review ever claimed: who has it, since when, until when. A claim whose
    ``expires_at`` has passed is nobody's (a closed tab, a lost session): the next reviewer who
    opens the review gets it. Released claims keep their row with ``expires_at`` in the past, so
    ``changed_at`` (the newest of which the live endpoint watches) moves on every change."""

    review = models.OneToOneField(Review, on_delete=models.CASCADE, related_name="claim")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    claimed_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("claim")
        verbose_name_plural = _("claims")
        indexes = [models.Index(fields=["changed_at"], name="nitro_claim_changed_idx")]

    def __str__(self) -> str:
        return f"claim on review #{self.review_id} by user #{self.user_id}"

    def active(self, now: Any = None) -> bool:
        return self.expires_at > (now or timezone.now())


class Assignment(models.Model):
    """The person or the group a review is for (one of the two). Assigning again replaces it."""

    review = models.OneToOneField(Review, on_delete=models.CASCADE, related_name="assignment")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
    )
    group = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text=_("empty when the host project's rule assigned it"),
    )
    assigned_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("assignment")
        verbose_name_plural = _("assignments")
        permissions = [("assign_review", _("Can assign reviews"))]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=False, group__isnull=True)
                | models.Q(user__isnull=True, group__isnull=False),
                name="nitro_assignment_user_or_group",
            )
        ]

    def __str__(self) -> str:
        return f"review #{self.review_id} assigned to {self.assignee}"

    @property
    def assignee(self) -> Any:
        return self.user if self.user_id else self.group
