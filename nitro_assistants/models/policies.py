"""Governance: policy rules (data, edited in the admin), the handling a rule gave a review, and
the approvals a quorum counts."""

from __future__ import annotations

import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models
from django.utils.translation import gettext_lazy as _

from nitro_assistants import policy_rules
from nitro_assistants.models.reviews import Review


def _seconds(duration: datetime.timedelta | None) -> float | None:
    return duration.total_seconds() if duration is not None else None


class Policy(models.Model):
    """One rule of the review policy. Enabled rules are tried in ``position`` order; the first
    that matches a held call decides its handling (:mod:`nitro_assistants.policies`).

    ``version`` goes up each time the rule is saved with a change; reviews and decisions keep
    the version (and a copy of the rule) they were handled under, so changing a rule never
    rewrites the past."""

    class Action(models.TextChoices):
        REVIEW = policy_rules.REVIEW, _("review by people")
        AUTO_APPROVE = policy_rules.AUTO_APPROVE, _("approve at once")
        AUTO_REJECT = policy_rules.AUTO_REJECT, _("reject at once")

    class Mode(models.TextChoices):
        ENFORCE = policy_rules.ENFORCE, _("enforce")
        SHADOW = policy_rules.SHADOW, _("shadow (never acts)")

    class Kind(models.TextChoices):
        ANY = "", _("any")
        TOOL_CALLS = "tool_calls", _("tool calls")
        REPLY = "reply", _("reply")

    class OnDeadline(models.TextChoices):
        NOTHING = policy_rules.NOTHING, _("nothing (flag it overdue)")
        ESCALATE = policy_rules.ESCALATE, _("escalate")
        APPROVE = policy_rules.APPROVE, _("approve")
        REJECT = policy_rules.REJECT, _("reject")
        EXPIRE = policy_rules.EXPIRE, _("expire (the assistant is told nobody answered)")

    class AfterEscalation(models.TextChoices):
        NOTHING = policy_rules.NOTHING, _("nothing (flag it overdue)")
        APPROVE = policy_rules.APPROVE, _("approve")
        REJECT = policy_rules.REJECT, _("reject")
        EXPIRE = policy_rules.EXPIRE, _("expire (the assistant is told nobody answered)")

    name = models.CharField(max_length=100, unique=True)
    position = models.PositiveIntegerField(
        default=0, db_index=True, help_text=_("Rules are tried from the lowest position up.")
    )
    enabled = models.BooleanField(default=True)
    mode = models.CharField(
        max_length=8,
        choices=Mode.choices,
        default=Mode.ENFORCE,
        help_text=_(
            "Shadow: tried on every review and what it would have done recorded (with how often "
            "people agreed), never acting."
        ),
    )
    assistant = models.CharField(
        max_length=100, blank=True, help_text=_("An assistant key; blank: any assistant.")
    )
    kind = models.CharField(max_length=16, blank=True, choices=Kind.choices, default=Kind.ANY)
    tool = models.CharField(
        _("tool name"),
        max_length=200,
        blank=True,
        help_text=_("A tool name or a glob (refund_*); blank: any tool (and replies)."),
    )
    conditions = models.JSONField(
        default=list,
        blank=True,
        help_text=_(
            'A list of {"path": "amount", "op": "gt", "value": 100}; operators: eq, ne, lt, '
            "lte, gt, gte, in, contains, matches. A path the call's arguments do not have "
            'never matches. A reply is matched as {"content": <the draft>}.'
        ),
    )
    must_show = models.JSONField(
        _("must show"),
        default=list,
        blank=True,
        help_text=_(
            'Argument paths a reviewer must have been shown to approve, e.g. ["body", '
            '"customer.card"] (the conditions\' path syntax; a reply\'s draft is "content"). '
            "A part drawn collapsed must be opened, a redacted one revealed, first."
        ),
    )
    action = models.CharField(max_length=16, choices=Action.choices, default=Action.REVIEW)
    reason = models.CharField(
        max_length=500,
        blank=True,
        help_text=_("Why calls are rejected at once: the rejection's message and note."),
    )
    approvals = models.PositiveSmallIntegerField(
        default=1, help_text=_("How many distinct people must approve.")
    )
    group = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text=_("Only its members may decide; blank: anyone who may decide reviews."),
    )
    priority = models.SmallIntegerField(default=0, help_text=_("Higher shows first."))
    deadline = models.DurationField(null=True, blank=True, help_text=_("e.g. 04:00:00"))
    on_deadline = models.CharField(
        max_length=16, blank=True, choices=OnDeadline.choices, default=OnDeadline.NOTHING
    )
    escalate_to = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    escalation_deadline = models.DurationField(
        null=True, blank=True, help_text=_("After an escalation, how long the new group has.")
    )
    on_escalation_deadline = models.CharField(
        max_length=16,
        blank=True,
        choices=AfterEscalation.choices,
        default=AfterEscalation.NOTHING,
    )
    allow_grants = models.BooleanField(
        _("grants"),
        default=True,
        help_text=_(
            "Whether a reviewer approving a call under this rule may also grant approval of "
            "calls like it (a rule that reviews with one approval only)."
        ),
    )
    grant_max_uses = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("The most uses a grant under this rule may have.")
    )
    grant_max_duration = models.DurationField(
        null=True, blank=True, help_text=_("The longest a grant under this rule may last.")
    )
    version = models.PositiveIntegerField(default=1, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("policy rule")
        verbose_name_plural = _("policy rules")
        ordering = ["position", "pk"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:  # every saved change is a new version of the rule
            self.version += 1
            if kwargs.get("update_fields") is not None:
                kwargs["update_fields"] = {*kwargs["update_fields"], "version"}
        super().save(*args, **kwargs)

    def compiled(self) -> policy_rules.Rule:
        """This row as a :class:`nitro_assistants.policies.Rule`; raises ``PolicyError``."""
        return policy_rules.clean_rule(
            id=self.pk or 0,
            position=self.position,
            assistant=self.assistant,
            kind=self.kind,
            tool=self.tool,
            conditions=self.conditions,
            action=self.action,
            approvals=self.approvals,
            group=self.group.name if self.group_id and self.group else "",
            group_id=self.group_id,
            priority=self.priority,
            deadline=_seconds(self.deadline),
            on_deadline=self.on_deadline,
            escalate_to=self.escalate_to.name if self.escalate_to_id and self.escalate_to else "",
            escalate_to_id=self.escalate_to_id,
            escalation_deadline=_seconds(self.escalation_deadline),
            on_escalation_deadline=self.on_escalation_deadline,
            reason=self.reason,
            name=self.name,
            version=self.version,
            must_show=self.must_show,
            mode=self.mode,
            grants=self.allow_grants,
            grant_max_uses=self.grant_max_uses,
            grant_max_seconds=_seconds(self.grant_max_duration),
        )


class ReviewHandling(models.Model):
    """The handling a policy rule gave a review (no row: the default, one approval by anyone
    who may decide). A copy of the rule as it was is kept in ``rule``."""

    class Stage(models.TextChoices):
        WAITING = "waiting", _("waiting")
        ESCALATED = "escalated", _("escalated")
        DONE = "done", _("deadline applied")

    review = models.OneToOneField(
        Review, primary_key=True, on_delete=models.CASCADE, related_name="handling"
    )
    policy = models.ForeignKey(
        Policy, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rule = models.JSONField(default=dict, help_text=_("The rule's handling, as it was"))
    action = models.CharField(max_length=16, default=policy_rules.REVIEW)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    group = models.ForeignKey(
        Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    priority = models.SmallIntegerField(default=0)
    due_at = models.DateTimeField(null=True, blank=True)
    stage = models.CharField(max_length=16, choices=Stage.choices, default=Stage.WAITING)
    escalated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("review handling")
        verbose_name_plural = _("review handlings")
        indexes = [
            # The deadline sweep: passed deadlines not applied yet.
            models.Index(
                fields=["due_at"],
                condition=~models.Q(stage="done"),
                name="nitro_handling_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"handling of review #{self.review_id}"

    @property
    def handling(self) -> policy_rules.Handling:
        return policy_rules.Handling.from_dict(self.rule or {})


class Approval(models.Model):
    """One person's approval of one version (``digest``) of a review that needs several. The
    review is applied when enough distinct people approved the same version."""

    review = models.ForeignKey(Review, on_delete=models.CASCADE, related_name="approvals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    revision = models.PositiveIntegerField()
    digest = models.CharField(max_length=128)
    edited = models.BooleanField(default=False, help_text=_("This approval edited the content"))
    at = models.DateTimeField()

    class Meta:
        verbose_name = _("approval")
        verbose_name_plural = _("approvals")
        ordering = ["at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["review", "user", "digest"], name="nitro_one_approval_per_person"
            ),
        ]

    def __str__(self) -> str:
        return f"approval of review #{self.review_id} by user #{self.user_id}"

    def as_dict(self) -> dict[str, Any]:
        return {"user": self.user_id, "revision": self.revision, "at": self.at.isoformat()}
