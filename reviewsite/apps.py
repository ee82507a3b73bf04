from __future__ import annotations

from django.apps import AppConfig


class ReviewSiteConfig(AppConfig):
    name = "reviewsite"
    label = "reviewsite"
    verbose_name = "Review site (example)"

    def ready(self) -> None:
        # Connects the example receivers and registers the demo plan's operations (the Celery
        # worker runs this too, so it knows them).
        from reviewsite import operations, receivers  # noqa: F401
