"""Typed interactions (docs/protocol.md §8): recording a decision on the exact revision shown (a
user's edit first becomes a revision of its own), and describing an interaction as the decide API
shows it. The rules a decision is checked by are :mod:`nitro_assistants.rules`.

:func:`nitro_assistants.services.decide` is the one entry point: it hands interaction reviews to
:func:`decide_interaction` inside its transaction, so admin, API and bulk paths share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import OuterRef, Subquery
from django.utils import timezone

from nitro_assistants import rules
from nitro_assistants.exceptions import InteractionForbiddenError
from nitro_assistants.models import Decision, Review, Run
from nitro_assistants.operations import get_operation
from nitro_assistants.services import plans
from nitro_assistants.services.audit import record_event
from nitro_assistants.services.enqueue import enqueue
from nitro_assistants.services.lifecycle import transition

INTERACTION_KINDS = rules.INTERACTION_KINDS


def missing_permissions(user: Any, steps: list[dict[str, Any]]) -> list[str]:
    """Permissions the steps' operations need that ``user`` lacks, sorted."""
    needed: set[str] = set()
    for step in steps:
        operation = get_operation(str(step.get("action") or ""))
        if operation is not None:
            needed.update(operation.permissions)
    return sorted(p for p in needed if not user.has_perm(p))


def username(user: Any) -> str:
    """Who decided, as the assistant is told (``system`` for no signed-in user)."""
    if user is None or not getattr(user, "pk", None):
        return str(getattr(user, "reviewer_id", "") or "system")  # a policy names its rule
    return str(user.get_username())


# -- recording ------------------------------------------------------------------------------------


def edited_revision(review: Review, edits: dict[str, dict[str, Any]], user: Any) -> Review:
    """Record the reader's edits as a revision of their own (``origin: "user"``) that replaces
    ``review``; the caller holds the review's lock."""
    interaction = rules.apply_edits(review.payload.get("interaction") or {}, edits)
    transition(
        review,
        rules.SUPERSEDED,
        actor=user,
        reason="edited",
        signal_kwargs={"reason": "edited"},
    )
    revision = (
        Review.objects.filter(thread=review.thread, interaction_id=review.interaction_id).count()
        + 1
    )
    edited = Review.objects.create(
        thread=review.thread,
        run=review.run,
        kind=review.kind,
        interrupt_ids=list(review.interrupt_ids),
        payload={**review.payload, "interaction": interaction},
        interaction_id=review.interaction_id,
        revision=revision,
        digest=rules.interaction_digest(interaction),
        origin="user",
    )
    record_event(review.thread, "interaction_edited", review=edited, actor=user, edits=edits)
    return edited


def decide_interaction(
    review: Review, user: Any, cleaned: Mapping[str, Any], *, channel: str = ""
) -> Decision:
    """Record ``cleaned``, a decision on the interaction ``review`` that
    :func:`nitro_assistants.rules.check_interaction_decision` let through (the revision and
    digest shown, the body against the content), and enqueue its delivery.

    Called by :func:`nitro_assistants.services.decide` with the review locked. Raises
    :class:`InteractionForbiddenError` (missing permissions to approve a plan); nothing is
    stored then. ``channel`` is recorded on the decision and its audit event.
    """
    interaction = review.payload.get("interaction") or {}
    if cleaned["decision"] == "approve":
        steps = rules.enabled_steps(interaction.get("plan"), cleaned["disabledSteps"])
        if not getattr(user, "is_authenticated", False):
            raise InteractionForbiddenError(
                "Approving a plan needs a signed-in user", field="decision"
            )
        missing = missing_permissions(user, steps)
        if missing:
            raise InteractionForbiddenError(
                "Approving this plan needs permissions you do not have: " + ", ".join(missing),
                field="decision",
                issues=[f"Missing permission {p}" for p in missing],
            )
        if cleaned["edits"]:
            review = edited_revision(review, cleaned["edits"], user)
    value = rules.resume_value(username(user), cleaned)
    real_user = user if getattr(user, "pk", None) else None
    thread = review.thread
    run = Run.objects.create(
        thread=thread, kind=Run.Kind.RESUME, input={"answer": value}, requested_by=real_user
    )
    record = Decision.objects.create(
        review=review,
        decided_by=real_user,
        reviewer_id=username(user),
        interrupt_id=review.interrupt_id or "",
        answer=value,
        note=cleaned["note"],
        channel=channel,
        decided_at=timezone.now(),
        run=run,
    )
    transition(
        review,
        rules.STATUS_AFTER[cleaned["decision"]],
        actor=user,
        run=run,
        at=record.decided_at,
        actions=record.actions,
        note=record.note,
        decision=value,
        channel=channel,
        signal_kwargs={"decision": record, "user": user},
    )
    if review.status == rules.EXECUTING:
        plans.start_plan(review, cleaned["disabledSteps"], user)
    enqueue("nitro_assistants.resume_thread", record.pk)
    return record


# -- reading --------------------------------------------------------------------------------------


def describe(review: Review) -> dict[str, Any]:
    """An interaction as the decide API shows it (one revision)."""
    interaction = review.payload.get("interaction") or {}
    content_key = rules.CONTENT_KEY.get(review.kind, "questions")
    shown: dict[str, Any] = {
        "sessionId": str(review.thread.thread_id),
        "interactionId": review.interaction_id,
        "kind": review.kind,
        "revision": review.revision,
        "digest": review.digest,
        "origin": review.origin or "assistant",
        "status": review.status,
        "title": str(interaction.get("title") or ""),
        "summary": interaction.get("summary")
        if isinstance(interaction.get("summary"), str)
        else None,
        "requestedAt": review.requested_at.isoformat(),
        content_key: interaction.get(content_key),
        "problems": list(review.payload.get("problems") or []),
        "decision": None,
    }
    decision = getattr(review, "decision", None) if _has_decision(review) else None
    if decision is not None and decision.answer is not None:
        shown["decision"] = {
            **decision.answer,
            "decidedAt": decision.decided_at.isoformat(),
            "delivery": decision.outcome,
        }
    if review.kind == Review.Kind.PLAN:
        shown["stepResults"] = [step.as_dict() for step in review.step_results.all()]
    return shown


def _has_decision(review: Review) -> bool:
    try:
        review.decision  # noqa: B018 - a reverse one-to-one raises when absent
    except Decision.DoesNotExist:
        return False
    return True


def latest_revisions(thread_pk: int) -> list[Review]:
    """The latest revision of each interaction of a thread, oldest interaction first."""
    # A correlated subquery, not DISTINCT ON: the same one query on SQLite and PostgreSQL.
    newest = (
        Review.objects.filter(
            thread_id=OuterRef("thread_id"),
            interaction_id=OuterRef("interaction_id"),
            kind__in=INTERACTION_KINDS,
        )
        .order_by("-revision", "-pk")
        .values("pk")[:1]
    )
    return list(
        Review.objects.filter(thread_id=thread_pk, kind__in=INTERACTION_KINDS)
        .exclude(interaction_id="")
        .filter(pk=Subquery(newest))
        .select_related("thread", "decision")
        .prefetch_related("step_results")
        .order_by("requested_at", "pk")
    )


def latest_revision(thread_pk: int, interaction_id: str) -> Review | None:
    return (
        Review.objects.filter(
            thread_id=thread_pk, interaction_id=interaction_id, kind__in=INTERACTION_KINDS
        )
        .select_related("thread", "decision")
        .prefetch_related("step_results")
        .order_by("-revision", "-pk")
        .first()
    )
