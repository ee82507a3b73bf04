"""The decide API through the test client: each decision type, its validation errors, the opener
rule, stale revisions and digests, edits as revisions, and the error envelope."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import Decision, Event, Review, Run
from tests.interactions.conftest import (
    BLUEPRINT,
    DAY_FIELD,
    QUESTIONS,
    Api,
    assert_error,
    plan,
    step,
)

pytestmark = pytest.mark.django_db


def events_of(review: Review) -> list[tuple[str, str, int]]:
    return [
        (e.verb, e.data.get("status"), e.data.get("revision"))
        for e in Event.objects.filter(
            thread=review.thread, data__interactionId=review.interaction_id
        )
    ]


# -- answer ---------------------------------------------------------------------------------------


def test_answer_is_recorded_and_queued_as_the_resume_value(
    api: Api, interaction: Any, run_tasks_inline: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    review = interaction("question", QUESTIONS)
    answers = [{"questionId": "day", "optionIds": ["fri"]}, {"questionId": "why", "text": " late "}]
    with django_capture_on_commit_callbacks(execute=True):
        response = api.decide(review, {"decision": "answer", "answers": answers})
    assert response.status_code == 200, response.json()
    shown = response.json()
    assert shown["status"] == "answered"
    assert shown["revision"] == 1 and shown["digest"] == review.digest
    assert shown["questions"] == QUESTIONS
    expected = {
        "decision": "answer",
        "answers": [
            {"questionId": "day", "optionIds": ["fri"]},
            {"questionId": "why", "optionIds": [], "text": "late"},
        ],
        "comments": [],
        "disabledSteps": [],
        "edits": {},
        "note": None,
        "decidedBy": "olivia",
    }
    assert {k: shown["decision"][k] for k in expected} == expected
    assert shown["decision"]["delivery"] == "pending"
    decision = Decision.objects.get(review=review)
    assert decision.answer == expected
    assert decision.decided_by.username == "olivia"
    assert decision.run.kind == Run.Kind.RESUME and decision.run.input == {"answer": expected}
    assert run_tasks_inline == [("resume_thread", decision.pk)]
    assert events_of(review) == [
        ("review_requested", "pending", 1),
        ("review_decided", "answered", 1),
    ]


def test_answer_is_delivered_through_execute_resume(
    api: Api, interaction: Any, fake: Any, run_tasks_inline: list[Any]
) -> None:
    """The one path: the resume task hands the stored value to the client as ``answer``."""
    from nitro_assistants import services

    review = interaction("question", QUESTIONS)
    api.decide(
        review, {"decision": "answer", "answers": [{"questionId": "day", "optionIds": ["tue"]}]}
    )
    decision = Decision.objects.get(review=review)
    services.execute_resume(decision.pk)
    (call,) = fake.called("review")
    assert call["answer"] == decision.answer
    assert call["interrupt_id"] == review.interrupt_id
    assert call["reply"] is None and call["tool_calls"] is None
    decision.refresh_from_db()
    review.refresh_from_db()
    assert decision.outcome == Decision.Outcome.APPLIED
    assert review.status == Review.Status.ANSWERED  # the interaction keeps its own status


@pytest.mark.parametrize(
    ("answers", "field", "issue"),
    [
        ([], "answers", "Question 'day' needs an answer"),
        ([{"questionId": "nope", "optionIds": ["tue"]}], "answers[0].questionId", "No question"),
        (
            [{"questionId": "day", "optionIds": ["mon"]}],
            "answers[0].optionIds",
            "has no option 'mon'",
        ),
        ([{"questionId": "day", "optionIds": ["tue", "fri"]}], "answers[0].optionIds", "takes one"),
        ([{"questionId": "day", "text": "Monday"}], "answers[0].text", "takes no free text"),
        (
            [
                {"questionId": "day", "optionIds": ["tue"]},
                {"questionId": "day", "optionIds": ["fri"]},
            ],
            "answers[1].questionId",
            "answered twice",
        ),
        (
            [{"questionId": "day", "optionIds": ["tue"]}, {"questionId": "why", "optionIds": []}],
            "answers[1].text",
            "needs a text answer",
        ),
    ],
)
def test_answer_validation(
    api: Api, interaction: Any, answers: list[Any], field: str, issue: str
) -> None:
    review = interaction("question", QUESTIONS)
    body = assert_error(
        api.decide(review, {"decision": "answer", "answers": answers}), 400, "invalid_json", field
    )
    assert any(issue in text for text in body["details"]["issues"]), body
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert not Decision.objects.exists()


def test_free_text_is_taken_where_other_is_allowed(api: Api, interaction: Any) -> None:
    questions = [{**QUESTIONS[0], "allowOther": True}]
    review = interaction("question", questions)
    response = api.decide(
        review, {"decision": "answer", "answers": [{"questionId": "day", "text": "Monday"}]}
    )
    assert response.status_code == 200, response.json()


def test_a_question_takes_no_accept_or_revision_request(api: Api, interaction: Any) -> None:
    review = interaction("question", QUESTIONS)
    assert_error(api.decide(review, {"decision": "accept"}), 400, "invalid_json", "decision")
    assert_error(
        api.decide(review, {"decision": "request_revision", "note": "x"}),
        400,
        "invalid_json",
        "decision",
    )


# -- blueprint: accept, request_revision, cancel -----------------------------------------------------


def test_accept_a_blueprint(api: Api, interaction: Any) -> None:
    review = interaction("blueprint", BLUEPRINT)
    response = api.decide(review, {"decision": "accept", "note": "Looks right"})
    assert response.status_code == 200
    assert response.json()["status"] == "accepted"
    assert response.json()["decision"]["note"] == "Looks right"
    assert response.json()["blueprint"] == BLUEPRINT


def test_request_revision_of_a_blueprint_with_comments_pinned_to_fields(
    api: Api, interaction: Any
) -> None:
    review = interaction("blueprint", BLUEPRINT)
    comments = [{"text": "Use production", "field": "environment"}]
    response = api.decide(review, {"decision": "request_revision", "comments": comments})
    assert response.status_code == 200
    assert response.json()["status"] == "revision_requested"
    assert Decision.objects.get(review=review).answer["comments"] == comments


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"decision": "request_revision"}, "note"),
        ({"decision": "request_revision", "note": "   "}, "note"),
        (
            {"decision": "request_revision", "comments": [{"text": "x", "field": "nope"}]},
            "comments[0].field",
        ),
        (
            {"decision": "request_revision", "comments": [{"text": "x", "stepId": "s1"}]},
            "comments[0].stepId",
        ),
        (
            {"decision": "request_revision", "comments": [{"field": "environment"}]},
            "comments[0].text",
        ),
        ({"decision": "approve"}, "decision"),
        (
            {"decision": "accept", "answers": [{"questionId": "day", "optionIds": ["tue"]}]},
            "answers",
        ),
        ({"decision": "accept", "comments": [{"text": "x"}]}, "comments"),
    ],
)
def test_blueprint_validation(api: Api, interaction: Any, body: dict[str, Any], field: str) -> None:
    review = interaction("blueprint", BLUEPRINT)
    assert_error(api.decide(review, body), 400, "invalid_json", field)


def test_cancel_any_pending_interaction(api: Api, interaction: Any, thread: Any) -> None:
    question = interaction("question", QUESTIONS, interaction_id="q")
    response = api.decide(question, {"decision": "cancel", "note": "Not needed"})
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    plan_review = interaction("plan", plan(step("s1")), interaction_id="p")
    assert api.decide(plan_review, {"decision": "cancel"}).json()["status"] == "cancelled"


# -- plan: approve, disabledSteps, edits ------------------------------------------------------------


def test_approve_with_disabled_optional_step_and_an_edit_records_a_user_revision(
    api: Api,
    interaction: Any,
    registered_operations: list[Any],
    run_tasks_inline: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    content = plan(
        step("s1", input={"day": "Tuesday", "id": 42}, fields=[DAY_FIELD]),
        step("s2", optional=True),
        step("s3", dependsOn=["s1"]),
    )
    review = interaction("plan", content)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.decide(
            review,
            {"decision": "approve", "disabledSteps": ["s2"], "edits": {"s1": {"day": "Friday"}}},
        )
    assert response.status_code == 200, response.json()
    shown = response.json()
    assert shown["revision"] == 2 and shown["origin"] == "user"
    assert shown["plan"]["steps"][0]["input"] == {"day": "Friday", "id": 42}
    assert shown["digest"] != review.digest
    assert shown["status"] == "executing"
    assert [(s["stepId"], s["status"]) for s in shown["stepResults"]] == [
        ("s1", "pending"),
        ("s3", "pending"),
    ]
    # The steps ran (inline here) once the decision committed.
    after = api.get(f"sessions/{review.thread.thread_id}/interactions/int-1").json()
    assert after["status"] == "completed"
    assert [(s["stepId"], s["status"]) for s in after["stepResults"]] == [
        ("s1", "completed"),
        ("s3", "completed"),
    ]
    assert after["stepResults"][0] == {
        "stepId": "s1",
        "status": "completed",
        "message": "done",
        "link": "https://crm.example/42",
        "resourceId": "42",
        "resourceKind": "appointment",
    }
    assert registered_operations == [
        ("test.ok", {"day": "Friday", "id": 42}, "olivia"),
        ("test.ok", {}, "olivia"),
    ]
    review.refresh_from_db()
    assert review.status == Review.Status.SUPERSEDED
    edited = Review.objects.get(interaction_id="int-1", revision=2)
    assert edited.origin == "user" and edited.interrupt_ids == review.interrupt_ids
    decision = Decision.objects.get(review=edited)
    assert decision.answer["edits"] == {"s1": {"day": "Friday"}}
    assert decision.answer["disabledSteps"] == ["s2"]
    # Every state change of the interaction, in order; the latest is its state.
    assert events_of(review) == [
        ("review_requested", "pending", 1),
        ("review_superseded", "superseded", 1),
        ("interaction_edited", "pending", 2),
        ("review_decided", "executing", 2),
        ("plan_started", "executing", 2),
        ("plan_step", "executing", 2),
        ("plan_step", "executing", 2),
        ("plan_step", "executing", 2),
        ("plan_step", "executing", 2),
        ("plan_completed", "completed", 2),
    ]
    # The old revision can no longer be decided; the listing shows the latest revision only.
    assert_error(api.decide(review, {"decision": "cancel"}), 409, "conflict", "revision")
    listed = api.get(f"sessions/{review.thread.thread_id}/interactions").json()["items"]
    assert [(i["interactionId"], i["revision"]) for i in listed] == [("int-1", 2)]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"disabledSteps": ["s1"]}, "disabledSteps[0]"),  # not optional
        ({"disabledSteps": ["zz"]}, "disabledSteps[0]"),
        ({"disabledSteps": ["s2", "s2"]}, "disabledSteps"),
        ({"edits": {"s1": {"time": "10:00"}}}, "edits.s1.time"),  # not a declared field
        ({"edits": {"s1": {"day": "Sunday"}}}, "edits.s1.day"),  # not an option
        ({"edits": {"s1": {"day": ""}}}, "edits.s1.day"),  # required
        ({"edits": {"zz": {"day": "Friday"}}}, "edits.zz"),
        ({"edits": {"s2": {"day": "Friday"}}, "disabledSteps": ["s2"]}, "edits.s2"),
        ({"edits": {"s1": "Friday"}}, "edits"),
        ({"answers": [{"questionId": "day"}]}, "answers"),
    ],
)
def test_approve_validation(
    api: Api, interaction: Any, registered_operations: Any, body: dict[str, Any], field: str
) -> None:
    review = interaction(
        "plan", plan(step("s1", fields=[DAY_FIELD]), step("s2", optional=True, fields=[DAY_FIELD]))
    )
    assert_error(api.decide(review, {"decision": "approve", **body}), 400, "invalid_json", field)
    assert Review.objects.filter(interaction_id="int-1").count() == 1  # no edit revision either


def test_request_revision_of_a_plan_with_comments_pinned_to_steps(
    api: Api, interaction: Any, registered_operations: Any
) -> None:
    review = interaction("plan", plan(step("s1", fields=[DAY_FIELD])))
    comments = [{"text": "Friday please", "stepId": "s1", "field": "day"}, {"text": "And text me"}]
    response = api.decide(review, {"decision": "request_revision", "comments": comments})
    assert response.status_code == 200
    assert response.json()["status"] == "revision_requested"
    bad = interaction("plan", plan(step("s1")), interaction_id="int-2", title="Other")
    assert_error(
        api.decide(
            bad, {"decision": "request_revision", "comments": [{"text": "x", "stepId": "s9"}]}
        ),
        400,
        "invalid_json",
        "comments[0].stepId",
    )


def test_unknown_action_makes_the_plan_invalid_on_arrival(api: Api, interaction: Any) -> None:
    review = interaction("plan", plan(step("s1", action="crm.nope")))
    shown = api.get(f"sessions/{review.thread.thread_id}/interactions/int-1").json()
    assert shown["problems"] == ["Step s1: unknown action 'crm.nope'"]
    body = assert_error(
        api.decide(review, {"decision": "approve"}), 400, "invalid_json", "decision"
    )
    assert "Step s1: unknown action 'crm.nope'" in body["details"]["issues"]
    # It can still be sent back or dismissed.
    assert (
        api.decide(
            review, {"decision": "request_revision", "note": "Use crm.reschedule"}
        ).status_code
        == 200
    )


# -- opener, revision, digest ------------------------------------------------------------------------


def test_only_the_opener_may_decide(api: Api, interaction: Any, stranger: Any) -> None:
    from nitro_assistants.models import ApiKey

    review = interaction("question", QUESTIONS)
    other_key = ApiKey.generate(stranger, "sam")[1]
    body = {"decision": "answer", "answers": [{"questionId": "day", "optionIds": ["tue"]}]}
    assert_error(api.decide(review, body, key=other_key), 403, "forbidden")
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert api.decide(review, body).status_code == 200


def test_stale_revision_and_wrong_digest_are_conflicts(api: Api, interaction: Any) -> None:
    first = interaction("blueprint", BLUEPRINT)
    second = interaction("blueprint", {**BLUEPRINT, "environment": "production"})
    assert second.revision == 2
    first.refresh_from_db()
    assert first.status == Review.Status.SUPERSEDED
    stale = assert_error(api.decide(first, {"decision": "accept"}), 409, "conflict", "revision")
    assert "at revision 2" in stale["message"]
    assert_error(
        api.decide(second, {"decision": "accept", "digest": first.digest}),
        409,
        "conflict",
        "digest",
    )
    assert_error(
        api.decide(second, {"decision": "accept", "revision": 3}), 409, "conflict", "revision"
    )
    assert not Decision.objects.exists()
    assert api.decide(second, {"decision": "accept"}).status_code == 200
    # Decided already: deciding again is a conflict, not a second decision.
    assert_error(api.decide(second, {"decision": "cancel"}), 409, "conflict", "revision")
    assert Decision.objects.count() == 1


# -- the envelope for request errors -----------------------------------------------------------------


def _url(review: Review) -> str:
    return (
        f"/nitro/api/sessions/{review.thread.thread_id}/interactions/{review.interaction_id}/decide"
    )


def test_request_errors_are_in_the_envelope(api: Api, interaction: Any, key: str) -> None:
    review = interaction("question", QUESTIONS)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    post = api.client.post
    assert_error(
        post(_url(review), data="{not json", content_type="application/json", **auth),
        400,
        "invalid_json",
    )
    assert_error(
        post(_url(review), data="[]", content_type="application/json", **auth), 400, "invalid_json"
    )
    assert_error(
        post(_url(review), data="a=1", content_type="text/plain", **auth),
        415,
        "unsupported_media_type",
    )
    big = json.dumps({"decision": "cancel", "note": "x" * (65 * 1024)})
    assert_error(
        post(_url(review), data=big, content_type="application/json", **auth),
        413,
        "payload_too_large",
    )
    assert_error(api.client.get(_url(review), **auth), 405, "not_found")
    missing = f"/nitro/api/sessions/{review.thread.thread_id}/interactions/nope/decide"
    assert_error(
        post(missing, data="{}", content_type="application/json", **auth),
        404,
        "not_found",
        "interactionId",
    )
    unknown = "/nitro/api/sessions/00000000-0000-0000-0000-000000000000/interactions/int-1/decide"
    assert_error(
        post(unknown, data="{}", content_type="application/json", **auth),
        404,
        "not_found",
        "sessionId",
    )
    assert_error(post("/nitro/api/sessions/not-a-uuid/events", **auth), 405, "not_found")
    assert_error(api.client.get("/nitro/api/no/such/thing", **auth), 404, "not_found")
    long_id = f"/nitro/api/sessions/{review.thread.thread_id}/interactions/{'x' * 129}/decide"
    assert_error(
        post(long_id, data="{}", content_type="application/json", **auth),
        400,
        "invalid_json",
        "interactionId",
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"decision": "maybe"}, "decision"),
        ({"decision": "cancel", "revision": 0}, "revision"),
        ({"decision": "cancel", "revision": 9007199254740992}, "revision"),
        ({"decision": "cancel", "revision": True}, "revision"),
        ({"decision": "cancel", "digest": "x" * 129}, "digest"),
        ({"decision": "cancel", "digest": 5}, "digest"),
        ({"decision": "cancel", "note": "x" * 4001}, "note"),
        (
            {"decision": "answer", "answers": [{"questionId": "day", "optionIds": ["tue"]}] * 5},
            "answers",
        ),
        ({"decision": "request_revision", "comments": [{"text": "x"}] * 31}, "comments"),
        ({"decision": "approve", "disabledSteps": [f"s{i}" for i in range(13)]}, "disabledSteps"),
        ({"decision": "cancel", "colour": "red"}, "colour"),
        ({"decision": "answer", "answers": [{"questionId": "x" * 129}]}, "answers[0].questionId"),
    ],
)
def test_field_limits(api: Api, interaction: Any, body: dict[str, Any], field: str) -> None:
    review = interaction("question", QUESTIONS)
    error = assert_error(api.decide(review, body), 400, "invalid_json", field)
    assert error["details"]["issues"]


def test_unexpected_errors_are_500_internal_error_in_the_envelope(
    api: Api, interaction: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    review = interaction("question", QUESTIONS)

    def boom(*args: Any, **kwargs: Any) -> None:
        raise ZeroDivisionError("bug")

    monkeypatch.setattr("nitro_assistants.api.views.latest_revision", boom)
    body = assert_error(api.decide(review, {"decision": "cancel"}), 500, "internal_error")
    assert "bug" not in body["message"]


# -- the Assistants server unreachable ----------------------------------------------------------------


def test_a_decision_sends_nothing_to_the_server_in_the_request_and_a_repeat_is_the_same_one(
    api: Api,
    interaction: Any,
    fake: Any,
    run_tasks_inline: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The decision is stored and its delivery queued; the web request never waits on the
    Assistants server (a server that is down costs the reviewer nothing), and sending the same
    decision again (after a timeout, a double click) answers the same decision."""
    # The server is down for the whole test: every thread_state call would raise.
    fake.raises["thread_state"] = NitroAssistantsError("connection refused", transient=True)
    review = interaction("question", QUESTIONS)
    body = {"decision": "answer", "answers": [{"questionId": "day", "optionIds": ["tue"]}]}
    with django_capture_on_commit_callbacks(execute=False):
        first = api.decide(review, body)
    assert first.status_code == 200 and first.json()["status"] == "answered"
    assert fake.called("thread_state") == []  # nothing asked of the server inside the request
    decision = Decision.objects.get(review=review)
    assert decision.outcome == Decision.Outcome.PENDING
    with django_capture_on_commit_callbacks(execute=True):
        again = api.decide(review, body)
    assert again.status_code == 200 and again.json()["status"] == "answered"
    assert Decision.objects.count() == 1
    assert run_tasks_inline == []  # the repeat enqueues nothing more


# -- reading -----------------------------------------------------------------------------------------


def test_the_listing_shows_each_interactions_latest_revision_in_constant_queries(
    api: Api, interaction: Any
) -> None:
    """One item per interaction, its latest revision, in the order those were asked; the same
    number of queries however many interactions and revisions the session has."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for interaction_id in ("a", "b", "a"):
        review = interaction("question", QUESTIONS, interaction_id=interaction_id)
    path = f"sessions/{review.thread.thread_id}/interactions"
    api.get(path)  # the key's first use also records when it was used
    with CaptureQueriesContext(connection) as few:
        listed = api.get(path).json()["items"]
    assert [(i["interactionId"], i["revision"]) for i in listed] == [("b", 1), ("a", 2)]

    for interaction_id in ("c", "b", "d", "a", "c"):
        interaction("blueprint", BLUEPRINT, interaction_id=interaction_id)
    with CaptureQueriesContext(connection) as many:
        listed = api.get(path).json()["items"]
    assert [(i["interactionId"], i["revision"], i["status"]) for i in listed] == [
        ("b", 2, "superseded"),
        ("d", 1, "superseded"),
        ("a", 3, "superseded"),
        ("c", 2, "pending"),
    ]
    assert len(many) == len(few), [q["sql"] for q in many]


def test_interactions_and_events_are_readable_by_the_opener(
    api: Api, interaction: Any, stranger: Any, grant: Any
) -> None:
    from nitro_assistants.models import ApiKey

    interaction("question", QUESTIONS, interaction_id="a")
    second = interaction("blueprint", BLUEPRINT, interaction_id="b")
    session = second.thread.thread_id
    listed = api.get(f"sessions/{session}/interactions").json()["items"]
    assert [(i["interactionId"], i["kind"], i["status"]) for i in listed] == [
        ("a", "question", "superseded"),
        ("b", "blueprint", "pending"),
    ]
    assert api.get(f"sessions/{session}/interactions/b").json()["digest"] == second.digest
    first = api.get(f"sessions/{session}/events", limit=2).json()
    assert [e["verb"] for e in first["items"]] == ["review_requested", "review_superseded"]
    rest = api.get(f"sessions/{session}/events", limit=2, after=first["next"]).json()
    assert [e["verb"] for e in rest["items"]] == ["review_requested"] and rest["next"] is None
    assert rest["items"][0]["interactionId"] == "b" and rest["items"][0]["status"] == "pending"
    assert_error(api.get(f"sessions/{session}/events", limit=0), 400, "invalid_query", "limit")
    assert_error(api.get(f"sessions/{session}/events", after="x"), 400, "invalid_query", "after")
    sams = ApiKey.generate(stranger, "sam")[1]
    assert_error(api.get(f"sessions/{session}/interactions", key=sams), 403, "forbidden")
    grant(stranger, "nitro_assistants.view_review")
    assert api.get(f"sessions/{session}/interactions", key=sams).status_code == 200


TEXT_FIELD = {"name": "note", "label": "Note", "widget": "text", "required": False}
NUMBER_FIELD = {"name": "minutes", "label": "Minutes", "widget": "number", "required": True}
BOOLEAN_FIELD = {"name": "urgent", "label": "Urgent", "widget": "checkbox"}
DATE_FIELD = {"name": "on", "label": "On", "widget": "date"}
MULTI_FIELD = {"name": "days", "label": "Days", "widget": "multiselect", "options": ["Tue", "Fri"]}
UNKNOWN_FIELD = {"name": "colour", "label": "Colour", "widget": "swatch"}


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"note": {"text": "an object"}}, "edits.s1.note"),  # an object for a text field
        ({"note": ["a", "list"]}, "edits.s1.note"),
        ({"note": 42}, "edits.s1.note"),
        ({"minutes": "ten"}, "edits.s1.minutes"),
        ({"minutes": True}, "edits.s1.minutes"),  # a boolean is no number
        ({"urgent": "yes"}, "edits.s1.urgent"),
        ({"on": "next Tuesday"}, "edits.s1.on"),
        ({"days": "Tue"}, "edits.s1.days"),
        ({"days": ["Tue", "Sun"]}, "edits.s1.days"),
        ({"colour": {"r": 1}}, "edits.s1.colour"),  # no widget edits an object
    ],
)
def test_a_plan_edit_must_fit_its_fields_widget(
    api: Api, interaction: Any, registered_operations: Any, edit: dict[str, Any], field: str
) -> None:
    fields = [TEXT_FIELD, NUMBER_FIELD, BOOLEAN_FIELD, DATE_FIELD, MULTI_FIELD, UNKNOWN_FIELD]
    review = interaction("plan", plan(step("s1", fields=fields)))
    body = {"decision": "approve", "edits": {"s1": edit}}
    error = assert_error(api.decide(review, body), 400, "invalid_json", field)
    assert "takes" in error["message"] or "not an option" in error["message"]
    assert not Decision.objects.exists()


def test_plan_edits_that_fit_their_widgets_are_accepted(
    api: Api, interaction: Any, registered_operations: Any, run_tasks_inline: Any
) -> None:
    fields = [TEXT_FIELD, NUMBER_FIELD, BOOLEAN_FIELD, DATE_FIELD, MULTI_FIELD, UNKNOWN_FIELD]
    review = interaction("plan", plan(step("s1", fields=fields)))
    edit = {
        "note": "ring first",
        "minutes": 15,
        "urgent": True,
        "on": "2026-12-08",
        "days": ["Fri"],
        "colour": "teal",
    }
    response = api.decide(review, {"decision": "approve", "edits": {"s1": edit}})
    assert response.status_code == 200, response.json()
    assert Decision.objects.get().answer["edits"] == {"s1": edit}
