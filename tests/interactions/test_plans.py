"""Approved plans: permissions, one task per step in dependsOn order, a failed step stopping only
its dependents, every step's result in the events."""

from __future__ import annotations

from typing import Any

import pytest

import nitro_assistants
from nitro_assistants import operations, services, tasks
from nitro_assistants.models import ApiKey, Decision, Review, StepResult
from nitro_assistants.services import stops
from tests.interactions.conftest import Api, assert_error, plan, step

pytestmark = pytest.mark.django_db


def test_operation_decorator_registers_and_is_exported() -> None:
    @nitro_assistants.operation("crm.reschedule", permissions=["crm.change_appointment"])
    def reschedule(input: dict[str, Any], user: Any) -> None:
        return None

    try:
        registered = operations.get_operation("crm.reschedule")
        assert registered is not None
        assert registered.function is reschedule
        assert registered.permissions == ("crm.change_appointment",)
    finally:
        operations.unregister("crm.reschedule")
    with pytest.raises(ValueError, match="needs a name"):
        nitro_assistants.operation(" ")


def test_a_failed_step_skips_its_dependents_not_the_others(
    api: Api,
    interaction: Any,
    registered_operations: list[Any],
    run_tasks_inline: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    review = interaction(
        "plan",
        plan(
            step("book", input={"n": 1}),
            step("charge", action="test.fail", dependsOn=["book"]),
            step("receipt", dependsOn=["charge"]),
            step("notify", dependsOn=["book"]),
            step("audit"),
        ),
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = api.decide(review, {"decision": "approve"})
    assert response.status_code == 200, response.json()
    review.refresh_from_db()
    assert review.status == Review.Status.FAILED
    results = {r.step_id: r for r in StepResult.objects.filter(review=review)}
    assert {k: r.status for k, r in results.items()} == {
        "book": "completed",
        "charge": "failed",
        "receipt": "skipped",
        "notify": "completed",
        "audit": "completed",
    }
    assert results["charge"].message == "CRM refused the change"
    assert results["receipt"].message == "Not run: step charge did not complete"
    # dependsOn order: nothing ran before what it depends on; the skipped step never ran.
    order = [pk for name, pk in run_tasks_inline if name == "execute_plan_step"]
    by_pk = {r.pk: r.step_id for r in results.values()}
    ran = [by_pk[pk] for pk in order]
    assert sorted(ran) == ["audit", "book", "charge", "notify"]
    assert ran.index("book") < ran.index("charge") and ran.index("book") < ran.index("notify")
    assert [call[0] for call in registered_operations].count("test.fail") == 1
    # Each step's result is appended to the events: running, then its outcome.
    reported = [
        (e["step"]["stepId"], e["step"]["status"])
        for e in review.events.filter(verb="plan_step").values_list("data", flat=True)
    ]
    assert ("charge", "running") in reported and ("charge", "failed") in reported
    assert ("receipt", "skipped") in reported and ("receipt", "running") not in reported
    assert review.events.last().verb == "plan_failed"
    listed = api.get(f"sessions/{review.thread.thread_id}/interactions/int-1").json()
    assert listed["status"] == "failed"
    failed = next(s for s in listed["stepResults"] if s["stepId"] == "charge")
    assert failed == {
        "stepId": "charge",
        "status": "failed",
        "message": "CRM refused the change",
        "link": None,
        "resourceId": None,
        "resourceKind": None,
    }


def test_a_step_runs_once_even_if_its_task_is_delivered_twice(
    api: Api,
    interaction: Any,
    registered_operations: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(tasks.execute_plan_step, "delay", sent.append)
    monkeypatch.setattr(tasks.resume_thread, "delay", lambda pk: None)
    review = interaction("plan", plan(step("only")))
    with django_capture_on_commit_callbacks(execute=True):
        api.decide(review, {"decision": "approve"})
    (pk,) = sent
    assert services.execute_plan_step(pk).status == "completed"
    assert services.execute_plan_step(pk).status == "completed"
    assert len(registered_operations) == 1


def test_approving_needs_every_permission_of_the_enabled_steps(
    api: Api,
    interaction: Any,
    opener: Any,
    registered_operations: list[Any],
    grant: Any,
    run_tasks_inline: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    review = interaction(
        "plan",
        plan(step("s1"), step("s2", action="test.guarded", optional=True)),
    )
    body = assert_error(api.decide(review, {"decision": "approve"}), 403, "forbidden", "decision")
    assert body["details"]["issues"] == [
        "Missing permission nitro_assistants.change_thread",
        "Missing permission nitro_assistants.view_thread",
    ]
    assert not Decision.objects.exists()
    grant(opener, "nitro_assistants.view_thread")
    body = assert_error(api.decide(review, {"decision": "approve"}), 403, "forbidden")
    assert body["details"]["issues"] == ["Missing permission nitro_assistants.change_thread"]
    # Turning the guarded optional step off needs no permission for it.
    with django_capture_on_commit_callbacks(execute=True):
        response = api.decide(review, {"decision": "approve", "disabledSteps": ["s2"]})
    assert response.status_code == 200
    assert [c[0] for c in registered_operations] == ["test.ok"]


def test_steps_run_under_the_approver_and_fail_if_they_lost_permission(
    api: Api,
    interaction: Any,
    opener: Any,
    registered_operations: list[Any],
    grant: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(tasks.execute_plan_step, "delay", sent.append)
    monkeypatch.setattr(tasks.resume_thread, "delay", lambda pk: None)
    grant(opener, "nitro_assistants.view_thread", "nitro_assistants.change_thread")
    review = interaction("plan", plan(step("s1", action="test.guarded")))
    with django_capture_on_commit_callbacks(execute=True):
        assert api.decide(review, {"decision": "approve"}).status_code == 200
    opener.user_permissions.clear()
    result = services.execute_plan_step(sent[0])
    assert result.status == "failed"
    assert "lost permission" in result.message
    assert registered_operations == []


def test_approval_is_refused_without_a_signed_in_user(
    interaction: Any, registered_operations: Any
) -> None:
    from django.contrib.auth.models import AnonymousUser

    from nitro_assistants.exceptions import InteractionForbiddenError

    review = interaction("plan", plan(step("s1")))
    with pytest.raises(InteractionForbiddenError, match="signed-in"):
        services.decide(
            review, AnonymousUser(), {"decision": "approve", "revision": 1, "digest": review.digest}
        )


def test_an_unknown_dependency_or_cycle_is_a_problem_on_arrival(
    interaction: Any, registered_operations: Any
) -> None:
    unknown = interaction("plan", plan(step("a", dependsOn=["zz"])), interaction_id="p1")
    assert unknown.payload["problems"] == ["Step a depends on unknown step 'zz'"]
    cycle = interaction(
        "plan", plan(step("a", dependsOn=["b"]), step("b", dependsOn=["a"])), interaction_id="p2"
    )
    assert cycle.payload["problems"] == ["The steps' dependsOn form a cycle"]


def test_api_keys_authenticate_their_user(
    api: Api, interaction: Any, opener: Any, key: str
) -> None:
    review = interaction("question", [])
    session = review.thread.thread_id
    assert api.get(f"sessions/{session}/interactions").status_code == 200
    stored = ApiKey.objects.get(user=opener)
    assert stored.last_used_at is not None
    assert key not in stored.hashed_key and stored.hashed_key != key
    assert_error(
        api.get(f"sessions/{session}/interactions", key=key[:-1] + "x"), 401, "unauthorized"
    )
    assert_error(api.get(f"sessions/{session}/interactions", key="nak_nope_x"), 401, "unauthorized")
    assert_error(api.get(f"sessions/{session}/interactions", key="garbage"), 401, "unauthorized")
    stored.revoke()
    revoked = assert_error(api.get(f"sessions/{session}/interactions"), 401, "unauthorized")
    assert "revoked" in revoked["message"]
    anonymous = api.client.get(f"/nitro/api/sessions/{session}/interactions")
    assert_error(anonymous, 401, "unauthorized")
    assert anonymous["WWW-Authenticate"] == "Bearer"


def test_session_auth_needs_the_csrf_token_to_decide(
    interaction: Any, opener: Any, fake: Any
) -> None:
    import json

    from django.test import Client

    review = interaction("blueprint", {"agents": []})
    client = Client(enforce_csrf_checks=True)
    client.force_login(opener)
    url = f"/nitro/api/sessions/{review.thread.thread_id}/interactions/int-1/decide"
    body = json.dumps({"decision": "accept", "revision": 1, "digest": review.digest})
    # Reading needs no token.
    assert (
        client.get(f"/nitro/api/sessions/{review.thread.thread_id}/interactions").status_code == 200
    )
    assert_error(
        client.post(url, body, content_type="application/json"), 403, "forbidden", "X-CSRFToken"
    )
    client.get("/admin/login/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = client.post(url, body, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200, response.json()
    assert response.json()["decision"]["decidedBy"] == "olivia"


def test_rate_limit_is_per_user(api: Api, interaction: Any, stranger: Any, settings: Any) -> None:
    from django.core.cache import cache

    cache.clear()
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "API_RATE_LIMIT": 3}
    review = interaction("question", [])
    path = f"sessions/{review.thread.thread_id}/interactions"
    for _ in range(3):
        assert api.get(path).status_code == 200
    limited = api.get(path)
    body = assert_error(limited, 429, "rate_limit_exceeded")
    assert body["details"]["retryable"] is True
    assert int(limited["Retry-After"]) >= 1
    other = ApiKey.generate(stranger, "sam")[1]
    assert_error(api.get(path, key=other), 403, "forbidden")  # its own budget: not limited
    cache.clear()


def test_ready_steps_whose_task_was_lost_are_enqueued_again(
    api: Api,
    interaction: Any,
    registered_operations: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    import datetime

    from django.utils import timezone

    lost: list[int] = []
    monkeypatch.setattr(tasks.execute_plan_step, "delay", lost.append)
    monkeypatch.setattr(tasks.resume_thread, "delay", lambda pk: None)
    review = interaction("plan", plan(step("a"), step("b", dependsOn=["a"])))
    with django_capture_on_commit_callbacks(execute=True):
        api.decide(review, {"decision": "approve"})
    first = StepResult.objects.get(step_id="a")
    assert lost == [first.pk]
    lost.clear()
    later = timezone.now() + datetime.timedelta(hours=1)
    assert services.requeue_stale_steps(timezone.now()) == 0  # too recent: maybe just slow
    assert services.requeue_stale_steps(later) == 1 and lost == [first.pk]  # b waits for a
    lost.clear()
    services.execute_plan_step(first.pk)  # runs; b's enqueue is lost too
    second = StepResult.objects.get(step_id="b")
    lost.clear()
    assert services.requeue_stale_steps(later) == 1 and lost == [second.pk]


def test_an_overlong_interaction_id_is_kept_and_flagged(interaction: Any) -> None:
    review = interaction("question", [], interaction_id="x" * 200)
    assert review.interaction_id == "x" * 128
    assert review.payload["problems"] == ["The interactionId is longer than 128 characters"]


def test_a_stop_runs_no_step_of_an_approved_plan(
    api: Api,
    interaction: Any,
    registered_operations: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    sent: list[int] = []
    monkeypatch.setattr(tasks.execute_plan_step, "delay", sent.append)
    monkeypatch.setattr(tasks.resume_thread, "delay", lambda pk: None)
    review = interaction("plan", plan(step("only")))
    with django_capture_on_commit_callbacks(execute=True):
        api.decide(review, {"decision": "approve"})
    stops.stop(None, scope="thread", thread=review.thread, reason="customer left")
    (pk,) = sent
    result = services.execute_plan_step(pk)
    assert result.status == "failed" and "customer left" in result.message
    assert registered_operations == []
