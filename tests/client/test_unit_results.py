"""``RunResult`` and ``PendingReview``: docs/protocol.md §4–5, read from bodies a server would send."""

from __future__ import annotations

import pytest
import responses

from nitro_assistants.client import Assistants, RunResult
from nitro_assistants.client.results import is_interrupt_id, pending_review

BASE = "http://assistants.test"
THREAD = "0b7e2a55-7c1e-4a8e-9a57-1d2f3b4c5d6e"
ASSISTANT = "3f2c1b0a-9e8d-4c7b-a6f5-e4d3c2b1a090"
IID = "0123456789abcdef0123456789abcdef"


def human(text="hi", id="h-1"):
    return {"type": "human", "id": id, "content": text}


def ai(content="", id="a-1", tool_calls=None, **metadata):
    message = {"type": "ai", "id": id, "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    if metadata:
        message["response_metadata"] = metadata
    return message


def tool(call_id="c-1", content="ok", status="success"):
    return {
        "type": "tool",
        "id": f"t-{call_id}",
        "tool_call_id": call_id,
        "content": content,
        "status": status,
    }


def call(call_id, name, **args):
    return {"id": call_id, "name": name, "args": args}


def batched(*requests, allowed=None, iid=IID):
    names = list(dict.fromkeys(r["name"] for r in requests))
    return {
        "id": iid,
        "value": {
            "action_requests": [
                {"name": r["name"], "args": r["args"], "description": f"Hold {r['name']}"}
                for r in requests
            ],
            "review_configs": [
                {
                    "action_name": n,
                    "allowed_decisions": (allowed or {}).get(n, ["approve", "reject"]),
                }
                for n in names
            ],
        },
    }


def result(messages, interrupts=None):
    values = {"messages": messages}
    if interrupts is not None:
        values["__interrupt__"] = interrupts
    return RunResult.build(values)


# -- reply ----------------------------------------------------------------------------------


def test_reply_is_the_last_ai_text():
    out = result([human(), ai("Hello!")])
    assert out.reply == "Hello!"
    assert out.interrupted is False
    assert out.review is None
    assert out.delivery is None
    assert out.messages == [human(), ai("Hello!")]
    assert out.raw == {"messages": [human(), ai("Hello!")]}


def test_list_content_joins_text_blocks_only():
    content = [
        {"type": "text", "text": "Hello "},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "tool_use", "id": "x", "name": "y", "input": {}},
        {"type": "text", "text": "there"},
    ]
    assert result([human(), ai(content)]).reply == "Hello there"


@pytest.mark.parametrize("content", ["", "   ", "\n\t ", [], [{"type": "text", "text": "  "}]])
def test_blank_reply_is_none(content):
    assert result([human(), ai(content)]).reply is None


def test_ai_with_tool_calls_is_never_the_reply():
    out = result([human(), ai("Let me check.", tool_calls=[call("c-1", "lookup", id=1)])])
    assert out.reply is None
    assert out.delivery is None


def test_empty_tool_calls_list_does_not_block_the_reply():
    assert result([human(), ai("Hi", tool_calls=[])]).reply == "Hi"


def test_no_reply_when_last_message_is_human_earlier_text_does_not_stand_in():
    # After a reply is rejected the draft is removed: the customer's message is last.
    assert result([human("a"), ai("Earlier answer", id="a-0"), human("b", id="h-2")]).reply is None


def test_no_reply_when_last_message_is_a_tool_result():
    messages = [
        human(),
        ai("Earlier answer", id="a-0"),
        human("b", id="h-2"),
        ai("", id="a-1", tool_calls=[call("c-1", "lookup", id=1)]),
        tool("c-1"),
    ]
    assert result(messages).reply is None


def test_no_messages_no_reply():
    out = RunResult.build({})
    assert out.reply is None
    assert out.messages == []


def test_no_reply_while_interrupted_even_with_text():
    calls = [call("c-1", "cancel", id=1)]
    messages = [human(), ai("Working on it", tool_calls=calls)]
    out = result(messages, [batched(calls[0])])
    assert out.interrupted is True
    assert out.reply is None
    # Even a plain AI text last: a paused run has no reply.
    reply_pause = result([human(), ai("Draft")], [_reply_interrupt("Draft")])
    assert reply_pause.interrupted is True
    assert reply_pause.reply is None


def test_no_reply_when_stamped_pending_review_without_a_pause():
    out = result([human(), ai("Draft", review={"type": "pending"})])
    assert out.interrupted is False
    assert out.reply is None


@pytest.mark.parametrize("stamp", ["approved", "edited"])
def test_reviewed_reply_is_the_reply(stamp):
    out = result([human(), ai("Sent", review={"type": stamp, "reviewer_id": "jane"})])
    assert out.reply == "Sent"


def test_role_shaped_messages_are_read_too():
    assert (
        result([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]).reply
        == "b"
    )


# -- delivery -------------------------------------------------------------------------------


def test_delivered():
    stamp = {
        "status": "delivered",
        "tool": "send_sms",
        "attempts": 1,
        "result": "sms queued (5 chars)",
        "delivered_at": "2026-10-18T14:03:01Z",
    }
    out = result([human(), ai("Hello", id="a-9", delivery=stamp)])
    d = out.delivery
    assert out.reply == "Hello"
    assert (d.status, d.delivered, d.failed, d.pending) == ("delivered", True, False, False)
    assert (d.tool, d.attempts, d.result, d.error) == ("send_sms", 1, "sms queued (5 chars)", None)
    assert (d.delivered_at, d.failed_at, d.message_id) == ("2026-10-18T14:03:01Z", None, "a-9")


def test_failed():
    stamp = {
        "status": "failed",
        "tool": "send_sms",
        "attempts": 3,
        "error": "RuntimeError: gateway",
        "failed_at": "2026-10-18T14:03:05Z",
    }
    d = result([human(), ai("Hello", delivery=stamp)]).delivery
    assert (d.status, d.delivered, d.failed, d.pending) == ("failed", False, True, False)
    assert (d.error, d.attempts, d.failed_at, d.delivered_at) == (
        "RuntimeError: gateway",
        3,
        "2026-10-18T14:03:05Z",
        None,
    )


def test_pending_delivery_on_a_finished_run():
    out = result([human(), ai("Hello", delivery={"status": "pending", "tool": "send_sms"})])
    d = out.delivery
    assert (d.status, d.delivered, d.failed, d.pending) == ("pending", False, False, True)
    assert d.attempts is None
    assert out.reply == "Hello"


@pytest.mark.parametrize("stamp", [None, {}, {"status": ""}, "delivered", ["x"]])
def test_no_or_unreadable_delivery_stamp(stamp):
    message = ai("Hello", delivery=stamp) if stamp is not None else ai("Hello")
    assert result([human(), message]).delivery is None


def test_non_integer_attempts_are_dropped():
    d = result([human(), ai("x", delivery={"status": "delivered", "attempts": "2"})]).delivery
    assert d.attempts is None


# -- batched tool review --------------------------------------------------------------------


def test_batched_review_shape():
    held = call("c-1", "reschedule", day="Tue", time="10:00")
    messages = [human("move it", id="h-1"), ai("On it", tool_calls=[held])]
    review = result(messages, [batched(held, allowed={"reschedule": ["approve", "edit"]})]).review
    assert review.kind == "tool_calls"
    assert review.is_tool_calls
    assert not review.is_reply
    assert review.reply is None
    assert review.interrupt_id == IID
    assert review.interrupt_ids == [IID]
    assert review.mode == "batched"
    assert review.tool_calls == [
        {
            "previous_message_id": "h-1",
            "id": "c-1",
            "name": "reschedule",
            "args": {"day": "Tue", "time": "10:00"},
            "allowed_decisions": ["approve", "edit"],
            "description": "Hold reschedule",
        }
    ]


def test_matching_by_name_and_args_first():
    c1, c2 = call("c-1", "cancel", id=1), call("c-2", "cancel", id=2)
    messages = [human(), ai(tool_calls=[c1, c2])]
    review = pending_review([batched(c2, c1)], messages)
    assert [t["id"] for t in review.tool_calls] == ["c-2", "c-1"]
    assert [t["args"] for t in review.tool_calls] == [{"id": 2}, {"id": 1}]


def test_matching_falls_back_to_name_each_call_once():
    c1, c2 = call("c-1", "cancel", id=1), call("c-2", "cancel", id=2)
    messages = [human(), ai(tool_calls=[c1, c2])]
    requests = [{"name": "cancel", "args": {"id": 8}}, {"name": "cancel", "args": {"id": 9}}]
    review = pending_review([batched(*requests)], messages)
    assert [t["id"] for t in review.tool_calls] == ["c-1", "c-2"]
    # The args shown are what the interrupt holds.
    assert [t["args"] for t in review.tool_calls] == [{"id": 8}, {"id": 9}]


def test_exact_matches_are_not_taken_by_an_earlier_name_only_match():
    # The first request matches nothing exactly; it must not take c-1, which the second matches
    # exactly.
    c1, c2 = call("c-1", "cancel", id=1), call("c-2", "cancel", id=2)
    messages = [human(), ai(tool_calls=[c1, c2])]
    requests = [{"name": "cancel", "args": {"id": 9}}, {"name": "cancel", "args": {"id": 1}}]
    review = pending_review([batched(*requests)], messages)
    assert [t["id"] for t in review.tool_calls] == ["c-2", "c-1"]


def test_mixed_held_and_unheld_calls_only_held_are_reviewed():
    lookup, cancel = call("c-0", "lookup", id=1), call("c-1", "cancel", id=1)
    messages = [human(id="h-7"), ai(tool_calls=[lookup, cancel])]
    review = pending_review([batched(cancel)], messages)
    assert [(t["id"], t["name"], t["previous_message_id"]) for t in review.tool_calls] == [
        ("c-1", "cancel", "h-7")
    ]


def test_matches_the_last_ai_message_with_tool_calls():
    old, new = call("c-old", "cancel", id=1), call("c-new", "cancel", id=1)
    messages = [
        human(id="h-1"),
        ai(tool_calls=[old], id="a-1"),
        tool("c-old"),
        ai("done", id="a-2"),
        human(id="h-2"),
        ai(tool_calls=[new], id="a-3"),
    ]
    review = pending_review([batched(new)], messages)
    assert review.tool_calls[0]["id"] == "c-new"
    assert review.tool_calls[0]["previous_message_id"] == "h-2"


def test_previous_message_id_is_none_at_index_zero():
    held = call("c-1", "cancel", id=1)
    review = pending_review([batched(held)], [ai(tool_calls=[held])])
    assert review.tool_calls[0]["previous_message_id"] is None


def test_allowed_decisions_default_when_no_config():
    held = call("c-1", "cancel", id=1)
    interrupt = batched(held)
    interrupt["value"]["review_configs"] = []
    review = pending_review([interrupt], [human(), ai(tool_calls=[held])])
    assert review.tool_calls[0]["allowed_decisions"] == ["approve", "edit", "reject", "respond"]


def test_per_tool_configs_out_of_order():
    a, b = call("c-1", "cancel", id=1), call("c-2", "reschedule", day="Mon")
    interrupt = batched(a, b, allowed={"cancel": ["reject"], "reschedule": ["approve", "edit"]})
    interrupt["value"]["review_configs"].reverse()
    review = pending_review([interrupt], [human(), ai(tool_calls=[a, b])])
    assert [t["allowed_decisions"] for t in review.tool_calls] == [["reject"], ["approve", "edit"]]


def _plain(interrupts, messages):
    review = pending_review(interrupts, messages)
    assert review is not None and review.kind == "interrupt"
    assert [p.value for p in review.pauses] == [i["value"] for i in interrupts]
    return review.problem


def test_action_without_matching_call_is_a_plain_interrupt_saying_why():
    held = call("c-1", "cancel", id=1)
    problem = _plain(
        [batched({"name": "reschedule", "args": {}})], [human(), ai(tool_calls=[held])]
    )
    assert "`reschedule`, which no tool call matches" in problem
    assert "no AI message makes any" in _plain([batched(held)], [human()])
    # Two held requests for one call: the second has nothing left to match.
    problem = _plain([batched(held, held)], [human(), ai(tool_calls=[held])])
    assert "`cancel`, which no tool call matches" in problem


def test_an_interrupt_of_no_known_shape_is_a_plain_interrupt():
    assert _plain([{"id": IID, "value": {"something": 1}}], [human()]) is None


def test_no_interrupts_are_no_pause():
    assert pending_review([], [human()]) is None
    assert pending_review(None, [human()]) is None  # type: ignore[arg-type]


# -- per-call tool review -------------------------------------------------------------------

APPROVE_REJECT_SCHEMA = {
    "$defs": {
        "ApproveDecision": {
            "properties": {"type": {"const": "approve", "type": "string"}},
            "required": ["type"],
            "type": "object",
        },
        "RejectDecision": {
            "properties": {
                "type": {"const": "reject", "type": "string"},
                "message": {"type": "string"},
            },
            "required": ["type"],
            "type": "object",
        },
    },
    "discriminator": {"propertyName": "type"},
    "oneOf": [{"$ref": "#/$defs/ApproveDecision"}, {"$ref": "#/$defs/RejectDecision"}],
}
APPROVE_ONLY_SCHEMA = APPROVE_REJECT_SCHEMA["$defs"]["ApproveDecision"]


def per_call(iid, held, schema):
    return {
        "id": iid,
        "value": {
            "type": "tool_approval",
            "tool_call_id": held["id"],
            "name": held["name"],
            "args": held["args"],
            "description": "hold",
        },
        "response_schema": schema,
    }


def test_per_call_review_reads_allowed_decisions_from_the_schema():
    a, b = call("c-1", "cancel", id=1), call("c-2", "reschedule", day="Mon")
    messages = [human(id="h-1"), ai(tool_calls=[a, b])]
    interrupts = [
        per_call("1" * 32, a, APPROVE_REJECT_SCHEMA),
        per_call("2" * 32, b, APPROVE_ONLY_SCHEMA),
    ]
    review = pending_review(interrupts, messages)
    assert review.kind == "tool_calls"
    assert review.mode == "per_call"
    assert review.interrupt_id == "1" * 32
    assert review.interrupt_ids == ["1" * 32, "2" * 32]
    assert [
        (t["id"], t["allowed_decisions"], t["interrupt_id"], t["previous_message_id"])
        for t in review.tool_calls
    ] == [
        ("c-1", ["approve", "reject"], "1" * 32, "h-1"),
        ("c-2", ["approve"], "2" * 32, "h-1"),
    ]


def test_per_call_without_schema_allows_every_decision():
    a = call("c-1", "cancel", id=1)
    review = pending_review([per_call(IID, a, None)], [human(), ai(tool_calls=[a])])
    assert review.tool_calls[0]["allowed_decisions"] == ["approve", "edit", "reject", "respond"]


def test_per_call_run_reads_messages_from_the_thread_state():
    a = call("c-1", "cancel", id=1)
    messages = [human(id="h-1"), ai("Working", tool_calls=[a])]
    with responses.RequestsMock() as mock:
        mock.post(
            f"{BASE}/threads/{THREAD}/runs/wait",
            json={"__interrupt__": [per_call(IID, a, APPROVE_REJECT_SCHEMA)]},
        )
        mock.get(f"{BASE}/threads/{THREAD}/state", json={"values": {"messages": messages}})
        out = Assistants(BASE, "k").run(
            THREAD, ASSISTANT, [{"role": "user", "content": "x"}], known_thread=True
        )
    assert out.interrupted is True
    assert out.reply is None
    assert out.messages == messages
    assert out.review.tool_calls[0]["previous_message_id"] == "h-1"


# -- reply review ---------------------------------------------------------------------------


def _reply_interrupt(text, allowed=("approve", "edit", "reject"), description="Review this SMS"):
    return {
        "id": IID,
        "value": {
            "action_requests": [
                {"name": "__reply__", "args": {"content": text}, "description": description}
            ],
            "review_configs": [{"action_name": "__reply__", "allowed_decisions": list(allowed)}],
        },
    }


def test_reply_pause():
    messages = [human(), ai("Done! See you Tuesday.", id="a-5", review={"type": "pending"})]
    out = result(messages, [_reply_interrupt("Done! See you Tuesday.")])
    review = out.review
    assert out.interrupted is True
    assert out.reply is None
    assert review.kind == "reply"
    assert review.is_reply
    assert review.tool_calls == []
    assert review.interrupt_id == IID
    draft = review.reply
    assert draft.content == "Done! See you Tuesday."
    assert draft.allowed_decisions == ["approve", "edit", "reject"]
    assert draft.description == "Review this SMS"
    assert draft.interrupt_id == IID
    assert draft.message_id == "a-5"


def test_reply_pause_never_offers_respond():
    out = result([human(), ai("x")], [_reply_interrupt("x", allowed=("approve", "respond"))])
    assert out.review.reply.allowed_decisions == ["approve"]


def test_reply_draft_content_falls_back_to_the_message():
    interrupt = _reply_interrupt("x")
    interrupt["value"]["action_requests"][0]["args"] = {}
    out = result([human(), ai([{"type": "text", "text": "From message"}])], [interrupt])
    assert out.review.reply.content == "From message"


# -- through the client ---------------------------------------------------------------------


def test_run_with_unmatchable_pause_is_a_plain_interrupt():
    held = call("c-1", "cancel", id=1)
    with responses.RequestsMock() as mock:
        mock.post(
            f"{BASE}/threads/{THREAD}/runs/wait",
            json={
                "messages": [human(), ai(tool_calls=[held])],
                "__interrupt__": [batched({"name": "other", "args": {}})],
            },
        )
        result = Assistants(BASE, "k").run(
            THREAD, ASSISTANT, [{"role": "user", "content": "x"}], known_thread=True
        )
    assert result.review.kind == "interrupt"
    assert "the interrupt holds `other`" in result.review.problem


def test_under_review_reads_the_state_not_the_status():
    with responses.RequestsMock() as mock:
        mock.get(
            f"{BASE}/threads/{THREAD}/state",
            json={"values": {"messages": [human()]}, "interrupts": [], "next": ["model"]},
        )
        assert Assistants(BASE, "k").under_review(THREAD) is None


def test_under_review_falls_back_to_task_interrupts():
    held = call("c-1", "cancel", id=1)
    state = {
        "values": {"messages": [human(), ai(tool_calls=[held])]},
        "tasks": [{"id": "t", "interrupts": [batched(held)]}],
    }
    with responses.RequestsMock() as mock:
        mock.get(f"{BASE}/threads/{THREAD}/state", json=state)
        review = Assistants(BASE, "k").under_review(THREAD)
    assert review.tool_calls[0]["id"] == "c-1"


def test_under_review_of_a_pause_not_matching_its_dialect_is_a_plain_interrupt():
    with responses.RequestsMock() as mock:
        mock.get(
            f"{BASE}/threads/{THREAD}/state",
            json={"values": {"messages": []}, "interrupts": [batched(call("c", "x"))]},
        )
        review = Assistants(BASE, "k").under_review(THREAD)
    assert review.kind == "interrupt" and "no AI message" in review.problem


def test_thread_messages():
    with responses.RequestsMock() as mock:
        mock.get(f"{BASE}/threads/{THREAD}/state", json={"values": {"messages": [human()]}})
        mock.get(f"{BASE}/threads/{THREAD}/state", json={"values": {}})
        client = Assistants(BASE, "k")
        assert client.thread_messages(THREAD) == [human()]
        assert client.thread_messages(THREAD) == []


@pytest.mark.parametrize(
    ("value", "keyed"),
    [
        ("0123456789abcdef0123456789abcdef", True),
        ("0123456789abcdef0123456789abcdef\n", False),  # `$` would have let the newline by
        ("0123456789ABCDEF0123456789ABCDEF", False),
        ("0123456789abcdef0123456789abcde", False),
        ("", False),
    ],
)
def test_interrupt_ids_are_exactly_32_lowercase_hex(value: str, keyed: bool) -> None:
    assert is_interrupt_id(value) is keyed
