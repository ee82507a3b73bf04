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

from nitro_assistants import hashchain
from nitro_assistants.models import AuditChain, Event
from nitro_assistants.services import evidence
from nitro_assistants.services.audit import events_batched, record_event
from tests.core.test_audit_chain import cut_behind_a_forged_checkpoint, pruned_thread, use_key
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
    assert hashchain.verify_export(rows) == []
    exported[3]["data"]["note"] = "changed"
    [broken] = hashchain.verify_export(rows)
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


def exported(*args: str) -> list[dict[str, Any]]:
    out, _ = audit("export", "--format", "jsonl", *args)
    return [json.loads(line) for line in out.splitlines()]


def test_prune_without_an_audit_key_exits_non_zero_saying_why() -> None:
    thread = ThreadFactory()
    with events_batched():
        record_event(thread, "old").at = timezone.now() - datetime.timedelta(days=90)
    with pytest.raises(CommandError, match=r"Pruning needs NITRO_ASSISTANTS\['AUDIT_KEY'\]") as e:
        audit("prune", "--before", timezone.now().date().isoformat())
    assert e.value.returncode == 1
    assert list(Event.objects.values_list("verb", flat=True)) == ["old"]


def test_an_export_whose_first_lines_were_cut_is_refused(django_user_model: Any) -> None:
    """An export of whole chains must hold each from seq 1 (or a signed checkpoint): one whose
    first lines were cut (here a thread's opening and its decision) passed, being walked from
    its first line. A time range export is checked from its first line, when asked to."""
    events = some_trail(django_user_model)
    rows = exported()
    assert hashchain.verify_export(rows) == []
    cut = [r for r in rows if r.get("id") not in (events[0].pk, events[1].pk)]
    [broken] = hashchain.verify_export(cut)
    assert broken.chain == str(events[0].thread.thread_id)
    assert "2 event(s) missing before" in broken.problem and broken.pk == events[4].pk
    assert hashchain.verify_export(cut, partial=True) == []


def test_an_export_of_a_chain_cut_behind_a_forged_checkpoint_is_refused(
    audit_key: str, tmp_path: Any
) -> None:
    """After the database attack (first events deleted, a checkpoint forged, the head moved), a
    new export's chain ends at the database's head and its links hold: only the checkpoint's
    signature, checked with AUDIT_KEY, shows it."""
    thread = ThreadFactory()
    decided = [record_event(thread, f"step_{i}") for i in range(2)]
    decided.append(record_event(thread, "review_decided", actions=["approve"]))
    decided.append(record_event(thread, "run_succeeded"))
    forged = cut_behind_a_forged_checkpoint(thread, 3)
    rows = exported()
    assert hashchain.verify_export(rows, partial=True) != []  # the checkpoint is checked anyway
    [broken] = evidence.verify_export(rows)
    assert broken.chain == str(thread.thread_id) and broken.pk == forged.pk
    assert "not signed" in broken.problem
    path = tmp_path / "trail.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = io.StringIO()
    with pytest.raises(CommandError, match="The export is broken: 1 chain") as raised:
        call_command("nitro_assistants_audit", "check-export", str(path), stderr=err)
    assert raised.value.returncode == 1
    assert f"BROKEN chain {thread.thread_id}: checkpoint event #{forged.pk}" in err.getvalue()


def test_a_genuine_prune_exports_and_checks_with_its_key_only(
    settings: Any, audit_key: str, tmp_path: Any
) -> None:
    thread, checkpoint = pruned_thread()
    rows = exported()
    assert [r["seq"] for r in rows if r.get("chain") == str(thread.thread_id)] == [4, 5]
    assert evidence.verify_export(rows) == []
    assert hashchain.verify_export(rows, key=audit_key) == []
    path = tmp_path / "trail.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = io.StringIO()
    call_command("nitro_assistants_audit", "check-export", str(path), stdout=out)
    assert out.getvalue() == "The export is whole: 3 event(s).\n"
    [broken] = hashchain.verify_export(rows)  # no key: the checkpoint cannot be vouched for
    assert broken.pk == checkpoint.pk and "no AUDIT_KEY is configured" in broken.problem
    use_key(settings, "another key")
    [broken] = evidence.verify_export(rows)
    assert broken.pk == checkpoint.pk and "signature does not match" in broken.problem
    # Its first line (the first event kept) cut: the chain no longer starts after the checkpoint.
    use_key(settings, audit_key)
    cut = [r for r in rows if not (r.get("chain") == str(thread.thread_id) and r["seq"] == 4)]
    [broken] = evidence.verify_export(cut)
    assert broken.pk == checkpoint.pk and "missing before" in broken.problem


def test_verify_exits_non_zero_at_a_forged_checkpoint_naming_the_chain(audit_key: str) -> None:
    thread = ThreadFactory()
    for verb in ("review_requested", "review_decided", "run_succeeded"):
        record_event(thread, verb)
    forged = cut_behind_a_forged_checkpoint(thread, 2)
    err = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("nitro_assistants_audit", "verify", stdout=io.StringIO(), stderr=err)
    assert raised.value.returncode == 1
    assert f"first at event #{forged.pk}" in str(raised.value)
    assert f"BROKEN chain {thread.thread_id}: checkpoint event #{forged.pk}" in err.getvalue()
    assert "not signed" in err.getvalue()
