"""JSON views of the decide API. Thin: authenticate, parse, call a service, describe the result.
Every answer carries ``X-Request-ID``; every error is the envelope of :mod:`.errors`."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from nitro_assistants import redacting, rules, services
from nitro_assistants.api.auth import authenticate, throttle
from nitro_assistants.api.errors import REQUEST_ID_HEADER, ApiError, refused
from nitro_assistants.api.openapi import openapi_document
from nitro_assistants.exceptions import ThreadResumptionError
from nitro_assistants.models import Event, Review, Thread
from nitro_assistants.rules import MAX_ID
from nitro_assistants.services.clients import is_transient
from nitro_assistants.services.interactions import describe, latest_revision, latest_revisions
from nitro_assistants.validators import find_unstorable, unstorable_reason

logger = logging.getLogger("nitro_assistants.api")

MAX_BODY = 64 * 1024
EVENTS_PAGE_DEFAULT, EVENTS_PAGE_MAX = 50, 200
View = Callable[..., HttpResponse]


def endpoint(
    *methods: str, authenticated: bool = True, query: tuple[str, ...] = ()
) -> Callable[[View], View]:
    """Wrap a view: request id, allowed methods, authentication and rate limit, the query
    parameters it takes (any other is a 400), and the envelope for every error, including
    unexpected ones (500 ``internal_error``, never a bare 500)."""

    def wrap(view: View) -> View:
        @csrf_exempt  # session requests are CSRF-checked in ``authenticate``; key requests need none
        @wraps(view)
        def inner(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            request_id = uuid.uuid4().hex
            try:
                if request.method not in methods:
                    raise ApiError(
                        405,
                        "not_found",
                        f"{request.method} is not allowed here; allowed: {', '.join(methods)}",
                        headers={"Allow": ", ".join(methods)},
                    )
                if authenticated:
                    user, identity = authenticate(request)
                    throttle(identity)
                    args = (user, *args)
                _check_path_ids(kwargs)
                unknown = sorted(set(request.GET) - set(query))
                if unknown:
                    raise ApiError(
                        400,
                        "invalid_query",
                        f"Unknown query parameter `{unknown[0]}`",
                        field=unknown[0],
                        issues=[f"Unknown query parameter `{name}`" for name in unknown],
                    )
                response = view(request, *args, **kwargs)
            except ApiError as error:
                response = error.response(request_id)
            except Exception as exc:
                logger.exception("Decide API request %s failed", request_id)
                # Retryable only when retrying can help (a lost database connection, say): a
                # bug answers the same every time, and a client told to retry would never stop.
                response = ApiError(
                    500,
                    "internal_error",
                    "Something went wrong on our side; the request id identifies it in the logs",
                    retryable=is_transient(exc),
                ).response(request_id)
            response[REQUEST_ID_HEADER] = request_id
            return response

        return inner

    return wrap


def _check_path_ids(kwargs: dict[str, Any]) -> None:
    """A NUL or a lone surrogate in an id of the path is a 400 (the database cannot even be asked
    for such an id: PostgreSQL refuses NUL in text)."""
    for name, value in kwargs.items():
        reason = unstorable_reason(value) if name.endswith("_id") else None
        if reason is not None:
            head, *rest = name.removesuffix("_id").split("_")
            field = head + "".join(part.capitalize() for part in rest) + "Id"
            raise ApiError(400, "invalid_json", f"`{field}` {reason}", field=field)


def _thread(session_id: str, user: Any, *, deciding: bool = False) -> Thread:
    try:
        thread_uuid = uuid.UUID(session_id)
    except ValueError:
        thread_uuid = None
    thread = (
        Thread.objects.filter(thread_id=thread_uuid).first() if thread_uuid is not None else None
    )
    if thread is None:
        raise ApiError(404, "not_found", f"No session {session_id}", field="sessionId")
    if thread.opened_by_id == user.pk or deciding:  # who may decide: services.may_decide
        return thread
    if not user.has_perm("nitro_assistants.view_review"):
        raise ApiError(403, "forbidden", "You may not read this session")
    return thread


def _review(thread: Thread, interaction_id: str) -> Review:
    if len(interaction_id) > MAX_ID:
        raise ApiError(
            400,
            "invalid_json",
            f"`interactionId` is longer than {MAX_ID} characters",
            field="interactionId",
        )
    review = latest_revision(thread.pk, interaction_id)
    if review is None:
        raise ApiError(
            404,
            "not_found",
            f"No interaction {interaction_id} in this session",
            field="interactionId",
        )
    return review


def _json_body(request: HttpRequest) -> Any:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > MAX_BODY:
        raise ApiError(413, "payload_too_large", f"The body is over {MAX_BODY // 1024} KiB")
    content_type = request.content_type or ""
    if content_type != "application/json" and not content_type.endswith("+json"):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Send the decision as application/json, not {content_type or 'no content type'}",
            field="Content-Type",
        )
    try:
        raw = request.body
    except RequestDataTooBig:
        raise ApiError(
            413, "payload_too_large", f"The body is over {MAX_BODY // 1024} KiB"
        ) from None
    if len(raw) > MAX_BODY:
        raise ApiError(413, "payload_too_large", f"The body is over {MAX_BODY // 1024} KiB")
    try:
        body = json.loads(raw.decode(request.encoding or "utf-8"))
    except (UnicodeDecodeError, LookupError, ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", f"The body is not valid JSON: {exc}") from None
    found = find_unstorable(body)
    if found is not None:
        # Parsed, but not what PostgreSQL can store (NUL, lone surrogates; NaN and Infinity,
        # which Python's json reads though they are not JSON): say where. Found on the parsed
        # body rather than refused by ``parse_constant``, which cannot tell where they were.
        field, reason = found
        raise ApiError(
            400,
            "invalid_json",
            f"`{field}` {reason}: it cannot be stored" if field else f"The body {reason}",
            field=field or None,
        )
    return body


@endpoint("POST")
def decide(request: HttpRequest, user: Any, session_id: str, interaction_id: str) -> HttpResponse:
    thread = _thread(session_id, user, deciding=True)
    review = _review(thread, interaction_id)
    if not services.may_decide(user, review, "api"):
        raise ApiError(
            403, "forbidden", "Only the person who opened this session may decide its interactions"
        )
    try:
        body = rules.clean_body(_json_body(request))
        services.decide(review, user, body, via="api")
    except ThreadResumptionError as error:
        raise refused(error) from None
    decided = latest_revision(thread.pk, interaction_id)
    assert decided is not None
    return JsonResponse(redacting.shown_fields(describe(decided)))


@endpoint("GET")
def interactions(request: HttpRequest, user: Any, session_id: str) -> HttpResponse:
    thread = _thread(session_id, user)
    return JsonResponse(
        {
            "items": [
                redacting.shown_fields(describe(review)) for review in latest_revisions(thread.pk)
            ]
        }
    )


@endpoint("GET")
def interaction(
    request: HttpRequest, user: Any, session_id: str, interaction_id: str
) -> HttpResponse:
    thread = _thread(session_id, user)
    return JsonResponse(redacting.shown_fields(describe(_review(thread, interaction_id))))


def _page_params(request: HttpRequest) -> tuple[int, int]:
    params = {}
    for name, default, low, high in (
        ("limit", EVENTS_PAGE_DEFAULT, 1, EVENTS_PAGE_MAX),
        ("after", 0, 0, 2**63 - 1),
    ):
        raw = request.GET.get(name)
        try:
            value = default if raw is None else int(raw)
        except ValueError:
            value = -1
        if not low <= value <= high:
            raise ApiError(
                400,
                "invalid_query",
                f"`{name}` must be an integer from {low} to {high}",
                field=name,
            )
        params[name] = value
    return params["limit"], params["after"]


def describe_event(event: Event) -> dict[str, Any]:
    data = dict(event.data or {})
    return {
        "id": event.pk,
        "verb": event.verb,
        "at": event.at.isoformat(),
        "actor": event.actor.get_username() if event.actor is not None else None,
        "interactionId": data.get("interactionId"),
        "revision": data.get("revision"),
        "status": data.get("status"),
        "data": redacting.shown_fields(data),
    }


@endpoint("GET", query=("limit", "after"))
def events(request: HttpRequest, user: Any, session_id: str) -> HttpResponse:
    """The session's audit trail, oldest first, ``limit`` at a time after the cursor ``after``."""
    thread = _thread(session_id, user)
    limit, after = _page_params(request)
    page = list(
        Event.objects.filter(thread=thread, pk__gt=after)
        .select_related("actor")
        .order_by("pk")[: limit + 1]
    )
    more = len(page) > limit
    page = page[:limit]
    return JsonResponse(
        {
            "items": [describe_event(event) for event in page],
            "next": page[-1].pk if more else None,
        }
    )


@endpoint("GET", authenticated=False)
def openapi(request: HttpRequest) -> HttpResponse:
    prefix = reverse("nitro_assistants_api:openapi").removesuffix("openapi.json")
    return JsonResponse(openapi_document(request.build_absolute_uri(prefix).rstrip("/")))


@endpoint("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", authenticated=False)
def not_found(request: HttpRequest, rest: str = "") -> HttpResponse:
    raise ApiError(404, "not_found", f"No such endpoint: {request.path}")
