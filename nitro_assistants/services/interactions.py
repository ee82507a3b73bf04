"""Typed interactions (PROTOCOL.md §8): checking a decision against the exact revision shown,
recording it (a user's edit first becomes a revision of its own), and describing an interaction
as the decide API shows it.

:func:`nitro_assistants.services.decide` is the one entry point: it hands interaction reviews to
:func:`decide_interaction` inside its transaction, so admin, API and bulk paths share it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from nitro_assistants import signals
from nitro_assistants.exceptions import (
    InteractionConflictError,
    InteractionDecisionError,
    InteractionForbiddenError,
)
from nitro_assistants.models import Decision, Review, Run
from nitro_assistants.operations import get_operation
from nitro_assistants.services.audit import record_event, send_on_commit
from nitro_assistants.services.mirror import CONTENT_KEY, interaction_digest

INTERACTION_KINDS = (Review.Kind.QUESTION, Review.Kind.BLUEPRINT, Review.Kind.PLAN)
DECISIONS = ("answer", "accept", "approve", "request_revision", "cancel")
#: Which decisions each kind takes (``cancel`` dismisses any pending interaction).
DECISIONS_BY_KIND = {
    "question": ("answer", "cancel"),
    "blueprint": ("accept", "request_revision", "cancel"),
    "plan": ("approve", "request_revision", "cancel"),
}
#: The interaction's status once the decision is recorded.
STATUS_AFTER = {
    "answer": Review.Status.ANSWERED,
    "accept": Review.Status.ACCEPTED,
    "approve": Review.Status.EXECUTING,
    "request_revision": Review.Status.REVISION_REQUESTED,
    "cancel": Review.Status.CANCELLED,
}
MAX_REVISION = 9007199254740991
MAX_ANSWERS, MAX_COMMENTS, MAX_DISABLED_STEPS = 4, 30, 12
MAX_NOTE, MAX_ID, MAX_DIGEST = 4000, 128, 128
BODY_FIELDS = (
    "decision",
    "digest",
    "revision",
    "answers",
    "comments",
    "disabledSteps",
    "edits",
    "note",
)


def _invalid(field: str, *issues: str) -> InteractionDecisionError:
    return InteractionDecisionError(issues[0], field=field, issues=list(issues))


def _is_text(value: Any, limit: int, *, blank_ok: bool = False) -> bool:
    return isinstance(value, str) and len(value) <= limit and (blank_ok or bool(value.strip()))


# -- arrival -------------------------------------------------------------------------------------


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def plan_steps(plan: Any) -> list[dict[str, Any]]:
    return _dicts(plan.get("steps")) if isinstance(plan, dict) else []


def interaction_problems(interaction: Mapping[str, Any]) -> list[str]:
    """Why an interaction cannot be decided as it arrived (empty when it can): for a plan, a step
    naming an operation nobody registered, an unknown or circular ``dependsOn``."""
    problems: list[str] = []
    kind = interaction.get("kind")
    if kind not in CONTENT_KEY:
        return [f"Unknown interaction kind {kind!r}"]
    if len(str(interaction.get("interactionId") or "")) > MAX_ID:
        problems.append(f"The interactionId is longer than {MAX_ID} characters")
    if kind != "plan":
        return problems
    steps = plan_steps(interaction.get("plan"))
    ids = [str(step.get("stepId") or "") for step in steps]
    if not steps:
        problems.append("The plan has no steps")
    if "" in ids or len(set(ids)) != len(ids):
        problems.append("Every step needs a stepId of its own")
    for step in steps:
        action = str(step.get("action") or "")
        if get_operation(action) is None:
            problems.append(f"Step {step.get('stepId')!s}: unknown action {action!r}")
        for dependency in step.get("dependsOn") or []:
            if dependency not in ids:
                problems.append(
                    f"Step {step.get('stepId')!s} depends on unknown step {dependency!r}"
                )
    if not problems and _has_cycle(steps):
        problems.append("The steps' dependsOn form a cycle")
    return problems


def _has_cycle(steps: list[dict[str, Any]]) -> bool:
    graph = {str(s.get("stepId")): [str(d) for d in s.get("dependsOn") or []] for s in steps}
    done: set[str] = set()
    visiting: set[str] = set()

    def visit(node: str) -> bool:
        if node in done:
            return False
        if node in visiting:
            return True
        visiting.add(node)
        if any(visit(dep) for dep in graph.get(node, [])):
            return True
        visiting.discard(node)
        done.add(node)
        return False

    return any(visit(node) for node in graph)


# -- the request body, on its own -----------------------------------------------------------------


def clean_body(body: Any) -> dict[str, Any]:
    """Check a decision body's shape and limits (without looking at the interaction) and return
    it with defaults filled in. Raises :class:`InteractionDecisionError` naming the field."""
    if not isinstance(body, dict):
        raise _invalid("", "The body must be a JSON object")
    unknown = sorted(set(body) - set(BODY_FIELDS))
    if unknown:
        raise _invalid(unknown[0], *(f"Unknown field `{name}`" for name in unknown))
    decision = body.get("decision")
    if decision not in DECISIONS:
        raise _invalid("decision", f"`decision` must be one of {', '.join(DECISIONS)}")
    digest = body.get("digest")
    if not isinstance(digest, str) or not digest or len(digest) > MAX_DIGEST:
        raise _invalid("digest", f"`digest` must be a string of 1 to {MAX_DIGEST} characters")
    revision = body.get("revision")
    if (
        isinstance(revision, bool)
        or not isinstance(revision, int)
        or not 1 <= revision <= MAX_REVISION
    ):
        raise _invalid("revision", f"`revision` must be an integer from 1 to {MAX_REVISION}")
    cleaned: dict[str, Any] = {"decision": decision, "digest": digest, "revision": revision}
    cleaned["answers"] = _clean_list(body, "answers", MAX_ANSWERS, _clean_answer)
    cleaned["comments"] = _clean_list(body, "comments", MAX_COMMENTS, _clean_comment)
    cleaned["disabledSteps"] = _clean_list(body, "disabledSteps", MAX_DISABLED_STEPS, _clean_id)
    if len(set(cleaned["disabledSteps"])) != len(cleaned["disabledSteps"]):
        raise _invalid("disabledSteps", "A step is listed more than once")
    edits = body.get("edits", {})
    if not isinstance(edits, dict) or not all(
        isinstance(fields, dict) and len(step) <= MAX_ID for step, fields in edits.items()
    ):
        raise _invalid("edits", "`edits` must be an object of objects: {stepId: {field: value}}")
    cleaned["edits"] = {step: dict(fields) for step, fields in edits.items() if fields}
    note = body.get("note", "")
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        raise _invalid("note", f"`note` must be a string of at most {MAX_NOTE} characters")
    cleaned["note"] = note.strip()
    return cleaned


def _clean_list(body: dict[str, Any], name: str, limit: int, clean: Any) -> list[Any]:
    value = body.get(name, [])
    if not isinstance(value, list):
        raise _invalid(name, f"`{name}` must be an array")
    if len(value) > limit:
        raise _invalid(name, f"`{name}` takes at most {limit} items; got {len(value)}")
    return [clean(item, f"{name}[{index}]") for index, item in enumerate(value)]


def _clean_id(value: Any, field: str) -> str:
    if not _is_text(value, MAX_ID):
        raise _invalid(
            field, f"`{field}` must be a non-blank string of at most {MAX_ID} characters"
        )
    return str(value)


def _clean_answer(item: Any, field: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise _invalid(field, f"`{field}` must be an object with a questionId")
    unknown = sorted(set(item) - {"questionId", "optionIds", "text"})
    if unknown:
        raise _invalid(f"{field}.{unknown[0]}", f"Unknown field `{unknown[0]}`")
    answer: dict[str, Any] = {
        "questionId": _clean_id(item.get("questionId"), f"{field}.questionId")
    }
    option_ids = item.get("optionIds", [])
    if not isinstance(option_ids, list) or len(option_ids) > 50:
        raise _invalid(f"{field}.optionIds", "`optionIds` must be an array of at most 50 ids")
    answer["optionIds"] = [
        _clean_id(option, f"{field}.optionIds[{i}]") for i, option in enumerate(option_ids)
    ]
    if "text" in item:
        if not isinstance(item["text"], str) or len(item["text"]) > MAX_NOTE:
            raise _invalid(
                f"{field}.text", f"`text` must be a string of at most {MAX_NOTE} characters"
            )
        if item["text"].strip():
            answer["text"] = item["text"].strip()
    return answer


def _clean_comment(item: Any, field: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise _invalid(field, f"`{field}` must be an object with a text")
    unknown = sorted(set(item) - {"text", "stepId", "field"})
    if unknown:
        raise _invalid(f"{field}.{unknown[0]}", f"Unknown field `{unknown[0]}`")
    if not _is_text(item.get("text"), MAX_NOTE):
        raise _invalid(
            f"{field}.text", f"A comment needs a non-blank `text` of at most {MAX_NOTE} characters"
        )
    comment = {"text": item["text"].strip()}
    for key in ("stepId", "field"):
        if key in item:
            comment[key] = _clean_id(item[key], f"{field}.{key}")
    return comment


# -- the body against the revision shown -----------------------------------------------------------


def check_revision(review: Review, body: Mapping[str, Any]) -> None:
    """409 material: the body must name exactly the pending revision and its digest."""
    if body["revision"] != review.revision:
        raise InteractionConflictError(
            f"Revision {body['revision']} is not the current one: interaction "
            f"{review.interaction_id} is at revision {review.revision}",
            field="revision",
        )
    if review.status != Review.Status.PENDING:
        raise InteractionConflictError(
            f"Revision {review.revision} of interaction {review.interaction_id} is "
            f"{review.status}: only a pending interaction can be decided",
            field="revision",
        )
    if body["digest"] != review.digest:
        raise InteractionConflictError(
            f"The digest does not match revision {review.revision}: it changed since it was shown",
            field="digest",
        )


def _not_with(body: Mapping[str, Any], decision: str, *names: str) -> None:
    for name in names:
        if body.get(name):
            raise _invalid(name, f"`{name}` does not go with the decision `{decision}`")


def check_content(review: Review, body: Mapping[str, Any]) -> None:
    """Check a cleaned body against the interaction's content; raises with the field at fault."""
    interaction = review.payload.get("interaction") or {}
    decision = body["decision"]
    allowed = DECISIONS_BY_KIND.get(review.kind, ("cancel",))
    if decision not in allowed:
        raise _invalid(
            "decision",
            f"A {review.kind} interaction takes {', '.join(allowed)}; not `{decision}`",
        )
    if decision != "answer":
        _not_with(body, decision, "answers")
    if decision != "request_revision":
        _not_with(body, decision, "comments")
    if decision != "approve":
        _not_with(body, decision, "disabledSteps", "edits")
    if decision == "answer":
        _check_answers(interaction, body["answers"])
    elif decision == "request_revision":
        if not body["note"] and not body["comments"]:
            raise _invalid("note", "A revision request needs a `note` or `comments`")
        _check_comments(review.kind, interaction, body["comments"])
    elif decision == "approve":
        problems = review.payload.get("problems") or []
        if problems:
            raise _invalid("decision", "This plan cannot be approved as it is", *problems)
        _check_approval(interaction.get("plan"), body["disabledSteps"], body["edits"])


def _check_answers(interaction: Mapping[str, Any], answers: list[dict[str, Any]]) -> None:
    questions = {str(q.get("questionId")): q for q in _dicts(interaction.get("questions"))}
    seen: set[str] = set()
    for index, answer in enumerate(answers):
        field = f"answers[{index}]"
        question = questions.get(answer["questionId"])
        if question is None:
            raise _invalid(f"{field}.questionId", f"No question {answer['questionId']!r}")
        if answer["questionId"] in seen:
            raise _invalid(
                f"{field}.questionId", f"Question {answer['questionId']!r} is answered twice"
            )
        seen.add(answer["questionId"])
        input_kind = question.get("input") or "single_select"
        options = {str(o.get("optionId")) for o in _dicts(question.get("options"))}
        unknown = [o for o in answer["optionIds"] if o not in options]
        if unknown:
            raise _invalid(
                f"{field}.optionIds",
                *(f"Question {answer['questionId']!r} has no option {o!r}" for o in unknown),
            )
        if len(set(answer["optionIds"])) != len(answer["optionIds"]):
            raise _invalid(f"{field}.optionIds", "An option is chosen more than once")
        single = input_kind == "single_select" and not question.get("multiple")
        if single and len(answer["optionIds"]) > 1:
            raise _invalid(
                f"{field}.optionIds", f"Question {answer['questionId']!r} takes one option"
            )
        free_text = input_kind == "text" or bool(question.get("allowOther"))
        if "text" in answer and not free_text:
            raise _invalid(
                f"{field}.text",
                f"Question {answer['questionId']!r} takes no free text, only options",
            )
        if input_kind == "text" and "text" not in answer:
            raise _invalid(
                f"{field}.text", f"Question {answer['questionId']!r} needs a text answer"
            )
        if not answer["optionIds"] and "text" not in answer:
            raise _invalid(f"{field}.optionIds", f"The answer to {answer['questionId']!r} is empty")
    missing = [
        q for q, question in questions.items() if not question.get("optional") and q not in seen
    ]
    if missing:
        raise _invalid("answers", *(f"Question {q!r} needs an answer" for q in missing))


def _step_fields(step: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(f.get("name")): f for f in _dicts(step.get("fields")) if f.get("name")}


def _check_comments(
    kind: str, interaction: Mapping[str, Any], comments: list[dict[str, Any]]
) -> None:
    steps = {str(s.get("stepId")): s for s in plan_steps(interaction.get("plan"))}
    content = interaction.get(CONTENT_KEY.get(kind, ""))
    for index, comment in enumerate(comments):
        field = f"comments[{index}]"
        step_id, name = comment.get("stepId"), comment.get("field")
        if kind != "plan":
            if step_id is not None:
                raise _invalid(f"{field}.stepId", f"A {kind} has no steps")
            if name is not None and not (isinstance(content, dict) and name in content):
                raise _invalid(f"{field}.field", f"The {kind} has no field {name!r}")
            continue
        if step_id is None:
            if name is not None and not (isinstance(content, dict) and name in content):
                raise _invalid(
                    f"{field}.field", f"The plan has no field {name!r}; pin it to a stepId"
                )
            continue
        if step_id not in steps:
            raise _invalid(f"{field}.stepId", f"The plan has no step {step_id!r}")
        if (
            name is not None
            and name not in _step_fields(steps[step_id])
            and name not in steps[step_id]
        ):
            raise _invalid(f"{field}.field", f"Step {step_id!r} has no field {name!r}")


def _option_values(options: Any) -> list[Any] | None:
    if not isinstance(options, list) or not options:
        return None
    values = []
    for option in options:
        if isinstance(option, dict):
            values.append(option.get("value", option.get("optionId")))
        else:
            values.append(option)
    return values


def _check_approval(plan: Any, disabled: list[str], edits: dict[str, dict[str, Any]]) -> None:
    steps = {str(s.get("stepId")): s for s in plan_steps(plan)}
    for index, step_id in enumerate(disabled):
        if step_id not in steps:
            raise _invalid(f"disabledSteps[{index}]", f"The plan has no step {step_id!r}")
        if not steps[step_id].get("optional"):
            raise _invalid(
                f"disabledSteps[{index}]",
                f"Step {step_id!r} is not optional: it cannot be turned off",
            )
    for step_id, values in edits.items():
        if step_id not in steps:
            raise _invalid(f"edits.{step_id}", f"The plan has no step {step_id!r}")
        if step_id in disabled or steps[step_id].get("enabled") is False:
            raise _invalid(
                f"edits.{step_id}", f"Step {step_id!r} is turned off: it cannot be edited"
            )
        declared = _step_fields(steps[step_id])
        for name, value in values.items():
            field = f"edits.{step_id}.{name}"
            if name not in declared:
                raise _invalid(
                    field,
                    f"Step {step_id!r} has no editable field {name!r}; it has "
                    + (", ".join(repr(d) for d in declared) or "none"),
                )
            spec = declared[name]
            if spec.get("required") and (value is None or value == ""):
                raise _invalid(field, f"Field {name!r} of step {step_id!r} is required")
            allowed = _option_values(spec.get("options"))
            if allowed is not None and value not in allowed:
                raise _invalid(field, f"{value!r} is not an option of field {name!r}")


def enabled_steps(plan: Any, disabled: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [
        step
        for step in plan_steps(plan)
        if step.get("enabled") is not False and str(step.get("stepId")) not in disabled
    ]


def missing_permissions(user: Any, steps: list[dict[str, Any]]) -> list[str]:
    """Permissions the steps' operations need that ``user`` lacks, sorted."""
    needed: set[str] = set()
    for step in steps:
        operation = get_operation(str(step.get("action") or ""))
        if operation is not None:
            needed.update(operation.permissions)
    return sorted(p for p in needed if not user.has_perm(p))


def resume_value(user: Any, body: Mapping[str, Any]) -> dict[str, Any]:
    """What the assistant is resumed with (PROTOCOL.md §8)."""
    return {
        "decision": body["decision"],
        "answers": list(body.get("answers") or []),
        "comments": list(body.get("comments") or []),
        "disabledSteps": list(body.get("disabledSteps") or []),
        "edits": dict(body.get("edits") or {}),
        "note": body.get("note") or None,
        "decidedBy": _username(user),
    }


def _username(user: Any) -> str:
    if user is None or not getattr(user, "pk", None):
        return "system"
    return str(user.get_username())


# -- recording ------------------------------------------------------------------------------------


def edited_revision(review: Review, edits: dict[str, dict[str, Any]], user: Any) -> Review:
    """Record the reader's edits as a revision of their own (``origin: "user"``) that replaces
    ``review``; the caller holds the review's lock."""
    interaction = copy.deepcopy(review.payload.get("interaction") or {})
    for step in plan_steps(interaction.get("plan")):
        changes = edits.get(str(step.get("stepId")))
        if changes:
            step["input"] = {**(step.get("input") or {}), **changes}
    review.status = Review.Status.SUPERSEDED
    review.closed_at = timezone.now()
    review.save(update_fields=["status", "closed_at"])
    record_event(review.thread, "review_superseded", review=review, actor=user, reason="edited")
    send_on_commit(signals.review_superseded, Review, review=review, reason="edited")
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
        digest=interaction_digest(interaction),
        origin="user",
    )
    record_event(review.thread, "interaction_edited", review=edited, actor=user, edits=edits)
    return edited


def decide_interaction(review: Review, user: Any, body: Mapping[str, Any]) -> Decision:
    """Record ``body``, a decision on the interaction ``review``, and enqueue its delivery.

    Called by :func:`nitro_assistants.services.decide` with the review locked. Raises
    :class:`InteractionConflictError` (stale revision or digest),
    :class:`InteractionDecisionError` (the body does not fit) or
    :class:`InteractionForbiddenError` (missing permissions to approve a plan); nothing is
    stored then.
    """
    from nitro_assistants import tasks
    from nitro_assistants.services import plans

    cleaned = clean_body(dict(body))
    newer = Review.objects.filter(
        thread_id=review.thread_id,
        interaction_id=review.interaction_id,
        revision__gt=review.revision,
    ).exists()
    if newer and cleaned["revision"] == review.revision:
        raise InteractionConflictError(
            f"Revision {review.revision} of interaction {review.interaction_id} has been replaced",
            field="revision",
        )
    check_revision(review, cleaned)
    check_content(review, cleaned)
    if cleaned["decision"] == "approve":
        steps = enabled_steps(
            (review.payload.get("interaction") or {}).get("plan"), cleaned["disabledSteps"]
        )
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
    value = resume_value(user, cleaned)
    real_user = user if getattr(user, "pk", None) else None
    thread = review.thread
    run = Run.objects.create(
        thread=thread, kind=Run.Kind.RESUME, input={"answer": value}, requested_by=real_user
    )
    record = Decision.objects.create(
        review=review,
        decided_by=real_user,
        reviewer_id=_username(user),
        interrupt_id=review.interrupt_id or "",
        answer=value,
        note=cleaned["note"],
        decided_at=timezone.now(),
        run=run,
    )
    review.status = STATUS_AFTER[cleaned["decision"]]
    if review.status != Review.Status.EXECUTING:
        review.closed_at = record.decided_at
    review.save(update_fields=["status", "closed_at"])
    record_event(
        thread,
        "review_decided",
        review=review,
        run=run,
        actor=user,
        actions=record.actions,
        note=record.note,
        decision=value,
    )
    send_on_commit(signals.review_decided, Review, review=review, decision=record, user=user)
    if review.status == Review.Status.EXECUTING:
        plans.start_plan(review, cleaned["disabledSteps"], user)
    decision_pk = record.pk
    transaction.on_commit(lambda: tasks.resume_thread.delay(decision_pk))
    return record


# -- reading --------------------------------------------------------------------------------------


def describe(review: Review) -> dict[str, Any]:
    """An interaction as the decide API shows it (one revision)."""
    interaction = review.payload.get("interaction") or {}
    content_key = CONTENT_KEY.get(review.kind, "questions")
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
    reviews = (
        Review.objects.filter(thread_id=thread_pk, kind__in=INTERACTION_KINDS)
        .exclude(interaction_id="")
        .select_related("thread", "decision")
        .prefetch_related("step_results")
        .order_by("interaction_id", "-revision", "-pk")
        .distinct("interaction_id")
    )
    return sorted(reviews, key=lambda r: (r.requested_at, r.pk))


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
