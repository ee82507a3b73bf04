from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.langgraph_server import LangGraphServer


@pytest.fixture(scope="session")
def langgraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LangGraphServer]:
    """The real LangGraph Agent Server running the graphs of tests/graphs/agents.py."""
    server = LangGraphServer(workdir=tmp_path_factory.mktemp("langgraph")).start()
    try:
        yield server
    finally:
        server.stop()
