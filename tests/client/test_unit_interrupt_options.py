"""A plain ``interrupt()`` whose value declares ``options`` (issue 34): the answer is one of them,
refused before any request otherwise, with the options named; a declared ``response_schema`` is
checked too; a pause without options takes any JSON answer."""

from __future__ import annotations

import re
from typing import Any

import pytest
import responses

from nitro_assistants.client import Assistants, ThreadResumptionError, review
from nitro_assistants.client.results import INTERRUPT, Pause, PendingReview
from nitro_assistants.client.review import dialect_resume, interrupt_answer

BASE = "http://assistants.test"
THREAD = "0b7e2a55-7c1e-4a8e-9a57-1d2f3b4c5d6e"
IID = "0123456789abcdef0123456789abcdef"
CARRIER = {"question": "Which carrier?", "options": ["UPS", "DHL"]}
OBJECTS = [{"value": "ups", "label": "UPS"}, {"id": "dhl", "label": "DHL"}, {"label": "Post"}]


def pause(value: Any, schema: dict[str, Any] | None = None) -> Pause:
    options = value.get("options") if isinstance(value, dict) else None
    return Pause(IID, INTERRUPT, value, response_schema=schema, options=options or None)


def state(value: Any, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"id": IID, "value": value}
    if schema is not None:
        item["response_schema"] = schema
    return {"values": {"messages": []}, "interrupts": [item], "next": ["ask"]}


@pytest.fixture
def mock():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield rsps


def test_an_answer_outside_the_options_is_refused_before_any_request(mock) -> None:
    mock.get(f"{BASE}/threads/{THREAD}/state", json=state(CARRIER))
    client = Assistants(BASE, "k", backoff=0)
    message = '"FedEx" is not one of the pause\'s options; allowed: UPS, DHL'
    with pytest.raises(ThreadResumptionError, match=re.escape(message)):
        client.review(THREAD, "agent", "alice", interrupt_id=IID, answer="FedEx")
    assert [c.request.method for c in mock.calls] == ["GET"]  # the pause read, nothing sent


def test_a_pause_shown_with_options_refuses_without_any_request() -> None:
    client = Assistants(BASE, "k", backoff=0)
    shown = PendingReview(
        kind=INTERRUPT, interrupt_id=IID, interrupt_ids=[IID], pauses=[pause(CARRIER)]
    )
    with pytest.raises(ThreadResumptionError, match="allowed: UPS, DHL"):
        client.review(THREAD, "agent", "alice", interrupt_id=IID, answer="ups", pending=shown)
    assert client.transport.requests_sent == 0


@pytest.mark.parametrize("answer", ["FedEx", "ups", "", ["UPS"], {"carrier": "UPS"}])
def test_only_the_options_answer_a_pause_that_declares_them(answer: Any) -> None:
    with pytest.raises(ThreadResumptionError, match="not one of the pause's options"):
        interrupt_answer(pause(CARRIER), answer)
    assert interrupt_answer(pause(CARRIER), "DHL") == "DHL"


def test_a_number_option_is_not_answered_by_a_boolean() -> None:
    numbers = {"question": "How many?", "options": [1, 2.5]}
    assert interrupt_answer(pause(numbers), 1) == 1
    assert interrupt_answer(pause(numbers), 2.5) == 2.5
    for wrong in (True, "1", 3):
        with pytest.raises(ThreadResumptionError, match=re.escape("allowed: 1, 2.5")):
            interrupt_answer(pause(numbers), wrong)


def test_object_options_are_answered_by_their_value_or_whole() -> None:
    value = {"question": "Which carrier?", "options": OBJECTS}
    assert review.option_answers(OBJECTS) == [
        OBJECTS[0],
        "ups",
        OBJECTS[1],
        "dhl",
        OBJECTS[2],
        "Post",
    ]
    for answer in ("ups", "dhl", "Post", OBJECTS[0]):
        assert interrupt_answer(pause(value), answer) == answer
    message = "allowed: ups (UPS), dhl (DHL), Post"
    for answer in ("UPS", "fedex", {"value": "ups"}):  # a label with a value is not the value
        with pytest.raises(ThreadResumptionError, match=re.escape(message)):
            interrupt_answer(pause(value), answer)


def test_options_and_a_response_schema_are_both_checked() -> None:
    schema = {"type": "string", "enum": ["UPS", "DHL"]}
    assert interrupt_answer(pause(CARRIER, schema), "UPS") == "UPS"
    with pytest.raises(ThreadResumptionError, match="allowed: UPS, DHL"):
        interrupt_answer(pause(CARRIER, schema), "FedEx")
    # An option the schema refuses is no answer, and is not offered as one.
    narrower = {"type": "string", "enum": ["UPS"]}
    with pytest.raises(ThreadResumptionError, match=r"allowed: UPS$"):
        interrupt_answer(pause(CARRIER, narrower), "DHL")


def test_a_schema_no_option_fits_says_what_an_answer_is() -> None:
    """Options shown beside a schema asking for an object are hints: the schema decides."""
    schema = {
        "type": "object",
        "properties": {"carrier": {"type": "string"}},
        "required": ["carrier"],
    }
    assert interrupt_answer(pause(CARRIER, schema), {"carrier": "UPS"}) == {"carrier": "UPS"}
    with pytest.raises(ThreadResumptionError, match="does not fit the pause's response_schema"):
        interrupt_answer(pause(CARRIER, schema), "UPS")


@pytest.mark.parametrize("answer", ["FedEx", True, 3, {"any": ["json"]}])
def test_a_pause_without_options_takes_any_json_answer(answer: Any) -> None:
    assert interrupt_answer(pause({"question": "Which carrier?"}), answer) == answer
    assert interrupt_answer(pause("Which carrier?"), answer) == answer


def test_answers_to_several_pauses_are_each_checked_against_their_options() -> None:
    other = "fedcba9876543210fedcba9876543210"
    pending = PendingReview(
        kind=INTERRUPT,
        interrupt_id=IID,
        interrupt_ids=[IID, other],
        pauses=[pause(CARRIER), Pause(other, INTERRUPT, "Note?")],
    )
    assert dialect_resume(pending, {IID: "UPS", other: "FedEx"}) == {IID: "UPS", other: "FedEx"}
    with pytest.raises(ThreadResumptionError, match="allowed: UPS, DHL"):
        dialect_resume(pending, {IID: "FedEx", other: "ok"})
