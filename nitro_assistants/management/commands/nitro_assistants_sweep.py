from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from nitro_assistants import services


class Command(BaseCommand):
    help = (
        "Send delivery_pending for replies pending longer than DELIVERY_PENDING_AFTER and "
        "delivery_failed for failures not yet reported (each once)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        counts = services.sweep_deliveries()
        self.stdout.write(
            f"{counts['pending']} pending past the limit, {counts['failed']} failed, alerted."
        )
