"""Scoped approval grants: a reviewer's "approve calls like this" for a thread, a customer (the
thread's subject) or an assistant, for a time or a number of uses. Records: a grant revoked,
expired or used up stays, and every decision a grant made names it (``Decision.grant``)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from nitro_assistants import grant_rules
from nitro_assistants.models.policies import Policy
from nitro_assistants.models.reviews import Review
from nitro_assistants.models.threads import Thread


class Grant(models.Model):
    """One grant, given with the approval of a held call (``review``) by ``granted_by``."""

    class Scope(models.TextChoices):
        THREAD = grant_rules.THREAD, _("this thread")
        SUBJECT = grant_rules.SUBJECT, _("this customer (the thread's subject)")
        ASSISTANT = grant_rules.ASSISTANT, _("this assistant")

    class State(models.TextChoices):
        LIVE = "live", _("live")
        REVOKED = "revoked", _("revoked")
        EXPIRED = "expired", _("expired")
        USED_UP = "used_up", _("used up")

    scope = models.CharField(max_length=16, choices=Scope.choices)
    key = models.CharField(
        max_length=300, help_text=_("The thread's id, the subject or the assistant key it covers")
    )
    thread = models.ForeignKey(
        Thread, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    assistant_key = models.CharField(max_length=100)
    tool = models.CharField(max_length=200)
    constraints = models.JSONField(
        default=dict, help_text=_('Per argument: {"eq": value}, {"max": n} or {"in": [...]}')
    )
    max_uses = models.PositiveIntegerField(null=True, blank=True)
    uses_left = models.PositiveIntegerField(null=True, blank=True)
    uses = models.PositiveIntegerField(default=0)
    duration = models.DurationField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    review = models.ForeignKey(
        Review, null=True, blank=True, on_delete=models.SET_NULL, related_name="grants_given"
    )
    policy = models.ForeignKey(
        Policy, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    group = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text=_("The group the approval was given for"),
    )
    granted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    granted_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoke_reason = models.CharField(max_length=500, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("grant")
        verbose_name_plural = _("grants")
        ordering = ["-granted_at", "-pk"]
        permissions = [("grant_approval", "Can grant approval of calls like one approved")]
        indexes = [
            models.Index(
                fields=["tool"],
                condition=models.Q(revoked_at__isnull=True),
                name="nitro_grant_open_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"grant #{self.pk}: {self.tool} for {self.get_scope_display()}"

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return self.State.REVOKED
        if self.uses_left is not None and self.uses_left <= 0:
            return self.State.USED_UP
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return self.State.EXPIRED
        return self.State.LIVE

    def compiled(self) -> grant_rules.Grant:
        return grant_rules.Grant(
            id=self.pk,
            scope=self.scope,
            key=self.key,
            tool=self.tool,
            constraints=self.constraints,
            expires_at=self.expires_at.timestamp() if self.expires_at is not None else None,
            uses=self.max_uses,
            seconds=int(self.duration.total_seconds()) if self.duration is not None else None,
            group_id=self.group_id,
        )
