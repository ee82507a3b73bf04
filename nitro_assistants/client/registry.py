"""The assistant registry: named definitions sharing one server, each with its key and id."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from nitro_assistants.client.assistants import DEFAULT_USER_ID, Assistants
from nitro_assistants.client.results import PendingReview, RunResult
from nitro_assistants.client.review import Resume
from nitro_assistants.client.sse import ServerSentEvent
from nitro_assistants.exceptions import ConfigurationError, UnknownAssistantError, UsageError

REQUIRED_FIELDS = ("api_key", "assistant_id")
_clients: dict[tuple[Any, ...], Assistants] = {}
_clients_lock = threading.Lock()


def _refuse_assistant_id(given: Mapping[str, Any], assistant_id: str) -> None:
    if "assistant_id" in given:
        raise UsageError(
            f"This assistant is bound to assistant_id {assistant_id!r}; do not pass one"
        )


def _refuse(unexpected: Mapping[str, Any], assistant_id: str) -> None:
    _refuse_assistant_id(unexpected, assistant_id)
    if unexpected:
        raise UsageError(f"Unexpected arguments: {', '.join(sorted(unexpected))}")


class Assistant:
    """One configured assistant: the :class:`Assistants` methods with its ``assistant_id`` bound."""

    def __init__(self, key: str, client: Assistants, assistant_id: str) -> None:
        self.key = key
        self.client = client
        self.assistant_id = assistant_id

    def __repr__(self) -> str:
        return f"<Assistant {self.key!r} assistant_id={self.assistant_id!r}>"

    def run(
        self,
        thread_id: str,
        messages: list[dict[str, Any]],
        context: dict[str, Any] | None = None,
        known_thread: bool = False,
        metadata: dict[str, Any] | None = None,
        thread_metadata: dict[str, Any] | None = None,
        **unexpected: Any,
    ) -> RunResult:
        _refuse(unexpected, self.assistant_id)
        return self.client.run(
            thread_id,
            self.assistant_id,
            messages,
            context,
            known_thread,
            metadata,
            thread_metadata=thread_metadata,
        )

    def review(
        self, thread_id: str, resume: Resume | str | None = None, **fields: Any
    ) -> RunResult:
        _refuse_assistant_id(fields, self.assistant_id)
        return self.client.review(thread_id, self.assistant_id, resume, **fields)

    def start_review(
        self,
        thread_id: str,
        resume: Resume | str | None = None,
        *,
        webhook: str | None = None,
        metadata: dict[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        _refuse_assistant_id(fields, self.assistant_id)
        return self.client.start_review(
            thread_id, self.assistant_id, resume, webhook=webhook, metadata=metadata, **fields
        )

    def dismiss(self, thread_id: str, interrupt_ids: Iterable[str] | None = None) -> None:
        self.client.dismiss(thread_id, interrupt_ids)

    def review_result(self, thread_id: str, run_id: str) -> RunResult:
        return self.client.review_result(thread_id, run_id)

    def resume_outcome(self, thread_id: str, metadata: Mapping[str, Any]) -> RunResult | None:
        return self.client.resume_outcome(thread_id, metadata)

    def start_run(
        self,
        thread_id: str,
        messages: list[dict[str, Any]] | None = None,
        context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        webhook: str | None = None,
        command: dict[str, Any] | None = None,
        known_thread: bool = False,
        thread_metadata: dict[str, Any] | None = None,
        **unexpected: Any,
    ) -> dict[str, Any]:
        _refuse(unexpected, self.assistant_id)
        return self.client.start_run(
            thread_id,
            self.assistant_id,
            messages,
            context,
            metadata,
            webhook,
            command,
            known_thread,
            thread_metadata=thread_metadata,
        )

    def stream(
        self,
        thread_id: str,
        messages: list[dict[str, Any]] | None = None,
        context: dict[str, Any] | None = None,
        stream_mode: str | list[str] = "values",
        **unexpected: Any,
    ) -> Iterator[ServerSentEvent]:
        _refuse(unexpected, self.assistant_id)
        return self.client.stream(thread_id, self.assistant_id, messages, context, stream_mode)

    def update_thread(self, thread_id: str, metadata: Mapping[str, Any]) -> bool:
        return self.client.update_thread(thread_id, metadata)

    def under_review(self, thread_id: str) -> PendingReview | None:
        return self.client.under_review(thread_id)

    def thread_state(self, thread_id: str) -> dict[str, Any]:
        return self.client.thread_state(thread_id)

    def thread_messages(self, thread_id: str) -> list[dict[str, Any]]:
        return self.client.thread_messages(thread_id)

    def join_run(self, thread_id: str, run_id: str) -> RunResult:
        return self.client.join_run(thread_id, run_id)

    def list_runs(self, thread_id: str, limit: int = 20) -> list[dict[str, Any]]:
        return self.client.list_runs(thread_id, limit)

    def get_run(self, thread_id: str, run_id: str) -> dict[str, Any]:
        return self.client.get_run(thread_id, run_id)

    def cancel_run(self, thread_id: str, run_id: str, *, action: str = "interrupt") -> None:
        self.client.cancel_run(thread_id, run_id, action=action)


class Registry:
    """Assistants by key, from a config like ``settings.NITRO_ASSISTANTS``::

        {"base_url": ..., "user_id": ..., "auth": "bearer", "timeout": ...,
         "max_concurrent_requests": None,
         "definitions": {"virtual-confirmation": {"api_key": ..., "assistant_id": ...}}}

    Upper-case keys (``BASE_URL``, ``DEFINITIONS``) are read too. Clients are shared between
    registries with the same server and key, so connections are reused.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        def get(name: str, default: Any = None) -> Any:
            return config.get(name, config.get(name.upper(), default))

        self.base_url = get("base_url")
        self.user_id = get("user_id", DEFAULT_USER_ID)
        self.auth = get("auth", "bearer")
        self.timeout = get("timeout", (5.0, 300.0))
        self.max_concurrent_requests = get("max_concurrent_requests")
        definitions = get("definitions") or {}
        if not isinstance(definitions, Mapping):
            raise ConfigurationError("definitions must be a mapping of key to definition")
        self.definitions: dict[str, Mapping[str, Any]] = dict(definitions)

    def keys(self) -> list[str]:
        return list(self.definitions)

    def __contains__(self, key: object) -> bool:
        return key in self.definitions

    def problems(self) -> list[str]:
        """Every configuration problem, one line each (what the system checks report)."""
        found = []
        if not self.base_url:
            found.append("base_url is not set")
        for key, definition in self.definitions.items():
            missing = [f for f in REQUIRED_FIELDS if not (definition or {}).get(f)]
            if missing:
                found.append(f"Assistant `{key}` is missing {', '.join(missing)}")
        return found

    def __getitem__(self, key: str) -> Assistant:
        if key not in self.definitions:
            configured = ", ".join(f"`{k}`" for k in self.definitions) or "(none)"
            raise UnknownAssistantError(f"Unknown assistant `{key}`; configured: {configured}")
        definition = self.definitions[key] or {}
        missing = [f for f in REQUIRED_FIELDS if not definition.get(f)]
        if missing:
            raise ConfigurationError(f"Assistant `{key}` is missing {', '.join(missing)}")
        if not self.base_url:
            raise ConfigurationError("base_url is not set")
        return Assistant(
            key, self._client(str(definition["api_key"])), str(definition["assistant_id"])
        )

    def _client(self, api_key: str) -> Assistants:
        timeout = tuple(self.timeout) if isinstance(self.timeout, list) else self.timeout
        limit = self.max_concurrent_requests
        cache_key = (self.base_url, api_key, self.user_id, self.auth, timeout, limit)
        with _clients_lock:
            client = _clients.get(cache_key)
            if client is None:
                client = Assistants(
                    self.base_url,
                    api_key,
                    self.user_id,
                    self.auth,
                    timeout,
                    max_concurrent_requests=limit,
                )
                _clients[cache_key] = client
            return client
