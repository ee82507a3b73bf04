"""Schemathesis against the API's own OpenAPI document, in process through Django's WSGI app:
valid and invalid requests alike never get a 5xx, every error is the envelope, and every answer
fits the document."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, FormatChecker
from schemathesis.checks import not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from nitro_assistants.api.errors import CODES
from nitro_assistants.models import Decision, Review
from tests.admin.conftest import make_reply_review, make_tool_review
from tests.interactions.conftest import BLUEPRINT, QUESTIONS, plan, step

pytestmark = pytest.mark.django_db(transaction=True)

OPENAPI = "/nitro/api/openapi.json"


def error_envelope(ctx: Any, response: Any, case: Any) -> bool | None:
    """Every 4xx/5xx is the envelope of docs/protocol.md §8, with the request id in a header too."""
    if response.status_code < 400:
        return None
    body = response.json()
    assert set(body) == {"code", "message", "details"}, body
    assert body["code"] in CODES, body
    assert isinstance(body["message"], str) and body["message"], body
    details = body["details"]
    assert set(details) == {"field", "issues", "requestId", "retryable"}, body
    headers = {name.lower(): value for name, value in response.headers.items()}
    assert [details["requestId"]] == list(headers["x-request-id"]), body
    assert isinstance(details["retryable"], bool) and isinstance(details["issues"], list)
    return True


def query_fits(operation: Any, url: str) -> bool:
    """Whether the query string of ``url``, as the server reads it, fits ``operation``'s declared
    query parameters: each name declared and given once, each value of its declared type and
    schema, every required one there."""
    sent = parse_qs(urlsplit(url).query, keep_blank_values=True)
    declared = {parameter.name: parameter for parameter in operation.query}
    if not set(sent) <= set(declared):
        return False
    for name, parameter in declared.items():
        if name not in sent:
            if parameter.is_required:
                return False
            continue
        if len(sent[name]) != 1:
            return False
        schema = parameter.definition["schema"]
        value: Any = sent[name][0]
        if schema.get("type") == "integer":
            try:
                value = int(value)
            except ValueError:
                return False
        if not Draft202012Validator(schema, format_checker=FormatChecker()).is_valid(value):
            return False
    return True


def negated(case: Any, where: ParameterLocation) -> bool:
    """Whether schemathesis generated ``case``'s part ``where`` (path, query, body...) to break
    the document."""
    component = case.meta.components.get(where)
    return component is not None and component.mode.is_negative


def negative_data_rejected_as_sent(ctx: Any, response: Any, case: Any) -> bool | None:
    """Schemathesis's ``negative_data_rejection``, judged on the request that went out. A case is
    negative by what was generated, and some of that is never sent: an undeclared query
    parameter whose value is an empty list or object goes out as nothing, a one-item list as its
    item, and the Authorization header is always the test's own key. A request that went out
    fitting the document is rightly answered 200 (CI once failed on ``GET
    /reviews?thread=<uuid>&after=<n>``, reported as a query that broke ``additionalProperties``).
    Body and path negations are left to schemathesis: they go out as generated."""
    if negated(case, ParameterLocation.BODY) or negated(case, ParameterLocation.PATH):
        return negative_data_rejection(ctx, response, case)
    if not query_fits(case.operation, response.request.url):
        return negative_data_rejection(ctx, response, case)
    return None


def test_query_fits_reads_the_query_as_sent(client: Any) -> None:
    operation = schemathesis.openapi.from_wsgi(OPENAPI, WSGIHandler())["/reviews"]["GET"]
    base = "http://testserver/nitro/api/reviews"
    thread = "17a90bc5-8c28-486f-a5ae-d4c6c3882fec"
    assert query_fits(operation, base)
    assert query_fits(operation, f"{base}?thread={thread}&after=3884595645&status=decided")
    assert not query_fits(operation, f"{base}?thread={thread}&extra=")
    assert not query_fits(operation, f"{base}?after=-1")
    assert not query_fits(operation, f"{base}?after=soon")
    assert not query_fits(operation, f"{base}?limit=201")
    assert not query_fits(operation, f"{base}?limit=1&limit=2")
    assert not query_fits(operation, f"{base}?status=nonsense")
    assert not query_fits(operation, f"{base}?thread=17a90bc58c28486fa5aed4c6c3882fec")


def test_the_document_is_openapi_3_1_and_served(client: Any) -> None:
    response = client.get(OPENAPI)
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": "http://testserver/nitro/api"}]
    assert set(document["paths"]) == {
        "/sessions/{sessionId}/interactions/{interactionId}/decide",
        "/sessions/{sessionId}/interactions",
        "/sessions/{sessionId}/interactions/{interactionId}",
        "/sessions/{sessionId}/events",
        "/reviews",
        "/reviews/{reviewId}",
        "/reviews/{reviewId}/decide",
        "/reviews/{reviewId}/dismiss",
        "/grants",
        "/grants/{grantId}",
        "/grants/{grantId}/revoke",
    }


#: The sessions' endpoints in two runs of their own, as the reviews' below: the decide endpoint
#: gets every example of one, so that its checks see decisions aimed at the real session. Which
#: status codes the draws reach is not asserted (CI failed on that more than once): every code
#: a test must see is reached by a directed case (``DIRECTED`` below).
SESSION_RUNS = {"reads": (False, 80), "decide": (True, 80)}


@pytest.mark.parametrize("part", list(SESSION_RUNS))
def test_schemathesis_finds_no_server_error_and_only_enveloped_errors(
    part: str,
    interaction: Any,
    key: str,
    settings: Any,
    fake: Any,
    registered_operations: Any,
    run_tasks_inline: Any,
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "API_RATE_LIMIT": 0}
    reviews = [
        interaction("question", QUESTIONS, interaction_id="q"),
        interaction("blueprint", BLUEPRINT, interaction_id="b"),
        interaction("plan", plan(step("s1"), step("s2", optional=True)), interaction_id="p"),
    ]
    session = str(reviews[0].thread.thread_id)
    # The reviews endpoints have a run of their own (below), with reviews of every kind.
    deciding, examples = SESSION_RUNS[part]
    schema = schemathesis.openapi.from_wsgi(OPENAPI, WSGIHandler()).exclude(path_regex="^/reviews")
    schema = (schema.include if deciding else schema.exclude)(path_regex="/decide$")
    cases = st.one_of(
        schema.as_strategy(generation_mode=GenerationMode.POSITIVE),
        schema.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    checks = [
        not_a_server_error,
        error_envelope,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]

    @hypothesis_settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,  # the same examples every run: a failure here is never a fluke
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases, real=st.sampled_from([None, *reviews]))
    def run(case: Any, real: Any) -> None:
        # Half the time aim at the real session (and one of its interactions), so requests get
        # past the 404s into authentication, validation, conflicts and decisions.
        if real is not None and "sessionId" in (case.path_parameters or {}):
            case.path_parameters["sessionId"] = session
            if "interactionId" in case.path_parameters:
                case.path_parameters["interactionId"] = real.interaction_id
            if isinstance(case.body, dict) and case.body.get("revision") == 1:
                case.body["digest"] = real.digest
        extra = [negative_data_rejected_as_sent] if case.meta.generation.mode.is_negative else []
        case.call_and_validate(
            headers={**(case.headers or {}), "Authorization": f"Bearer {key}"},
            checks=checks + extra,
        )

    run()


#: The reviews endpoints in two runs of their own: the decide endpoint gets every example of
#: one (with three endpoints sharing 150, a run could reach only ten or so decisions aimed at a
#: review of their kind). The codes reached are not asserted: see ``DIRECTED``.
REVIEW_RUNS = {
    "reads": ("^/reviews(/[{]reviewId[}])?$", 100),
    "decide": ("^/reviews/[{]reviewId[}]/decide$", 150),
}


@pytest.mark.parametrize("part", list(REVIEW_RUNS))
def test_schemathesis_on_the_reviews_endpoints_reaches_decisions_of_every_kind(
    part: str,
    interaction: Any,
    opener: Any,
    key: str,
    grant: Any,
    settings: Any,
    fake: Any,
    registered_operations: Any,
    run_tasks_inline: Any,
) -> None:
    """The reviews endpoints with a caller who may decide tool calls and replies (and opened the
    interactions' session): requests aimed at real reviews get past the 404s into validation,
    conflicts and decisions."""
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "API_RATE_LIMIT": 0}
    grant(opener, "nitro_assistants.decide_review")
    reviews = [
        *(make_tool_review() for _ in range(3)),
        *(make_reply_review() for _ in range(3)),
        interaction("question", QUESTIONS, interaction_id="q"),
    ]
    # Dismiss has a test of its own below: here the examples go to reaching decisions.
    paths, examples = REVIEW_RUNS[part]
    schema = schemathesis.openapi.from_wsgi(OPENAPI, WSGIHandler()).include(path_regex=paths)
    cases = st.one_of(
        schema.as_strategy(generation_mode=GenerationMode.POSITIVE),
        schema.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    checks = [
        not_a_server_error,
        error_envelope,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]

    @hypothesis_settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases, real=st.sampled_from([None, *reviews]))
    def run(case: Any, real: Any) -> None:
        shown_id = (case.path_parameters or {}).get("reviewId")
        negative = case.meta.generation.mode.is_negative
        # Aim at a real review, unless the id is what a negative case got wrong (then an id that
        # fits would make it a positive case).
        fits = isinstance(shown_id, int) and not isinstance(shown_id, bool) and shown_id >= 1
        if real is not None and isinstance(case.body, dict) and not negative:
            # A decision aims at a review of the kind it decides: a reply's at a reply review,
            # tool calls' at a tool-call review (the rest at the interaction), else nearly every
            # positive decision would be a 400 for the wrong kind and none would go through.
            kind = next((k for k in ("tool_calls", "reply") if k in case.body), "question")
            alike = [review for review in reviews if review.kind == kind]
            real = alike[reviews.index(real) % len(alike)]
        if real is not None and shown_id is not None and (fits or not negative):
            case.path_parameters["reviewId"] = real.pk
            if isinstance(case.body, dict) and not negative:
                # What the reader was shown: a decision that may fit (a negative case keeps
                # what it got wrong).
                case.body.update(revision=real.revision, digest=real.digest)
                if "interrupt_id" in case.body:  # the pause it was shown
                    if real.interrupt_id:
                        case.body["interrupt_id"] = real.interrupt_id
                    else:
                        del case.body["interrupt_id"]
                calls = case.body.get("tool_calls")
                if isinstance(calls, list) and calls and isinstance(calls[0], dict):
                    calls[0]["id"] = "call_1"  # the held call's id: a decision that may fit
        extra = [negative_data_rejected_as_sent] if negative else []
        case.call_and_validate(
            headers={**(case.headers or {}), "Authorization": f"Bearer {key}"},
            checks=checks + extra,
        )

    run()


def test_schemathesis_on_dismiss_finds_no_server_error_and_conforms(
    opener: Any, key: str, grant: Any, settings: Any, fake: Any
) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "API_RATE_LIMIT": 0}
    grant(opener, "nitro_assistants.decide_review")
    reviews = [make_tool_review() for _ in range(3)]
    schema = schemathesis.openapi.from_wsgi(OPENAPI, WSGIHandler()).include(path_regex="/dismiss$")
    checks = [
        not_a_server_error,
        error_envelope,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]

    @hypothesis_settings(
        max_examples=30,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=schema.as_strategy(generation_mode=GenerationMode.POSITIVE),
        real=st.sampled_from([None, *reviews]),
    )
    def run(case: Any, real: Any) -> None:
        if real is not None:
            case.path_parameters["reviewId"] = real.pk
        case.call_and_validate(
            headers={**(case.headers or {}), "Authorization": f"Bearer {key}"}, checks=checks
        )

    run()


# -- directed cases: each status code a run above used to hope to draw ------------------------------


@dataclass
class World:
    """What a directed request aims at: a session with a question, a held tool call, a drafted
    reply and a tool call already decided, all of which the key's user may decide."""

    session: str
    question: Review
    tool: Review
    reply: Review
    decided: Review


def shown(review: Review, **body: Any) -> dict[str, Any]:
    return {"revision": review.revision, "digest": review.digest, **body}


ANSWER = {"decision": "answer", "answers": [{"questionId": "day", "optionIds": ["tue"]}]}
APPROVE_CALL = {"tool_calls": [{"id": "call_1", "action": "approve"}]}
UNKNOWN_REVIEW = 2**31 - 1
SESSION_DECIDE = "/sessions/{sessionId}/interactions/{interactionId}/decide"

#: name -> (path, method, the status it must get, the request: Case(...) arguments).
DIRECTED: dict[str, tuple[str, str, int, Callable[[World], dict[str, Any]]]] = {
    "a session's interactions": (
        "/sessions/{sessionId}/interactions", "GET", 200,
        lambda w: {"path_parameters": {"sessionId": w.session}},
    ),
    "an unknown session's interactions": (
        "/sessions/{sessionId}/interactions", "GET", 404,
        lambda w: {"path_parameters": {"sessionId": str(uuid.UUID(int=7))}},
    ),
    "an interaction": (
        "/sessions/{sessionId}/interactions/{interactionId}", "GET", 200,
        lambda w: {"path_parameters": {"sessionId": w.session, "interactionId": "q"}},
    ),
    "a session's events after a negative cursor": (
        "/sessions/{sessionId}/events", "GET", 400,
        lambda w: {"path_parameters": {"sessionId": w.session}, "query": {"after": -1}},
    ),
    "an answer to the question": (
        SESSION_DECIDE, "POST", 200,
        lambda w: {
            "path_parameters": {"sessionId": w.session, "interactionId": "q"},
            "body": shown(w.question, **ANSWER),
        },
    ),
    "a decision the question does not take": (
        SESSION_DECIDE, "POST", 400,
        lambda w: {
            "path_parameters": {"sessionId": w.session, "interactionId": "q"},
            "body": shown(w.question, decision="accept"),
        },
    ),
    "a decision on an unknown interaction": (
        SESSION_DECIDE, "POST", 404,
        lambda w: {
            "path_parameters": {"sessionId": w.session, "interactionId": "nope"},
            "body": shown(w.question, **ANSWER),
        },
    ),
    "an answer to another revision of the question": (
        SESSION_DECIDE, "POST", 409,
        lambda w: {
            "path_parameters": {"sessionId": w.session, "interactionId": "q"},
            "body": {**shown(w.question, **ANSWER), "revision": w.question.revision + 1},
        },
    ),
    "the reviews": ("/reviews", "GET", 200, lambda w: {}),
    "the reviews past the page limit": ("/reviews", "GET", 400, lambda w: {"query": {"limit": 201}}),
    "a review": (
        "/reviews/{reviewId}", "GET", 200, lambda w: {"path_parameters": {"reviewId": w.tool.pk}}
    ),
    "an unknown review": (
        "/reviews/{reviewId}", "GET", 404,
        lambda w: {"path_parameters": {"reviewId": UNKNOWN_REVIEW}},
    ),
    "an approved tool call": (
        "/reviews/{reviewId}/decide", "POST", 200,
        lambda w: {"path_parameters": {"reviewId": w.tool.pk}, "body": shown(w.tool, **APPROVE_CALL)},
    ),
    "an approved reply": (
        "/reviews/{reviewId}/decide", "POST", 200,
        lambda w: {
            "path_parameters": {"reviewId": w.reply.pk},
            "body": shown(w.reply, reply={"action": "approve"}),
        },
    ),
    "a decision on a call the review does not hold": (
        "/reviews/{reviewId}/decide", "POST", 400,
        lambda w: {
            "path_parameters": {"reviewId": w.tool.pk},
            "body": shown(w.tool, tool_calls=[{"id": "call_9", "action": "approve"}]),
        },
    ),
    "a decision on an unknown review": (
        "/reviews/{reviewId}/decide", "POST", 404,
        lambda w: {"path_parameters": {"reviewId": UNKNOWN_REVIEW}, "body": shown(w.tool, **APPROVE_CALL)},
    ),
    "a decision on another digest": (
        "/reviews/{reviewId}/decide", "POST", 409,
        lambda w: {
            "path_parameters": {"reviewId": w.tool.pk},
            "body": {**shown(w.tool, **APPROVE_CALL), "digest": "0" * 64},
        },
    ),
    "a dismissed review": (
        "/reviews/{reviewId}/dismiss", "POST", 200,
        lambda w: {"path_parameters": {"reviewId": w.tool.pk}},
    ),
    "an unknown review dismissed": (
        "/reviews/{reviewId}/dismiss", "POST", 404,
        lambda w: {"path_parameters": {"reviewId": UNKNOWN_REVIEW}},
    ),
    "a decided review dismissed": (
        "/reviews/{reviewId}/dismiss", "POST", 409,
        lambda w: {"path_parameters": {"reviewId": w.decided.pk}},
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(DIRECTED))
def test_each_status_code_is_reached_by_a_directed_request_that_fits_the_document(
    name: str,
    interaction: Any,
    opener: Any,
    key: str,
    grant: Any,
    settings: Any,
    fake: Any,
    registered_operations: Any,
    run_tasks_inline: Any,
) -> None:
    """Every status code the runs above exercise (200, 400, 404, 409 on each endpoint) by a
    request sent on purpose, checked as they check theirs: no server error, the envelope, the
    documented status, content type and schema."""
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "API_RATE_LIMIT": 0}
    grant(opener, "nitro_assistants.decide_review")
    question = interaction("question", QUESTIONS, interaction_id="q")
    world = World(
        session=str(question.thread.thread_id),
        question=question,
        tool=make_tool_review(),
        reply=make_reply_review(),
        decided=make_tool_review(status=Review.Status.DECIDED),
    )
    path, method, status, request = DIRECTED[name]
    operation = schemathesis.openapi.from_wsgi(OPENAPI, WSGIHandler())[path][method]
    case = operation.Case(**request(world))
    response = case.call_and_validate(
        headers={"Authorization": f"Bearer {key}"},
        checks=[
            not_a_server_error,
            error_envelope,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
    )
    assert response.status_code == status, response.text
    if status == 200 and method == "POST" and "decide" in path:
        assert Decision.objects.count() == 1


def test_session_without_credentials_is_401_in_the_envelope(client: Any) -> None:
    response = client.get("/nitro/api/sessions/00000000-0000-0000-0000-000000000000/events")
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"
