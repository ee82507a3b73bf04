"""The package's test double (nitro_assistants.testing), used the way README "Testing your
project" tells a host project to use it."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nitro_assistants import services
from nitro_assistants.client import Assistant, Resume
from nitro_assistants.exceptions import (
    ReviewSupersededError,
    RunError,
    ThreadStateError,
    UnknownAssistantError,
    UsageError,
)
from nitro_assistants.models import Review, Run
from nitro_assistants.services import clients
from nitro_assistants.testing import (
    FakeAssistant,
    fake_assistants,
    reply_review,
    run_result,
    tool_calls_review,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.django_db
def test_a_scripted_pause_becomes_a_pending_review() -> None:
    with fake_assistants() as fake:
        fake.results.append(run_result(tool_calls_review({"name": "refund", "args": {"order": 7}})))
        run = services.start_run("tools", "Refund order 7")
        services.execute_run(run.pk)  # what the run_thread task does
    review = Review.objects.get(run=run)
    assert (review.kind, review.status) == ("tool_calls", Review.Status.PENDING)
    assert review.payload["tool_calls"][0]["name"] == "refund"
    (call,) = fake.called("run")
    assert call["messages"][-1]["content"] == "Refund order 7"
    assert call["metadata"] == {"nitro_run_id": str(run.pk)}


@pytest.mark.django_db
def test_a_scripted_failure_is_what_the_app_sees() -> None:
    review_run = services.start_run("walkthrough", "hi")
    down = FakeAssistant(raises={"thread_state": ThreadStateError("Server answered 500")})
    with fake_assistants(down), pytest.raises(ThreadStateError, match="500"):
        services.sync_thread(review_run.thread.pk)
    assert down.called("thread_state") == [{"thread_id": str(review_run.thread.thread_id)}]


def test_scripted_errors_are_raised_once_each_in_order_then_the_answers_again() -> None:
    fake = FakeAssistant(results=[run_result(reply_review("Tuesday?"))])
    assert fake.fail_next("review", ReviewSupersededError("moved on"), RunError("502")) is fake
    with pytest.raises(ReviewSupersededError, match="moved on"):
        fake.review(thread_id="t", reviewer_id="r")
    with pytest.raises(RunError, match="502"):
        fake.review(thread_id="t", reviewer_id="r")
    again = fake.review(thread_id="t", reviewer_id="r")
    assert again.review is not None and again.review.reply is not None  # the scripted result
    assert [c["thread_id"] for c in fake.called("review")] == ["t", "t", "t"]  # each recorded
    assert fake.run(thread_id="t", messages=[]).reply == "ok"  # other methods untouched


def test_scripted_errors_come_before_the_standing_ones() -> None:
    fake = FakeAssistant(raises={"thread_state": ThreadStateError("down")})
    fake.fail_next("thread_state", ThreadStateError("once"))
    with pytest.raises(ThreadStateError, match="once"):
        fake.thread_state(thread_id="t")
    with pytest.raises(ThreadStateError, match="down"):
        fake.thread_state(thread_id="t")


def test_failing_a_method_the_fake_has_not_is_refused() -> None:
    fake = FakeAssistant()
    with pytest.raises(UsageError, match="no method `reveiw`"):
        fake.fail_next("reveiw", RunError("x"))
    with pytest.raises(UsageError, match="no method `called`"):
        fake.fail_next("called", RunError("x"))
    with pytest.raises(UsageError, match="one exception or more"):
        fake.fail_next("run")
    assert fake.failures == {}


@pytest.mark.django_db
def test_an_unknown_key_still_fails_inside_the_block() -> None:
    with fake_assistants() as fake, pytest.raises(UnknownAssistantError, match="nope"):
        services.start_run("nope", "hi")
    assert fake.calls == []
    assert not Run.objects.exists()


def test_leaving_the_block_puts_back_the_configured_clients() -> None:
    outer, inner = FakeAssistant(), FakeAssistant()
    with fake_assistants(outer):
        with fake_assistants(inner):
            assert clients.assistant_for("plain") is inner
        assert clients.assistant_for("plain") is outer
    assert isinstance(clients.assistant_for("plain"), Assistant)


def test_results_are_answered_in_order_then_a_finished_run() -> None:
    fake = FakeAssistant(results=[run_result(reply_review("Tuesday?"))])
    first = fake.review(thread_id="t", reviewer_id="r")
    assert first.review is not None and first.review.reply is not None
    assert first.review.reply.content == "Tuesday?"
    assert fake.run(thread_id="t", messages=[]).reply == "ok"


def parameters(function: Any) -> list[tuple[str, Any]]:
    return [
        (p.name, p.default)
        for p in inspect.signature(function).parameters.values()
        if p.kind is not p.VAR_KEYWORD and p.name != "self"
    ]


def test_the_fake_has_the_parameters_of_the_real_assistant() -> None:
    """Services call the assistant with keywords: a parameter renamed or added in
    :class:`Assistant` must be renamed or added in the fake too, or host tests would pass
    against calls the real client refuses."""
    methods = [name for name in vars(FakeAssistant) if not name.startswith("_")]
    faked = [name for name in methods if callable(getattr(FakeAssistant, name))]
    assert {"called", "fail_next"} <= set(faked)
    for name in (n for n in faked if n not in ("called", "fail_next")):
        assert parameters(getattr(FakeAssistant, name)) == parameters(getattr(Assistant, name)), (
            name
        )


def test_the_testing_modules_import_without_pytest_django_or_langgraph() -> None:
    code = (
        "import sys\n"
        "import nitro_assistants.testing, nitro_assistants.testing.launchers\n"
        "loaded = [m for m in ('pytest', 'django.db.models', 'langgraph', 'redis') if m in sys.modules]\n"
        "assert loaded == [], loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.django_db
def test_background_mode_runs_and_resumes_through_the_fake(settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "RUN_MODE": "background"}
    pause = tool_calls_review({"name": "refund", "args": {"order": 7}})
    with fake_assistants() as fake:
        fake.results = [run_result(pause), run_result(reply="Refunded.")]
        run = services.execute_run(services.start_run("tools", "Refund order 7").pk)
        assert not run.finished  # created on the "server", not waited for
        assert not services.collect_run(run.pk, wait=False).finished  # still "pending" there
        services.collect_run(run.pk)  # the collect_run task: joins it
        review = Review.objects.get(run=run)
        decision = services.decide(
            review, None, {"tool_calls": [{"id": "call_1", "action": "approve"}]}
        )
        services.execute_resume(decision.pk)
        decision.refresh_from_db()
        services.collect_run(decision.run.pk)
    review.refresh_from_db()
    assert review.status == Review.Status.APPLIED
    assert [name for name, _ in fake.calls if name.startswith(("start_", "join", "review"))] == [
        "start_run",
        "join_run",
        "start_review",
        "review_result",
    ]
    (started,) = fake.called("start_review")
    assert started["tool_calls"][0]["action"] == "approve"
    # The Resume the real client would have been given, and its fields by name beside it.
    assert isinstance(started["resume"], Resume)
    assert started["resume"].tool_calls == started["tool_calls"]
    assert started["resume"].pending is not None  # the pause shown: not read again
    assert started["metadata"] == {"nitro_run_id": str(decision.run.pk)}


def test_the_fake_takes_a_resume_or_its_keywords_as_the_client_does() -> None:
    fake = FakeAssistant()
    resume = Resume(reviewer_id="jane", interrupt_id="i1", reply={"action": "approve"})
    fake.review("t", resume)
    fake.review(thread_id="t", reviewer_id="jane", interrupt_id="i1", reply={"action": "approve"})
    fake.review("t", "jane", interrupt_id="i1", reply={"action": "approve"})
    assert [call["resume"] for call in fake.called("review")] == [resume, resume, resume]
    with pytest.raises(UsageError, match="Unexpected arguments: colour"):
        fake.review("t", resume=None, reviewer_id="jane", colour="red")  # as the client refuses
