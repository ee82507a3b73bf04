"""``path("nitro/slack/", include("nitro_assistants.integrations.urls"))``: the Slack app's
Interactivity Request URL is ``https://<your site>/nitro/slack/interactions/``."""

from __future__ import annotations

from django.urls import path

from nitro_assistants.integrations import slack

app_name = "nitro_assistants_integrations"

urlpatterns = [
    path("interactions/", slack.interactions, name="slack_interactions"),
]
