"""Settings of the reliability suite's Celery workers: the test settings, plus what a fault test
needs to turn from the environment (retries, Redis redelivery, secrets, the slow graph)."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import NITRO_ASSISTANTS as BASE

API_KEY = os.environ.get("NITRO_REL_API_KEY", "test-key")

NITRO_ASSISTANTS = {
    **BASE,
    "DEFINITIONS": {
        **{key: {**d, "api_key": API_KEY} for key, d in BASE["DEFINITIONS"].items()},
        "slow": {"api_key": API_KEY, "assistant_id": "slow"},
    },
    "WEBHOOK_SECRET": os.environ.get("NITRO_REL_WEBHOOK_SECRET", BASE["WEBHOOK_SECRET"]),
    "TASK_MAX_RETRIES": int(os.environ.get("NITRO_REL_MAX_RETRIES", "8")),
}

# What docs/django.md recommends for production, with a short visibility timeout so a task whose
# worker died is delivered again within seconds instead of an hour.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_REJECT_ON_WORKER_LOST = os.environ.get("NITRO_REL_REJECT_ON_WORKER_LOST", "1") == "1"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": float(os.environ.get("NITRO_REL_VISIBILITY_TIMEOUT", "3600")),
    "unacked_restore_interval": 1,  # look for abandoned messages every second
    "unacked_restore_throttle": 1,
}
