"""Every code block of README.md and docs/ runs here as pasted, or is marked a fragment.

A block is marked on the line before its fence: ``<!-- fragment: why -->``, or
``<!-- run: name -->`` for a block one of these tests runs under that name (a fragment may also
say so on its first line, ``# fragment: why``). The host project of docs/django.md is pasted into
a project made by ``django-admin startproject`` and serves a turn, through a real Celery worker,
against a real ``langgraph dev`` serving the agent of the same page. The ``curl`` examples of
docs/api.md run in bash against a live server, one review of each kind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.db import transaction

from nitro_assistants import operations, signals
from nitro_assistants.client import PendingReview
from nitro_assistants.models import ApiKey, Decision, Review, Thread
from nitro_assistants.rules import CONTENT_KEY
from nitro_assistants.services import datasets
from nitro_assistants.services.audit import record_event
from nitro_assistants.services.mirror import mirror_pending
from nitro_assistants.testing.launchers import CeleryWorker, LangGraphServer
from tests.admin.conftest import make_reply_review, make_tool_review
from tests.docs.markdown import ROOT, Block, all_blocks
from tests.interactions.conftest import BLUEPRINT, QUESTIONS, plan, step

#: The names of the blocks the tests below run.
RUN_HERE = {
    "host-settings",
    "host-urls",
    "host-celery",
    "host-init",
    "host-start-run",
    "agent-graph",
    "agent-config",
    "receiver",
    "testing-fixture",
    "testing-example",
    "api-list",
    "api-read",
    *(f"api-decide-{kind}" for kind in ("tool-calls", "reply", "question", "blueprint", "plan")),
    *(f"dataset-{fmt}" for fmt in ("jsonl", "openai", "langsmith")),
}
BIN = Path(sys.executable).parent


def named_blocks() -> dict[str, Block]:
    found: dict[str, Block] = {}
    for block in all_blocks():
        if block.marker == "run":
            found.setdefault(block.name, block)
    return found


def test_every_block_runs_here_or_is_marked_a_fragment() -> None:
    blocks = all_blocks()
    unmarked = [block.where for block in blocks if not block.marker]
    assert not unmarked, (
        f"Code blocks neither run by a test nor marked a fragment: {unmarked}. Put "
        "`<!-- fragment: why -->` on the line before the fence (or `# fragment: why` as its first "
        "line), or `<!-- run: name -->` and run it in tests/docs/test_snippets.py (RUN_HERE)"
    )
    unknown = [
        f"{b.where} ({b.name})" for b in blocks if b.marker == "run" and b.name not in RUN_HERE
    ]
    assert not unknown, f"Blocks marked `run:` under a name no test runs: {unknown}"
    missing = sorted(RUN_HERE - set(named_blocks()))
    assert not missing, f"tests/docs/test_snippets.py runs blocks no doc has any more: {missing}"


def test_a_block_shown_in_two_places_is_the_same_block() -> None:
    first: dict[str, Block] = {}
    for block in all_blocks():
        if block.marker != "run":
            continue
        seen = first.setdefault(block.name, block)
        assert block.code == seen.code, (
            f"`run: {block.name}` differs between {seen.where} and {block.where}: the test runs "
            "only the first, so make them the same"
        )


def test_the_receiver_example_connects_to_review_requested() -> None:
    code = named_blocks()["receiver"].code
    namespace: dict[str, Any] = {"__name__": "docs_receiver_example"}
    exec(compile(code, "docs/django.md (receiver)", "exec"), namespace)
    try:
        uids = [entry[0][0] for entry in signals.review_requested.receivers]
        assert "notify_reviewers" in uids
    finally:
        assert signals.review_requested.disconnect(dispatch_uid="notify_reviewers")


# -- the host project of docs/django.md -----------------------------------------------------------


def host_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CELERY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    return {**env, **extra}


def manage(site: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=site,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def host_project(tmp_path: Path) -> Path:
    """``django-admin startproject proj`` with the docs' blocks pasted where they say."""
    blocks = named_blocks()
    site = tmp_path / "site"
    site.mkdir()
    subprocess.run(
        [str(BIN / "django-admin"), "startproject", "proj", str(site)], check=True, timeout=60
    )
    package = site / "proj"
    settings = package / "settings.py"
    settings.write_text(settings.read_text() + "\n" + blocks["host-settings"].code)
    (package / "urls.py").write_text(blocks["host-urls"].code)
    (package / "celery.py").write_text(blocks["host-celery"].code)
    (package / "__init__.py").write_text(blocks["host-init"].code)
    return site


@pytest.fixture
def served_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LangGraphServer]:
    """``langgraph dev`` serving the graph.py and langgraph.json of docs/django.md."""
    blocks = named_blocks()
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "graph.py").write_text(blocks["agent-graph"].code)
    config = json.loads(blocks["agent-config"].code)
    monkeypatch.delenv("AGENT_MODEL", raising=False)  # the scripted model: no key, no network
    monkeypatch.setenv("PYTHONPATH", host_env()["PYTHONPATH"])
    server = LangGraphServer(workdir=agent, config=config).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def broker_url() -> Iterator[str]:
    """The test broker, with the host project's default queue ("celery") emptied around the test."""
    url = os.environ.get("NITRO_TEST_BROKER_URL", "redis://127.0.0.1:6379/9")
    client = redis.Redis.from_url(url)
    client.delete("celery")
    yield url
    client.delete("celery")


def test_a_placeholder_assistant_id_fails_the_check_of_the_host_project(host_project: Path) -> None:
    env = host_env(ASSISTANTS_URL="http://127.0.0.1:2024", VC_KEY="k", VC_ASSISTANT_ID="...")
    done = manage(host_project, env, "check")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "nitro_assistants.E010" in done.stderr
    assert "HINT: Set it to the assistant's UUID" in done.stderr


@pytest.mark.server
def test_the_host_project_runs_a_turn_as_pasted(
    host_project: Path, served_agent: LangGraphServer, broker_url: str
) -> None:
    env = host_env(
        ASSISTANTS_URL=served_agent.url,
        VC_KEY="local-dev-key",
        VC_ASSISTANT_ID=next(iter(json.loads(named_blocks()["agent-config"].code)["graphs"])),
        CELERY_BROKER_URL=broker_url,
    )
    checked = manage(host_project, env, "check", "--fail-level", "WARNING")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "System check identified no issues" in checked.stdout
    migrated = manage(host_project, env, "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr

    worker = CeleryWorker(
        app="proj",
        queue="celery",  # the host project's default
        log_dir=host_project,
        name="worker",
        pool="solo",
        cwd=host_project,
        environ=env,
    ).start()
    try:
        started = manage(host_project, env, "shell", "-c", named_blocks()["host-start-run"].code)
        assert started.returncode == 0, started.stdout + started.stderr
        report = (
            "from nitro_assistants.models import Review, Run\n"
            "run = Run.objects.get()\n"
            "review = Review.objects.filter(status='pending').first()\n"
            "print(run.status, review and review.kind, "
            "review and [c['name'] for c in review.tool_calls])\n"
        )
        deadline = time.monotonic() + 90
        while True:
            done = manage(host_project, env, "shell", "-c", report)
            assert done.returncode == 0, done.stdout + done.stderr
            status = done.stdout.strip().splitlines()[-1]
            if not status.startswith(("queued", "running")) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert status == "interrupted tool_calls ['reschedule_appointment']", worker.log_tail()
    finally:
        worker.stop(timeout=30)


def test_the_testing_example_passes_in_the_host_project(host_project: Path) -> None:
    """README "Testing your project": its conftest.py and test, pasted into the host project and
    run with pytest there; nothing listens at ASSISTANTS_URL, so only the fake can answer."""
    blocks = named_blocks()
    (host_project / "conftest.py").write_text(blocks["testing-fixture"].code)
    (host_project / "test_refund.py").write_text(blocks["testing-example"].code)
    env = host_env(ASSISTANTS_URL="http://127.0.0.1:9", VC_KEY="k", VC_ASSISTANT_ID="agent")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--ds=proj.settings"],
        cwd=host_project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout


# -- the curl examples of docs/api.md --------------------------------------------------------------


def _interaction(kind: str, content: Any, opened_by: User) -> Review | None:
    """A pending interaction of ``kind`` on a session ``opened_by`` opened, mirrored as a real
    pause arrives."""
    thread = Thread.objects.create(assistant_key="interactions", opened_by=opened_by)
    interrupt_id = uuid.uuid4().hex
    pending = PendingReview(
        kind=kind,
        interrupt_id=interrupt_id,
        interrupt_ids=[interrupt_id],
        interaction={
            "interactionId": f"int-{kind}",
            "kind": kind,
            "title": "Please decide",
            CONTENT_KEY[kind]: content,
        },
        mode="interaction",
    )
    with transaction.atomic():
        return mirror_pending(Thread.objects.select_for_update().get(pk=thread.pk), None, pending)


@pytest.mark.django_db(transaction=True)
def test_the_curl_examples_of_the_api_decide_every_kind_as_written(
    live_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []  # the resume tasks, enqueued after commit: no broker needed
    monkeypatch.setattr(
        "nitro_assistants.services.enqueue.send", lambda name, *a, **kw: sent.append(name)
    )
    bot = User.objects.create_user("chatops")
    bot.user_permissions.add(Permission.objects.get(codename="decide_review"))
    key = ApiKey.generate(bot, "docs")[1]
    operations.operation("docs.ok")(lambda input, user: None)
    try:
        # A call id as a real assistant makes one, not the factory's "call_1": the example
        # must read it from the review (issue 40, item 11).
        held = {
            "id": "toolu_01HxR7wq3Tz9",
            "name": "reschedule_appointment",
            "args": {"appointment_id": 42, "day": "Tuesday", "time": "10:00"},
            "allowed_decisions": ["approve", "edit", "reject", "respond"],
        }
        reviews = {
            "tool-calls": (make_tool_review([held]), "decided"),
            "reply": (make_reply_review(), "decided"),
            "question": (_interaction("question", QUESTIONS, bot), "answered"),
            "blueprint": (_interaction("blueprint", BLUEPRINT, bot), "revision_requested"),
            "plan": (
                _interaction(
                    "plan",
                    plan(
                        step("s1", action="docs.ok"),
                        step("notify", action="docs.ok", optional=True),
                    ),
                    bot,
                ),
                "executing",
            ),
        }
        blocks = named_blocks()
        env = {"PATH": os.environ.get("PATH", ""), "NITRO": f"{live_server.url}/nitro/api"}
        env["NITRO_KEY"] = key

        def bash(code: str, **extra: str) -> Any:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", code],
                env={**env, **extra},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            return json.loads(done.stdout) if done.stdout.strip() else None

        listed = bash(blocks["api-list"].code)
        assert [item["id"] for item in listed["items"]] == [reviews["tool-calls"][0].pk]
        assert bash(blocks["api-read"].code, REVIEW=str(reviews["reply"][0].pk)) is None
        for kind, (review, status) in reviews.items():
            # Read it as the example does, then decide with what was read.
            code = blocks["api-read"].code + "\n" + blocks[f"api-decide-{kind}"].code
            shown = bash(code, REVIEW=str(review.pk))
            assert shown["status"] == status, (kind, shown)
            decision = Decision.objects.get(review__pk=shown["id"])
            assert decision.decided_by == bot, kind
        assert Decision.objects.get(review=reviews["tool-calls"][0]).tool_calls == [
            # The example edits one argument; the decision holds the whole call (issue 34).
            {
                "id": "toolu_01HxR7wq3Tz9",
                "action": "edit",
                "args": {"appointment_id": 42, "day": "Friday", "time": "10:00"},
            }
        ]
        assert sent.count("nitro_assistants.resume_thread") == 5
    finally:
        operations.unregister("docs.ok")


@pytest.mark.django_db
def test_the_dataset_examples_are_what_the_export_writes() -> None:
    """docs/datasets.md's examples of each format: an edited call exported as written (ids,
    numbers, hashes and times are the installation's, so only their keys are compared)."""
    review = make_tool_review()
    Review.objects.filter(pk=review.pk).update(status=Review.Status.DECIDED)
    documented = {
        fmt: json.loads(named_blocks()[f"dataset-{fmt}"].code) for fmt in datasets.FORMATS
    }
    Decision.objects.create(
        review=review,
        reviewer_id="alice",
        decided_at=review.requested_at,
        tool_calls=[{"id": "call_1", "action": "edit", "args": {"day": "Thursday"}}],
        note=documented["jsonl"]["decided"]["note"],
        outcome=Decision.Outcome.APPLIED,
        channel=Decision.Channel.ADMIN,
    )
    record_event(
        review.thread,
        "decision_recorded",
        review=review,
        executed=documented["jsonl"]["executed"],
    )
    exported = {
        fmt: [
            json.loads(line)
            for line in datasets.export(None, fmt, datasets.Filters(), everything=True)
        ]
        for fmt in datasets.FORMATS
    }
    [row], [line], [example] = exported["jsonl"], exported["openai"], exported["langsmith"]
    doc = documented["jsonl"]
    assert set(row) == set(doc) and set(row["provenance"]) == set(doc["provenance"])
    for key in ("kind", "assistant", "conversation", "proposed", "decided", "executed", "outcome"):
        assert row[key] == doc[key], key
    assert set(row["provenance"]["event"]) == set(doc["provenance"]["event"])
    assert line == documented["openai"]
    doc = documented["langsmith"]
    assert example["inputs"] == doc["inputs"]
    assert example["outputs"]["message"] == doc["outputs"]["message"]
    assert set(example["outputs"]) == set(doc["outputs"])
    assert set(example["metadata"]) == set(doc["metadata"])
