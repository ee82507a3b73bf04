"""An admin site whose index and sidebar show, beside "Reviews", how many pending reviews the
signed-in user may decide. Use it as the project's default site (``NitroAdminConfig`` in
``INSTALLED_APPS`` instead of ``django.contrib.admin``), or mix :class:`ReviewCountMixin` into
a site of your own. (Outside the ``admin`` package: that package registers the app's models on
``admin.site`` when imported, so the default site's own module must not import it.)"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.translation import ngettext

from nitro_assistants.models import Review
from nitro_assistants.services import stops
from nitro_assistants.services.claims import pending_decidable

#: The badge is styled inline: the admin index loads only the admin's own stylesheets.
BADGE_STYLE = (
    "display:inline-block;min-width:1.3em;margin-left:.35em;padding:0 .45em;border-radius:.7em;"
    "background:var(--secondary,#417690);color:var(--header-link-color,#fff);font-size:.8em;"
    "line-height:1.5;text-align:center;font-weight:600"
)


def pending_count(request: HttpRequest) -> int:
    """Pending reviews the user may decide, counted once per request."""
    count = getattr(request, "_nitro_pending_count", None)
    if count is None:
        count = pending_decidable(request.user).count()
        request._nitro_pending_count = count  # type: ignore[attr-defined]
    return int(count)


class ReviewCountMixin:
    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> Any:
        app_list = super().get_app_list(request, app_label)  # type: ignore[misc]
        for app in app_list:
            if app.get("app_label") != Review._meta.app_label:
                continue
            for model in app["models"]:
                if model.get("model") is Review:
                    count = pending_count(request)
                    model["pending_count"] = count
                    badge = (
                        '{}<span class="nitro-count" data-nitro-count style="{}" title="{}">'
                        "{}</span>"
                    )
                    if not count:  # shown by the live pages once something waits
                        badge = badge.replace(" title=", " hidden title=")
                    model["name"] = format_html(
                        badge,
                        model["name"],
                        BADGE_STYLE,
                        ngettext(
                            "%(n)d review waiting for you",
                            "%(n)d reviews waiting for you",
                            count,
                        )
                        % {"n": count},
                        count,
                    )
        return app_list


class StopBannerMixin:
    """``nitro_stops`` (the stops in force) in every admin page's context, for the banner of
    ``admin/base_site.html``, to signed-in staff."""

    def each_context(self, request: HttpRequest) -> dict[str, Any]:
        context: dict[str, Any] = super().each_context(request)  # type: ignore[misc]
        user = getattr(request, "user", None)
        if getattr(user, "is_staff", False) and getattr(user, "is_active", False):
            context["nitro_stops"] = list(stops.in_force())
            if context["nitro_stops"]:
                try:
                    context["nitro_stops_url"] = reverse(
                        f"{self.name}:nitro_assistants_stop_changelist"  # type: ignore[attr-defined]
                    )
                except NoReverseMatch:
                    context["nitro_stops_url"] = ""
        return context


class AdminSite(StopBannerMixin, ReviewCountMixin, admin.AdminSite):
    """Django's admin site, with the pending-review count beside "Reviews" and a banner on
    every page while a stop is in force."""
