from __future__ import annotations

from django.urls import path

from nitro_assistants import views

app_name = "nitro_assistants"

urlpatterns = [
    path("webhook/", views.webhook, name="webhook"),
    path("review/<str:token>/", views.review_link, name="review_link"),
]
