"""HTTP requests per client operation, against a real `langgraph dev` server.

Counts what `Assistants.transport.requests_sent` records for each operation and prints it next
to the Ruby client's sequence (nitro_intelligence 4.1) and the goal. Prints figures only.

    .venv/bin/python bench/requests_per_call.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import requests  # noqa: E402

from bench import langgraph_server  # noqa: E402
from nitro_assistants.client import Assistants  # noqa: E402

# The Ruby client's requests (its documentation, "Thread initialization" and `#review`).
RUBY = {
    "run on a known thread": (2, "POST /threads (409: it exists) + runs/wait"),
    "first run with three earlier messages": (
        4,
        "GET /assistants/{id} + POST /threads + POST /threads/{id}/state + runs/wait",
    ),
    "one review": (3, "GET /threads/{id} + GET /threads/{id}/state + runs/wait"),
}
GOALS = {
    "run on a known thread": (1, "1"),
    "first run with three earlier messages": (3, "≤3"),
    "one review": (2, "≤2"),
}


def assistant_uuid(base_url: str, graph: str) -> str:
    """The server's default assistant for a graph: a UUID, so the graph lookup is exercised."""
    found = requests.post(
        f"{base_url}/assistants/search", json={"graph_id": graph, "limit": 1}, timeout=10
    )
    found.raise_for_status()
    return str(found.json()[0]["assistant_id"])


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def measure(base_url: str) -> list[tuple[str, int, str]]:
    rows: list[tuple[str, int, str]] = []
    tools = assistant_uuid(base_url, "tools")
    plain = assistant_uuid(base_url, "plain")

    # 1. A run on a thread the caller knows exists.
    client = Assistants(base_url, "bench-key", auth="x-api-key")
    thread = str(uuid.uuid4())
    client.run(thread, plain, [user("reply: first")])
    before = client.transport.requests_sent
    result = client.run(thread, plain, [user("reply: second")], known_thread=True)
    assert result.reply == "second", result.raw
    rows.append(("run on a known thread", client.transport.requests_sent - before, "runs/wait"))

    # 2. The first run of a conversation with three earlier messages, on a fresh client
    #    (nothing cached: the assistant's graph is looked up), then on a warm one.
    history = [user("Hello"), {"role": "assistant", "content": "Hi there!"}, user("Still there?")]
    client = Assistants(base_url, "bench-key", auth="x-api-key")
    result = client.run(str(uuid.uuid4()), plain, [*history, user("reply: yes")])
    assert result.reply == "yes", result.raw
    rows.append(
        (
            "first run with three earlier messages",
            client.transport.requests_sent,
            "GET /assistants/{id} + POST /threads (created and seeded) + runs/wait",
        )
    )
    before = client.transport.requests_sent
    client.run(str(uuid.uuid4()), plain, [*history, user("reply: again")])
    rows.append(
        (
            "  … the same client's next new thread",
            client.transport.requests_sent - before,
            "POST /threads + runs/wait (graph id cached)",
        )
    )

    # 3. One review: a held tool call, approved.
    client = Assistants(base_url, "bench-key", auth="x-api-key")
    thread = str(uuid.uuid4())
    calls = json.dumps([{"name": "cancel_appointment", "args": {"appointment_id": 7}}])
    # Once reading the pause first, once as the Celery worker does: the pause shown is passed in.
    for label, held, what in (
        ("one review", False, "GET /threads/{id}/state + POST runs/stream"),
        ("  … with the pause already held (`pending=`)", True, "POST runs/stream"),
    ):
        paused = client.run(thread, tools, [user(f"tools: {calls}")])
        assert paused.review is not None, paused.raw
        before = client.transport.requests_sent
        done = client.review(
            thread,
            tools,
            reviewer_id="bench",
            interrupt_id=paused.review.interrupt_id,
            tool_calls=[{"id": paused.review.tool_calls[0]["id"], "action": "approve"}],
            pending=paused.review if held else None,
        )
        assert done.reply and done.reply.startswith("Done!"), done.raw
        rows.append((label, client.transport.requests_sent - before, what))
    return rows


def table(rows: list[tuple[str, int, str]]) -> str:
    out = [
        "| operation | nitro_assistants | Ruby client 4.1 | goal | met | our requests |",
        "|---|---:|---:|---:|:-:|---|",
    ]
    for name, count, what in rows:
        ruby = RUBY.get(name)
        goal = GOALS.get(name)
        met = "" if goal is None else ("yes" if count <= goal[0] else "**no**")
        out.append(
            f"| {name} | {count} | {ruby[0] if ruby else ''} | {goal[1] if goal else ''} "
            f"| {met} | {what} |"
        )
    out.append("")
    out.append("Ruby client's requests:")
    for name, (count, what) in RUBY.items():
        out.append(f"- {name}: {count} ({what})")
    return "\n".join(out)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-requests-") as workdir:
        server = langgraph_server(Path(workdir)).start()
        try:
            rows = measure(server.url)
        finally:
            server.stop()
    print(
        "HTTP requests per operation, counted by `transport.requests_sent` against `langgraph dev`."
    )
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
