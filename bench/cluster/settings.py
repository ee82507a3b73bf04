"""The example site's settings as the cluster deploys it: the production Celery settings of
docs/django.md, and quieter logs (every host writes its own)."""

from __future__ import annotations

from reviewsite.settings import *  # noqa: F403
from reviewsite.settings import DATABASES, NITRO_ASSISTANTS, env

CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Redelivery of a task whose worker host died, by Redis: longer than the longest task (a wait-mode
# run, seconds here), short enough to be back within the Agent Server's 2-minute sweep. A task
# still running when it comes back is harmless (docs/django.md): its row lock holds the copy.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CLUSTER_VISIBILITY_TIMEOUT", default=60)
}
# The same for work a dead host had recorded but not enqueued (requeue_stale, every minute).
NITRO_ASSISTANTS["REQUEUE_AFTER"] = env.int("CLUSTER_REQUEUE_AFTER", default=90)
NITRO_ASSISTANTS["MAX_CONCURRENT_REQUESTS"] = env.int(
    "ASSISTANTS_MAX_CONCURRENT_REQUESTS", default=5
)
# The driver (which starts conversations, as an SMS gateway's view would) has no pool: a pooled
# connection outlives a PostgreSQL restart only as an error on its next use.
if env.bool("CLUSTER_NO_POOL", default=False):
    DATABASES["default"]["OPTIONS"].pop("pool", None)
elif env.bool("CLUSTER_POOL_CHECK", default=True):
    # A pooled connection PostgreSQL closed (a restart) is found before it is lent, not by the
    # task that gets it: one round trip a checkout.
    from psycopg_pool import ConnectionPool

    DATABASES["default"]["OPTIONS"]["pool"]["check"] = ConnectionPool.check_connection
# libpq gives up on a connection whose data goes unacknowledged this long (a host cut off from
# the database): the task fails as transient and is retried, instead of hanging for TCP's
# minutes of retransmissions.
DATABASES["default"]["OPTIONS"]["tcp_user_timeout"] = 10_000  # ms
