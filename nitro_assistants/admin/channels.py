"""Slack users linked to reviewers: who a Slack user speaks for when they click a card's button.

Only superusers see and edit these links: a link lets a Slack account decide as its user, so
whoever could add one could decide as anybody (their own Slack account linked to an
administrator). Without a link, a Slack user is matched by their verified e-mail address.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from nitro_assistants.models import SlackUser


@admin.register(SlackUser)
class SlackUserAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["slack_user_id", "user", "created_at"]
    search_fields = ["slack_user_id", "user__username", "user__email"]
    raw_id_fields = ["user"]
    fields = ["slack_user_id", "user"]

    def _superuser(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._superuser(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._superuser(request)
