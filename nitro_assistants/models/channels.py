"""Deciding where reviewers are: who a Slack user is here, the cards posted for reviews, and the
signed Slack requests already seen (a replay is refused)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from nitro_assistants.models.reviews import Review


class SlackUser(models.Model):
    """A Slack user speaking for a Django user: set by an administrator, and taken before the
    Slack user's verified e-mail address (``users.info``) is matched against the users'."""

    slack_user_id = models.CharField(
        _("Slack user ID"),
        max_length=32,
        unique=True,
        help_text=_("As Slack shows it in the person's profile (Copy member ID), e.g. U024BE7LH."),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="nitro_slack_users"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("Slack user")
        verbose_name_plural = _("Slack users")
        ordering = ["slack_user_id"]

    def __str__(self) -> str:
        return f"{self.slack_user_id} → user #{self.user_id}"


class SlackCard(models.Model):
    """A message posted to Slack for a review: where it is (``channel`` + ``ts``), what it
    showed (``revision`` + ``digest``, which its buttons carry), and whether it was closed
    (updated to say how the review ended)."""

    review = models.ForeignKey(Review, on_delete=models.CASCADE, related_name="slack_cards")
    notifier = models.CharField(max_length=64)
    #: What the notifier was asked to post to: its channel, or a reviewer's Slack user ID.
    target = models.CharField(max_length=80)
    #: Where Slack put it (a channel's ID; a D… ID for direct messages).
    channel = models.CharField(max_length=32)
    ts = models.CharField(max_length=32)
    revision = models.PositiveIntegerField()
    digest = models.CharField(max_length=128)
    posted_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("Slack card")
        verbose_name_plural = _("Slack cards")
        ordering = ["-posted_at"]
        constraints = [
            models.UniqueConstraint(fields=["channel", "ts"], name="nitro_slack_card_message"),
        ]

    def __str__(self) -> str:
        return f"Slack card of review #{self.review_id} in {self.channel}"


class SlackRequest(models.Model):
    """A signed request from Slack already handled, by its signature's hash, for as long as its
    timestamp is accepted: the same request sent again is refused (a unique row, so two
    processes receiving it at once cannot both take it)."""

    key = models.CharField(max_length=64, unique=True)
    at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = _("Slack request seen")
        verbose_name_plural = _("Slack requests seen")

    def __str__(self) -> str:
        return f"Slack request {self.key[:12]}… at {self.at:%Y-%m-%d %H:%M:%S}"
