"""The reviews of the decide API: every kind of review a caller may decide, listed, read with its
conversation, and decided with the bodies :func:`nitro_assistants.services.decide` takes: the
same rules as the admin, for a client that is not the admin (a chat-ops bot, a mobile screen).

Who may decide is :func:`nitro_assistants.services.may_decide` with ``via="api"``: tool calls and
replies need ``nitro_assistants.decide_review``; a typed interaction only the person who opened
its session. A review the caller may neither decide nor read (``view_review``) is a 404, as is
an id that names nothing: the API does not say which reviews exist. See docs/api.md."""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse

from nitro_assistants import redacting, rules, services
from nitro_assistants.api.errors import ApiError, refused
from nitro_assistants.api.views import _json_body, _page_params, endpoint
from nitro_assistants.client.results import INBOX_TYPES, REPLY_DECISIONS, message_text
from nitro_assistants.conf import app_settings
from nitro_assistants.conversation import held_call_ids, held_messages, role_of
from nitro_assistants.exceptions import ReviewSupersededError, ThreadResumptionError
from nitro_assistants.models import Approval, Decision, Review
from nitro_assistants.services import grants, previews
from nitro_assistants.services.interactions import describe

VIEW_PERMISSION = "nitro_assistants.view_review"
MAX_PK = 2**63 - 1
#: The filters of the list, and what each matches.
FILTERS = {
    "status": "status",
    "kind": "kind",
    "assistant": "thread__assistant_key",
    "thread": "thread__thread_id",
}


# -- reading -------------------------------------------------------------------------------------


#: A held call's id and name: what a decision names, shown as they are.
_CALL_NAMING = re.compile(r"tool_calls\.\d+\.(?:id|name)")


def _decision(review: Review) -> dict[str, Any] | None:
    try:
        decision = review.decision
    except Decision.DoesNotExist:
        return None
    return {
        "decidedBy": decision.reviewer_id,
        "decidedAt": decision.decided_at.isoformat(),
        "outcome": decision.outcome,
        "error": decision.error or None,
        "note": decision.note or None,
        "tool_calls": decision.tool_calls,
        "reply": decision.reply,
        "answer": decision.answer,
        "shown": decision.shown,
    }


def describe_review(review: Review) -> dict[str, Any]:
    """A review as the API lists it: what it holds (tool calls as the assistant sent them, the
    reply draft, or the interaction as the session endpoints show it), the ``revision`` and
    ``digest`` a decision names, and the decision once made."""
    shown: dict[str, Any] = {
        "id": review.pk,
        "kind": review.kind,
        "status": review.status,
        "revision": review.revision,
        "digest": review.digest,
        "interruptIds": [str(i) for i in review.interrupt_ids],
        "requestedAt": review.requested_at.isoformat(),
        # When it expires unanswered (its rule's deadline or the pause's own expiresAt).
        "expiresAt": review.expires_at.isoformat() if review.expires_at else None,
        "sessionId": str(review.thread.thread_id),
        "assistant": review.thread.assistant_key,
        "tool_calls": None,
        "reply": None,
        "interaction": None,
        "pauses": None,
        "stuckError": None,
        "decision": _decision(review),
    }
    if review.kind == Review.Kind.TOOL_CALLS:
        shown["tool_calls"] = [
            {
                "id": str(call.get("id") or ""),
                "name": str(call.get("name") or ""),
                "args": call.get("args") if isinstance(call.get("args"), dict) else {},
                "allowed_decisions": list(call.get("allowed_decisions") or []),
            }
            for call in review.tool_calls
        ]
    elif review.kind == Review.Kind.REPLY:
        reply = review.reply or {}
        shown["reply"] = {
            "content": str(reply.get("content") or ""),
            "allowed_decisions": list(reply.get("allowed_decisions") or REPLY_DECISIONS),
            "description": reply.get("description")
            if isinstance(reply.get("description"), str)
            else None,
        }
    elif review.kind in rules.INTERACTION_KINDS:
        shown["interaction"] = describe(review)
    elif review.kind in rules.DIALECT_KINDS:
        shown["pauses"] = [
            {
                "interruptId": str(pause.get("interrupt_id") or ""),
                "kind": str(pause.get("kind") or ""),
                "value": pause.get("value"),
                "responseSchema": pause.get("response_schema"),
                "actionRequest": pause.get("action_request"),
                "allowed": [
                    t
                    for t, flag in INBOX_TYPES.items()
                    if (pause.get("config") or {}).get(flag) is True
                ],
                "description": pause.get("description"),
                "question": pause.get("question"),
                "options": pause.get("options"),
            }
            for pause in review.payload.get("pauses") or []
            if isinstance(pause, dict)
        ]
        shown["stuckError"] = review.payload.get("error") if review.status == "failed" else None
    # The parts a rule says an approval needs shown, with what hides each (previews.py).
    parts = previews.required_parts(review) if review.kind in rules.REVIEW_KINDS else []
    if shown["tool_calls"] is not None:
        for index, call in enumerate(shown["tool_calls"]):
            call["must_show"] = [p.as_dict() for p in parts if p.call == index]
    if shown["reply"] is not None:
        shown["reply"]["must_show"] = [p.as_dict() for p in parts if p.call is None]
    # What a reviewer reads is redacted (REDACT); ``redacted`` names the parts of what the
    # review holds that are not shown whole, so a client can say so.
    shown["redacted"] = [
        path for path in redacting.hidden_paths(review) if not _CALL_NAMING.fullmatch(path)
    ]
    calls, reply = shown["tool_calls"], shown["reply"]
    shown = redacting.shown_fields(shown)
    if calls:  # a call's id and name are what a decision names: never redacted
        for call, original in zip(shown["tool_calls"], calls, strict=True):
            call["id"], call["name"] = original["id"], original["name"]
            call["must_show"] = original["must_show"]  # paths, as ``redacted``'s
    if reply:
        shown["reply"]["must_show"] = reply["must_show"]
    return shown


def _message(message: dict[str, Any], held: frozenset[str]) -> dict[str, Any]:
    calls = [call for call in message.get("tool_calls") or [] if isinstance(call, dict)]
    return {
        "role": role_of(message),
        "id": str(message.get("id") or ""),
        "text": message_text(message),
        "tool_calls": [
            {
                "id": str(call.get("id") or ""),
                "name": str(call.get("name") or ""),
                "args": call.get("args") if isinstance(call.get("args"), dict) else {},
                "held": str(call.get("id") or "") in held,
            }
            for call in calls
        ],
        "tool_call_id": str(message["tool_call_id"]) if message.get("tool_call_id") else None,
        "name": str(message["name"]) if isinstance(message.get("name"), str) else None,
    }


def describe_with_conversation(review: Review) -> dict[str, Any]:
    """A review as the API shows one: :func:`describe_review` and the conversation up to what
    it holds (the admin's cut, :func:`nitro_assistants.conversation.held_messages`)."""
    held = held_call_ids(review)
    return {
        **describe_review(review),
        "conversation": redacting.shown(
            [_message(message, held) for message in held_messages(review)]
        ),
    }


def _reviews() -> QuerySet[Review]:
    # The handling with the review: its rule's parts to show (``must_show``), no statement more.
    return Review.objects.select_related("thread", "decision", "handling").prefetch_related(
        "step_results"
    )


def _review_for(user: Any, review_id: str) -> Review:
    """The review ``review_id`` names, if the caller may decide it or read reviews; else 404
    (a malformed id too)."""
    pk = int(review_id) if review_id.isascii() and review_id.isdigit() else 0
    review = _reviews().filter(pk=pk).first() if 1 <= pk <= MAX_PK else None
    if review is None or not (
        user.has_perm(VIEW_PERMISSION) or services.may_decide(user, review, "api")
    ):
        raise ApiError(404, "not_found", f"No review {review_id}", field="reviewId")
    return review


# -- the endpoints -------------------------------------------------------------------------------


def _filters(request: HttpRequest) -> dict[str, Any]:
    """The list's filters from the query; a value that names nothing is a 400 naming it.
    ``status=all`` lists every status, as the admin's queue says it."""
    allowed = {
        "status": [*rules.statuses_for(), rules.ALL_STATUSES],
        "kind": list(rules.KINDS),
        "assistant": sorted(app_settings.DEFINITIONS),
    }
    chosen: dict[str, Any] = {"status": rules.PENDING}
    for name in FILTERS:
        value = request.GET.get(name)
        if value is None:
            continue
        if name == "thread":
            try:
                chosen[name] = uuid.UUID(value)
            except ValueError:
                raise ApiError(
                    400,
                    "invalid_query",
                    "`thread` must be a session id (the thread's UUID)",
                    field="thread",
                ) from None
        elif value in allowed[name]:
            chosen[name] = value
        else:
            raise ApiError(
                400,
                "invalid_query",
                f"Unknown {name} {value!r}; one of: {', '.join(allowed[name]) or 'none'}",
                field=name,
            )
    if chosen["status"] == rules.ALL_STATUSES:
        del chosen["status"]
    return {FILTERS[name]: value for name, value in chosen.items()}


@endpoint("GET", query=(*FILTERS, "limit", "after"))
def reviews(request: HttpRequest, user: Any) -> HttpResponse:
    """The reviews the caller may decide, oldest first, ``limit`` at a time after the cursor
    ``after``; pending ones unless ``status`` says otherwise."""
    filters = _filters(request)
    limit, after = _page_params(request)
    page = list(
        _reviews()
        .defer("thread__values", "thread__context")  # the list shows no conversation
        .filter(services.decidable_by(user, "api"), pk__gt=after, **filters)
        .order_by("pk")[: limit + 1]
    )
    more = len(page) > limit
    page = page[:limit]
    return JsonResponse(
        {
            "items": [describe_review(review) for review in page],
            "next": page[-1].pk if more else None,
        }
    )


@endpoint("GET")
def review(request: HttpRequest, user: Any, review_id: str) -> HttpResponse:
    return JsonResponse(describe_with_conversation(_review_for(user, review_id)))


@endpoint("POST")
def decide(request: HttpRequest, user: Any, review_id: str) -> HttpResponse:
    """Decide a review of any kind: ``{"revision", "digest", "tool_calls" | "reply", "note"?}``
    or an interaction's body; the answer is the review decided, as :func:`review` shows it."""
    shown = _review_for(user, review_id)
    if not services.may_decide(user, shown, "api"):
        raise ApiError(403, "forbidden", str(services.refusal(shown, "api", user)))
    body = _json_body(request)
    grant = body.pop("grant", None) if isinstance(body, dict) else None
    try:
        # The pk, not the review read above: the revision and digest are the body's, as shown.
        decision: Decision | Approval
        if grant is not None:  # an approval that also grants approval of calls like it
            decision = grants.decide_with_grant(shown.pk, user, body, grant, via="api")
        else:
            decision = services.decide(shown.pk, user, body, via="api")
    except ThreadResumptionError as error:
        held = next(
            (k for k in ("tool_calls", "reply") if isinstance(body, dict) and k in body), ""
        )
        raise refused(error, field=held or None) from None
    return JsonResponse(describe_with_conversation(_reviews().get(pk=decision.review_id)))


@endpoint("POST")
def dismiss(request: HttpRequest, user: Any, review_id: str) -> HttpResponse:
    """End the review's pause without answering it (Agent Inbox's "ignore thread"); needs
    ``decide_review``. The answer is the review dismissed."""
    shown = _review_for(user, review_id)
    try:
        services.dismiss(shown.pk, user, via="api")
    except ReviewSupersededError as error:
        raise ApiError(409, "conflict", str(error)) from None
    except ThreadResumptionError as error:
        raise refused(error) from None
    return JsonResponse(describe_with_conversation(_reviews().get(pk=shown.pk)))
