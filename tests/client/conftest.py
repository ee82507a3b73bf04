from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from nitro_assistants.client import Assistants
from nitro_assistants.testing.launchers import LangGraphServer


@pytest.fixture
def client(langgraph_server: LangGraphServer) -> Assistants:
    return Assistants(base_url=langgraph_server.url, api_key="test-key", user_id="tests")


@pytest.fixture
def new_thread() -> Callable[[], str]:
    return lambda: str(uuid.uuid4())
