"""The client against the real LangGraph Agent Server running the project's graphs."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from nitro_assistants.client import (
    Assistants,
    ReviewSupersededError,
    RunError,
    ThreadResumptionError,
)

pytestmark = pytest.mark.server

MOVE = "Can I move my appointment to Tuesday?"
CUSTOMER = {"role": "user", "content": MOVE}


def tools_message(*calls: tuple[str, dict[str, Any]]) -> dict[str, str]:
    body = json.dumps([{"name": name, "args": args} for name, args in calls])
    return {"role": "user", "content": f"tools: {body}"}


def tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["type"] == "tool"]


def test_review_flow_walkthrough(client: Assistants) -> None:
    """The Ruby client's walkthrough: tool pause, approve, reply pause, edit, delivered."""
    thread_id = str(uuid.uuid4())
    result = client.run(thread_id=thread_id, assistant_id="walkthrough", messages=[CUSTOMER])
    assert result.interrupted is True
    assert result.reply is None
    review = result.review
    assert review is not None and review.kind == "tool_calls" and review.reply is None
    human = result.messages[0]
    assert [
        {k: c[k] for k in ("previous_message_id", "name", "args", "allowed_decisions")}
        for c in review.tool_calls
    ] == [
        {
            "previous_message_id": human["id"],
            "name": "reschedule_appointment",
            "args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"},
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
        }
    ]
    assert review.interrupt_id and len(review.interrupt_id) == 32

    pending = client.under_review(thread_id=thread_id)
    assert pending is not None
    assert pending.tool_calls == review.tool_calls
    assert pending.interrupt_id == review.interrupt_id

    call_id = pending.tool_calls[0]["id"]
    result = client.review(
        thread_id=thread_id,
        assistant_id="walkthrough",
        reviewer_id="jane@example.com",
        interrupt_id=pending.interrupt_id,
        tool_calls=[{"id": call_id, "action": "approve"}],
    )
    assert result.review is not None and result.review.kind == "reply"
    assert result.review.tool_calls == []
    draft = result.review.reply
    assert draft is not None
    assert draft.content == "Done! Appointment 42 moved to Tuesday at 10:00"
    assert draft.description == "Review this SMS before it is sent"
    assert draft.allowed_decisions == ["approve", "edit", "reject"]
    assert result.reply is None

    edited = "Done! You're booked for Tuesday at 10am. Reply STOP to cancel."
    result = client.review(
        thread_id=thread_id,
        assistant_id="walkthrough",
        reviewer_id="jane@example.com",
        interrupt_id=draft.interrupt_id,
        reply={"action": "edit", "content": edited},
        reviewed_at="2026-10-18T14:03:00Z",
    )
    assert result.interrupted is False
    assert result.reply == edited
    assert result.delivery is not None and result.delivery.delivered
    assert result.delivery.tool == "send_sms" and result.delivery.attempts == 1
    assert client.under_review(thread_id=thread_id) is None

    last = client.thread_messages(thread_id=thread_id)[-1]
    assert last["id"] == draft.message_id, "an edit replaces the draft under the same id"
    assert last["response_metadata"]["review"] == {
        "type": "edited",
        "reviewer_id": "jane@example.com",
        "reviewed_at": "2026-10-18T14:03:00Z",
    }


def test_second_reviewer_is_superseded_and_nothing_applied(client: Assistants) -> None:
    thread_id = str(uuid.uuid4())
    first = client.run(thread_id=thread_id, assistant_id="walkthrough", messages=[CUSTOMER])
    assert first.review is not None
    stale_id = first.review.interrupt_id
    call_id = first.review.tool_calls[0]["id"]
    after = client.review(
        thread_id=thread_id,
        assistant_id="walkthrough",
        reviewer_id="jane@example.com",
        interrupt_id=stale_id,
        tool_calls=[{"id": call_id, "action": "approve"}],
    )
    assert after.review is not None and after.review.kind == "reply"
    before = client.thread_state(thread_id=thread_id)

    with pytest.raises(ReviewSupersededError) as raised:
        client.review(
            thread_id=thread_id,
            assistant_id="walkthrough",
            reviewer_id="sam@example.com",
            interrupt_id=stale_id,
            tool_calls=[{"id": call_id, "action": "reject"}],
        )
    assert f"no longer paused on {stale_id}" in str(raised.value)
    now = client.thread_state(thread_id=thread_id)
    assert now["checkpoint"] == before["checkpoint"]
    assert client.under_review(thread_id=thread_id).interrupt_id == after.review.interrupt_id


def test_race_between_check_and_resume_is_reported_not_applied(
    client: Assistants, langgraph_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another reviewer resumes between our state read and our resume: the server ignores our
    keyed resume (it answers 200), and the client must notice and say so."""
    thread_id = str(uuid.uuid4())
    first = client.run(thread_id=thread_id, assistant_id="tools", messages=[CUSTOMER])
    assert first.review is not None
    seen_state = client.thread_state(thread_id=thread_id)
    call_id = first.review.tool_calls[0]["id"]
    other = Assistants(base_url=langgraph_server.url, api_key="k", user_id="other")
    won = other.review(
        thread_id=thread_id,
        assistant_id="tools",
        reviewer_id="jane",
        interrupt_id=first.review.interrupt_id,
        tool_calls=[{"id": call_id, "action": "reject", "message": "no"}],
    )
    assert won.reply and won.reply.startswith("Done! User rejected")
    # Our reviewer still sees the state read before the other decision landed.
    monkeypatch.setattr(client, "_state", lambda thread_id, error: seen_state)
    with pytest.raises(ReviewSupersededError):
        client.review(
            thread_id=thread_id,
            assistant_id="tools",
            reviewer_id="sam",
            interrupt_id=first.review.interrupt_id,
            tool_calls=[{"id": call_id, "action": "approve"}],
        )
    moved = tool_messages(other.thread_messages(thread_id=thread_id))
    assert len(moved) == 1 and moved[0]["status"] == "error", "the tool never ran"


def test_race_with_the_thread_paused_again_is_reported_not_applied(
    client: Assistants, langgraph_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The winner's resume paused again (on the reply): our keyed resume is answered 200 with
    that new pause; the client must not mistake it for its own."""
    thread_id = str(uuid.uuid4())
    first = client.run(thread_id=thread_id, assistant_id="walkthrough", messages=[CUSTOMER])
    assert first.review is not None
    seen_state = client.thread_state(thread_id=thread_id)
    other = Assistants(base_url=langgraph_server.url, api_key="k", user_id="other")
    won = other.review(
        thread_id=thread_id,
        assistant_id="walkthrough",
        reviewer_id="jane",
        interrupt_id=first.review.interrupt_id,
        tool_calls=[{"id": first.review.tool_calls[0]["id"], "action": "approve"}],
    )
    assert won.review is not None and won.review.kind == "reply"
    checkpoint = other.thread_state(thread_id=thread_id)["checkpoint"]
    monkeypatch.setattr(client, "_state", lambda thread_id, error: seen_state)
    with pytest.raises(ReviewSupersededError):
        client.review(
            thread_id=thread_id,
            assistant_id="walkthrough",
            reviewer_id="sam",
            interrupt_id=first.review.interrupt_id,
            tool_calls=[{"id": first.review.tool_calls[0]["id"], "action": "reject"}],
        )
    assert other.thread_state(thread_id=thread_id)["checkpoint"] == checkpoint
    assert other.under_review(thread_id=thread_id).interrupt_id == won.review.interrupt_id


def test_new_customer_message_supersedes_a_waiting_reply(client: Assistants) -> None:
    thread_id = str(uuid.uuid4())
    first = client.run(
        thread_id=thread_id,
        assistant_id="walkthrough",
        messages=[{"role": "user", "content": "reply: See you Monday"}],
    )
    assert first.review is not None and first.review.reply is not None
    second = client.run(
        thread_id=thread_id,
        assistant_id="walkthrough",
        messages=[{"role": "user", "content": "reply: See you Friday instead"}],
        known_thread=True,
    )
    assert second.review is not None and second.review.reply is not None
    assert second.review.reply.content == "See you Friday instead"
    texts = [m["content"] for m in client.thread_messages(thread_id=thread_id)]
    assert "See you Monday" not in texts, "the undecided draft leaves the conversation"
    with pytest.raises(ReviewSupersededError):
        client.review(
            thread_id=thread_id,
            assistant_id="walkthrough",
            reviewer_id="jane",
            interrupt_id=first.review.interrupt_id,
            reply={"action": "approve"},
        )
    assert client.under_review(thread_id=thread_id).interrupt_id == second.review.interrupt_id


def _paused(
    client: Assistants, *calls: tuple[str, dict[str, Any]], graph: str = "tools"
) -> tuple[str, Any]:
    thread_id = str(uuid.uuid4())
    result = client.run(thread_id=thread_id, assistant_id=graph, messages=[tools_message(*calls)])
    assert result.interrupted and result.review is not None
    return thread_id, result.review


RESCHEDULE = ("reschedule_appointment", {"appointment_id": 42, "day": "Tuesday", "time": "10:00"})


@pytest.mark.parametrize(
    ("decision", "tool_result", "status"),
    [
        ({"action": "approve"}, "Appointment 42 moved to Tuesday at 10:00", "success"),
        ({"action": "edit", "args": {"time": "11:30"}}, "moved to Tuesday at 11:30", "success"),
        ({"action": "reject", "message": "Wrong day"}, "The tool was not executed", "error"),
        ({"action": "respond", "message": "Customer called in"}, "Customer called in", "success"),
    ],
)
def test_tool_call_decisions_take_effect(
    client: Assistants, decision: dict[str, Any], tool_result: str, status: str
) -> None:
    thread_id, review = _paused(client, RESCHEDULE)
    result = client.review(
        thread_id=thread_id,
        assistant_id="tools",
        reviewer_id="jane",
        interrupt_id=review.interrupt_id,
        tool_calls=[{"id": review.tool_calls[0]["id"], **decision}],
    )
    assert result.interrupted is False
    (tool,) = tool_messages(result.messages)
    assert tool_result in tool["content"] and tool["status"] == status
    assert result.reply == "Done! " + tool["content"]
    assert "Wrong day" not in json.dumps(result.messages), "a reject reason never reaches the model"
    if decision.get("message"):
        recorded = client.thread_state(thread_id=thread_id)["metadata"]
        assert recorded["reviewer_id"] == "jane"
        if decision["action"] == "reject":
            assert recorded["review_messages"] == {review.tool_calls[0]["id"]: "Wrong day"}


def test_only_held_calls_are_reviewed_and_unheld_ones_run(client: Assistants) -> None:
    lookup = ("lookup_appointment", {"appointment_id": 7})
    thread_id, review = _paused(client, lookup, RESCHEDULE)
    assert [c["name"] for c in review.tool_calls] == ["reschedule_appointment"]
    with pytest.raises(ThreadResumptionError, match="not under review"):
        client.review(
            thread_id=thread_id,
            assistant_id="tools",
            reviewer_id="jane",
            tool_calls=[
                {"id": review.tool_calls[0]["id"], "action": "approve"},
                {"id": "call-1-0", "action": "approve"},
            ],
        )
    result = client.review(
        thread_id=thread_id,
        assistant_id="tools",
        reviewer_id="jane",
        tool_calls=[{"id": review.tool_calls[0]["id"], "action": "approve"}],
    )
    assert sorted(t["name"] for t in tool_messages(result.messages)) == [
        "lookup_appointment",
        "reschedule_appointment",
    ]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"tool_calls": [{"id": "nope", "action": "approve"}]}, "`nope` is not under review"),
        ({"tool_calls": []}, "missing: `call-1-0`"),
        (
            {"tool_calls": [{"id": "call-1-0", "action": "edit", "args": {"hour": 3}}]},
            "no argument `hour`",
        ),
        ({"tool_calls": [{"id": "call-1-0", "action": "respond"}]}, "needs a `message`"),
        (
            {"tool_calls": [{"id": "call-1-0", "action": "explode"}]},
            "Invalid review action `explode`",
        ),
        ({"tool_calls": [{"id": "call-1-0", "action": "approve"}] * 2}, "more than once"),
        ({"reply": {"action": "approve"}, "interrupt_id": "x" * 32}, "no longer paused on"),
        ({"reply": {"action": "approve"}}, "interrupt_id is required"),
        (
            {
                "tool_calls": [{"id": "call-1-0", "action": "approve"}],
                "reply": {"action": "approve"},
            },
            "exactly one",
        ),
    ],
)
def test_each_invalid_review_is_refused_then_a_correct_one_works(
    client: Assistants, bad: dict[str, Any], message: str
) -> None:
    thread_id, review = _paused(client, RESCHEDULE)
    before = client.thread_state(thread_id=thread_id)["checkpoint"]
    with pytest.raises(ThreadResumptionError, match=message):
        client.review(thread_id=thread_id, assistant_id="tools", reviewer_id="jane", **bad)
    assert client.thread_state(thread_id=thread_id)["checkpoint"] == before
    result = client.review(
        thread_id=thread_id,
        assistant_id="tools",
        reviewer_id="jane",
        interrupt_id=review.interrupt_id,
        tool_calls=[{"id": "call-1-0", "action": "approve"}],
    )
    assert result.reply == "Done! Appointment 42 moved to Tuesday at 10:00"


def test_disallowed_decision_for_a_restricted_tool(client: Assistants) -> None:
    thread_id, review = _paused(client, ("cancel_appointment", {"appointment_id": 9}))
    assert review.tool_calls[0]["allowed_decisions"] == ["approve", "reject"]
    with pytest.raises(ThreadResumptionError, match="allowed: approve, reject"):
        client.review(
            thread_id=thread_id,
            assistant_id="tools",
            reviewer_id="jane",
            tool_calls=[{"id": review.tool_calls[0]["id"], "action": "respond", "message": "x"}],
        )
    result = client.review(
        thread_id=thread_id,
        assistant_id="tools",
        reviewer_id="jane",
        tool_calls=[{"id": review.tool_calls[0]["id"], "action": "reject"}],
    )
    assert tool_messages(result.messages)[0]["status"] == "error"


def _reply_pause(client: Assistants, text: str) -> tuple[str, Any]:
    thread_id = str(uuid.uuid4())
    result = client.run(
        thread_id=thread_id,
        assistant_id="walkthrough",
        messages=[{"role": "user", "content": f"reply: {text}"}],
    )
    assert result.review is not None and result.review.kind == "reply"
    assert result.reply is None
    return thread_id, result.review


def _decide_reply(client: Assistants, thread_id: str, review: Any, reply: dict[str, Any]) -> Any:
    """Jane decides the reply draft she was shown."""
    return client.review(
        thread_id=thread_id,
        assistant_id="walkthrough",
        reviewer_id="jane",
        interrupt_id=review.interrupt_id,
        reply=reply,
    )


def test_reply_approve_is_delivered(client: Assistants, langgraph_server: Any) -> None:
    thread_id, review = _reply_pause(client, "See you Tuesday at 10.")
    result = _decide_reply(client, thread_id, review, {"action": "approve"})
    assert result.reply == "See you Tuesday at 10."
    assert result.delivery is not None and result.delivery.delivered
    assert result.delivery.result == "sms queued (22 chars)"
    outbox = (langgraph_server.workdir / "outbox.jsonl").read_text().splitlines()
    assert {"content": "See you Tuesday at 10."} in [json.loads(line) for line in outbox]
    stamp = result.messages[-1]["response_metadata"]["review"]
    assert stamp["type"] == "approved" and stamp["reviewer_id"] == "jane"


def test_reply_reject_removes_the_draft_and_sends_nothing(client: Assistants) -> None:
    thread_id, review = _reply_pause(client, "Wrong appointment")
    result = _decide_reply(
        client, thread_id, review, {"action": "reject", "message": "I'll call the customer."}
    )
    assert result.interrupted is False
    assert result.reply is None and result.delivery is None
    assert [m["type"] for m in result.messages] == ["human"]
    log = client.thread_state(thread_id=thread_id)["values"]["reply_reviews"]
    assert log[-1]["type"] == "reject" and log[-1]["message"] == "I'll call the customer."


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"action": "respond", "message": "hi"},
            "Invalid review action `respond` for the reply; allowed: approve, edit, reject",
        ),
        ({"action": "edit"}, "needs `content`"),
        ({"action": "edit", "content": "   "}, "needs `content`"),
    ],
)
def test_invalid_reply_reviews_are_refused_before_sending(
    client: Assistants, bad: dict[str, Any], message: str
) -> None:
    thread_id, review = _reply_pause(client, "Hello there")
    with pytest.raises(ThreadResumptionError, match=message):
        _decide_reply(client, thread_id, review, bad)
    with pytest.raises(ThreadResumptionError, match="paused on its reply"):
        client.review(
            thread_id=thread_id,
            assistant_id="walkthrough",
            reviewer_id="jane",
            tool_calls=[{"id": "x", "action": "approve"}],
        )
    result = _decide_reply(client, thread_id, review, {"action": "approve"})
    assert result.reply == "Hello there"


def test_reply_review_sent_to_a_tool_pause_is_refused(client: Assistants) -> None:
    thread_id, review = _paused(client, RESCHEDULE, graph="walkthrough")
    with pytest.raises(ThreadResumptionError, match="paused on tool calls"):
        _decide_reply(client, thread_id, review, {"action": "approve"})


def test_failed_delivery_is_reported(client: Assistants) -> None:
    thread_id, review = _reply_pause(client, "Please FAIL this one")
    result = _decide_reply(client, thread_id, review, {"action": "approve"})
    assert result.reply == "Please FAIL this one"
    delivery = result.delivery
    assert delivery is not None and delivery.failed and not delivery.delivered
    assert delivery.attempts == 2
    assert delivery.error == "RuntimeError: SMS gateway refused the message"
    assert delivery.failed_at


def test_per_call_mode_with_two_held_calls(client: Assistants) -> None:
    thread_id, review = _paused(
        client,
        RESCHEDULE,
        ("lookup_appointment", {"appointment_id": 7}),
        ("cancel_appointment", {"appointment_id": 9}),
        graph="per_call",
    )
    assert review.mode == "per_call"
    assert len(review.interrupt_ids) == 2
    calls = {c["name"]: c for c in review.tool_calls}
    assert set(calls) == {"reschedule_appointment", "cancel_appointment"}
    assert calls["cancel_appointment"]["allowed_decisions"] == ["approve", "reject"]
    assert calls["reschedule_appointment"]["allowed_decisions"] == [
        "approve",
        "edit",
        "reject",
        "respond",
    ]
    human_id = client.thread_messages(thread_id=thread_id)[0]["id"]
    assert {c["previous_message_id"] for c in review.tool_calls} == {human_id}

    result = client.review(
        thread_id=thread_id,
        assistant_id="per_call",
        reviewer_id="jane",
        interrupt_id=review.interrupt_id,
        tool_calls=[
            {
                "id": calls["reschedule_appointment"]["id"],
                "action": "edit",
                "args": {"day": "Friday"},
            },
            {"id": calls["cancel_appointment"]["id"], "action": "reject", "message": "Keep it"},
        ],
    )
    assert result.interrupted is False
    results = {t["name"]: t for t in tool_messages(result.messages)}
    assert "moved to Friday at 10:00" in results["reschedule_appointment"]["content"]
    assert results["cancel_appointment"]["status"] == "error"
    assert results["lookup_appointment"]["status"] == "success"


def test_history_is_seeded_once(client: Assistants) -> None:
    thread_id = str(uuid.uuid4())
    history = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "I have an appointment"},
    ]
    first = client.run(
        thread_id=thread_id,
        assistant_id="plain",
        messages=[*history, {"role": "user", "content": "reply: Noted"}],
    )
    assert first.reply == "Noted"
    assert [m["content"] for m in first.messages] == [
        "Hi",
        "Hello! How can I help?",
        "I have an appointment",
        "reply: Noted",
        "Noted",
    ]
    second = client.run(
        thread_id=thread_id,
        assistant_id="plain",
        messages=[*history, {"role": "user", "content": "reply: Again"}],
    )
    assert len(second.messages) == 7, "an existing thread is never seeded again"
    assert second.reply == "Again"


def test_graph_error_is_a_run_error(client: Assistants) -> None:
    with pytest.raises(RunError, match=r"^ValueError: the model broke$"):
        client.run(
            thread_id=str(uuid.uuid4()),
            assistant_id="plain",
            messages=[{"role": "user", "content": "error: the model broke"}],
        )


def test_unknown_assistant_is_a_run_error(client: Assistants) -> None:
    with pytest.raises(RunError):
        client.run(thread_id=str(uuid.uuid4()), assistant_id=str(uuid.uuid4()), messages=[CUSTOMER])


def test_stream_yields_the_runs_events_and_seeds_a_new_thread(client: Assistants) -> None:
    events = list(
        client.stream(
            thread_id=str(uuid.uuid4()),
            assistant_id="plain",
            messages=[
                {"role": "user", "content": "Hi"},
                {"role": "user", "content": "reply: streamed"},
            ],
            stream_mode=["values", "updates"],
        )
    )
    assert [m["content"] for m in events[-1].data["messages"]] == [
        "Hi",
        "reply: streamed",
        "streamed",
    ]
    kinds = [e.event for e in events]
    assert kinds[0] == "metadata" and "updates" in kinds
    assert events[-1].event == "values"
    assert events[-1].data["messages"][-1]["content"] == "streamed"


def _ask(interaction: dict[str, Any]) -> dict[str, str]:
    return {"role": "user", "content": f"ask: {json.dumps(interaction)}"}


QUESTION = {
    "kind": "question",
    "title": "Which day suits you?",
    "interaction_id": "int-day",
    "content": [
        {
            "questionId": "day",
            "prompt": "Pick a day",
            "input": "single_select",
            "options": [
                {"optionId": "tue", "label": "Tuesday"},
                {"optionId": "fri", "label": "Friday"},
            ],
        }
    ],
}


def test_typed_interaction_is_read_and_answered(client: Assistants) -> None:
    thread_id = str(uuid.uuid4())
    result = client.run(thread_id=thread_id, assistant_id="interactions", messages=[_ask(QUESTION)])
    review = result.review
    assert review is not None and review.kind == "question" and review.mode == "interaction"
    assert review.interaction["interactionId"] == "int-day"
    assert review.interaction["questions"][0]["questionId"] == "day"
    with pytest.raises(ThreadResumptionError, match="paused on question"):
        client.review(
            thread_id=thread_id,
            assistant_id="interactions",
            reviewer_id="jane",
            interrupt_id=review.interrupt_id,
            reply={"action": "approve"},
        )
    answer = {"decision": "answer", "answers": [{"questionId": "day", "optionIds": ["tue"]}]}
    done = client.review(
        thread_id=thread_id,
        assistant_id="interactions",
        reviewer_id="jane",
        interrupt_id=review.interrupt_id,
        answer=answer,
    )
    assert done.interrupted is False
    assert json.loads(done.reply.removeprefix("Done! ")) == answer


def test_revision_request_brings_a_new_revision_of_the_same_interaction(client: Assistants) -> None:
    plan = {
        "kind": "plan",
        "title": "Move the appointment",
        "interaction_id": "int-plan",
        "content": {"steps": [{"stepId": "s1", "title": "Reschedule", "action": "crm.reschedule"}]},
    }
    thread_id = str(uuid.uuid4())
    first = client.run(thread_id=thread_id, assistant_id="interactions", messages=[_ask(plan)])
    assert first.review is not None and first.review.kind == "plan"
    second = client.review(
        thread_id=thread_id,
        assistant_id="interactions",
        reviewer_id="jane",
        interrupt_id=first.review.interrupt_id,
        answer={"decision": "request_revision", "note": "Friday instead"},
    )
    assert second.review is not None and second.review.kind == "plan"
    assert second.review.interrupt_id != first.review.interrupt_id
    assert second.review.interaction["interactionId"] == "int-plan"
    assert second.review.interaction["title"] == "Move the appointment (revised)"
    assert second.review.interaction["summary"] == "Revised: Friday instead"


def test_background_review_is_applied_and_read_later(client: Assistants) -> None:
    thread_id, review = _paused(client, RESCHEDULE)
    run = client.start_review(
        thread_id=thread_id,
        assistant_id="tools",
        reviewer_id="jane",
        interrupt_id=review.interrupt_id,
        tool_calls=[{"id": review.tool_calls[0]["id"], "action": "approve"}],
        metadata={"nitro_run_id": "r-1"},
    )
    assert run["status"] in ("pending", "running")
    assert run["metadata"]["nitro_run_id"] == "r-1"
    result = client.review_result(thread_id=thread_id, run_id=run["run_id"])
    assert result.reply == "Done! Appointment 42 moved to Tuesday at 10:00"
    assert result.interrupted is False


def test_background_review_the_server_ignored_is_superseded(
    client: Assistants, langgraph_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread_id, review = _paused(client, RESCHEDULE)
    seen_state = client.thread_state(thread_id=thread_id)
    other = Assistants(base_url=langgraph_server.url, api_key="k", user_id="other")
    other.review(
        thread_id=thread_id,
        assistant_id="tools",
        reviewer_id="jane",
        interrupt_id=review.interrupt_id,
        tool_calls=[{"id": review.tool_calls[0]["id"], "action": "reject"}],
    )
    monkeypatch.setattr(client, "_state", lambda thread_id, error: seen_state)
    run = client.start_review(
        thread_id=thread_id,
        assistant_id="tools",
        reviewer_id="sam",
        interrupt_id=review.interrupt_id,
        tool_calls=[{"id": review.tool_calls[0]["id"], "action": "approve"}],
    )
    monkeypatch.undo()
    with pytest.raises(ReviewSupersededError):
        client.review_result(thread_id=thread_id, run_id=run["run_id"])
    assert [t["status"] for t in tool_messages(client.thread_messages(thread_id=thread_id))] == [
        "error"
    ]


def test_review_with_the_pause_held_is_one_request_and_applied(client: Assistants) -> None:
    thread_id = str(uuid.uuid4())
    first = client.run(thread_id=thread_id, assistant_id="walkthrough", messages=[CUSTOMER])
    assert first.review is not None
    before = client.transport.requests_sent
    after = client.review(
        thread_id=thread_id,
        assistant_id="walkthrough",
        reviewer_id="jane",
        interrupt_id=first.review.interrupt_id,
        tool_calls=[{"id": first.review.tool_calls[0]["id"], "action": "approve"}],
        pending=first.review,
    )
    assert client.transport.requests_sent - before == 1  # runs/stream only
    assert after.review is not None and after.review.kind == "reply"
    assert after.review.reply is not None and after.review.reply.content.startswith("Done!")
    assert client.under_review(thread_id=thread_id).interrupt_id == after.review.interrupt_id
    moved = tool_messages(client.thread_messages(thread_id=thread_id))
    assert [m["status"] for m in moved] == ["success"]


def test_held_per_call_pause_is_answered_for_every_call(client: Assistants) -> None:
    thread_id, review = _paused(
        client, RESCHEDULE, ("cancel_appointment", {"appointment_id": 9}), graph="per_call"
    )
    calls = {c["name"]: c for c in review.tool_calls}
    result = client.review(
        thread_id=thread_id,
        assistant_id="per_call",
        reviewer_id="jane",
        tool_calls=[
            {"id": calls["reschedule_appointment"]["id"], "action": "approve"},
            {"id": calls["cancel_appointment"]["id"], "action": "reject", "message": "Keep it"},
        ],
        pending=review,
    )
    assert result.interrupted is False
    results = {t["name"]: t["status"] for t in tool_messages(result.messages)}
    assert results == {"reschedule_appointment": "success", "cancel_appointment": "error"}


@pytest.mark.parametrize("moved_on", ["paused again", "idle"])
def test_a_held_pause_the_thread_moved_past_is_superseded_not_applied(
    client: Assistants, langgraph_server: Any, moved_on: str
) -> None:
    """The caller holds a pause someone else already answered: nothing is read before the
    resume, so the server's refusal (a 200 that changes nothing) is what must be noticed."""
    thread_id = str(uuid.uuid4())
    graph = "walkthrough" if moved_on == "paused again" else "tools"
    first = client.run(thread_id=thread_id, assistant_id=graph, messages=[CUSTOMER])
    assert first.review is not None
    other = Assistants(base_url=langgraph_server.url, api_key="k", user_id="other")
    won = other.review(
        thread_id=thread_id,
        assistant_id=graph,
        reviewer_id="jane",
        interrupt_id=first.review.interrupt_id,
        tool_calls=[{"id": first.review.tool_calls[0]["id"], "action": "approve"}],
    )
    assert won.interrupted is (moved_on == "paused again")
    checkpoint = other.thread_state(thread_id=thread_id)["checkpoint"]
    with pytest.raises(ReviewSupersededError):
        client.review(
            thread_id=thread_id,
            assistant_id=graph,
            reviewer_id="sam",
            interrupt_id=first.review.interrupt_id,
            tool_calls=[{"id": first.review.tool_calls[0]["id"], "action": "reject"}],
            pending=first.review,
        )
    assert other.thread_state(thread_id=thread_id)["checkpoint"] == checkpoint
    moved = tool_messages(other.thread_messages(thread_id=thread_id))
    assert [m["status"] for m in moved] == ["success"], "the approved tool ran once, no rejection"


def test_a_request_limit_holds_on_the_real_server(langgraph_server: Any) -> None:
    """Four threads, two request slots: every run pauses as it should, never more than two
    requests in flight (the streamed resume holds its slot until its events are read)."""
    import threading

    client = Assistants(
        base_url=langgraph_server.url,
        api_key="test-key",
        user_id="tests",
        max_concurrent_requests=2,
    )
    session_request = client.transport.session.request
    lock = threading.Lock()
    counts = {"in_flight": 0, "most": 0}

    def counted(*args: Any, **kwargs: Any) -> Any:
        with lock:
            counts["in_flight"] += 1
            counts["most"] = max(counts["most"], counts["in_flight"])
        try:
            return session_request(*args, **kwargs)
        finally:
            with lock:
                counts["in_flight"] -= 1

    client.transport.session.request = counted  # type: ignore[method-assign]
    outcomes: list[str] = []

    def flow() -> None:
        thread_id = str(uuid.uuid4())
        paused = client.run(thread_id=thread_id, assistant_id="tools", messages=[CUSTOMER])
        assert paused.review is not None
        call = paused.review.tool_calls[0]
        done = client.review(
            thread_id=thread_id,
            assistant_id="tools",
            reviewer_id="ana",
            tool_calls=[{"id": call["id"], "action": "approve"}],
            pending=paused.review,
        )
        outcomes.append(str(done.reply))

    threads = [threading.Thread(target=flow) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == 4 and all(reply.startswith("Done!") for reply in outcomes)
    assert counts["most"] == 2
