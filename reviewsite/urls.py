from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from reviewsite import views

urlpatterns = [
    path("", views.home, name="home"),
    path("outbox/", views.outbox, name="outbox"),
    path("admin/", admin.site.urls),
    path("nitro/", include("nitro_assistants.urls")),
    path("nitro/api/", include("nitro_assistants.api.urls")),
]

# Slack's interactivity URL, when the site is given a Slack app (SLACK_BOT_TOKEN, settings.py).
if settings.NITRO_ASSISTANTS.get("SLACK"):
    urlpatterns.append(path("nitro/slack/", include("nitro_assistants.integrations.urls")))
