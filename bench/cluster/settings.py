"""The example site's settings as the cluster deploys it: the production Celery settings of
docs/django.md, and quieter logs (every host writes its own)."""

from __future__ import annotations

from bench.cluster.hosts import NOTIFY_QUEUE
from reviewsite.settings import *  # noqa: F403
from reviewsite.settings import DATABASES, NITRO_ASSISTANTS, env

CELERY_WORKER_PREFETCH_MULTIPLIER = 1
#: The notification sends (and their flush) go to a queue of their own, with a worker of its
#: own on each host (bench/cluster/run.py): a burst of digests never holds up a resume.
CELERY_TASK_ROUTES = {
    "nitro_assistants.send_notifications": {"queue": NOTIFY_QUEUE},
    "nitro_assistants.flush_notifications": {"queue": NOTIFY_QUEUE},
}
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# Redis hands a task out again when its worker has not acknowledged it within the visibility
# timeout, and a worker holds countdown tasks unacknowledged until they are due (a notification
# waiting out NOTIFY_INTERVAL, 300 s; a retry's backoff): the timeout must be longer than the
# longest of them and the longest task, or they are sent again every timeout while they wait.
# So it cannot bring a dead host's work back quickly: requeue_stale does, from the database,
# after REQUEUE_AFTER without progress (every minute, on beat).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CLUSTER_VISIBILITY_TIMEOUT", default=3600)
}
NITRO_ASSISTANTS["REQUEUE_AFTER"] = env.int("CLUSTER_REQUEUE_AFTER", default=90)
NITRO_ASSISTANTS["MAX_CONCURRENT_REQUESTS"] = env.int(
    "ASSISTANTS_MAX_CONCURRENT_REQUESTS", default=5
)
# The driver (which starts conversations, as an SMS gateway's view would) has no pool: a pooled
# connection outlives a PostgreSQL restart only as an error on its next use.
if env.bool("CLUSTER_NO_POOL", default=False):
    DATABASES["default"]["OPTIONS"].pop("pool", None)
else:
    # A pooled connection PostgreSQL closed (a restart) is found before it is lent, not by the
    # task that gets it: Django gives the pool psycopg's check (one round trip a checkout).
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("CLUSTER_POOL_CHECK", default=True)
# libpq gives up on a connection whose data goes unacknowledged this long (a host cut off from
# the database): the task fails as transient and is retried, instead of hanging for TCP's
# minutes of retransmissions.
DATABASES["default"]["OPTIONS"]["tcp_user_timeout"] = 10_000  # ms
