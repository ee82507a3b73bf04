from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class NitroAssistantsConfig(AppConfig):
    name = "nitro_assistants"
    label = "nitro_assistants"
    verbose_name = _("Assistants")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from nitro_assistants import checks, receivers  # noqa: F401  (registers checks)

        receivers.connect()
