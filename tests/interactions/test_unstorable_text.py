"""NUL characters and lone surrogates sent to the decide API: PostgreSQL can store neither (NUL in
text or jsonb, a lone surrogate is not UTF-8), so each is a 400 ``invalid_json`` naming the field,
not retryable, and nothing is recorded; an unexpected error is retryable only when transient."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import OperationalError

from nitro_assistants.models import Decision, Event, Review
from tests.interactions.conftest import BLUEPRINT, QUESTIONS, Api, assert_error, plan, step

pytestmark = pytest.mark.django_db

NUL, SURROGATE = "\x00", "\ud800"
TEXT_FIELD = {"name": "day", "label": "Day", "widget": "text", "required": True, "help": ""}


def nothing_recorded(review: Review) -> None:
    review.refresh_from_db()
    assert review.status == Review.Status.PENDING
    assert not Decision.objects.exists()
    assert not Event.objects.filter(verb="interaction_decided").exists()


def raw_post(api: Api, url: str, text: str) -> Any:
    """Post ``text`` as it is: ``json.dumps`` would escape a NUL as ``\\u0000`` too, but a raw
    NUL byte inside a JSON string is what a careless client sends."""
    return api.client.post(
        url, data=text.encode("utf-8"), content_type="application/json", **api.headers()
    )


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(
    ("kind", "body", "field"),
    [
        ("question", {"decision": "cancel", "note": "a{bad}b"}, "note"),
        (
            "question_other",
            {"decision": "answer", "answers": [{"questionId": "day", "text": "Mon{bad}"}]},
            "answers[0].text",
        ),
        (
            "blueprint",
            {
                "decision": "request_revision",
                "comments": [{"text": "x{bad}", "field": "environment"}],
            },
            "comments[0].text",
        ),
        ("plan", {"decision": "approve", "edits": {"s1": {"day": "Fri{bad}"}}}, "edits.s1.day"),
        ("plan", {"decision": "approve", "edits": {"s1{bad}": {"day": "Fri"}}}, "edits"),
        ("question", {"decision": "cancel", "digest{bad}": "x"}, None),
    ],
    ids=["note", "answer-text", "comment", "edit-value", "edit-key", "top-level-key"],
)
def test_unstorable_text_in_the_body_is_a_400_naming_the_field(
    api: Api,
    interaction: Any,
    registered_operations: Any,
    kind: str,
    body: dict[str, Any],
    field: str | None,
    bad: str,
) -> None:
    if kind == "question_other":
        review = interaction("question", [{**QUESTIONS[0], "allowOther": True}])
    elif kind == "plan":
        review = interaction("plan", plan(step("s1", input={"day": "Tue"}, fields=[TEXT_FIELD])))
    else:
        review = interaction(kind, {"question": QUESTIONS, "blueprint": BLUEPRINT}[kind])
    sent = json.loads(json.dumps(body).replace("{bad}", json.dumps(bad)[1:-1]))
    error = assert_error(api.decide(review, sent), 400, "invalid_json", field)
    what = "NUL character" if bad == NUL else "lone surrogate"
    assert what in error["message"], error
    assert error["details"]["retryable"] is False
    nothing_recorded(review)


def test_a_raw_nul_byte_in_a_json_string_is_a_400(api: Api, interaction: Any) -> None:
    review = interaction("question", QUESTIONS)
    text = json.dumps(
        {"decision": "cancel", "note": "a\u0000b", "revision": 1, "digest": review.digest}
    ).replace("\\u0000", "\x00")
    url = f"/nitro/api/sessions/{review.thread.thread_id}/interactions/int-1/decide"
    response = raw_post(api, url, text)
    # JSON forbids control characters inside strings: the parser refuses it before we look.
    assert_error(response, 400, "invalid_json")
    nothing_recorded(review)


@pytest.mark.parametrize("path", ["decide", ""], ids=["decide", "read"])
def test_a_nul_in_the_interaction_id_of_the_path_is_a_400(
    api: Api, interaction: Any, path: str
) -> None:
    review = interaction("question", QUESTIONS)
    url = f"/nitro/api/sessions/{review.thread.thread_id}/interactions/int%00-1"
    if path:
        body = json.dumps({"decision": "cancel", "revision": 1, "digest": review.digest})
        response = api.client.post(
            f"{url}/{path}", data=body, content_type="application/json", **api.headers()
        )
    else:
        response = api.client.get(url, **api.headers())
    error = assert_error(response, 400, "invalid_json", "interactionId")
    assert "NUL character" in error["message"]
    assert error["details"]["retryable"] is False
    nothing_recorded(review)


def test_a_nul_in_the_session_id_of_the_path_is_a_400(api: Api, interaction: Any) -> None:
    interaction("question", QUESTIONS)
    error = assert_error(
        api.client.get("/nitro/api/sessions/abc%00/interactions", **api.headers()),
        400,
        "invalid_json",
        "sessionId",
    )
    assert error["details"]["retryable"] is False


@pytest.mark.parametrize("where", ["prefix", "secret"])
@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
def test_a_nul_or_a_surrogate_in_the_api_key_is_a_401(
    api: Api, interaction: Any, key: str, where: str, bad: str
) -> None:
    """In the prefix the lookup met it, in the rest of a real key's prefix the hash did."""
    review = interaction("question", QUESTIONS)
    prefix, _, rest = key.removeprefix("nak_").partition("_")
    if where == "prefix":
        prefix = prefix[:3] + bad + prefix[3:]
    else:
        rest = rest[:3] + bad + rest[3:]
    response = api.client.get(
        f"/nitro/api/sessions/{review.thread.thread_id}/interactions",
        HTTP_AUTHORIZATION=f"Bearer nak_{prefix}_{rest}",
    )
    assert_error(response, 401, "unauthorized")


def test_an_unexpected_error_is_not_retryable_but_a_lost_database_connection_is(
    api: Api, interaction: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    review = interaction("question", QUESTIONS)
    errors: list[Exception] = [ZeroDivisionError("bug")]

    def fail(*args: Any, **kwargs: Any) -> None:
        raise errors[0]

    monkeypatch.setattr("nitro_assistants.api.views.latest_revision", fail)
    body = assert_error(api.decide(review, {"decision": "cancel"}), 500, "internal_error")
    assert body["details"]["retryable"] is False
    errors[0] = OperationalError("server closed the connection unexpectedly")
    body = assert_error(api.decide(review, {"decision": "cancel"}), 500, "internal_error")
    assert body["details"]["retryable"] is True
