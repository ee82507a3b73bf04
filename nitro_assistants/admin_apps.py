"""``django.contrib.admin`` with the review count on its default site (a module of its own: the
admin package registers models on import, which ``INSTALLED_APPS`` loading must not do)."""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class NitroAdminConfig(AdminConfig):
    """``django.contrib.admin`` whose default site is
    :class:`nitro_assistants.admin_site.AdminSite` (the pending-review count beside "Reviews"
    on the index and in the sidebar): put ``"nitro_assistants.admin_apps.NitroAdminConfig"`` in
    ``INSTALLED_APPS`` in place of ``"django.contrib.admin"``."""

    default_site = "nitro_assistants.admin_site.AdminSite"
