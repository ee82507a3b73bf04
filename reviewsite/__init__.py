"""The example project: a review site for a demo assistant, configured from the environment."""

from __future__ import annotations

from reviewsite.celery import app as celery_app

__all__ = ["celery_app"]
