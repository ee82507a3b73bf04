"""Include under any prefix: ``path("assistants/api/", include("nitro_assistants.api.urls"))``."""

from __future__ import annotations

from django.urls import path, re_path

from nitro_assistants.api import grants, reviews, views

app_name = "nitro_assistants_api"

urlpatterns = [
    path(
        "sessions/<str:session_id>/interactions/<str:interaction_id>/decide",
        views.decide,
        name="decide",
    ),
    path("sessions/<str:session_id>/interactions", views.interactions, name="interactions"),
    path(
        "sessions/<str:session_id>/interactions/<str:interaction_id>",
        views.interaction,
        name="interaction",
    ),
    path("sessions/<str:session_id>/events", views.events, name="events"),
    path("reviews", reviews.reviews, name="reviews"),
    path("reviews/<str:review_id>", reviews.review, name="review"),
    path("reviews/<str:review_id>/decide", reviews.decide, name="review_decide"),
    path("reviews/<str:review_id>/dismiss", reviews.dismiss, name="review_dismiss"),
    path("grants", grants.grant_list, name="grants"),
    path("grants/<str:grant_id>", grants.grant, name="grant"),
    path("grants/<str:grant_id>/revoke", grants.revoke, name="grant_revoke"),
    path("openapi.json", views.openapi, name="openapi"),
    # Anything else under the prefix answers 404 in the envelope too, not Django's HTML page.
    re_path(r"^(?P<rest>.*)$", views.not_found, name="not_found"),
]
