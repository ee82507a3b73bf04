"""Celery for the example site, as Celery's "First steps with Django" guide sets it up."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewsite.settings")

app = Celery("reviewsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
