from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class NitroAssistantsConfig(AppConfig):
    name = "nitro_assistants"
    label = "nitro_assistants"
    verbose_name = _("Assistants")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Django's way: import for the side effect once the app registry is ready: the checks
        # register, and the tasks register with whichever Celery app the project runs (the
        # services enqueue them by name).
        from nitro_assistants import checks, receivers, tasks  # noqa: F401

        receivers.connect()
