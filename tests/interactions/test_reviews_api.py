"""The reviews endpoints of the decide API: a client that is not the admin lists the reviews it
may decide, reads one with its conversation, and decides every kind with the admin's bodies and
rules. Per kind: stale content (another revision, another digest, decided by someone else) is a
409 naming the field, and the same decision posted twice is recorded once."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from nitro_assistants import services
from nitro_assistants.models import ApiKey, Decision, Review, Run, Thread
from nitro_assistants.services import decidable_by, may_decide
from tests.admin.conftest import MOVE_ARGS, make_reply_review, make_tool_review
from tests.interactions.conftest import BLUEPRINT, QUESTIONS, assert_error, plan, step

pytestmark = pytest.mark.django_db

DECIDE = "nitro_assistants.decide_review"
VIEW = "nitro_assistants.view_review"


class Caller:
    """One API client of the reviews endpoints, with its own key."""

    def __init__(self, client: Client, user: User) -> None:
        self.client = client
        self.user = user
        self.key = ApiKey.generate(user, "tests")[1]

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(
            f"/nitro/api/{path}", params, HTTP_AUTHORIZATION=f"Bearer {self.key}"
        )

    def post(self, path: str, body: Any) -> Any:
        return self.client.post(
            f"/nitro/api/{path}",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.key}",
        )

    def decide(self, review: Review, body: dict[str, Any], **stamp: Any) -> Any:
        shown = {"revision": review.revision, "digest": review.digest, **stamp}
        return self.post(f"reviews/{review.pk}/decide", {**shown, **body})


@pytest.fixture
def caller(client: Client, fake: Any) -> Callable[..., Caller]:
    def make(user: User) -> Caller:
        return Caller(client, user)

    return make


@pytest.fixture
def reviewer(grant: Any) -> User:
    """Not staff: a chat-ops bot's user that holds ``decide_review`` (and nothing else)."""
    return grant(User.objects.create_user("bot"), DECIDE)


@pytest.fixture
def reviewer_api(caller: Callable[..., Caller], reviewer: User) -> Caller:
    return caller(reviewer)


@pytest.fixture
def opener_api(caller: Callable[..., Caller], opener: User) -> Caller:
    return caller(opener)


# -- each kind: a pending review, the decision that fits it, who decides it ----------------------

APPROVE_CALL = {"tool_calls": [{"id": "call_1", "action": "approve"}]}
EDIT_REPLY = {"reply": {"action": "edit", "content": "See you Friday at 10."}}
ANSWER = {"decision": "answer", "answers": [{"questionId": "day", "optionIds": ["fri"]}]}
KINDS = ["tool_calls", "reply", "question", "blueprint", "plan"]


def pending_of(kind: str, interaction: Any) -> tuple[Review, dict[str, Any]]:
    if kind == "tool_calls":
        return make_tool_review(), APPROVE_CALL
    if kind == "reply":
        return make_reply_review(), EDIT_REPLY
    if kind == "question":
        return interaction("question", QUESTIONS), ANSWER
    if kind == "blueprint":
        return interaction("blueprint", BLUEPRINT), {"decision": "accept"}
    return interaction("plan", plan(step("s1"))), {"decision": "approve"}


@pytest.fixture
def world(
    kind: str,
    interaction: Any,
    reviewer_api: Caller,
    opener_api: Caller,
    registered_operations: Any,
) -> tuple[Review, dict[str, Any], Caller]:
    """The pending review of ``kind``, its decision, and the API caller who may decide it (a
    decide_review holder for tool calls and replies, the session's opener for interactions)."""
    review, body = pending_of(kind, interaction)
    return review, body, (reviewer_api if kind in ("tool_calls", "reply") else opener_api)


def someone_else(grant: Any) -> User:
    """Another person who may decide any review in the admin (over the API, an interaction only
    its opener may)."""
    return grant(User.objects.create_user("other", is_staff=True), DECIDE, VIEW)


# -- stale content and double posts, per kind ----------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_decision_on_another_revision_is_a_conflict_naming_revision(
    kind: str, world: tuple[Review, dict[str, Any], Caller]
) -> None:
    review, body, api = world
    response = api.decide(review, body, revision=review.revision + 1)
    assert_error(response, 409, "conflict", "revision")
    assert not Decision.objects.exists()
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING


@pytest.mark.parametrize("kind", KINDS)
def test_a_decision_on_another_digest_is_a_conflict_naming_digest(
    kind: str, world: tuple[Review, dict[str, Any], Caller]
) -> None:
    review, body, api = world
    response = api.decide(review, body, digest="0" * 64)
    assert_error(response, 409, "conflict", "digest")
    assert not Decision.objects.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_review_decided_by_someone_else_is_a_conflict(
    kind: str, world: tuple[Review, dict[str, Any], Caller], grant: Any
) -> None:
    review, body, api = world
    other = someone_else(grant)
    services.decide(
        review.pk,
        other,
        {"revision": review.revision, "digest": review.digest, **body},
        via="admin",
    )
    response = api.decide(review, body)
    assert_error(response, 409, "conflict", "revision")
    (decision,) = Decision.objects.all()
    assert decision.decided_by == other


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_decision_posted_twice_is_recorded_once(
    kind: str, world: tuple[Review, dict[str, Any], Caller]
) -> None:
    review, body, api = world
    first = api.decide(review, body)
    assert first.status_code == 200, first.json()
    second = api.decide(review, body)
    assert second.status_code == 200, second.json()
    assert second.json() == first.json()
    (decision,) = Decision.objects.all()
    assert decision.decided_by == api.user
    assert Run.objects.filter(kind=Run.Kind.RESUME).count() == 1
    shown = first.json()
    assert shown["id"] == review.pk and shown["status"] != "pending"
    assert shown["decision"]["decidedBy"] == api.user.username


@pytest.mark.parametrize("kind", ["tool_calls", "reply"])
def test_another_decision_by_the_same_person_after_theirs_is_a_conflict(
    kind: str, world: tuple[Review, dict[str, Any], Caller]
) -> None:
    """A replay is the same decision: a different one on a decided review is stale, not a
    replay."""
    review, body, api = world
    assert api.decide(review, body).status_code == 200
    other = (
        {"tool_calls": [{"id": "call_1", "action": "reject", "message": "No"}]}
        if kind == "tool_calls"
        else {"reply": {"action": "approve"}}
    )
    assert_error(api.decide(review, other), 409, "conflict", "revision")
    assert Decision.objects.count() == 1


# -- deciding tool calls and replies -------------------------------------------------------------


def test_approving_a_held_call_records_it_and_queues_the_resume(
    reviewer_api: Caller, django_capture_on_commit_callbacks: Any, monkeypatch: Any, fake: Any
) -> None:
    review = make_tool_review()
    sent: list[tuple[str, Any]] = []
    monkeypatch.setattr(
        "nitro_assistants.services.enqueue.send",
        lambda name, *args, **kw: sent.append((name, args)),
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = reviewer_api.decide(
            review,
            {"tool_calls": [{"id": "call_1", "action": "edit", "args": {**MOVE_ARGS, "day": "Friday"}}],
             "note": "  Friday suits them  "},
        )  # fmt: skip
    assert response.status_code == 200, response.json()
    shown = response.json()
    assert shown["status"] == "decided"
    decision = Decision.objects.get(review=review)
    assert decision.tool_calls == [
        {"id": "call_1", "action": "edit", "args": {**MOVE_ARGS, "day": "Friday"}}
    ]
    assert decision.note == "Friday suits them"
    assert decision.decided_by.username == "bot"
    assert shown["decision"] == {
        "decidedBy": "bot",
        "decidedAt": decision.decided_at.isoformat(),
        "outcome": "pending",
        "error": None,
        "note": "Friday suits them",
        "tool_calls": decision.tool_calls,
        "reply": None,
        "answer": None,
        "shown": None,
    }
    assert sent == [("nitro_assistants.resume_thread", (decision.pk,))]
    assert fake.calls == []  # nothing reaches the Assistants server inside the request


def test_editing_a_reply_records_the_new_text(reviewer_api: Caller) -> None:
    review = make_reply_review()
    response = reviewer_api.decide(review, EDIT_REPLY)
    assert response.status_code == 200, response.json()
    assert Decision.objects.get(review=review).reply == EDIT_REPLY["reply"]


@pytest.mark.parametrize(
    ("make", "body", "field", "issue"),
    [
        (make_tool_review, {"tool_calls": [{"id": "call_1", "action": "fly"}]}, "tool_calls",
         "Invalid review action `fly`"),
        (make_tool_review, {"tool_calls": [{"id": "call_2", "action": "approve"}]}, "tool_calls",
         "call_2"),
        (make_tool_review, {"tool_calls": [{"id": "call_1", "action": "edit"}]}, "tool_calls",
         "needs `args`"),
        (make_tool_review, {"tool_calls": {"call_1": "approve"}}, "tool_calls", "must be"),
        (make_tool_review, {"reply": {"action": "approve"}}, "reply", ""),
        (make_tool_review, {**APPROVE_CALL, "note": 5}, "note", "`note` must be a string"),
        (make_tool_review, {**APPROVE_CALL, "decision": "answer"}, "decision", "Unknown field"),
        (make_tool_review, {}, None, "exactly one of reply or tool_calls"),
        (make_tool_review, {"tool_calls": [{"id": "call_1", "action": "approve", "args": 5}]},
         "tool_calls[0].args", "must be an object"),
        (make_tool_review, {"tool_calls": [{"id": "call_1", "action": "reject", "message": []}]},
         "tool_calls[0].message", "must be a string"),
        (make_tool_review, {"tool_calls": [{"id": "call_1", "action": "approve", "why": "x"}]},
         "tool_calls[0].why", "Unknown field"),
        (make_reply_review, {"reply": {"action": "edit"}}, "reply", "needs `content`"),
        (make_reply_review, {"reply": {"action": "approve", "content": 5}}, "reply.content",
         "must be a string"),
        (make_reply_review, {"reply": {"action": "approve", "colour": "red"}}, "reply.colour",
         "Unknown field"),
        (make_reply_review, {"reply": {"action": "respond"}}, "reply", "respond"),
        (make_reply_review, {"decision": "answer"}, "decision", "Unknown field"),
    ],
)  # fmt: skip
def test_a_decision_that_does_not_fit_is_a_400_naming_the_field(
    reviewer_api: Caller, make: Callable[[], Review], body: Any, field: str | None, issue: str
) -> None:
    review = make()
    error = assert_error(reviewer_api.decide(review, body), 400, "invalid_json")
    assert error["details"]["field"] == field, error
    assert issue in error["message"], error
    assert not Decision.objects.exists()
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (APPROVE_CALL, "revision"),  # a decision on whatever is pending now: refused
        ({"digest": "x", **APPROVE_CALL}, "revision"),
        ({"revision": 1, **APPROVE_CALL}, "digest"),
        ({"revision": "1", "digest": "x", **APPROVE_CALL}, "revision"),
        ({"revision": 0, "digest": "x", **APPROVE_CALL}, "revision"),
        ({"revision": 1, "digest": "", **APPROVE_CALL}, "digest"),
    ],
)
def test_a_decision_must_name_what_it_was_shown(
    reviewer_api: Caller, body: dict[str, Any], field: str
) -> None:
    review = make_tool_review()
    assert_error(reviewer_api.post(f"reviews/{review.pk}/decide", body), 400, "invalid_json", field)
    assert not Decision.objects.exists()


@pytest.mark.parametrize("body", [[], "approve", None, 3])
def test_a_body_that_is_not_an_object_is_a_400(reviewer_api: Caller, body: Any) -> None:
    review = make_tool_review()
    assert_error(reviewer_api.post(f"reviews/{review.pk}/decide", body), 400, "invalid_json")


def test_a_body_that_is_not_json_is_refused_in_the_envelope(reviewer_api: Caller) -> None:
    review = make_tool_review()
    url = f"/nitro/api/reviews/{review.pk}/decide"
    auth = {"HTTP_AUTHORIZATION": f"Bearer {reviewer_api.key}"}
    client = reviewer_api.client
    assert_error(
        client.post(url, "{", content_type="application/json", **auth), 400, "invalid_json"
    )
    assert_error(
        client.post(url, "x", content_type="text/plain", **auth), 415, "unsupported_media_type"
    )
    assert_error(client.get(url, **auth), 405, "not_found")  # 405 in the envelope: GET /decide
    assert not Decision.objects.exists()


# -- who may decide --------------------------------------------------------------------------------


def test_without_decide_review_a_tool_call_review_is_not_found_or_forbidden(
    caller: Callable[..., Caller], grant: Any
) -> None:
    review = make_tool_review()
    nobody = caller(User.objects.create_user("nobody"))
    assert_error(nobody.decide(review, APPROVE_CALL), 404, "not_found", "reviewId")
    assert_error(nobody.get(f"reviews/{review.pk}"), 404, "not_found")
    looker = caller(grant(User.objects.create_user("looker"), VIEW))
    assert looker.get(f"reviews/{review.pk}").status_code == 200  # may read reviews ...
    error = assert_error(looker.decide(review, APPROVE_CALL), 403, "forbidden")  # ... not decide
    assert DECIDE in error["message"]
    assert not Decision.objects.exists()


def test_a_signed_in_decider_needs_the_csrf_token_to_decide(reviewer: User) -> None:
    review = make_tool_review()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(reviewer)
    assert browser.get("/nitro/api/reviews").status_code == 200  # reading needs no token
    body = json.dumps({"revision": review.revision, "digest": review.digest, **APPROVE_CALL})
    url = f"/nitro/api/reviews/{review.pk}/decide"
    refused = browser.post(url, body, content_type="application/json")
    assert_error(refused, 403, "forbidden", "X-CSRFToken")
    assert not Decision.objects.exists()
    browser.get("/admin/login/")  # sets the CSRF cookie
    token = browser.cookies["csrftoken"].value
    done = browser.post(url, body, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert done.status_code == 200, done.json()
    assert Decision.objects.get().decided_by == reviewer


def test_the_opener_of_a_session_does_not_decide_its_tool_calls_without_the_permission(
    opener_api: Caller, opener: User
) -> None:
    review = make_tool_review()
    Thread.objects.filter(pk=review.thread_id).update(opened_by=opener)
    assert_error(opener_api.decide(review, APPROVE_CALL), 404, "not_found")
    assert not Decision.objects.exists()


def test_an_interaction_is_decided_over_the_api_by_its_opener_only(
    interaction: Any, reviewer_api: Caller, opener_api: Caller, grant: Any
) -> None:
    review = interaction("question", QUESTIONS)
    assert_error(reviewer_api.decide(review, ANSWER), 404, "not_found")
    grant(reviewer_api.user, VIEW)
    reviewer_api.user = User.objects.get(pk=reviewer_api.user.pk)
    error = assert_error(reviewer_api.decide(review, ANSWER), 403, "forbidden")
    assert "opened this session" in error["message"]
    response = opener_api.decide(review, ANSWER)
    assert response.status_code == 200, response.json()
    shown = response.json()
    assert shown["status"] == "answered"
    assert shown["interaction"]["status"] == "answered"
    assert shown["interaction"]["decision"]["decidedBy"] == "olivia"
    assert shown["decision"]["answer"]["decision"] == "answer"


def test_an_interaction_decision_that_does_not_fit_names_the_field(
    interaction: Any, opener_api: Caller
) -> None:
    review = interaction("question", QUESTIONS)
    bad = {"decision": "answer", "answers": [{"questionId": "day", "optionIds": ["mon"]}]}
    assert_error(opener_api.decide(review, bad), 400, "invalid_json", "answers[0].optionIds")
    assert_error(opener_api.decide(review, APPROVE_CALL), 400, "invalid_json", "tool_calls")
    url = f"reviews/{review.pk}/decide"
    assert_error(opener_api.post(url, ANSWER), 400, "invalid_json", "digest")  # not named
    assert not Decision.objects.exists()


def test_approving_a_plan_over_the_reviews_endpoint_checks_the_operations_permissions(
    interaction: Any, opener_api: Caller, registered_operations: Any
) -> None:
    review = interaction("plan", plan(step("s1", action="test.guarded")))
    error = assert_error(opener_api.decide(review, {"decision": "approve"}), 403, "forbidden")
    assert "Missing permission nitro_assistants.change_thread" in error["details"]["issues"]
    assert not Decision.objects.exists()


def test_an_edit_while_approving_answers_with_the_revision_it_recorded(
    interaction: Any, opener_api: Caller, registered_operations: Any
) -> None:
    day = {"name": "day", "widget": "select", "options": ["Tuesday", "Friday"], "required": True}
    review = interaction("plan", plan(step("s1", fields=[day], input={"day": "Tuesday"})))
    body = {"decision": "approve", "edits": {"s1": {"day": "Friday"}}}
    response = opener_api.decide(review, body)
    assert response.status_code == 200, response.json()
    shown = response.json()
    edited = Review.objects.get(interaction_id=review.interaction_id, revision=2)
    assert shown["id"] == edited.pk and shown["revision"] == 2 and shown["status"] == "executing"
    assert shown["interaction"]["origin"] == "user"
    # the review shown first is now superseded: the same post again is answered by the replay
    again = opener_api.decide(review, body)
    assert again.status_code == 200, again.json()
    assert again.json()["id"] == edited.pk
    assert Decision.objects.count() == 1


# -- reading one -----------------------------------------------------------------------------------


def test_a_tool_call_review_is_shown_with_the_conversation_up_to_the_held_call(
    reviewer_api: Caller,
) -> None:
    review = make_tool_review()
    thread = review.thread
    later = {"type": "tool", "id": "t1", "content": "moved", "tool_call_id": "call_1"}
    thread.values = {"messages": [*thread.messages, later]}  # the snapshot moved on
    thread.save()
    response = reviewer_api.get(f"reviews/{review.pk}")
    assert response.status_code == 200, response.json()
    shown = response.json()
    assert {k: shown[k] for k in ("id", "kind", "status", "revision", "digest")} == {
        "id": review.pk,
        "kind": "tool_calls",
        "status": "pending",
        "revision": 1,
        "digest": review.digest,
    }
    assert shown["interruptIds"] == review.interrupt_ids
    assert shown["sessionId"] == str(thread.thread_id) and shown["assistant"] == "walkthrough"
    assert shown["tool_calls"] == [
        {
            "id": "call_1",
            "name": "reschedule_appointment",
            "args": MOVE_ARGS,
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
            "must_show": [],  # no rule names a part to show
        }
    ]
    assert shown["reply"] is None and shown["interaction"] is None and shown["decision"] is None
    assert shown["conversation"] == [
        {"role": "human", "id": "h1", "text": "Can I move my appointment to Tuesday?",
         "tool_calls": [], "tool_call_id": None, "name": None},
        {"role": "ai", "id": "a1", "text": "Let me do that for you.",
         "tool_calls": [{"id": "call_1", "name": "reschedule_appointment", "args": MOVE_ARGS,
                         "held": True}],
         "tool_call_id": None, "name": None},
    ]  # fmt: skip


def test_a_reply_review_is_shown_with_its_draft_and_the_conversation_before_it(
    reviewer_api: Caller,
) -> None:
    review = make_reply_review()
    shown = reviewer_api.get(f"reviews/{review.pk}").json()
    assert shown["reply"] == {
        "content": "Done! See you Tuesday at 10.",
        "allowed_decisions": ["approve", "edit", "reject"],
        "description": "Review this SMS before it is sent",
        "must_show": [],
    }
    assert [m["id"] for m in shown["conversation"]] == ["h1"]  # the draft is not repeated


def test_an_interaction_is_shown_as_the_session_endpoints_show_it(
    interaction: Any, opener_api: Caller
) -> None:
    review = interaction("question", QUESTIONS)
    shown = opener_api.get(f"reviews/{review.pk}").json()
    session = opener_api.get(
        f"sessions/{review.thread.thread_id}/interactions/{review.interaction_id}"
    ).json()
    assert shown["interaction"] == session
    assert shown["kind"] == "question" and shown["digest"] == session["digest"]


@pytest.mark.parametrize("review_id", ["0", "-1", "abc", "1.5", "99999999", str(2**63), "١"])
def test_a_malformed_or_unknown_id_is_not_found(reviewer_api: Caller, review_id: str) -> None:
    make_tool_review()
    assert_error(reviewer_api.get(f"reviews/{review_id}"), 404, "not_found")
    body = {"revision": 1, "digest": "x", **APPROVE_CALL}
    assert_error(reviewer_api.post(f"reviews/{review_id}/decide", body), 404, "not_found")


# -- the list --------------------------------------------------------------------------------------


def test_the_list_holds_the_reviews_the_caller_may_decide_oldest_first(
    interaction: Any, reviewer_api: Caller, opener_api: Caller, opener: User, grant: Any
) -> None:
    tool = make_tool_review()
    reply = make_reply_review()
    question = interaction("question", QUESTIONS)
    decided = make_tool_review()
    services.decide(decided, reviewer_api.user, APPROVE_CALL, via="api")
    mine = make_tool_review(assistant_key="interactions")
    Thread.objects.filter(pk=mine.thread_id).update(opened_by=opener)

    def ids(api: Caller, **params: Any) -> list[int]:
        response = api.get("reviews", **params)
        assert response.status_code == 200, response.json()
        return [item["id"] for item in response.json()["items"]]

    assert ids(reviewer_api) == [tool.pk, reply.pk, mine.pk]  # not the question: not theirs
    assert ids(opener_api) == [question.pk]  # not the tool calls of their session: no permission
    assert ids(reviewer_api, status="decided") == [decided.pk]
    # The admin queue's word for every status (issue 40, item 15).
    assert ids(reviewer_api, status="all") == [tool.pk, reply.pk, decided.pk, mine.pk]
    assert ids(reviewer_api, kind="reply") == [reply.pk]
    assert ids(reviewer_api, assistant="interactions") == [mine.pk]
    assert ids(reviewer_api, thread=str(tool.thread.thread_id)) == [tool.pk]
    assert ids(reviewer_api, thread="00000000-0000-0000-0000-000000000000") == []
    assert ids(opener_api, kind="question", status="pending") == [question.pk]
    grant(opener, DECIDE)
    assert ids(opener_api) == [tool.pk, reply.pk, question.pk, mine.pk]
    item = opener_api.get("reviews", kind="question").json()["items"][0]
    assert item["interaction"]["questions"] == QUESTIONS and "conversation" not in item


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "open"}, "status"),
        ({"status": ""}, "status"),
        ({"kind": "mailbox"}, "kind"),
        ({"assistant": "nope"}, "assistant"),
        ({"thread": "not-a-uuid"}, "thread"),
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"after": "-1"}, "after"),
        ({"assignee": "me"}, "assignee"),
    ],
)
def test_a_filter_that_names_nothing_is_a_400_naming_it(
    reviewer_api: Caller, params: dict[str, str], field: str
) -> None:
    # A GET has no body: its code says the query is at fault, not JSON (issue 40, item 15).
    assert_error(reviewer_api.get("reviews", **params), 400, "invalid_query", field)


def test_the_list_pages_with_a_cursor(reviewer_api: Caller) -> None:
    made = [make_tool_review().pk for _ in range(5)]
    seen: list[int] = []
    after = None
    pages = 0
    while True:
        params = {"limit": 2, **({"after": after} if after is not None else {})}
        page = reviewer_api.get("reviews", **params).json()
        seen += [item["id"] for item in page["items"]]
        pages += 1
        after = page["next"]
        if after is None:
            break
    assert seen == made and pages == 3


def test_the_list_takes_the_same_number_of_queries_for_any_page_size(
    interaction: Any, reviewer_api: Caller, opener_api: Caller, opener: User, grant: Any,
    django_assert_max_num_queries: Any, registered_operations: Any,
) -> None:  # fmt: skip
    grant(opener, DECIDE)

    def count(limit: int) -> int:
        with CaptureQueriesContext(connection) as queries:
            response = opener_api.get("reviews", limit=limit, status="pending")
        assert response.status_code == 200
        assert len(response.json()["items"]) == limit
        return len(queries)

    for n in range(2):
        make_tool_review()
        make_reply_review()
        interaction("plan", plan(step("s1")), interaction_id=f"p{n}", on=_thread(opener))
    opener_api.get("reviews")  # the key's last use is written once a minute: not in the count
    small = count(3)
    for n in range(2, 10):
        make_tool_review()
        make_reply_review()
        interaction("plan", plan(step("s1")), interaction_id=f"p{n}", on=_thread(opener))
    assert count(30) == small
    with django_assert_max_num_queries(8):
        opener_api.get("reviews", limit=30)


def _thread(opener: User) -> Thread:
    return Thread.objects.create(assistant_key="interactions", opened_by=opener)


# -- the rule of who may decide, as a query and one by one -------------------------------------------


def test_the_list_filter_and_may_decide_agree_for_every_kind_caller_and_channel(
    interaction: Any, opener: User, stranger: User, grant: Any, registered_operations: Any
) -> None:
    reviews = [pending_of(kind, interaction)[0] for kind in KINDS]
    opened = make_tool_review()
    Thread.objects.filter(pk=opened.thread_id).update(opened_by=opener)
    reviews = [Review.objects.select_related("thread").get(pk=r.pk) for r in [*reviews, opened]]
    users = [opener, stranger, grant(User.objects.create_user("d"), DECIDE)]
    users.append(grant(User.objects.create_user("od"), DECIDE))
    Thread.objects.filter(pk=reviews[2].thread_id).update(opened_by=users[3])
    reviews = [Review.objects.select_related("thread").get(pk=r.pk) for r in reviews]
    checked = 0
    for user in users:
        for via in ("admin", "api", None):
            listed = set(
                Review.objects.filter(decidable_by(user, via)).values_list("pk", flat=True)
            )
            for review in reviews:
                assert (review.pk in listed) == may_decide(user, review, via), (
                    user.username,
                    via,
                    review.kind,
                    review.thread.opened_by_id,
                )
                checked += 1
    assert checked == 4 * 3 * 6
