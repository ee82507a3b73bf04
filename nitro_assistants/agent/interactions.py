"""Typed interactions (docs/protocol.md §8): pause a graph to ask a question, or to have a blueprint
accepted or a plan approved, and get the reader's decision back as the resume value."""

from __future__ import annotations

import json
import uuid
from typing import Any

from langchain_core.tools import tool
from langgraph.types import interrupt

from nitro_assistants.exceptions import InvalidArgumentError
from nitro_assistants.rules import CONTENT_KEY, INTERACTION_KINDS

KINDS = INTERACTION_KINDS


def request_interaction(
    kind: str,
    title: str,
    content: Any,
    *,
    summary: str | None = None,
    interaction_id: str | None = None,
) -> dict[str, Any]:
    """Pause on one interaction and return the decision it is resumed with.

    ``content`` is the question list, the blueprint or the plan. Ask again with the same
    ``interaction_id`` (after a ``request_revision``) and the reviewing side records a new
    revision of the same interaction.
    """
    if kind not in KINDS:
        raise InvalidArgumentError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    interaction = {
        "interactionId": interaction_id or uuid.uuid4().hex,
        "kind": kind,
        "title": title,
        "summary": summary,
        CONTENT_KEY[kind]: content,
    }
    decision = interrupt({"type": "interaction", "interaction": interaction})
    return decision if isinstance(decision, dict) else {"decision": decision}


@tool
def ask_reader(
    kind: str,
    title: str,
    content: Any,
    summary: str | None = None,
    interaction_id: str | None = None,
) -> str:
    """Ask the person reviewing this conversation: questions (kind "question", content: the list
    of questions), a solution design to accept (kind "blueprint") or a plan of steps to approve
    (kind "plan"). Returns their decision as JSON."""
    decision = request_interaction(
        kind, title, content, summary=summary, interaction_id=interaction_id
    )
    return json.dumps(decision, sort_keys=True)
