"""The Celery app the test worker runs (``celery -A tests.celery_app worker``)."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

from celery import Celery

app = Celery("nitro_tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["nitro_assistants"])
