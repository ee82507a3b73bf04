"""No approval of what was not shown: the parts of a review its rule names (``must_show``) that
a person's approval needs shown, and the check :func:`nitro_assistants.services.decide` makes
of every approval and edit before anything is recorded (docs/redaction.md, "Complete
previews"). The measure of "collapsed" and the paths are :mod:`nitro_assistants.previews`'."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nitro_assistants import previews, redacting
from nitro_assistants.exceptions import InteractionDecisionError
from nitro_assistants.models import Event, Review
from nitro_assistants.models.policies import ReviewHandling

#: The actions that run what is held: an approval of them needs the required parts shown.
APPROVING = frozenset({"approve", "edit"})
#: Channels that cannot show a collapsed or redacted part (a Slack card, an e-mail).
ELSEWHERE = frozenset({"slack", "email"})


def required_paths(review: Review) -> tuple[str, ...]:
    """The paths a rule says an approval of ``review`` needs shown (read with the review's
    handling, which :func:`services.decide` reads with its lock: no statement of its own)."""
    try:
        row = review.handling
    except ReviewHandling.DoesNotExist:
        return ()
    if row is None:
        return ()
    return tuple(str(path) for path in (row.rule or {}).get("must_show") or ())


def required_parts(review: Review) -> list[previews.Part]:
    """The parts of ``review`` an approval needs shown, each with whether it is drawn
    collapsed and whether it is redacted for reviewers (``REDACT``)."""
    paths = required_paths(review)
    if not paths:
        return []
    hidden = redacting.hidden_paths(review) if redacting.current() else []
    return previews.parts(review.payload or {}, paths, hidden)


def revealed(review: Review, user: Any) -> bool:
    """Whether ``user`` revealed ``review`` (the audited reveal, ``review_revealed``)."""
    if not getattr(user, "pk", None):
        return False
    return Event.objects.filter(review=review, verb="review_revealed", actor_id=user.pk).exists()


def _approved(review: Review, cleaned: Mapping[str, Any]) -> tuple[set[int | None], list[str]]:
    """The calls (by index; None: the reply) ``cleaned`` approves or edits, and the paths of
    what its edits wrote (an argument whose value the reviewer replaced)."""
    reply = cleaned.get("reply")
    if reply is not None:
        if reply.get("action") not in APPROVING:
            return set(), []
        held = (review.reply or {}).get("content")
        changed = reply.get("action") == "edit" and reply.get("content") != held
        return {None}, ["reply.content"] if changed else []
    calls = {str(call.get("id")): (i, call) for i, call in enumerate(review.tool_calls)}
    approved: set[int | None] = set()
    edited: list[str] = []
    for item in cleaned.get("tool_calls") or []:
        if item.get("action") not in APPROVING or str(item.get("id")) not in calls:
            continue
        index, call = calls[str(item.get("id"))]
        approved.add(index)
        args = call.get("args")
        held_args: dict[str, Any] = args if isinstance(args, dict) else {}
        for key, value in (item.get("args") or {}).items():
            if held_args.get(key) != value:
                edited.append(f"tool_calls.{index}.args.{key}")
    return approved, edited


def _why(part: previews.Part, reason: str, via: Any) -> str:
    if via in ELSEWHERE:
        return (
            f"Approving needs `{part.path}` shown, and it is "
            f"{'redacted' if reason == 'redacted' else 'too long to show'} here: open the "
            "review in the admin to approve it."
        )
    if reason == "redacted":
        return (
            f"Approving needs `{part.path}` shown, and it is redacted: reveal the review "
            "(recorded) in the admin first."
        )
    return (
        f"Approving needs `{part.path}` shown, and it is drawn collapsed: open it (show all) "
        "before approving."
    )


def check(review: Review, user: Any, cleaned: Mapping[str, Any], via: Any) -> list[str] | None:
    """Refuse a person's approval (or edit) of ``review`` when a part its rule names was
    collapsed and not opened (``cleaned["shown"]``: the paths the decision says were shown) or
    redacted and the review not revealed by ``user``: ``InteractionDecisionError`` on the field
    ``shown``, naming each part. Returns what the decision says was shown (None: nothing).

    Code of the host project, policies and deadlines (``via`` None) decide as themselves, and
    a rejection shows nothing: neither is checked."""
    shown = cleaned.get("shown")
    if via is None:
        return shown
    found = required_parts(review)
    if not found:
        return shown
    approved, edited = _approved(review, cleaned)
    found = [part for part in found if part.call in approved]
    if not found:
        return shown
    missing = previews.unshown(
        found,
        [] if via in ELSEWHERE else shown or [],
        revealed=via not in ELSEWHERE
        and any(part.redacted for part in found)
        and revealed(review, user),
        edited=edited,
    )
    if missing:
        issues = [_why(part, reason, via) for part, reason in missing]
        raise InteractionDecisionError(issues[0], field="shown", issues=issues)
    return shown


__all__ = ["check", "required_parts", "required_paths", "revealed"]
