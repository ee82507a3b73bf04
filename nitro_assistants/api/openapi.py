"""The OpenAPI 3.1 document of the decide API, served at ``<prefix>/openapi.json``.

Kept true to the views: the limits come from the same constants, and the test suite runs
schemathesis against this document."""

from __future__ import annotations

from typing import Any

from nitro_assistants import __version__, rules
from nitro_assistants.api.errors import CODES
from nitro_assistants.rules import (
    DECISIONS,
    MAX_ANSWERS,
    MAX_COMMENTS,
    MAX_DIGEST,
    MAX_DISABLED_STEPS,
    MAX_ID,
    MAX_NOTE,
    MAX_REVISION,
)

#: The statuses an interaction passes through (rules.INTERACTION_LIFECYCLE).
STATUSES = list(rules.INTERACTION_LIFECYCLE)

ERRORS = {
    "400": "Malformed JSON, or a field that is wrong (`details.field` names it, `details.issues` "
    "says what is wrong).",
    "401": "No valid credentials: sign in, or send a live API key.",
    "403": "Not allowed: not the session's opener, a failed CSRF check, or missing permissions "
    "(`details.issues` lists them).",
    "404": "No such session or interaction.",
    "409": "The revision or digest is not the pending one (`details.field`: `revision` or "
    "`digest`).",
    "413": "The body is over 64 KiB.",
    "415": "The body is not `application/json`.",
    "429": "Too many requests for this key (`retryable`: true; see `Retry-After`).",
    "500": "An unexpected error (`internal_error`).",
    "503": "The decision is recorded, but the Assistants server cannot be reached: it will be "
    "delivered later (`assistant_decisions_unavailable`, `retryable`: true).",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _error(status: str) -> dict[str, Any]:
    return {
        "description": ERRORS[status],
        "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestId"}},
        "content": {"application/json": {"schema": _ref("Error")}},
    }


def _ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "description": description,
        "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestId"}},
        "content": {"application/json": {"schema": schema}},
    }


def _id(description: str) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": MAX_ID, "description": description}


SESSION = {
    "name": "sessionId",
    "in": "path",
    "required": True,
    "description": "The assistant session (the thread's UUID) that made the interaction.",
    "schema": {"type": "string", "format": "uuid"},
}
INTERACTION = {
    "name": "interactionId",
    "in": "path",
    "required": True,
    "description": "The interaction id, from the interaction or its event.",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID, "pattern": "^[^/]+$"},
}


def _schemas() -> dict[str, Any]:
    nullable_text = {"type": ["string", "null"]}
    return {
        "Error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string", "enum": list(CODES)},
                "message": {"type": "string"},
                "details": {
                    "type": "object",
                    "required": ["field", "issues", "requestId", "retryable"],
                    "properties": {
                        "field": nullable_text,
                        "issues": {"type": "array", "items": {"type": "string"}},
                        "requestId": {"type": "string"},
                        "retryable": {"type": "boolean"},
                    },
                },
            },
        },
        "Answer": {
            "type": "object",
            "additionalProperties": False,
            "required": ["questionId"],
            "properties": {
                "questionId": _id("The question answered."),
                "optionIds": {"type": "array", "maxItems": 50, "items": _id("A chosen option.")},
                "text": {
                    "type": "string",
                    "maxLength": MAX_NOTE,
                    "description": "Free text: only for a text question or one with allowOther.",
                },
            },
        },
        "Comment": {
            "type": "object",
            "additionalProperties": False,
            "required": ["text"],
            "properties": {
                "text": {"type": "string", "minLength": 1, "maxLength": MAX_NOTE},
                "stepId": _id("The plan step the comment is pinned to."),
                "field": _id("The field (of the step, or of the blueprint) it is pinned to."),
            },
        },
        "DecisionRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["decision", "digest", "revision"],
            "description": "One decision on the exact revision of an interaction the caller was "
            "shown.",
            "properties": {
                "decision": {
                    "type": "string",
                    "enum": list(DECISIONS),
                    "description": "answer (question), accept (blueprint), approve (plan), "
                    "request_revision (blueprint, plan), cancel (any).",
                },
                "digest": {"type": "string", "minLength": 1, "maxLength": MAX_DIGEST},
                "revision": {"type": "integer", "minimum": 1, "maximum": MAX_REVISION},
                "answers": {"type": "array", "maxItems": MAX_ANSWERS, "items": _ref("Answer")},
                "comments": {"type": "array", "maxItems": MAX_COMMENTS, "items": _ref("Comment")},
                "disabledSteps": {
                    "type": "array",
                    "maxItems": MAX_DISABLED_STEPS,
                    "uniqueItems": True,
                    "items": _id("An optional step to turn off."),
                },
                "edits": {
                    "type": "object",
                    "description": "With approve: {stepId: {field: value}} for declared fields. "
                    "Any edit records a new revision with origin `user`.",
                    "propertyNames": {"maxLength": MAX_ID},
                    "additionalProperties": {"type": "object"},
                },
                "note": {"type": "string", "maxLength": MAX_NOTE},
            },
        },
        "StepResult": {
            "type": "object",
            "required": ["stepId", "status"],
            "properties": {
                "stepId": {"type": "string"},
                "status": {
                    "type": "string",
                    "enum": ["pending", "running", "completed", "failed", "skipped"],
                },
                "message": nullable_text,
                "link": nullable_text,
                "resourceId": nullable_text,
                "resourceKind": nullable_text,
            },
        },
        "Interaction": {
            "type": "object",
            "required": [
                "sessionId",
                "interactionId",
                "kind",
                "revision",
                "digest",
                "origin",
                "status",
                "title",
                "requestedAt",
                "problems",
                "decision",
            ],
            "properties": {
                "sessionId": {"type": "string", "format": "uuid"},
                "interactionId": {"type": "string"},
                "kind": {"type": "string", "enum": list(rules.INTERACTION_KINDS)},
                "revision": {"type": "integer", "minimum": 1, "maximum": MAX_REVISION},
                "digest": {"type": "string"},
                "origin": {"type": "string", "enum": ["assistant", "user"]},
                "status": {"type": "string", "enum": STATUSES},
                "title": {"type": "string"},
                "summary": nullable_text,
                "requestedAt": {"type": "string", "format": "date-time"},
                "questions": {"description": "The questions, on a question interaction."},
                "blueprint": {"description": "The solution design, on a blueprint interaction."},
                "plan": {"description": "The changes, on a plan interaction."},
                "problems": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Why the interaction cannot be approved as it arrived "
                    "(e.g. a plan step naming an unknown operation).",
                },
                "decision": {
                    "type": ["object", "null"],
                    "description": "The decision as delivered to the assistant, once made.",
                },
                "stepResults": {"type": "array", "items": _ref("StepResult")},
            },
        },
        "InteractionList": {
            "type": "object",
            "required": ["items"],
            "properties": {"items": {"type": "array", "items": _ref("Interaction")}},
        },
        "Event": {
            "type": "object",
            "required": ["id", "verb", "at", "actor", "data"],
            "properties": {
                "id": {"type": "integer"},
                "verb": {"type": "string"},
                "at": {"type": "string", "format": "date-time"},
                "actor": nullable_text,
                "interactionId": nullable_text,
                "revision": {"type": ["integer", "null"]},
                "status": nullable_text,
                "data": {"type": "object"},
            },
        },
        "EventPage": {
            "type": "object",
            "required": ["items", "next"],
            "properties": {
                "items": {"type": "array", "items": _ref("Event")},
                "next": {
                    "type": ["integer", "null"],
                    "description": "Pass as `after` for the next page; null on the last.",
                },
            },
        },
    }


def openapi_document(server_url: str) -> dict[str, Any]:
    """The document, with ``server_url`` (the prefix the API is included under) as its server."""
    read_errors = {s: _error(s) for s in ("400", "401", "403", "404", "429", "500")}
    decide_errors = {s: _error(s) for s in ERRORS}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "nitro_assistants decide API",
            "version": __version__,
            "description": "Read a session's typed interactions (questions, blueprints, plans) "
            "and decide on the exact revision shown.",
        },
        "servers": [{"url": server_url}],
        "security": [{"apiKey": []}, {"session": []}],
        "components": {
            "securitySchemes": {
                "apiKey": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key created in the admin: `Authorization: Bearer <key>`.",
                },
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "sessionid",
                    "description": "The Django session; unsafe methods need the CSRF token "
                    "in `X-CSRFToken`.",
                },
            },
            "headers": {
                "RequestId": {
                    "description": "Identifies the request (also `details.requestId` of an error).",
                    "schema": {"type": "string"},
                }
            },
            "schemas": _schemas(),
        },
        "paths": {
            "/sessions/{sessionId}/interactions/{interactionId}/decide": {
                "post": {
                    "operationId": "decideInteraction",
                    "summary": "Decide on an assistant interaction",
                    "description": "Records the caller's decision on the pending revision and "
                    "delivers it to the assistant (in the background) as the resume value "
                    "`{decision, answers, comments, disabledSteps, edits, note, decidedBy}`. "
                    "Only the session's opener may decide. The response is the interaction after "
                    "the decision.",
                    "parameters": [SESSION, INTERACTION],
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("DecisionRequest")}},
                    },
                    "responses": {
                        "200": _ok("The interaction after the decision.", _ref("Interaction")),
                        **decide_errors,
                    },
                }
            },
            "/sessions/{sessionId}/interactions": {
                "get": {
                    "operationId": "listInteractions",
                    "summary": "The latest revision of each interaction of a session",
                    "parameters": [SESSION],
                    "responses": {
                        "200": _ok("Oldest interaction first.", _ref("InteractionList")),
                        **read_errors,
                    },
                }
            },
            "/sessions/{sessionId}/interactions/{interactionId}": {
                "get": {
                    "operationId": "getInteraction",
                    "summary": "The latest revision of one interaction",
                    "parameters": [SESSION, INTERACTION],
                    "responses": {
                        "200": _ok("The interaction.", _ref("Interaction")),
                        **read_errors,
                    },
                }
            },
            "/sessions/{sessionId}/events": {
                "get": {
                    "operationId": "listEvents",
                    "summary": "A session's events (audit trail), oldest first, paginated",
                    "parameters": [
                        SESSION,
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 200},
                        },
                        {
                            "name": "after",
                            "in": "query",
                            "description": "Cursor: the `next` of the previous page.",
                            "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                        },
                    ],
                    "responses": {"200": _ok("One page.", _ref("EventPage")), **read_errors},
                }
            },
        },
    }
