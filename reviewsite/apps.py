from __future__ import annotations

from django.apps import AppConfig


class ReviewSiteConfig(AppConfig):
    name = "reviewsite"
    label = "reviewsite"
    verbose_name = "Review site (example)"

    def ready(self) -> None:
        from reviewsite import receivers  # noqa: F401  (connects the example receivers)
