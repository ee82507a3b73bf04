"""``nitro_assistants_audit``: verify, export and prune from the command line."""

from __future__ import annotations

import csv
import datetime
import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from nitro_assistants import chain as pure_chain
from nitro_assistants.models import AuditChain, Event
from nitro_assistants.services.audit import events_batched, record_event
from tests.factories import ThreadFactory

pytestmark = pytest.mark.django_db


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def audit(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("nitro_assistants_audit", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def some_trail(django_user_model: Any) -> list[Event]:
    alice = django_user_model.objects.create(username="alice")
    first, second = ThreadFactory(assistant_key="walkthrough"), ThreadFactory(assistant_key="tools")
    events = [
        record_event(first, "thread_opened", actor=alice, assistant_key="walkthrough"),
        record_event(first, "review_decided", actor=alice, actions=["edit"], note="día ✓\nok"),
        record_event(second, "run_requested", messages=[{"role": "user", "content": "1.0"}]),
        record_event(None, "api_key_created", actor=alice, prefix="abc", ratio=0.25, big=1e16),
    ]
    with events_batched():
        for i in range(3):
            events.append(record_event(first, "run_succeeded", reply=f"reply {i}"))
    return events


def test_verify_an_empty_database_passes() -> None:
    out, _ = audit("verify")
    assert out == "The audit trail is whole: 0 event(s) in 0 chain(s).\n"


def test_verify_exits_non_zero_naming_the_broken_event(django_user_model: Any) -> None:
    events = some_trail(django_user_model)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Event._meta.db_table} SET verb = 'review_rejected' WHERE id = %s",
            [events[1].pk],
        )
    err = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("nitro_assistants_audit", "verify", stdout=io.StringIO(), stderr=err)
    assert raised.value.returncode == 1
    assert f"first at event #{events[1].pk}" in str(raised.value)
    assert f"BROKEN chain {events[1].thread.thread_id}: event #{events[1].pk} (review_rejected" in (
        err.getvalue()
    )


def test_verify_draws_a_progress_bar_on_a_terminal_only(django_user_model: Any) -> None:
    some_trail(django_user_model)
    terminal = Terminal()
    call_command("nitro_assistants_audit", "verify", stdout=io.StringIO(), stderr=terminal)
    assert terminal.getvalue().endswith("\r[" + "#" * 30 + "] 7/7 events\n")
    _, err = audit("verify")
    assert err == ""


def test_verify_one_thread_and_a_range(django_user_model: Any) -> None:
    events = some_trail(django_user_model)
    out, _ = audit("verify", "--thread", str(events[0].thread.thread_id))
    assert "5 event(s) in 1 chain(s)" in out
    out, _ = audit("verify", "--since", events[2].at.isoformat())
    assert "5 event(s)" in out


def test_export_jsonl_round_trips_and_verifies_offline(django_user_model: Any) -> None:
    events = some_trail(django_user_model)
    out, err = audit("export", "--format", "jsonl")
    assert err == "7 event(s) exported.\n"
    rows = [json.loads(line) for line in out.splitlines()]
    exported, heads = rows[:7], rows[7:]
    by_pk = {e.pk: e for e in Event.objects.select_related("thread")}
    assert sorted(r["id"] for r in exported) == sorted(e.pk for e in events)
    for row in exported:
        event = by_pk[row["id"]]
        assert row == {
            "id": event.pk,
            "chain": str(event.thread.thread_id) if event.thread else "installation",
            "seq": event.seq,
            "thread": str(event.thread.thread_id) if event.thread else None,
            "assistant": event.thread.assistant_key if event.thread else None,
            "review": event.review_id,
            "run": None if event.run_id is None else str(event.run_id),
            "actor": None if event.actor_id is None else str(event.actor_id),
            "verb": event.verb,
            "data": event.data,
            "at": event.at.astimezone(datetime.UTC).isoformat(timespec="microseconds"),
            "prev_hash": event.prev_hash,
            "hash": event.hash,
        }
    assert [h["chain_head"] for h in heads] == [
        {"chain": c.chain, "seq": c.seq, "hash": c.hash} for c in AuditChain.objects.all()
    ]
    # Whoever receives it can walk every chain without our database.
    assert pure_chain.verify_export(rows) == []
    exported[3]["data"]["note"] = "changed"
    [broken] = pure_chain.verify_export(rows)
    assert broken.pk == exported[3]["id"] and "was changed" in broken.problem


def test_export_csv_filters_and_ends_with_the_heads(django_user_model: Any) -> None:
    events = some_trail(django_user_model)
    thread = events[0].thread
    out, _ = audit("export", "--format", "csv", "--assistant", "walkthrough")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["verb"] for r in rows] == [
        "thread_opened",
        "review_decided",
        "run_succeeded",
        "run_succeeded",
        "run_succeeded",
        "chain_head",
    ]
    assert json.loads(rows[1]["data"]) == {"actions": ["edit"], "note": "día ✓\nok"}
    head = AuditChain.objects.get(chain=str(thread.thread_id))
    assert (rows[-1]["chain"], rows[-1]["seq"], rows[-1]["hash"]) == (
        head.chain,
        str(head.seq),
        head.hash,
    )
    out, _ = audit("export", "--thread", str(events[2].thread.thread_id))
    assert [json.loads(line).get("verb") for line in out.splitlines()] == ["run_requested", None]
    later = (timezone.now() + datetime.timedelta(days=1)).date().isoformat()
    out, err = audit("export", "--since", later)
    assert err == "0 event(s) exported.\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "--since", "yesterday"], "--since: `yesterday` is not a date"),
        (["export", "--until", "2026-13-40"], "--until: `2026-13-40` is not a date"),
        (["export", "--format", "xml"], "--format: `xml` is not one of jsonl, csv"),
        (["export", "--thread", "nope"], "--thread: no thread `nope`"),
        (["verify", "--since", "2026-02-30"], "--since: `2026-02-30` is not a date"),
        (["prune", "--before", "soon"], "--before: `soon` is not a date"),
        (["prune", "--before", "2999-01-01"], "--before: the date is in the future"),
    ],
)
def test_bad_input_is_a_clear_error(args: list[str], message: str) -> None:
    record_event(ThreadFactory(), "kept")
    with pytest.raises(CommandError, match=message):
        audit(*args)
    assert Event.objects.count() == 1  # nothing written, nothing lost


def test_prune_from_the_command_line(django_user_model: Any, audit_key: str) -> None:
    thread = ThreadFactory()
    with events_batched():
        for i in range(4):
            record_event(thread, f"old_{i}").at = timezone.now() - datetime.timedelta(days=90)
    out, _ = audit(
        "prune", "--before", (timezone.now() - datetime.timedelta(days=30)).date().isoformat()
    )
    assert out == "4 event(s) pruned from 1 chain(s); 0 thread(s) with an open review kept.\n"
    assert audit("verify")[0].startswith("The audit trail is whole")
    assert Event.objects.filter(verb="audit_pruned").count() == 2
