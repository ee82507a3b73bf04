"""The error envelope of the decide API (docs/protocol.md §8): every 4xx and 5xx answers
``{"code", "message", "details": {"field", "issues", "requestId", "retryable"}}``."""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse

from nitro_assistants.exceptions import (
    InteractionConflictError,
    InteractionDecisionError,
    InteractionForbiddenError,
    NitroAssistantsError,
    ReviewExpiredError,
    ThreadResumptionError,
)

CODES = (
    "invalid_json",
    # A query parameter that is unknown or whose value names nothing (a list's filter, a page's
    # cursor): the body is not at fault, and a GET has none.
    "invalid_query",
    "unauthorized",
    "forbidden",
    "not_found",
    "conflict",
    # The review expired unanswered: no decision or dismissal any more.
    "expired",
    "payload_too_large",
    "unsupported_media_type",
    "rate_limit_exceeded",
    # The rate limits cannot be counted (the cache is unreachable): refused, retryable.
    "rate_limit_unavailable",
    "internal_error",
    "bad_gateway",
    "assistant_decisions_unavailable",
    "gateway_timeout",
)
REQUEST_ID_HEADER = "X-Request-ID"


class ApiError(NitroAssistantsError):
    """An error answer: raised anywhere in a view, turned into the envelope by the view wrapper."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        issues: list[str] | None = None,
        retryable: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        assert code in CODES, code
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.issues = list(issues) if issues else [message]
        self.retryable = retryable
        self.headers = dict(headers or {})

    def response(self, request_id: str) -> JsonResponse:
        details: dict[str, Any] = {
            "field": self.field,
            "issues": self.issues,
            "requestId": request_id,
            "retryable": self.retryable,
        }
        response = JsonResponse(
            {"code": self.code, "message": self.message, "details": details}, status=self.status
        )
        for name, value in self.headers.items():
            response[name] = value
        return response


def refused(error: ThreadResumptionError, *, field: str | None = None) -> ApiError:
    """The answer to a decision ``services.decide`` refused, for every endpoint that decides:
    409 ``conflict`` (stale: another revision or digest, or decided already), 409 ``expired``
    (the review expired unanswered), 403 ``forbidden``,
    400 ``invalid_json`` (the decision does not fit). ``details.field`` is the field the service
    named (none for the body as a whole); the client's own check of held calls or a reply names
    none, so the caller says which part of the body it was (``field``)."""
    where = (error.field or None) if isinstance(error, InteractionDecisionError) else field
    issues = error.issues if isinstance(error, InteractionDecisionError) else None
    if isinstance(error, ReviewExpiredError):
        return ApiError(409, "expired", str(error), field=where, issues=issues)
    if isinstance(error, InteractionConflictError):
        return ApiError(409, "conflict", str(error), field=where, issues=issues)
    if isinstance(error, InteractionForbiddenError):
        return ApiError(403, "forbidden", str(error), field=where, issues=issues)
    return ApiError(400, "invalid_json", str(error), field=where, issues=issues)
