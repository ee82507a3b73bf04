"""Fixtures of the typed-interaction tests: users, API keys, interactions mirrored the way a real
pause arrives (through ``mirror_pending``), an API client, and plan operations."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import transaction
from django.test import Client

from nitro_assistants import operations, services, tasks
from nitro_assistants.client import PendingReview
from nitro_assistants.models import ApiKey, Review, Thread
from nitro_assistants.services.audit import events_batched
from nitro_assistants.services.mirror import mirror_pending
from nitro_assistants.testing import FakeAssistant, fake_assistants
from tests.core.conftest import celery_worker, proxy, server_settings

__all__ = ["celery_worker", "proxy", "server_settings"]

QUESTIONS = [
    {
        "questionId": "day",
        "prompt": "Which day?",
        "input": "single_select",
        "options": [
            {"optionId": "tue", "label": "Tuesday", "description": ""},
            {"optionId": "fri", "label": "Friday", "description": ""},
        ],
        "allowOther": False,
        "multiple": False,
        "optional": False,
    },
    {
        "questionId": "why",
        "prompt": "Anything else?",
        "input": "text",
        "options": [],
        "allowOther": False,
        "multiple": False,
        "optional": True,
    },
]

BLUEPRINT = {
    "agents": [{"name": "scheduler"}],
    "capabilities": ["calendar"],
    "trigger": {"type": "sms"},
    "checkpoints": [],
    "costClass": "low",
    "environment": "staging",
    "gaps": [],
    "outputs": ["appointment"],
}
#: The blueprint revised: another revision of the same interaction.
REVISED = {**BLUEPRINT, "environment": "production"}


def plan(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"steps": list(steps), "prerequisites": []}


def step(step_id: str, action: str = "test.ok", **extra: Any) -> dict[str, Any]:
    return {
        "stepId": step_id,
        "title": f"Step {step_id}",
        "action": action,
        "input": extra.pop("input", {}),
        "enabled": True,
        "optional": False,
        "dependsOn": [],
        "costClass": "low",
        "warnings": [],
        "fields": [],
        **extra,
    }


DAY_FIELD = {
    "name": "day",
    "label": "Day",
    "widget": "select",
    "options": ["Tuesday", "Friday"],
    "required": True,
    "help": "",
}


@pytest.fixture
def jane(db: Any) -> User:
    return User.objects.create_user("jane", is_staff=True)


@pytest.fixture
def sam(db: Any) -> User:
    return User.objects.create_user("sam", is_staff=True)


@pytest.fixture
def fake() -> Iterator[FakeAssistant]:
    with fake_assistants() as fake:
        yield fake


@pytest.fixture
def opener(db: Any) -> User:
    return User.objects.create_user("olivia", password="pw")


@pytest.fixture
def stranger(db: Any) -> User:
    return User.objects.create_user("sam", password="pw")


@pytest.fixture
def key(opener: User) -> str:
    return ApiKey.generate(opener, "tests")[1]


@pytest.fixture
def thread(opener: User) -> Thread:
    return Thread.objects.create(assistant_key="interactions", opened_by=opener)


InteractionMaker = Callable[..., Review]


def pause(
    kind: str, content: Any, interaction_id: str = "int-1", title: str = "Please decide"
) -> PendingReview:
    """The server's pause on an interaction (a new interrupt id each time)."""
    interrupt_id = uuid.uuid4().hex
    key = {"question": "questions", "blueprint": "blueprint", "plan": "plan"}[kind]
    return PendingReview(
        kind=kind,
        interrupt_id=interrupt_id,
        interrupt_ids=[interrupt_id],
        interaction={
            "interactionId": interaction_id,
            "kind": kind,
            "title": title,
            "summary": "Because the customer asked.",
            key: content,
        },
        mode="interaction",
    )


@pytest.fixture
def interaction(thread: Thread) -> InteractionMaker:
    """Mirror a pause on an interaction, as a run that paused on it would."""

    def make(
        kind: str,
        content: Any,
        interaction_id: str = "int-1",
        on: Thread | None = None,
        title: str = "Please decide",
    ) -> Review:
        target = on or thread
        pending = pause(kind, content, interaction_id, title)
        # As a run's mirror (record_result) and sync_thread call it: the events in one batch.
        with transaction.atomic(), events_batched():
            review = mirror_pending(
                Thread.objects.select_for_update(no_key=True).get(pk=target.pk), None, pending
            )
        assert review is not None
        return review

    return make


class Api:
    """The decide API through Django's test client, authenticated by an API key."""

    def __init__(self, client: Client, key: str | None) -> None:
        self.client = client
        self.key = key

    def headers(self, key: str | None = None) -> dict[str, str]:
        key = key or self.key
        return {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}

    def decide(
        self, review: Review, body: dict[str, Any], key: str | None = None, **extra: Any
    ) -> Any:
        body = {"revision": review.revision, "digest": review.digest, **body}
        url = f"/nitro/api/sessions/{review.thread.thread_id}/interactions/{review.interaction_id}/decide"
        return self.client.post(
            url,
            data=json.dumps(body),
            content_type="application/json",
            **self.headers(key),
            **extra,
        )

    def get(self, path: str, key: str | None = None, **params: Any) -> Any:
        return self.client.get(f"/nitro/api/{path}", params, **self.headers(key))


@pytest.fixture
def api(client: Client, key: str, fake: FakeAssistant) -> Api:
    return Api(client, key)


def assert_error(response: Any, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    """The response is the envelope with this status and code (and field, if given)."""
    body = response.json()
    assert response.status_code == status, body
    assert body["code"] == code, body
    assert set(body) == {"code", "message", "details"}
    assert set(body["details"]) == {"field", "issues", "requestId", "retryable"}
    assert body["details"]["requestId"] == response["X-Request-ID"]
    if field is not None:
        assert body["details"]["field"] == field, body
    return body


@pytest.fixture
def grant() -> Callable[[User, str], User]:
    def grant(user: User, *perms: str) -> User:
        for perm in perms:
            app_label, codename = perm.split(".")
            user.user_permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )
        return User.objects.get(pk=user.pk)  # a fresh instance: no permission cache

    return grant


@pytest.fixture
def registered_operations() -> Iterator[list[tuple[str, dict[str, Any], str]]]:
    """Operations the test plans use: ``test.ok`` records its call, ``test.fail`` raises,
    ``test.guarded`` needs two permissions. Yields the calls (name, input, username)."""
    calls: list[tuple[str, dict[str, Any], str]] = []

    @operations.operation("test.ok")
    def ok(input: dict[str, Any], user: Any) -> dict[str, Any]:
        calls.append(("test.ok", input, user.get_username()))
        return {
            "message": "done",
            "link": "https://crm.example/42",
            "resourceId": "42",
            "resourceKind": "appointment",
        }

    @operations.operation("test.fail")
    def fail(input: dict[str, Any], user: Any) -> None:
        calls.append(("test.fail", input, user.get_username()))
        raise RuntimeError("CRM refused the change")

    @operations.operation(
        "test.guarded",
        permissions=["nitro_assistants.view_thread", "nitro_assistants.change_thread"],
    )
    def guarded(input: dict[str, Any], user: Any) -> None:
        calls.append(("test.guarded", input, user.get_username()))

    yield calls
    for name in ("test.ok", "test.fail", "test.guarded"):
        operations.unregister(name)


@pytest.fixture
def run_tasks_inline(
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[str, Any]]:
    """Plan steps run right here when their task is enqueued; resumes are only recorded."""
    sent: list[tuple[str, Any]] = []

    def run_step(pk: int) -> None:
        sent.append(("execute_plan_step", pk))
        services.execute_plan_step(pk)

    monkeypatch.setattr(tasks.execute_plan_step, "delay", run_step)
    monkeypatch.setattr(tasks.resume_thread, "delay", lambda pk: sent.append(("resume_thread", pk)))
    return sent
