"""The stop banner's data for ``admin/base_site.html``, whatever admin site the project uses."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse

from nitro_assistants.services import stops

register = template.Library()


@register.simple_tag(takes_context=True)
def nitro_stops_in_force(context: Any) -> dict[str, Any]:
    """``{"stops": [...], "url": ...}``: the stops in force, for signed-in active staff. The
    app's admin site (``StopBannerMixin``) puts them in every page's context already; on any
    other site (Django's own ``admin.site``) they are read here, one query a page."""
    if "nitro_stops" in context:
        return {"stops": context["nitro_stops"], "url": context.get("nitro_stops_url", "")}
    user = getattr(context.get("request"), "user", None)
    if not (getattr(user, "is_staff", False) and getattr(user, "is_active", False)):
        return {"stops": [], "url": ""}
    found = list(stops.in_force())
    url = ""
    if found:
        try:
            url = reverse("admin:nitro_assistants_stop_changelist")
        except NoReverseMatch:
            url = ""
    return {"stops": found, "url": url}
