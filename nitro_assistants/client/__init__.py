"""The Assistants HTTP client: pure Python and ``requests``; imports no Django.

::

    from nitro_assistants.client import Assistants, Resume
    client = Assistants(base_url="https://assistants.example.com", api_key="...")
    result = client.run(thread_id=..., assistant_id=..., messages=[{"role": "user", "content": "Hi"}])
    if result.interrupted:
        decision = Resume(reviewer_id="jane", interrupt_id=result.review.interrupt_id, ...)
        result = client.review(thread_id=..., assistant_id=..., resume=decision)
"""

from __future__ import annotations

from nitro_assistants.client.assistants import DEFAULT_USER_ID, Assistants
from nitro_assistants.client.registry import Assistant, Registry
from nitro_assistants.client.results import Delivery, PendingReview, ReplyDraft, RunResult
from nitro_assistants.client.review import Resume
from nitro_assistants.client.sse import ServerSentEvent, parse_sse
from nitro_assistants.exceptions import (
    ConfigurationError,
    NitroAssistantsError,
    ReviewSupersededError,
    RunError,
    ThreadInitializationError,
    ThreadResumptionError,
    ThreadStateError,
    UnknownAssistantError,
)

__all__ = [
    "DEFAULT_USER_ID",
    "Assistant",
    "Assistants",
    "ConfigurationError",
    "Delivery",
    "NitroAssistantsError",
    "PendingReview",
    "Registry",
    "ReplyDraft",
    "Resume",
    "ReviewSupersededError",
    "RunError",
    "RunResult",
    "ServerSentEvent",
    "ThreadInitializationError",
    "ThreadResumptionError",
    "ThreadStateError",
    "UnknownAssistantError",
    "parse_sse",
]
