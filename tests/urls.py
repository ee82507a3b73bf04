from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("nitro/", include("nitro_assistants.urls")),
    path("nitro/api/", include("nitro_assistants.api.urls")),
    path("nitro/slack/", include("nitro_assistants.integrations.urls")),
    path("anymail/", include("anymail.urls")),
]
