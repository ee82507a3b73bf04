"""Evidence of human oversight: a record per decision, and the audit trail handed out.

:func:`record_decision` writes, once a decision has taken effect, one ``decision_recorded``
event (chained like every event) that holds what the assistant proposed, what the reviewer was
shown (revision and digest), what they decided (edits as a diff), who and when, and what then ran
on the server, read from the thread: the tool calls and args the resumed run executed, or the
reply it delivered and the delivery's outcome. When what ran is not what was decided, the record
lists the mismatches and ``execution_mismatched`` is sent.

:func:`export_rows` streams the trail (every event, or a thread's, an assistant's, a time
range's) in ``seq`` order per chain and ends with the head of each chain it covers, so whoever
receives it can walk the chain on their own (``nitro_assistants.hashchain``) and compare the heads
with a later export. :func:`write_jsonl` and :func:`write_csv` write it; :func:`verify_export`
checks one with the installation's ``AUDIT_KEY`` (which vouches for the prune checkpoints).
"""

from __future__ import annotations

import csv
import datetime
import difflib
import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

from django.db.models import Q, QuerySet

from nitro_assistants import hashchain, rules, signals
from nitro_assistants.conf import app_settings
from nitro_assistants.models import AuditChain, Decision, Event, Review, Run, Thread
from nitro_assistants.services.audit import record_event, send_on_commit
from nitro_assistants.services.errors import clean_error

DECISION_RECORDED = "decision_recorded"
FORMATS = ("jsonl", "csv")
#: Where LangChain's human-in-the-loop middleware keeps the calls a reviewer's edit replaced: the
#: AI message keeps the model's call; the state says what ran instead.
EDITED_CALLS = "hitl_edited_tool_calls"
#: Decisions under which a held tool call runs (``reject``/``respond`` answer it instead).
RUNS = ("approve", "edit")
_PAST = {"approve": "approved", "edit": "edited", "reject": "rejected"}


# -- the decision record -------------------------------------------------------------------------


def record_decision(
    record: Decision,
    review: Review,
    run: Run | None,
    messages: list[dict[str, Any]],
    *,
    state: Any = None,
) -> Event:
    """Write the decision record of ``record``: applied (``messages`` is the thread after its
    resume, ``state`` the run's final state values), or closed without taking effect (failed,
    superseded: its error, nothing compared). In the caller's transaction;
    ``execution_mismatched`` after commit if need be."""
    body = decision_record(record, review, messages, state=state)
    event = record_event(review.thread, DECISION_RECORDED, review=review, run=run, **body)
    if body["mismatches"]:
        send_on_commit(
            signals.execution_mismatched,
            Decision,
            decision=record,
            record=body,
            mismatches=list(body["mismatches"]),
            mismatch_kinds=list(body["mismatch_kinds"]),
        )
    return event


def decision_record(
    record: Decision, review: Review, messages: list[dict[str, Any]], *, state: Any = None
) -> dict[str, Any]:
    """The record's content (plain JSON): proposed, shown, decided, edits, executed, mismatches."""
    body: dict[str, Any] = {
        "decision": record.pk,
        "kind": review.kind,
        "shown": {
            "revision": review.revision,
            "digest": review.digest,
            # The parts the approval said were opened (services.previews), when it said.
            **({"paths": record.shown} if record.shown is not None else {}),
        },
        "decided": {
            "by": record.reviewer_id,
            "user": record.decided_by_id,
            "at": record.decided_at.isoformat(),
            "actions": record.actions,
            "note": record.note,
        },
        "outcome": record.outcome,
    }
    if record.outcome in (Decision.Outcome.FAILED, Decision.Outcome.SUPERSEDED):
        # It never took effect: nothing to compare; what the server said is the error.
        body.update(
            proposed=_proposed(review),
            edits=[],
            executed=None,
            error=record.error,
            **_mismatches([]),
        )
        return body
    if review.kind == rules.REPLY and review.reply is not None:
        body.update(_reply_record(record, review.reply, messages))
    elif review.kind in rules.REVIEW_KINDS:
        replaced = (state or {}).get(EDITED_CALLS) if isinstance(state, dict) else None
        body.update(_tool_calls_record(record, review.tool_calls, messages, replaced or {}))
    else:
        body.update(
            proposed=_proposed(review),
            edits=[],
            executed={},
            **_mismatches([]),
        )
        body["decided"]["answer"] = record.answer
    return body


def _proposed(review: Review) -> dict[str, Any]:
    if review.kind == rules.REPLY and review.reply is not None:
        return {"reply": review.reply.get("content"), "message_id": review.reply.get("message_id")}
    if review.kind in rules.REVIEW_KINDS:
        return {
            "tool_calls": [
                {"id": c.get("id"), "name": c.get("name"), "args": c.get("args")}
                for c in review.tool_calls
            ]
        }
    if review.kind in rules.DIALECT_KINDS:  # pauses of a graph of its own (§9)
        return {"pauses": review.payload.get("pauses") or []}
    return {"interaction": review.payload.get("interaction")}


def decided_args(held_args: Any, edited: Any) -> Any:
    """The args a call was decided to run with: the held call's, each key an edit names
    replaced (``{**held_args, **edited}``, as the client sends it). An edit stored whole merges to
    itself, so this holds whether edits are stored as given or already merged."""
    if isinstance(held_args, dict) and isinstance(edited, dict):
        return {**held_args, **edited}
    return edited


def _tool_calls_record(
    record: Decision,
    proposed: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    replaced: dict[str, Any],
) -> dict[str, Any]:
    decided = {str(c.get("id")): c for c in record.tool_calls or []}
    calls, results = _calls_and_results(messages)
    for call_id, call in replaced.items():  # the call that ran in place of the model's
        if isinstance(call, dict):
            calls[str(call_id)] = {**calls.get(str(call_id), {}), **call}
    edits, executed = [], []
    found: list[dict[str, Any]] = []
    for call in proposed:
        call_id = str(call.get("id"))
        name = call.get("name")
        choice = decided.get(call_id, {})
        action = choice.get("action")
        held_args = call.get("args")
        want = decided_args(held_args, choice.get("args")) if action == "edit" else held_args
        if action == "edit":
            edits.append({"id": call_id, "name": name, "args": args_diff(held_args, want)})
        ran_call = calls.get(call_id)
        result = results.get(call_id)
        errored = result is not None and result.get("status") == "error"
        executed.append(
            {
                "id": call_id,
                "name": ran_call.get("name") if ran_call else None,
                "args": ran_call.get("args") if ran_call else None,
                "ran": result is not None,
                "status": (result.get("status") or "success") if result else None,
                "result": _text(result.get("content")) if result else None,
            }
        )
        about = {"id": call_id, "name": name}
        if action in RUNS:
            if result is None or ran_call is None:
                found.append(
                    _mismatch(NOT_RUN, f"{name} ({call_id}) was {_PAST[action]} but did not run")
                    | about
                )
                continue
            if ran_call.get("name") != name or hashchain.normalized(
                ran_call.get("args")
            ) != hashchain.normalized(want):
                diff = args_diff(want, ran_call.get("args"))
                found.append(
                    _mismatch(
                        OTHER_ARGS,
                        f"{name} ({call_id}) ran with other args than {_PAST[action]}: "
                        f"{json.dumps(diff, sort_keys=True)}",
                    )
                    | about
                    | {"args": diff}
                )
            if errored:
                assert result is not None
                error = clean_error(_text(result.get("content")))
                found.append(
                    _mismatch(
                        ERRORED, f"{name} ({call_id}) was {_PAST[action]} but failed: {error}"
                    )
                    | about
                    | {"error": error}
                )
        elif result is not None and not errored:
            found.append(
                _mismatch(RAN_ANYWAY, f"{name} ({call_id}) was answered with {action} but ran")
                | about
            )
    return {
        "proposed": {
            "tool_calls": [
                {"id": c.get("id"), "name": c.get("name"), "args": c.get("args")} for c in proposed
            ]
        },
        "edits": edits,
        "executed": {"tool_calls": executed},
        **_mismatches(found),
    }


#: The kinds of mismatch (``mismatch_kinds`` of a record): a call decided to run that did not,
#: ran with other args, or ran and failed; a call answered without running that ran; a reply
#: delivered with other content, a rejected reply still in the conversation, a reply decided to
#: go that is not in it.
NOT_RUN = "not_run"
OTHER_ARGS = "other_args"
ERRORED = "errored"
RAN_ANYWAY = "ran_anyway"
REPLY_CHANGED = "reply_changed"
REPLY_KEPT = "reply_kept"
REPLY_MISSING = "reply_missing"


def _mismatch(kind: str, message: str) -> dict[str, Any]:
    return {"kind": kind, "message": message}


def _mismatches(found: list[dict[str, Any]]) -> dict[str, Any]:
    """A record's mismatches: ``mismatches``, one sentence each (as ever), and
    ``mismatch_kinds``, the same in order as objects a program reads (``kind``, ``message``, and
    what it is about: a call's ``id`` and ``name``, an ``error``, an ``args`` diff)."""
    return {"mismatches": [m["message"] for m in found], "mismatch_kinds": found}


def _reply_record(
    record: Decision, draft: dict[str, Any], messages: list[dict[str, Any]]
) -> dict[str, Any]:
    proposed = str(draft.get("content") or "")
    choice = record.reply or {}
    action = choice.get("action")
    want = str(choice.get("content") or "") if action == "edit" else proposed
    edits = []
    if action == "edit":
        edits.append({"content": text_diff(proposed, want)})
    message_id = draft.get("message_id")
    sent = next(
        (m for m in reversed(messages) if message_id and m.get("id") == message_id),
        None,
    )
    found: list[dict[str, Any]] = []
    executed: dict[str, Any] = {"reply": None}
    if sent is not None:
        stamp = (sent.get("response_metadata") or {}).get("delivery") or {}
        content = _text(sent.get("content"))
        executed["reply"] = {
            "message_id": message_id,
            "content": content,
            "delivery": {
                k: stamp.get(k)
                for k in ("status", "tool", "attempts", "error", "delivered_at", "failed_at")
            }
            if stamp
            else None,
        }
        if action == "reject":
            found.append(
                _mismatch(REPLY_KEPT, "the reply was rejected but is still in the conversation")
            )
        elif content != want:
            found.append(
                _mismatch(
                    REPLY_CHANGED,
                    f"the reply sent is not the one {_PAST.get(str(action), action)}: "
                    + " ".join(text_diff(want, content)[2:]),
                )
            )
    elif action in RUNS:
        found.append(
            _mismatch(
                REPLY_MISSING, f"the reply was {_PAST[action]} but is not in the conversation"
            )
        )
    return {
        "proposed": {"reply": proposed, "message_id": message_id},
        "edits": edits,
        "executed": executed,
        **_mismatches(found),
    }


def _calls_and_results(
    messages: list[dict[str, Any]],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each tool call as the thread holds it now (an edit replaces the call under its id), and
    each call's tool message (what ran, or the answer to a rejected call)."""
    calls: dict[str, dict[str, Any]] = {}
    results: dict[str, dict[str, Any]] = {}
    for message in messages:
        kind = message.get("type")
        if kind in ("ai", "assistant"):
            for call in message.get("tool_calls") or []:
                calls[str(call.get("id"))] = call
        elif kind == "tool":
            results[str(message.get("tool_call_id"))] = message
    return calls, results


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return "" if content is None else json.dumps(content)


def args_diff(before: Any, after: Any) -> dict[str, dict[str, Any]]:
    """What changed between two args objects: ``{key: {"from": old, "to": new}}`` (a key
    missing on one side shows as ``None`` there)."""
    before = before if isinstance(before, dict) else {"": before}
    after = after if isinstance(after, dict) else {"": after}
    return {
        key: {"from": before.get(key), "to": after.get(key)}
        for key in sorted(set(before) | set(after))
        if hashchain.normalized(before.get(key)) != hashchain.normalized(after.get(key))
    }


def text_diff(before: str, after: str) -> list[str]:
    """A unified diff of two texts, line by line (the first two lines name the sides)."""
    return list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), "proposed", "decided", lineterm=""
        )
    )


# -- the export ----------------------------------------------------------------------------------

COLUMNS = (
    "id",
    "chain",
    "seq",
    "thread",
    "assistant",
    "review",
    "run",
    "actor",
    "verb",
    "data",
    "at",
    "prev_hash",
    "hash",
)
_FIELDS = (
    "pk",
    "thread__thread_id",
    "seq",
    "thread__assistant_key",
    "review_id",
    "run_id",
    "actor_ref",
    "verb",
    "data",
    "at",
    "prev_hash",
    "hash",
)
CHUNK = 5000


def selection(
    *,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
    threads: QuerySet[Thread] | None = None,
    assistant: str | None = None,
) -> tuple[QuerySet[Event], QuerySet[Thread] | None]:
    """The events to export and the threads whose chains they come from (None: every chain,
    the installation's too)."""
    if assistant:
        threads = (threads if threads is not None else Thread.objects.all()).filter(
            assistant_key=assistant
        )
    scope = Q()
    if threads is not None:
        scope &= Q(thread__in=threads.values("pk"))
    if since is not None:
        scope &= Q(at__gte=since)
    if until is not None:
        scope &= Q(at__lt=until)
    return Event.objects.filter(scope), threads


def export_rows(
    events: QuerySet[Event], threads: QuerySet[Thread] | None
) -> Iterator[dict[str, Any]]:
    """The events (chain by chain, in ``seq`` order), then one ``{"chain_head": ...}`` per chain
    covered. Read in chunks: memory stays flat however many events there are."""
    rows = (
        events.order_by("thread_id", "seq", "pk").values_list(*_FIELDS).iterator(chunk_size=CHUNK)
    )
    for pk, thread, seq, assistant, review, run, actor, verb, data, at, prev, hash_ in rows:
        yield {
            "id": pk,
            "chain": hashchain.INSTALLATION if thread is None else str(thread),
            "seq": seq,
            "thread": None if thread is None else str(thread),
            "assistant": assistant,
            "review": review,
            "run": None if run is None else str(run),
            "actor": actor or None,
            "verb": verb,
            "data": data,
            "at": hashchain.timestamp(at),
            "prev_hash": prev,
            "hash": hash_,
        }
    for key, seq, hash_ in _heads(threads):
        yield {"chain_head": {"chain": key, "seq": seq, "hash": hash_}}


def _heads(threads: QuerySet[Thread] | None) -> Iterator[tuple[str, int, str]]:
    heads = AuditChain.objects.order_by("chain").values_list("chain", "seq", "hash")
    if threads is None:
        yield from heads.iterator(chunk_size=CHUNK)
        return
    keys = threads.order_by("thread_id").values_list("thread_id", flat=True)
    batch: list[str] = []
    for key in keys.iterator(chunk_size=CHUNK):
        batch.append(str(key))
        if len(batch) == CHUNK:
            yield from heads.filter(chain__in=batch)
            batch = []
    if batch:
        yield from heads.filter(chain__in=batch)


def verify_export(
    rows: Iterable[dict[str, Any]], *, partial: bool = False
) -> list[hashchain.Break]:
    """:func:`hashchain.verify_export` with this installation's ``AUDIT_KEY``: each chain of the
    export must start at seq 1 or right after a checkpoint signed with it."""
    return hashchain.verify_export(rows, key=app_settings.AUDIT_KEY, partial=partial)


def jsonl_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """One JSON object per line."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"


class _Line:
    """What ``csv.writer`` writes to: hands each row back as its line."""

    def write(self, line: str) -> str:
        return line


def csv_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """A header of :data:`COLUMNS`, then a line per event (``data`` as JSON), then each chain
    head as a row with verb ``chain_head`` (its chain, seq and hash)."""
    writer = csv.writer(_Line())
    yield writer.writerow(COLUMNS)
    for row in rows:
        if "chain_head" in row:
            head = row["chain_head"]
            cells: list[Any] = ["", head["chain"], head["seq"], "", "", "", "", "", "chain_head"]
            yield writer.writerow([*cells, "", "", "", head["hash"]])
            continue
        yield writer.writerow(
            [
                json.dumps(row[c], ensure_ascii=False, sort_keys=True)
                if c == "data"
                else ("" if row[c] is None else row[c])
                for c in COLUMNS
            ]
        )


def write(rows: Iterable[dict[str, Any]], out: IO[str], fmt: str) -> int:
    """Write ``rows`` to ``out`` as ``fmt`` (jsonl or csv); returns how many events."""
    count = 0

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal count
        for row in rows:
            count += "chain_head" not in row
            yield row

    for line in (jsonl_lines if fmt == "jsonl" else csv_lines)(counted()):
        out.write(line)
    return count
