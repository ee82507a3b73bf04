"""The demo's SMS outbox: a JSON-lines file standing in for an SMS gateway.

The demo assistant's ``send_sms`` delivery tool (``reviewsite/agent/graph.py``, which runs in the
Assistants server, outside Django) appends the customer's messages to it; the plan operations
append the technician's; ``/outbox/`` shows them all.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings


def send(to: str, content: str) -> dict[str, Any]:
    entry = {"at": datetime.now(UTC).isoformat(), "to": to, "content": content}
    path = Path(settings.DEMO_OUTBOX)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as outbox:
        outbox.write(json.dumps(entry) + "\n")
    return entry


def sent() -> list[dict[str, Any]]:
    """Every message in the outbox, oldest first (a line that is not JSON is skipped)."""
    messages = []
    try:
        with open(settings.DEMO_OUTBOX, encoding="utf-8") as lines:
            for line in lines:
                try:
                    messages.append(json.loads(line))
                except ValueError:
                    continue
    except FileNotFoundError:
        pass
    return messages
