"""Work recorded but never picked up: a process that died between commit and enqueue, or a broker
that lost its queue. Recorded state is the source of truth, so it is enqueued again; every task
checks state first, so one that was only slow is not applied twice."""

from __future__ import annotations

import datetime

from django.db.models import Q
from django.utils import timezone

from nitro_assistants import policy_rules, rules
from nitro_assistants.conf import app_settings
from nitro_assistants.models import Decision, Review, Run
from nitro_assistants.services.enqueue import send


def requeue_stale(now: datetime.datetime | None = None) -> dict[str, int]:
    """Enqueue again runs still queued or running, decisions not yet applied, and reviews a rule
    decides at once still pending (their ``apply_policy`` task lost, or given up), that have
    seen no progress for ``REQUEUE_AFTER`` seconds."""
    now = now or timezone.now()
    cutoff = now - datetime.timedelta(seconds=app_settings.REQUEUE_AFTER)
    runs = list(
        Run.objects.filter(kind=Run.Kind.RUN, status__in=[Run.Status.QUEUED, Run.Status.RUNNING])
        .filter(Q(started_at__isnull=True, created_at__lte=cutoff) | Q(started_at__lte=cutoff))
        .values_list("pk", "remote_run_id")
    )
    for pk, remote_run_id in runs:
        if remote_run_id and app_settings.RUN_MODE == "background":
            send("nitro_assistants.collect_run", str(pk), wait=False)
        else:
            send("nitro_assistants.run_thread", str(pk))
    decisions = list(
        Decision.objects.filter(outcome=Decision.Outcome.PENDING, decided_at__lte=cutoff)
        .filter(Q(run__started_at__isnull=True) | Q(run__started_at__lte=cutoff))
        .values_list("pk", flat=True)
    )
    for decision_pk in decisions:
        send("nitro_assistants.resume_thread", decision_pk)
    policies = list(
        Review.objects.filter(
            status=rules.PENDING,
            requested_at__lte=cutoff,
            handling__action__in=[policy_rules.AUTO_APPROVE, policy_rules.AUTO_REJECT],
        ).values_list("pk", flat=True)
    )
    for review_pk in policies:
        send("nitro_assistants.apply_policy", review_pk)
    return {"runs": len(runs), "decisions": len(decisions), "policies": len(policies)}
