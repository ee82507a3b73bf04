from __future__ import annotations

import datetime
from io import StringIO
from typing import Any

import pytest
from celery.exceptions import Retry
from django.core.management import CommandError, call_command
from django.utils import timezone

import nitro_assistants
from nitro_assistants import services, tasks
from nitro_assistants.exceptions import RunError, ThreadStateError
from nitro_assistants.models import Delivery, Review, Run, Thread
from nitro_assistants.testing import FakeAssistant, reply_review
from tests.core.conftest import sent
from tests.factories import DeliveryFactory, ThreadFactory


def test_backoff_is_exponential_capped_and_jittered(settings: Any) -> None:
    settings.NITRO_ASSISTANTS = {"TASK_RETRY_BACKOFF": 2, "TASK_RETRY_BACKOFF_MAX": 60}
    for retries, ceiling in [(0, 2), (1, 4), (2, 8), (3, 16), (10, 60)]:
        delays = {tasks.backoff(retries) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1  # jittered: workers retrying together spread out


@pytest.mark.django_db
def test_run_task_retries_transient_errors_then_fails_the_run(
    fake_assistant: FakeAssistant,
    enqueued: list[Any],
    signal_log: list[Any],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    run = services.start_run("walkthrough", "hello")
    # Down for the whole test: the retried attempt and the last one both get the 502.
    fake_assistant.raises["run"] = RunError("502 Bad Gateway", transient=True)  # type: ignore[call-arg]
    scheduled: list[dict[str, Any]] = []

    def retry(**kwargs: Any) -> Retry:
        scheduled.append(kwargs)
        return Retry(exc=kwargs["exc"], when=kwargs["countdown"])

    monkeypatch.setattr(tasks.run_thread, "retry", retry)
    assert tasks.run_thread.apply(args=(str(run.pk),)).state == "RETRY"
    assert len(scheduled) == 1
    assert 0.5 <= scheduled[0]["countdown"] <= 1  # TASK_RETRY_BACKOFF = 1 in the test settings
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "TASK_MAX_RETRIES": 0}
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.run_thread.apply(args=(str(run.pk),)).get() == "failed"
    run.refresh_from_db()
    assert (run.status, run.error) == (Run.Status.FAILED, "502 Bad Gateway")
    assert len(sent(signal_log, "run_failed")) == 1


@pytest.mark.django_db
def test_run_task_does_not_retry_other_errors(
    fake_assistant: FakeAssistant, enqueued: list[Any]
) -> None:
    run = services.start_run("walkthrough", "hello")
    fake_assistant.fail_next("run", ValueError("a bug, not an outage"))
    outcome = tasks.run_thread.apply(args=(str(run.pk),))
    # Not retried, and not left running for requeue_stale to resend forever: failed, by type.
    assert outcome.result == "failed"
    run.refresh_from_db()
    assert (run.status, run.attempts) == (Run.Status.FAILED, 1)
    assert run.error == "ValueError: a bug, not an outage"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("error", "max_retries", "state"),
    [
        (ThreadStateError("503 Service Unavailable", transient=True), 8, "RETRY"),  # type: ignore[call-arg]
        (ThreadStateError("503 Service Unavailable", transient=True), 0, "FAILURE"),  # type: ignore[call-arg]
        (ThreadStateError("404 Not Found"), 8, "FAILURE"),
    ],
)
def test_sync_task_retries_transient_errors_while_retries_are_left(
    fake_assistant: FakeAssistant,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    error: ThreadStateError,
    max_retries: int,
    state: str,
) -> None:
    """The task the admin's sync button and ``sync_thread`` enqueue answers an outage as
    ``run_thread`` does: retried with backoff while ``TASK_MAX_RETRIES`` lasts; an error that
    will not go away by itself, or the last retry's, fails the task."""
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "TASK_MAX_RETRIES": max_retries}
    thread = ThreadFactory()
    fake_assistant.fail_next("thread_state", error)
    scheduled: list[dict[str, Any]] = []

    def retry(**kwargs: Any) -> Retry:
        scheduled.append(kwargs)
        return Retry(exc=kwargs["exc"], when=kwargs["countdown"])

    monkeypatch.setattr(tasks.sync_thread, "retry", retry)
    outcome = tasks.sync_thread.apply(args=(thread.pk,))
    assert outcome.state == state
    assert len(scheduled) == (state == "RETRY")
    if state == "FAILURE":
        assert outcome.result is error


@pytest.mark.django_db
def test_sync_command_syncs_the_threads_asked_for(fake_assistant: FakeAssistant) -> None:
    threads = [ThreadFactory(), ThreadFactory(), ThreadFactory(assistant_key="plain")]
    fake_assistant.pending = reply_review()
    out = StringIO()
    call_command("nitro_assistants_sync", "--assistant", "walkthrough", stdout=out)
    assert "[##############################] 2/2" in out.getvalue()
    assert "Synced 2 of 2 thread(s)." in out.getvalue()
    assert [t.reviews.count() for t in threads] == [1, 1, 0]
    out = StringIO()
    call_command("nitro_assistants_sync", str(threads[2].thread_id), "--no-progress", stdout=out)
    assert out.getvalue().strip() == "Synced 1 of 1 thread(s)."


@pytest.mark.django_db
def test_sweep_command(settings: Any) -> None:
    DeliveryFactory(first_seen_at=timezone.now() - datetime.timedelta(hours=1))
    DeliveryFactory(status=Delivery.Status.FAILED)
    out = StringIO()
    call_command("nitro_assistants_sweep", stdout=out)
    assert out.getvalue().strip() == "1 pending past the limit, 1 failed, alerted."
    assert not Delivery.objects.filter(alerted_at__isnull=True).exists()


@pytest.mark.django_db
def test_requeue_stale_enqueues_only_work_nobody_picked_up(
    enqueued: list[Any], settings: Any
) -> None:
    from nitro_assistants.models import Decision
    from tests.factories import DecisionFactory, RunFactory

    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "REQUEUE_AFTER": 60}
    now = timezone.now()
    old = now - datetime.timedelta(seconds=120)
    lost_run = RunFactory()  # committed, then the process died before enqueueing it
    RunFactory()  # fresh: its task is probably on its way
    RunFactory(status=Run.Status.SUCCEEDED)
    Run.objects.filter(pk=lost_run.pk).update(created_at=old)
    RunFactory(status=Run.Status.RUNNING, started_at=now)  # being worked on
    lost_decision = DecisionFactory(decided_at=old)
    DecisionFactory(decided_at=now)
    DecisionFactory(decided_at=old, outcome=Decision.Outcome.APPLIED)
    assert services.requeue_stale(now) == {"runs": 1, "decisions": 1, "policies": 0}
    assert sorted(enqueued) == [
        ("nitro_assistants.resume_thread", (lost_decision.pk,)),
        ("nitro_assistants.run_thread", (str(lost_run.pk),)),
    ]


@pytest.mark.server
@pytest.mark.django_db
def test_sync_over_all_threads_reports_each_bad_thread_and_syncs_the_others(
    server_settings: Any,
    enqueued: list[Any],
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # The first run of this thread failed before the server created the thread: the server was
    # down and the run had no retries left, so the local thread has no remote counterpart.
    settings.NITRO_ASSISTANTS = {**settings.NITRO_ASSISTANTS, "TASK_MAX_RETRIES": 0}
    with django_capture_on_commit_callbacks(execute=True):
        never = services.start_run("walkthrough", "reply: hello?")
    server_settings.stop()
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert tasks.run_thread.apply(args=(str(never.pk),)).get() == "failed"
    finally:
        server_settings.start()
    good = []
    for _ in range(3):
        with django_capture_on_commit_callbacks(execute=True):
            run = services.start_run("walkthrough", "reply: See you Tuesday.")
        with django_capture_on_commit_callbacks(execute=True):
            services.execute_run(run.pk)
        good.append(run.thread)
    # This one the server had, then lost: a 404 for it is a real failure.
    lost = good.pop(1)
    nitro_assistants.assistants()["walkthrough"].client.delete_thread(str(lost.thread_id))
    before = {t.pk: t.synced_at for t in Thread.objects.filter(pk__in=[t.pk for t in good])}

    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError, match=r"1 thread\(s\) could not be synced"):
        call_command("nitro_assistants_sync", stdout=out, stderr=err)

    assert "[##############################] 4/4\n" in out.getvalue()
    assert "Synced 2 of 4 thread(s); 1 skipped (never created on the server); 1 failed." in (
        out.getvalue()
    )
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(f"skipped {never.thread.thread_id} (walkthrough): The server never")
    assert "its last run failed: POST" in lines[0]
    assert "connection failed" in lines[0]
    assert lines[1].startswith(f"failed {lost.thread_id} (walkthrough): ThreadStateError: ")
    assert "not found" in lines[1]
    assert len(lines) == 2
    for thread in good:
        thread.refresh_from_db()
        assert thread.synced_at > before[thread.pk]
        assert thread.status == "interrupted"
        assert Review.objects.filter(thread=thread, status="pending", kind="reply").count() == 1
