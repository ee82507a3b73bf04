"""The API key, the webhook secret and every definition's ``api_key`` never appear in logs (all
loggers captured at DEBUG, in this process and in a worker run with ``--loglevel=DEBUG``),
exception messages, task results or what the services store, on the happy paths and the failing
ones (server down, retries running out, a 4xx from the server)."""

from __future__ import annotations

import json
import logging
import traceback
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import nitro_assistants
from nitro_assistants import services, tasks
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import Decision, Event, Review, Run, Thread
from tests.reliability.conftest import wait_for

pytestmark = [pytest.mark.server, pytest.mark.django_db(transaction=True)]

API_KEY = f"sk-rel-{uuid.uuid4().hex}"
WEBHOOK_SECRET = f"whsec-rel-{uuid.uuid4().hex}"
SECRETS = (API_KEY, WEBHOOK_SECRET)


class Everything(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.levelname} {self.format(record)}")
        self.lines.append(repr(record.args))


@pytest.fixture
def captured_logs() -> Iterator[Everything]:
    """Every log record of every logger, at DEBUG, formatted (with tracebacks)."""
    handler = Everything()
    handler.setFormatter(logging.Formatter("%(message)s"))
    loggers = [logging.getLogger()] + [
        logger
        for logger in logging.root.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    levels = {logger: logger.level for logger in loggers}
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)
        for logger, level in levels.items():
            logger.setLevel(level)


@pytest.fixture
def secret_settings(nitro_settings: Any, broker: Any) -> Any:
    config = nitro_settings.NITRO_ASSISTANTS
    nitro_settings.NITRO_ASSISTANTS = {
        **config,
        "DEFINITIONS": {
            **{key: {**d, "api_key": API_KEY} for key, d in config["DEFINITIONS"].items()},
            "missing": {"api_key": API_KEY, "assistant_id": str(uuid.uuid4())},
        },
        "WEBHOOK_SECRET": WEBHOOK_SECRET,
        "TASK_MAX_RETRIES": 1,
    }
    return nitro_settings


def stored_text() -> str:
    """Everything the services stored that a person or a log shipper may see."""
    rows: list[Any] = [
        *Run.objects.values("error", "input", "remote_run_id"),
        *Decision.objects.values("error", "note", "reply", "tool_calls"),
        *Event.objects.values("verb", "data"),
        *Review.objects.values("payload"),
        *Thread.objects.values("values", "context"),
    ]
    return json.dumps(rows, default=str)


def leaks(*texts: str) -> list[str]:
    return [secret for secret in SECRETS for text in texts if secret in text]


def describe(exc: BaseException) -> str:
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


def test_no_secret_in_logs_errors_or_results_in_process(
    secret_settings: Any, captured_logs: Everything, server: Any
) -> None:
    seen: list[str] = []
    assistant = nitro_assistants.assistants()["tools"]
    # The key is really in use: it is in the session's headers, sent with every request.
    assert assistant.client.transport.session.headers["Authorization"] == f"Bearer {API_KEY}"
    seen += [repr(assistant), repr(assistant.client), repr(assistant.client.transport)]

    # Happy path through the task bodies: run, pause, decide, resume.
    run = services.start_run("tools", "Can I move my appointment to Tuesday?")
    seen.append(repr(tasks.run_thread.apply(args=(str(run.pk),)).get()))
    review = Review.objects.get(thread=run.thread, status="pending")
    call_id = review.tool_calls[0]["id"]
    decision = services.decide(review, None, {"tool_calls": [{"id": call_id, "action": "approve"}]})
    seen.append(repr(tasks.resume_thread.apply(args=(decision.pk,)).get()))
    assert Decision.objects.get(pk=decision.pk).outcome == "applied"

    # Background mode with a webhook: the URL the server gets carries a signed token only.
    secret_settings.NITRO_ASSISTANTS = {
        **secret_settings.NITRO_ASSISTANTS,
        "RUN_MODE": "background",
        "WEBHOOK_URL": "http://127.0.0.1:9/nitro/webhook/",
    }
    background = services.start_run("plain", "reply: in the background")
    seen.append(repr(tasks.run_thread.apply(args=(str(background.pk),)).get()))
    secret_settings.NITRO_ASSISTANTS = {**secret_settings.NITRO_ASSISTANTS, "RUN_MODE": "wait"}

    # A 4xx from the server (an assistant it does not know): a failed run, not retried.
    refused = services.start_run("missing", "reply: hello")
    seen.append(repr(tasks.run_thread.apply(args=(str(refused.pk),)).get()))
    refused.refresh_from_db()
    assert refused.status == Run.Status.FAILED
    assert refused.error

    # The server down: transient errors, retried (eagerly here) until TASK_MAX_RETRIES, then failed.
    other = services.start_run("tools", "Can I move my appointment to Friday?")
    decided = services.start_run(run.thread, "Can I move my appointment to Monday?")
    seen.append(repr(tasks.run_thread.apply(args=(str(decided.pk),)).get()))
    pending = Review.objects.get(thread=run.thread, status="pending")
    server.stop()
    try:
        services.execute_run(other.pk)
    except NitroAssistantsError as exc:
        seen.append(describe(exc))
    else:
        raise AssertionError("the server is down: execute_run must raise")
    seen.append(repr(tasks.run_thread.apply(args=(str(other.pk),)).get()))
    late = services.decide(
        pending, None, {"tool_calls": [{"id": pending.tool_calls[0]["id"], "action": "reject"}]}
    )
    seen.append(repr(tasks.resume_thread.apply(args=(late.pk,)).get()))
    try:
        assistant.thread_state(thread_id=str(run.thread.thread_id))
    except NitroAssistantsError as exc:
        seen.append(describe(exc))
    other.refresh_from_db()
    late.refresh_from_db()
    assert other.status == Run.Status.FAILED
    assert late.outcome == Decision.Outcome.FAILED
    assert "connection failed" in other.error

    logged = "\n".join(captured_logs.lines)
    assert "connection failed" in logged  # the failures were logged, and searched
    assert len(captured_logs.lines) > 50
    assert leaks(logged, *seen, stored_text()) == []


def test_no_secret_in_a_debug_worker_log(
    nitro_settings: Any, start_worker: Any, server: Any
) -> None:
    worker = start_worker(
        NITRO_REL_API_KEY=API_KEY,
        NITRO_REL_WEBHOOK_SECRET=WEBHOOK_SECRET,
        NITRO_REL_MAX_RETRIES="1",
    )
    run = services.start_run("tools", "Can I move my appointment to Tuesday?")
    review = wait_for(lambda: Review.objects.filter(thread=run.thread, status="pending").first())
    call_id = review.tool_calls[0]["id"]
    decision = services.decide(review, None, {"tool_calls": [{"id": call_id, "action": "approve"}]})
    wait_for(lambda: Decision.objects.filter(pk=decision.pk, outcome="applied").exists())
    server.stop()
    failing = services.start_run("plain", "reply: nobody home")
    wait_for(lambda: worker.signals("run_failed"), 30)
    failing.refresh_from_db()
    assert failing.status == Run.Status.FAILED
    log = worker.log()
    assert "DEBUG" in log
    assert "retry: Retry in" in log
    assert leaks(log, worker.signal_log.read_text(), stored_text()) == []
