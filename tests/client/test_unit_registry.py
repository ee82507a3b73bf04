"""``Registry`` and ``Assistant``: definitions sharing one server, each bound to its assistant."""

from __future__ import annotations

import json

import pytest
import responses

from nitro_assistants.client import (
    Assistant,
    ConfigurationError,
    NitroAssistantsError,
    Registry,
    UnknownAssistantError,
)

BASE = "http://assistants.test"
THREAD = "0b7e2a55-7c1e-4a8e-9a57-1d2f3b4c5d6e"
VC_ID = "3f2c1b0a-9e8d-4c7b-a6f5-e4d3c2b1a090"
OTHER_ID = "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d"


def config(**definitions):
    return {"base_url": BASE, "user_id": "site", "definitions": definitions}


def test_from_lower_case_dict():
    registry = Registry(config(vc={"api_key": "k1", "assistant_id": VC_ID}))
    assistant = registry["vc"]
    assert isinstance(assistant, Assistant)
    assert assistant.assistant_id == VC_ID
    assert assistant.key == "vc"
    assert assistant.client.base_url == BASE
    assert assistant.client.user_id == "site"
    assert registry.keys() == ["vc"]
    assert "vc" in registry
    assert "other" not in registry


def test_from_upper_case_dict():
    registry = Registry(
        {
            "BASE_URL": BASE,
            "USER_ID": "site",
            "AUTH": "x-api-key",
            "DEFINITIONS": {"vc": {"api_key": "k-upper", "assistant_id": VC_ID}},
        }
    )
    assistant = registry["vc"]
    assert assistant.client.user_id == "site"
    assert assistant.client.transport.auth == "x-api-key"
    assert assistant.client.transport.session.headers["x-api-key"] == "k-upper"


def test_unknown_key_lists_configured_keys():
    registry = Registry(
        config(
            vc={"api_key": "k", "assistant_id": VC_ID},
            sales={"api_key": "k", "assistant_id": OTHER_ID},
        )
    )
    with pytest.raises(UnknownAssistantError) as caught:
        registry["nope"]
    assert str(caught.value) == "Unknown assistant `nope`; configured: `vc`, `sales`"
    assert isinstance(caught.value, KeyError)
    assert isinstance(caught.value, NitroAssistantsError)


def test_unknown_key_with_no_definitions_says_none():
    with pytest.raises(KeyError, match=r"configured: \(none\)"):
        Registry({"base_url": BASE})["vc"]


def test_missing_fields_listed_in_one_error():
    registry = Registry(
        config(vc={}, half={"api_key": "k"}, blank={"api_key": " ", "assistant_id": ""})
    )
    with pytest.raises(ConfigurationError, match="Assistant `vc` is missing api_key, assistant_id"):
        registry["vc"]
    with pytest.raises(ConfigurationError, match=r"Assistant `half` is missing assistant_id$"):
        registry["half"]
    assert registry.problems() == [
        "Assistant `vc` is missing api_key, assistant_id",
        "Assistant `half` is missing assistant_id",
        "Assistant `blank` is missing assistant_id",
    ]


def test_blank_api_key_in_a_definition_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="api_key"):
        Registry(config(vc={"api_key": "  ", "assistant_id": VC_ID}))["vc"]


def test_missing_base_url():
    registry = Registry({"definitions": {"vc": {"api_key": "k", "assistant_id": VC_ID}}})
    assert registry.problems() == ["base_url is not set"]
    with pytest.raises(ConfigurationError, match="base_url is not set"):
        registry["vc"]


def test_definitions_must_be_a_mapping():
    with pytest.raises(ConfigurationError, match="definitions must be a mapping"):
        Registry({"base_url": BASE, "definitions": ["vc"]})


def test_clients_shared_for_the_same_server_and_key():
    first = Registry(
        config(
            vc={"api_key": "shared-k", "assistant_id": VC_ID},
            sales={"api_key": "shared-k", "assistant_id": OTHER_ID},
        )
    )
    second = Registry(config(vc={"api_key": "shared-k", "assistant_id": VC_ID}))
    assert first["vc"].client is first["sales"].client
    assert first["vc"].client is second["vc"].client
    other_key = Registry(config(vc={"api_key": "another-k", "assistant_id": VC_ID}))
    assert other_key["vc"].client is not first["vc"].client
    other_server = Registry(
        {**config(vc={"api_key": "shared-k", "assistant_id": VC_ID}), "base_url": BASE + ":81"}
    )
    assert other_server["vc"].client is not first["vc"].client


def test_assistant_injects_its_assistant_id():
    assistant = Registry(config(vc={"api_key": "k", "assistant_id": VC_ID}))["vc"]
    with responses.RequestsMock() as mock:
        mock.post(f"{BASE}/threads/{THREAD}/runs/wait", json={"messages": []})
        assistant.run(
            thread_id=THREAD, messages=[{"role": "user", "content": "hi"}], known_thread=True
        )
        assert json.loads(mock.calls[0].request.body)["assistant_id"] == VC_ID


@pytest.mark.parametrize(
    ("method", "kwargs"),
    [
        ("run", {"messages": [{"role": "user", "content": "hi"}]}),
        ("review", {"reviewer_id": "jane", "tool_calls": []}),
        ("start_run", {"messages": [{"role": "user", "content": "hi"}]}),
        ("stream", {"messages": [{"role": "user", "content": "hi"}]}),
    ],
)
def test_assistant_refuses_an_assistant_id(method, kwargs):
    assistant = Registry(config(vc={"api_key": "k", "assistant_id": VC_ID}))["vc"]
    with (
        responses.RequestsMock() as mock,
        pytest.raises(TypeError, match=f"bound to assistant_id '{VC_ID}'; do not pass one"),
    ):
        getattr(assistant, method)(thread_id=THREAD, assistant_id=OTHER_ID, **kwargs)
    assert len(mock.calls) == 0


def test_assistant_refuses_unknown_arguments():
    assistant = Registry(config(vc={"api_key": "k", "assistant_id": VC_ID}))["vc"]
    with pytest.raises(TypeError, match="Unexpected arguments: colour"):
        assistant.run(thread_id=THREAD, messages=[], colour="red")
