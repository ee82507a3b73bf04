from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from nitro_assistants import rules
from nitro_assistants.models.threads import Run, Thread


def pending_first() -> models.Case:
    """0 for a pending review, 1 for any other: the review queue's first sort key (indexed)."""
    return models.Case(
        models.When(status="pending", then=models.Value(0)),
        default=models.Value(1),
        output_field=models.IntegerField(),
    )


class Review(models.Model):
    """What a thread is paused on. At most one ``pending`` review per thread.

    Every review carries a ``revision`` and the ``digest`` of what a reviewer is shown; a decision
    names both (:func:`nitro_assistants.services.decide`). Its status changes only through
    :func:`nitro_assistants.services.transition`, along one of two lifecycles
    (:data:`nitro_assistants.rules.TRANSITIONS`):

    - tool calls and replies: ``pending`` → ``decided`` → ``applied`` | ``failed``; ``pending`` or
      ``decided`` → ``superseded``. ``decided`` and ``applied`` belong to these kinds only.
    - typed interactions (question, blueprint, plan): ``pending`` → ``answered`` | ``accepted`` |
      ``revision_requested`` | ``cancelled`` | ``executing`` (an approved plan) | ``superseded``;
      ``executing`` → ``completed`` | ``failed``. These statuses belong to interactions only
      (``executing`` and ``completed`` to plans).
    - pauses of graphs of their own (``inbox``, ``interrupt``): as tool calls, and ``pending`` →
      ``failed`` when the graph refused an answer and is stuck on the pause.

    Any pending review may be ``dismissed`` (the pause ended without an answer); a stuck
    ``inbox``/``interrupt`` review too. Any pending review may be ``expired`` (nobody answered
    in time: the assistant is told so by a decision recorded by the expiry); terminal.
    """

    class Kind(models.TextChoices):
        TOOL_CALLS = "tool_calls", _("tool calls")
        REPLY = "reply", _("reply")
        QUESTION = "question", _("question")
        BLUEPRINT = "blueprint", _("blueprint")
        PLAN = "plan", _("plan")
        # pauses of graphs of their own (docs/protocol.md §9)
        INBOX = "inbox", _("Agent Inbox request")
        INTERRUPT = "interrupt", _("interrupt")

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        DECIDED = "decided", _("decided")
        SUPERSEDED = "superseded", _("superseded")
        APPLIED = "applied", _("applied")
        FAILED = "failed", _("failed")
        DISMISSED = "dismissed", _("dismissed")
        # Nobody answered before its deadline or the pause's own expiresAt: the assistant was
        # told so (docs/governance.md#expiry). Terminal.
        EXPIRED = "expired", _("expired")
        # typed interactions (docs/protocol.md §8)
        ANSWERED = "answered", _("answered")
        ACCEPTED = "accepted", _("accepted")
        REVISION_REQUESTED = "revision_requested", _("revision requested")
        CANCELLED = "cancelled", _("cancelled")
        EXECUTING = "executing", _("executing")
        COMPLETED = "completed", _("completed")

    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="reviews")
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="reviews"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.PENDING)
    interrupt_ids = models.JSONField(default=list, blank=True)
    payload = models.JSONField(
        default=dict, blank=True, help_text=_("tool_calls, the reply draft, or the interaction")
    )
    interaction_id = models.CharField(max_length=128, blank=True)
    revision = models.PositiveIntegerField(default=1)
    digest = models.CharField(max_length=128, blank=True)
    origin = models.CharField(max_length=16, blank=True, default="assistant")
    requested_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_(
            "When it expires unanswered: the pause's own expiresAt or its rule's deadline, "
            "the earlier"
        ),
    )
    expiry_warned_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When its reviewers were warned it will expire")
    )

    class Meta:
        verbose_name = _("review")
        verbose_name_plural = _("reviews")
        ordering = ["requested_at"]
        permissions = [
            ("decide_review", _("Can decide reviews")),
            ("reveal_redacted", _("Can reveal redacted values of a review")),
            ("export_dataset", _("Can export reviews as datasets")),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["thread"],
                condition=models.Q(status="pending"),
                name="nitro_assistants_one_pending_review",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "requested_at"], name="nitro_review_queue_idx"),
            # The expiry sweep: pending reviews that expire.
            models.Index(
                fields=["expires_at"],
                condition=models.Q(status="pending", expires_at__isnull=False),
                name="nitro_review_expiry_idx",
            ),
            # The admin queue across every status: pending first, oldest first, no sort.
            models.Index(
                pending_first(),
                models.F("requested_at"),
                models.F("id"),
                name="nitro_review_pending_first_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} review #{self.pk} ({self.status})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        fields = self.prepare_save(kwargs.get("update_fields"))
        if fields is not None:
            kwargs["update_fields"] = fields
        super().save(*args, **kwargs)

    def prepare_save(self, fields: Any) -> set[str] | None:
        """What ``save`` does before writing (the service's queued writes call it too): every
        review carries the digest of what a reviewer is shown. The fields to write (None: all)."""
        if not self.digest:
            self.digest = rules.review_digest(self.kind, self.payload or {})
            if fields is not None:
                return {*fields, "digest"}
        return None if fields is None else set(fields)

    @property
    def interrupt_id(self) -> str | None:
        return self.interrupt_ids[0] if self.interrupt_ids else None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return list(self.payload.get("tool_calls") or [])

    @property
    def reply(self) -> dict[str, Any] | None:
        reply = self.payload.get("reply")
        return dict(reply) if isinstance(reply, dict) else None


class Decision(models.Model):
    """Who decided a review, what, when and why; what was sent; how it came out."""

    class Outcome(models.TextChoices):
        PENDING = "pending", _("pending")
        APPLIED = "applied", _("applied")
        SUPERSEDED = "superseded", _("superseded")
        FAILED = "failed", _("failed")

    class Channel(models.TextChoices):
        """Where the decision was made. Empty: code of the host project (the shell, a script)."""

        ADMIN = "admin", _("admin")
        API = "api", _("API")
        SLACK = "slack", _("Slack")
        EMAIL = "email", _("e-mail reply")
        POLICY = "policy", _("policy rule")
        GRANT = "grant", _("grant")
        DEADLINE = "deadline", _("deadline")

    review = models.OneToOneField(Review, on_delete=models.CASCADE, related_name="decision")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    reviewer_id = models.CharField(max_length=150)
    interrupt_id = models.CharField(max_length=64, blank=True)
    reply = models.JSONField(null=True, blank=True)
    tool_calls = models.JSONField(null=True, blank=True)
    answer = models.JSONField(
        null=True, blank=True, help_text=_("the resume value of a typed interaction")
    )
    note = models.TextField(blank=True)
    shown = models.JSONField(
        null=True,
        blank=True,
        help_text=_(
            "the paths of the held content the reviewer said were shown (opened, or read whole)"
            " when approving; empty: not stated"
        ),
    )
    channel = models.CharField(
        max_length=16,
        choices=Channel.choices,
        blank=True,
        help_text=_("where it was decided; empty for code of the host project"),
    )
    decided_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.PENDING)
    error = models.TextField(blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    run = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="decision"
    )
    grant = models.ForeignKey(
        "nitro_assistants.Grant",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="decisions",
        help_text=_("the grant that approved it (its granter gave it)"),
    )

    class Meta:
        verbose_name = _("decision")
        verbose_name_plural = _("decisions")
        ordering = ["-decided_at"]

    def __str__(self) -> str:
        return f"decision on review #{self.review_id} by {self.reviewer_id}"

    @property
    def actions(self) -> list[str]:
        if self.reply:
            return [str(self.reply.get("action"))]
        if self.answer and isinstance(self.answer.get("answers"), dict):
            # inbox/interrupt pauses: an Agent Inbox response's type, else "answer".
            return [
                str(value.get("type")) if isinstance(value, dict) and "type" in value else "answer"
                for value in self.answer["answers"].values()
            ]
        if self.answer:
            return [str(self.answer.get("decision"))]
        return [str(call.get("action")) for call in self.tool_calls or []]
