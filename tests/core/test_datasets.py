"""Review datasets: ``manage.py nitro_assistants_dataset`` and ``services.datasets``, on real
PostgreSQL (SQLite too) and, for what then ran, against the real LangGraph server."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from nitro_assistants import services
from nitro_assistants.models import Decision, Event, Review, ReviewHandling, Run
from nitro_assistants.services import datasets
from tests.factories import DecisionFactory, ReviewFactory, ThreadFactory

pytestmark = pytest.mark.django_db

CARD = "4111 1111 1111 1111"
MOVE = (
    'tools: [{"name": "reschedule_appointment", '
    '"args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"}}]'
)


def export(*args: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    call_command("nitro_assistants_dataset", *args, stdout=out, stderr=io.StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def conversation(calls: list[dict[str, Any]], ask: str = "Move me to Tuesday") -> dict[str, Any]:
    return {
        "messages": [
            {"type": "system", "id": "s0", "content": "You book appointments."},
            {"type": "human", "id": "h1", "content": ask},
            {"type": "ai", "id": "a1", "content": "", "tool_calls": calls},
            {"type": "tool", "id": "t1", "tool_call_id": calls[0]["id"], "content": "done"},
        ]
    }


def decided_tool_review(
    action: str = "approve",
    args: dict[str, Any] | None = None,
    *,
    assistant: str = "walkthrough",
    name: str = "reschedule_appointment",
    held: dict[str, Any] | None = None,
    **decision: Any,
) -> Review:
    call = {"id": "call_1", "name": name, "args": held or {"day": "Tuesday", "time": "10:00"}}
    thread = ThreadFactory(assistant_key=assistant, values=conversation([call]))
    review = ReviewFactory(
        thread=thread,
        status=Review.Status.DECIDED,
        payload={"tool_calls": [{"previous_message_id": "h1", **call}], "reply": None},
    )
    choice: dict[str, Any] = {"id": "call_1", "action": action}
    if args is not None:
        choice["args"] = args
    if action == "reject":
        choice["message"] = "Not on Tuesdays"
    DecisionFactory(review=review, tool_calls=[choice], **decision)
    return review


# -- the real server -----------------------------------------------------------------------------


@pytest.mark.server
def test_an_openai_line_of_an_edited_call_holds_the_edit(
    server_settings: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        run = services.start_run("walkthrough", MOVE)
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_run(run.pk)
    review = Review.objects.get(status="pending")
    call = review.tool_calls[0]
    with django_capture_on_commit_callbacks(execute=True):
        record = services.decide(
            review,
            None,
            {"tool_calls": [{"id": call["id"], "action": "edit", "args": {"day": "Thursday"}}]},
        )
    with django_capture_on_commit_callbacks(execute=True):
        services.execute_resume(record.pk)
    record.refresh_from_db()
    assert record.outcome == Decision.Outcome.APPLIED, record.error

    [line] = export("--format", "openai", "--tool", "reschedule_appointment")
    *context, target = line["messages"]
    assert context[0] == {"role": "user", "content": MOVE}
    assert all("tool_calls" not in m for m in context)  # the model's own call is not the target
    [sent] = target["tool_calls"]
    assert target["role"] == "assistant" and sent["id"] == call["id"]
    assert sent["function"]["name"] == "reschedule_appointment"
    assert json.loads(sent["function"]["arguments"]) == {
        "appointment_id": 42,
        "day": "Thursday",
        "time": "10:00",
    }

    [row] = export("--all")
    recorded = Event.objects.get(review=review, verb="decision_recorded")
    assert row["provenance"]["event"]["hash"] == recorded.hash
    assert row["provenance"]["event"]["verb"] == "decision_recorded"
    assert row["provenance"]["decision"] == record.pk
    [ran] = row["executed"]["tool_calls"]
    assert ran["ran"] is True and ran["args"]["day"] == "Thursday"
    assert row["decided"]["tool_calls"][0]["args"]["day"] == "Thursday"
    assert row["proposed"]["tool_calls"][0]["args"]["day"] == "Tuesday"
    assert Run.objects.filter(thread=review.thread).count() == 2


# -- the formats ---------------------------------------------------------------------------------


def test_the_jsonl_record_holds_the_decision_and_its_provenance() -> None:
    review = decided_tool_review("edit", {"day": "Friday"}, reviewer_id="bob", note="Fridays")
    [row] = export("--all")
    assert row["review"] == review.pk and row["kind"] == "tool_calls"
    assert row["assistant"] == "walkthrough" and row["thread"] == str(review.thread.thread_id)
    # The conversation up to the pause: the tool's answer after it is not part of it.
    assert [m["id"] for m in row["conversation"]] == ["s0", "h1", "a1"]
    assert row["proposed"] == {
        "tool_calls": [
            {
                "id": "call_1",
                "name": "reschedule_appointment",
                "args": {"day": "Tuesday", "time": "10:00"},
            }
        ]
    }
    assert row["decided"]["tool_calls"] == [
        {
            "id": "call_1",
            "name": "reschedule_appointment",
            "action": "edit",
            "args": {"day": "Friday", "time": "10:00"},
        }
    ]
    assert row["decided"]["note"] == "Fridays"
    assert row["provenance"]["reviewer"] == "bob"
    assert row["provenance"]["digest"] == review.digest
    assert row["provenance"]["event"] is None  # no audit event recorded for this factory row


def test_a_rejection_has_no_openai_line_but_a_langsmith_example() -> None:
    decided_tool_review("reject")
    with pytest.raises(CommandError, match="nothing exported"):
        export("--all", "--format", "openai")
    [example] = export("--all", "--format", "langsmith")
    assert set(example) == {"inputs", "outputs", "metadata"}
    assert example["outputs"]["message"] is None
    assert example["outputs"]["decided"]["tool_calls"][0]["message"] == "Not on Tuesdays"
    assert example["inputs"]["messages"][-1] == {"role": "user", "content": "Move me to Tuesday"}
    assert example["metadata"]["reviewer"] == "alice"


def test_an_edited_reply_is_the_openai_target() -> None:
    thread = ThreadFactory(
        values={
            "messages": [
                {"type": "human", "id": "h1", "content": "Move me"},
                {"type": "ai", "id": "ai-2", "content": "See you Tuesday at 10."},
            ]
        }
    )
    review = ReviewFactory(thread=thread, reply=True, status=Review.Status.DECIDED)
    DecisionFactory(review=review, reply={"action": "edit", "content": "See you Thursday."})
    [line] = export("--all", "--format", "openai")
    assert line["messages"] == [
        {"role": "user", "content": "Move me"},
        {"role": "assistant", "content": "See you Thursday."},
    ]


def test_earlier_assistant_turns_are_not_trained_on() -> None:
    call = {"id": "call_2", "name": "book", "args": {"day": "Monday"}}
    earlier = {"id": "call_0", "name": "look_up", "args": {"q": "slots"}}
    thread = ThreadFactory(
        values={
            "messages": [
                {"type": "human", "id": "h1", "content": "Book me"},
                {"type": "ai", "id": "a0", "content": "", "tool_calls": [earlier]},
                {"type": "tool", "id": "t0", "tool_call_id": "call_0", "content": "Monday"},
                {"type": "ai", "id": "a1", "content": "", "tool_calls": [call]},
            ]
        }
    )
    review = ReviewFactory(
        thread=thread, status=Review.Status.DECIDED, payload={"tool_calls": [call], "reply": None}
    )
    DecisionFactory(review=review, tool_calls=[{"id": "call_2", "action": "approve"}])
    [line] = export("--all", "--format", "openai")
    roles = [(m["role"], m.get("weight")) for m in line["messages"]]
    assert roles == [("user", None), ("assistant", 0), ("tool", None), ("assistant", None)]
    assert line["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"q": "slots"}'
    assert line["messages"][2]["tool_call_id"] == "call_0"


# -- filters and bad input -----------------------------------------------------------------------


def test_filters_select_by_assistant_tool_kind_decision_rule_and_date() -> None:
    moved = decided_tool_review("approve")
    refund = decided_tool_review("reject", assistant="billing", name="refund_card")
    ReviewHandling.objects.create(review=refund, rule={"rule_name": "Refunds", "rule_version": 3})
    pending = ReviewFactory()  # not decided: never exported
    assert pending.pk
    picked = lambda *a: [row["review"] for row in export(*a)]  # noqa: E731
    assert picked("--assistant", "billing") == [refund.pk]
    assert picked("--tool", "refund_*") == [refund.pk]
    assert picked("--kind", "tool_calls") == [moved.pk, refund.pk]
    assert picked("--decision", "approve") == [moved.pk]
    assert picked("--rule", "Refunds") == [refund.pk]
    assert picked("--since", "2000-01-01") == [moved.pk, refund.pk]
    [row] = export("--rule", "Refunds")
    assert row["provenance"]["rule"] == {"name": "Refunds", "version": 3, "id": None}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "no filter"),
        (("--all", "--format", "csv"), "format: `csv` is not one of jsonl, openai, langsmith"),
        (("--kind", "email"), "kind: `email` is not a review kind"),
        (("--decision", "maybe"), "decision: `maybe` is not a decision"),
        (("--since", "yesterday"), "--since: `yesterday` is not a date"),
        (("--since", "2030-01-02", "--until", "2030-01-01"), "the range is empty"),
        (("--assistant", "nobody"), "nothing to export: no decided review matches"),
        (("--tool", "nothing_*"), "nothing exported"),
    ],
)
def test_bad_input_is_a_clear_error(args: tuple[str, ...], message: str) -> None:
    decided_tool_review()
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        export(*args)


def test_an_empty_database_has_nothing_to_export() -> None:
    with pytest.raises(CommandError, match="no decided review"):
        export("--all")


# -- redaction -------------------------------------------------------------------------------


def test_redaction_applies_unless_asked_otherwise(settings: Any, tmp_path: Any) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "REDACT": True}
    review = decided_tool_review("edit", {"card": CARD}, held={"card": "none", "day": "Tuesday"})
    Event.objects.create(thread=review.thread, review=review, verb="review_decided", hash="ab" * 32)
    review.thread.values["messages"][1]["name"] = "jane@example.com"  # a person's name field
    review.thread.save()
    [row] = export("--all")
    text = json.dumps(row)
    assert "4111" not in text and "[redacted card]" in text
    assert "jane@example.com" not in text and row["conversation"][1]["name"] == "[redacted email]"
    assert row["decided"]["tool_calls"][0]["name"] == "reschedule_appointment"
    assert row["provenance"]["event"]["hash"] == "ab" * 32  # names and hashes are kept
    assert row["decided"]["tool_calls"][0]["id"] == "call_1"
    [line] = export("--all", "--format", "openai")
    assert "4111" not in json.dumps(line)
    target = tmp_path / "out.jsonl"
    call_command(
        "nitro_assistants_dataset",
        "--all",
        "--unredacted",
        "--output",
        str(target),
        stderr=io.StringIO(),
    )
    [whole] = [json.loads(line) for line in target.read_text().splitlines()]
    assert whole["decided"]["tool_calls"][0]["args"]["card"] == CARD
    # The only export that was not redacted is on the installation's audit chain.
    (event,) = Event.objects.filter(verb="dataset_exported_unredacted")
    assert (event.thread_id, event.actor_id, event.data["format"]) == (None, None, "jsonl")
    assert event.data["filters"] == {} and event.data["reviews"] == 1


# -- constant memory: statements a chunk, not a review --------------------------------------------


def test_reviews_are_read_in_chunks_with_their_events_batched(
    monkeypatch: pytest.MonkeyPatch, django_assert_max_num_queries: Any
) -> None:
    monkeypatch.setattr(datasets, "CHUNK", 2)
    for _ in range(5):
        review = decided_tool_review()
        Event.objects.create(thread=review.thread, review=review, verb="decision_recorded")
    # one check that something matches, then per chunk of 2 (3 chunks): its events (the rows
    # come from one cursor: one statement on SQLite per fetch, a few on PostgreSQL's)
    with django_assert_max_num_queries(12):
        rows = list(datasets.records(Review.objects.all(), datasets.Filters(), redaction=None))
    assert len(rows) == 5 and all(r["provenance"]["event"] for r in rows)


def test_a_typed_interaction_is_exported_up_to_the_call_that_asked_it() -> None:
    questions = [{"id": "q1", "text": "Which day?"}]
    ask = {
        "id": "ask_1",
        "name": "ask_reader",
        "args": {"kind": "question", "title": "Day", "content": questions},
    }
    thread = ThreadFactory(
        values={
            "messages": [
                {"type": "human", "id": "h1", "content": "Book me"},
                {"type": "ai", "id": "a1", "content": "", "tool_calls": [ask]},
                {"type": "tool", "id": "t1", "tool_call_id": "ask_1", "content": "Monday"},
                {"type": "ai", "id": "a2", "content": "Booked for Monday."},
            ]
        }
    )
    review = ReviewFactory(
        thread=thread,
        kind=Review.Kind.QUESTION,
        status=Review.Status.ANSWERED,
        payload={"interaction": {"kind": "question", "title": "Day", "questions": questions}},
    )
    DecisionFactory(review=review, answer={"decision": "answer", "answers": {"q1": "Monday"}})
    [row] = export("--kind", "question", "--decision", "answer")
    assert [m["id"] for m in row["conversation"]] == ["h1", "a1"]  # not the answer, nor after
    assert row["decided"]["answer"] == {"decision": "answer", "answers": {"q1": "Monday"}}
    assert row["proposed"]["interaction"]["title"] == "Day"
    with pytest.raises(CommandError, match="nothing exported"):
        export("--kind", "question", "--format", "openai")  # no target to learn
