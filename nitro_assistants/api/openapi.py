"""The OpenAPI 3.1 document of the decide API, served at ``<prefix>/openapi.json``.

Kept true to the views: the limits come from the same constants, and the test suite runs
schemathesis against this document."""

from __future__ import annotations

from typing import Any

from nitro_assistants import __version__, grant_rules, rules
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
    "400": "Malformed JSON, or a field that is wrong (`invalid_json`); a query parameter that is "
    "unknown or names nothing (`invalid_query`). `details.field` names it, `details.issues` says "
    "what is wrong.",
    "401": "No valid credentials: sign in, or send a live API key.",
    "403": "Not allowed: not the session's opener, no `decide_review` permission, a failed CSRF "
    "check, or missing permissions (`details.issues` lists them).",
    "404": "No such session, interaction or review (or one the caller may not see).",
    "409": "Stale: the revision or digest is not the pending one, or the review was decided "
    "already (`details.field`: `revision`, `digest` or `interrupt_id`).",
    "413": "The body is over 64 KiB.",
    "415": "The body is not `application/json`.",
    "429": "Too many requests for this user, or too many refused API keys from this address "
    "(`retryable`: true; see `Retry-After`).",
    "500": "An unexpected error (`internal_error`).",
    "503": "The decision is recorded, but the Assistants server cannot be reached: it will be "
    "delivered later (`assistant_decisions_unavailable`, `retryable`: true); or the rate limits "
    "cannot be counted and nothing was done (`rate_limit_unavailable`, `retryable`: true, see "
    "`Retry-After`).",
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
        **_review_schemas(),
    }


def _stamp() -> dict[str, Any]:
    return {
        "revision": {"type": "integer", "minimum": 1, "maximum": MAX_REVISION},
        "digest": {"type": "string", "minLength": 1, "maxLength": MAX_DIGEST},
        "interrupt_id": {
            "description": "Optional: the interrupt shown; another than the pending one is a 409."
        },
        "note": {"type": "string", "maxLength": MAX_NOTE},
    }


def _review_schemas() -> dict[str, Any]:
    """The reviews endpoints': a review of any kind, its conversation, the decision bodies."""
    nullable_text = {"type": ["string", "null"]}
    text_or_null = {"type": ["string", "null"]}
    review: dict[str, Any] = {
        "type": "object",
        "required": [
            "id",
            "kind",
            "status",
            "revision",
            "digest",
            "interruptIds",
            "requestedAt",
            "expiresAt",
            "sessionId",
            "assistant",
            "tool_calls",
            "reply",
            "interaction",
            "pauses",
            "stuckError",
            "decision",
            "redacted",
        ],
        "properties": {
            "id": {"type": "integer", "minimum": 1},
            "kind": {"type": "string", "enum": list(rules.KINDS)},
            "status": {"type": "string", "enum": list(rules.statuses_for())},
            "revision": {"type": "integer", "minimum": 1, "maximum": MAX_REVISION},
            "digest": {"type": "string"},
            "interruptIds": {"type": "array", "items": {"type": "string"}},
            "requestedAt": {"type": "string", "format": "date-time"},
            "expiresAt": {
                "type": ["string", "null"],
                "format": "date-time",
                "description": "When it expires unanswered (its rule's deadline or the pause's "
                "own expiresAt, the earlier); null: never. Decisions after it answer 409 expired.",
            },
            "sessionId": {"type": "string", "format": "uuid"},
            "assistant": {"type": "string", "description": "The assistant's key (settings)."},
            "tool_calls": {
                "type": ["array", "null"],
                "items": _ref("HeldToolCall"),
                "description": "The held tool calls, on a tool_calls review.",
            },
            "reply": {
                "oneOf": [_ref("ReplyDraft"), {"type": "null"}],
                "description": "The reply draft, on a reply review.",
            },
            "interaction": {
                "oneOf": [_ref("Interaction"), {"type": "null"}],
                "description": "On a question, blueprint or plan: as the session endpoints show "
                "it.",
            },
            "pauses": {
                "type": ["array", "null"],
                "items": _ref("Pause"),
                "description": "On an inbox or interrupt review: each pending pause (several "
                "when branches paused at once).",
            },
            "stuckError": {
                **nullable_text,
                "description": "On a failed inbox or interrupt review: the graph's error when it "
                "refused an answer and is stuck on the pause (only dismissing is left).",
            },
            "decision": {"oneOf": [_ref("ReviewDecision"), {"type": "null"}]},
            "redacted": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Dotted paths of what the review holds that this read shows "
                "redacted (REDACT; docs/redaction.md), e.g. `tool_calls.0.args.card`. Empty when "
                "nothing is. A decision must not send a redaction's mark back as a value.",
            },
        },
    }
    detail = {
        **review,
        "required": [*review["required"], "conversation"],
        "properties": {
            **review["properties"],
            "conversation": {
                "type": "array",
                "items": _ref("Message"),
                "description": "The mirrored messages up to what the review holds (a reply "
                "draft itself is `reply`).",
            },
        },
    }
    decision_parts = {
        "ToolCallDecision": {
            "type": "object",
            "additionalProperties": False,
            "required": ["id", "action"],
            "properties": {
                "id": {"type": "string", "description": "A held call's id."},
                "action": {
                    "type": "string",
                    "enum": list(rules.TOOL_CALL_ACTIONS),
                    "description": "One of the call's `allowed_decisions`.",
                },
                "args": {
                    "type": "object",
                    "description": "With edit: the arguments to change (of those the call has).",
                },
                "message": {
                    **text_or_null,
                    "description": "With respond: the tool's result the assistant sees; with "
                    "reject: why (recorded, not shown to the model).",
                },
            },
        },
        "ReplyDecision": {
            "type": "object",
            "additionalProperties": False,
            "required": ["action"],
            "properties": {
                "action": {"type": "string", "enum": list(rules.REPLY_ACTIONS)},
                "content": {**text_or_null, "description": "With edit: the whole new text."},
                "message": {**text_or_null, "description": "With reject: why."},
            },
        },
        "ToolCallsDecisionRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["revision", "digest", "tool_calls"],
            "description": "A decision on held tool calls: one item per held call.",
            "properties": {
                **_stamp(),
                "tool_calls": {
                    "type": "array",
                    "minItems": 1,
                    "items": _ref("ToolCallDecision"),
                },
                "shown": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "With approve or edit: the paths of the held content the "
                    "client showed its person whole (`tool_calls.0.args.body`), covering every "
                    "`must_show` part that is collapsed; refused (400, field `shown`) without "
                    "them. A redacted part needs the review revealed in the admin first "
                    "(docs/redaction.md).",
                },
                "grant": _ref("GrantRequest"),
            },
        },
        "ReplyDecisionRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["revision", "digest", "reply"],
            "description": "A decision on a reply draft.",
            "properties": {
                **_stamp(),
                "reply": _ref("ReplyDecision"),
                "shown": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "With approve or edit: the paths of the held content the "
                    "client showed its person whole (`tool_calls.0.args.body`), covering every "
                    "`must_show` part that is collapsed; refused (400, field `shown`) without "
                    "them. A redacted part needs the review revealed in the admin first "
                    "(docs/redaction.md).",
                },
            },
        },
        "PauseDecisionRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["revision", "digest"],
            "description": "A decision on inbox or interrupt pauses: `answer` for the pause "
            "`interrupt_id` names (or the only one), or `answers` by interrupt id. An inbox "
            'answer is one Agent Inbox HumanResponse `{"type": "accept"|"edit"|"response"|'
            '"ignore", "args"}` of a type its config allows; an interrupt answer is the JSON '
            "value to resume with, valid against its `responseSchema` if it has one.",
            "properties": {
                **_stamp(),
                "interrupt_id": {"type": "string"},
                "answer": {"description": "The answer to one pause."},
                "answers": {"type": "object", "minProperties": 1},
                "note": {"type": "string", "maxLength": MAX_NOTE},
            },
        },
        "ReviewDecisionRequest": {
            "description": "Held tool calls and a reply draft take their own body; a typed "
            "interaction takes the interaction body (as the session decide endpoint); inbox "
            "and interrupt pauses take answers.",
            "oneOf": [
                _ref("ToolCallsDecisionRequest"),
                _ref("ReplyDecisionRequest"),
                _ref("DecisionRequest"),
                _ref("PauseDecisionRequest"),
            ],
        },
    }
    return {
        "Pause": {
            "type": "object",
            "required": ["interruptId", "kind", "value", "responseSchema", "allowed"],
            "properties": {
                "interruptId": {"type": "string"},
                "kind": {"type": "string", "enum": list(rules.DIALECT_KINDS)},
                "value": {"description": "The interrupt's value as the graph gave it."},
                "responseSchema": {"type": ["object", "null"]},
                "actionRequest": {"type": ["object", "null"]},
                "allowed": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The Agent Inbox response types its config allows.",
                },
                "description": {**nullable_text, "description": "Markdown (Agent Inbox)."},
                "question": nullable_text,
                "options": {"type": ["array", "null"]},
            },
        },
        "HeldToolCall": {
            "type": "object",
            "required": ["id", "name", "args", "allowed_decisions"],
            "properties": {
                "id": {"type": "string"},
                "name": {"type": "string"},
                "args": {"type": "object"},
                "allowed_decisions": {
                    "type": "array",
                    "items": {"type": "string", "enum": list(rules.TOOL_CALL_ACTIONS)},
                },
                "must_show": {
                    "type": "array",
                    "items": _ref("MustShow"),
                    "description": "The parts a policy rule says an approval needs shown "
                    '(docs/redaction.md, "Complete previews"); empty: none.',
                },
            },
        },
        "MustShow": {
            "type": "object",
            "required": ["path", "collapsed", "redacted"],
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Where it is in the review (`tool_calls.0.args.body`): what "
                    "`shown` names.",
                },
                "collapsed": {
                    "type": "boolean",
                    "description": "A value of it (or holding it) is longer than 600 characters "
                    "or 10 lines, or nested deeper than two levels and as long as JSON: a "
                    "reviewer's screen folds it. The decision must name it in `shown`.",
                },
                "redacted": {
                    "type": "boolean",
                    "description": "Redacted for reviewers: the person approving reveals the "
                    "review in the admin (recorded) first.",
                },
            },
        },
        "ReplyDraft": {
            "type": "object",
            "required": ["content", "allowed_decisions", "description"],
            "properties": {
                "content": {"type": "string"},
                "allowed_decisions": {
                    "type": "array",
                    "items": {"type": "string", "enum": list(rules.REPLY_ACTIONS)},
                },
                "description": nullable_text,
                "must_show": {
                    "type": "array",
                    "items": _ref("MustShow"),
                    "description": "The parts a policy rule says an approval needs shown "
                    '(docs/redaction.md, "Complete previews"); empty: none.',
                },
            },
        },
        "ReviewDecision": {
            "type": "object",
            "required": ["decidedBy", "decidedAt", "outcome", "error", "note"],
            "description": "Who decided, when, what (`tool_calls`, `reply`, or an interaction's "
            "`answer`: the resume value), and how it came out on the assistant's side.",
            "properties": {
                "decidedBy": {"type": "string"},
                "decidedAt": {"type": "string", "format": "date-time"},
                "outcome": {
                    "type": "string",
                    "enum": ["pending", "applied", "superseded", "failed"],
                },
                "error": nullable_text,
                "note": nullable_text,
                "tool_calls": {"type": ["array", "null"]},
                "reply": {"type": ["object", "null"]},
                "answer": {"type": ["object", "null"]},
                "shown": {
                    "type": ["array", "null"],
                    "items": {"type": "string"},
                    "description": "The paths the approval said were shown; null: not stated.",
                },
            },
        },
        "Message": {
            "type": "object",
            "required": ["role", "id", "text", "tool_calls", "tool_call_id", "name"],
            "properties": {
                "role": {"type": "string", "enum": ["human", "ai", "tool", "system"]},
                "id": {"type": "string"},
                "text": {"type": "string"},
                "tool_calls": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "name", "args", "held"],
                        "properties": {
                            "id": {"type": "string"},
                            "name": {"type": "string"},
                            "args": {"type": "object"},
                            "held": {
                                "type": "boolean",
                                "description": "One of the calls this review holds.",
                            },
                        },
                    },
                },
                "tool_call_id": nullable_text,
                "name": nullable_text,
            },
        },
        "Review": review,
        "ReviewWithConversation": detail,
        "ReviewPage": {
            "type": "object",
            "required": ["items", "next"],
            "properties": {
                "items": {"type": "array", "items": _ref("Review")},
                "next": {
                    "type": ["integer", "null"],
                    "description": "Pass as `after` for the next page; null on the last.",
                },
            },
        },
        **decision_parts,
    }


REVIEW = {
    "name": "reviewId",
    "in": "path",
    "required": True,
    "description": "The review's id (`id` in the list).",
    "schema": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
}


GRANT = {
    "name": "grantId",
    "in": "path",
    "required": True,
    "description": "The grant's id.",
    "schema": {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
}
_WHEN = {"type": ["string", "null"], "format": "date-time"}


def _grant_schemas() -> dict[str, Any]:
    constraint = {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "properties": {
            "eq": {"description": "The value approved."},
            "max": {"type": "number", "minimum": 0},
            "in": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        },
    }
    return {
        "GrantRequest": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scope"],
            "description": "Also approve later calls like the one approved (docs/governance.md "
            "Grants); needs `nitro_assistants.grant_approval`. Never wider than the call: "
            "refused with the field at fault (`grant.args.amount`) and nothing stored.",
            "properties": {
                "scope": {"type": "string", "enum": list(grant_rules.SCOPES)},
                "uses": {"type": "integer", "minimum": 1, "maximum": grant_rules.MAX_USES},
                "duration": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": grant_rules.MAX_SECONDS,
                    "description": "Seconds.",
                },
                "args": {"type": "object", "additionalProperties": constraint},
                "call": {"type": "string", "description": "The approved call it follows."},
            },
        },
        "Grant": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "state": {"type": "string", "enum": ["live", "revoked", "expired", "used_up"]},
                "scope": {"type": "string", "enum": list(grant_rules.SCOPES)},
                "key": {"type": "string"},
                "assistant": {"type": "string"},
                "tool": {"type": "string"},
                "args": {"type": "object", "additionalProperties": constraint},
                "maxUses": {"type": ["integer", "null"]},
                "usesLeft": {"type": ["integer", "null"]},
                "uses": {"type": "integer"},
                "duration": {"type": ["number", "null"]},
                "expiresAt": _WHEN,
                "review": {"type": ["integer", "null"]},
                "grantedBy": {"type": ["string", "null"]},
                "grantedAt": _WHEN,
                "revokedAt": _WHEN,
                "revokedBy": {"type": ["string", "null"]},
                "revokeReason": {"type": "string"},
            },
        },
        "GrantPage": {
            "type": "object",
            "required": ["items", "next"],
            "properties": {
                "items": {"type": "array", "items": _ref("Grant")},
                "next": {"type": ["integer", "null"]},
            },
        },
    }


def _grant_paths(read_errors: dict[str, Any], decide_errors: dict[str, Any]) -> dict[str, Any]:
    return {
        "/grants": {
            "get": {
                "operationId": "listGrants",
                "summary": "Grants, oldest first, paginated; needs `view_grant`",
                "parameters": [
                    _query(
                        "state",
                        "",
                        {"type": "string", "enum": ["live", "revoked", "expired", "used_up"]},
                    ),
                    _query("scope", "", {"type": "string", "enum": list(grant_rules.SCOPES)}),
                    _query("tool", "", {"type": "string"}),
                    _query("assistant", "", {"type": "string"}),
                    _query("limit", "Default 50.", {"type": "integer", "minimum": 1}),
                    _query("after", "Cursor.", {"type": "integer", "minimum": 0}),
                ],
                "responses": {"200": _ok("One page.", _ref("GrantPage")), **read_errors},
            }
        },
        "/grants/{grantId}": {
            "get": {
                "operationId": "getGrant",
                "summary": "One grant",
                "parameters": [GRANT],
                "responses": {"200": _ok("The grant.", _ref("Grant")), **read_errors},
            }
        },
        "/grants/{grantId}/revoke": {
            "post": {
                "operationId": "revokeGrant",
                "summary": "Revoke a grant (it stays as a record); needs `grant_approval`",
                "parameters": [GRANT],
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {"reason": {"type": "string", "maxLength": 500}},
                            }
                        }
                    },
                },
                "responses": {"200": _ok("The grant revoked.", _ref("Grant")), **decide_errors},
            }
        },
    }


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": schema}


def _review_paths(read_errors: dict[str, Any], decide_errors: dict[str, Any]) -> dict[str, Any]:
    page = {"type": "integer", "minimum": 1, "maximum": 200}
    return {
        "/reviews": {
            "get": {
                "operationId": "listReviews",
                "summary": "The reviews the caller may decide, oldest first, paginated",
                "description": "Tool calls and replies when the caller holds "
                "`nitro_assistants.decide_review`; interactions of the sessions they opened. "
                "A filter value that names nothing is a 400 `invalid_query` naming the filter.",
                "parameters": [
                    _query(
                        "status",
                        "Default `pending`; `all`: every status.",
                        {"type": "string", "enum": [*rules.statuses_for(), rules.ALL_STATUSES]},
                    ),
                    _query("kind", "", {"type": "string", "enum": list(rules.KINDS)}),
                    _query(
                        "assistant",
                        "A configured assistant's key.",
                        {"type": "string", "minLength": 1, "maxLength": 100},
                    ),
                    _query("thread", "A session id.", {"type": "string", "format": "uuid"}),
                    _query("limit", "Default 50.", page),
                    _query(
                        "after",
                        "Cursor: the `next` of the previous page.",
                        {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                    ),
                ],
                "responses": {"200": _ok("One page.", _ref("ReviewPage")), **read_errors},
            }
        },
        "/reviews/{reviewId}": {
            "get": {
                "operationId": "getReview",
                "summary": "One review, with the conversation up to what it holds",
                "description": "Open to those who may decide it and to holders of "
                "`nitro_assistants.view_review`; anyone else gets a 404.",
                "parameters": [REVIEW],
                "responses": {
                    "200": _ok("The review.", _ref("ReviewWithConversation")),
                    **read_errors,
                },
            }
        },
        "/reviews/{reviewId}/dismiss": {
            "post": {
                "operationId": "dismissReview",
                "summary": "End a review's pause without answering it",
                "description": "Agent Inbox's \"ignore thread\": the thread's pause ends and the "
                "assistant reads no answer. Needs `nitro_assistants.decide_review`; audited. A "
                "pending review, or an inbox/interrupt review failed because the graph is stuck "
                "on it. The response is the review dismissed.",
                "parameters": [REVIEW],
                "responses": {
                    "200": _ok("The review dismissed.", _ref("ReviewWithConversation")),
                    **decide_errors,
                },
            }
        },
        "/reviews/{reviewId}/decide": {
            "post": {
                "operationId": "decideReview",
                "summary": "Decide a review of any kind on the revision and digest shown",
                "description": "The same bodies and rules as the admin. Tool calls and replies "
                "need `nitro_assistants.decide_review`; a typed interaction only its session's "
                "opener decides. The same decision sent again by the same person answers "
                "with the recorded one. The decision is recorded, then delivered in the "
                "background. The response is the review decided.",
                "parameters": [REVIEW],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _ref("ReviewDecisionRequest")}},
                },
                "responses": {
                    "200": _ok("The review after the decision.", _ref("ReviewWithConversation")),
                    **decide_errors,
                },
            }
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
            "and decide on the exact revision shown; list, read and decide reviews of every "
            "kind (held tool calls and reply drafts too).",
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
            "schemas": {**_schemas(), **_grant_schemas()},
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
            **_review_paths(read_errors, decide_errors),
            **_grant_paths(read_errors, decide_errors),
        },
    }
