"""Decided reviews exported as datasets (``manage.py nitro_assistants_dataset`` and the review
queue's "Export dataset…" action): for each, the conversation up to the pause, what was proposed,
what the person decided, what then ran and where it all comes from (the review, the decision, the
reviewer or rule, the audit event's hash).

Reads only. Reviews are read in chunks (a server-side cursor on PostgreSQL) and the audit events
of each chunk in one more statement, so memory stays flat however many reviews are exported.
The formats themselves are :mod:`nitro_assistants.dataset_formats` (pure).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from fnmatch import fnmatchcase
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet

from nitro_assistants import conversation, dataset_formats, redacting, rules
from nitro_assistants.exceptions import InvalidArgumentError
from nitro_assistants.models import Event, Review
from nitro_assistants.redaction import Redaction
from nitro_assistants.services.audit import record_event

FORMATS = dataset_formats.FORMATS
#: Reviews read per round trip (each with its thread's mirrored conversation).
CHUNK = 500
#: The audit events that vouch for a decision, best first: the decision record (which also
#: holds what then ran), else the decision itself.
DECISION_RECORDED = "decision_recorded"
VOUCHING = (DECISION_RECORDED, "review_decided")
#: What ``decision`` filters by: a decision's actions (``Decision.actions``).
#: Held calls' and replies' actions, typed interactions' decisions, Agent Inbox responses.
DECISIONS = tuple(dict.fromkeys((*rules.TOOL_CALL_ACTIONS, *rules.DECISIONS, "response", "ignore")))


class DatasetError(InvalidArgumentError):
    """An export asked for what cannot be exported: an unknown format or filter value, no
    filter at all, or a filter that selects no decided review."""


@dataclass(frozen=True)
class Filters:
    """What to export; every field empty selects every decided review (which an export must
    ask for explicitly: ``everything``). ``tool`` is a tool name or a glob (``refund_*``);
    ``rule`` a policy rule's name; ``since``/``until`` bound the decision's time (until
    excluded)."""

    assistant: str = ""
    tool: str = ""
    kind: str = ""
    decision: str = ""
    rule: str = ""
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def check(self) -> None:
        """:class:`DatasetError` for a value no review can have."""
        if self.kind and self.kind not in Review.Kind.values:
            raise DatasetError(
                f"kind: `{self.kind}` is not a review kind; one of {', '.join(Review.Kind.values)}"
            )
        if self.decision and self.decision not in DECISIONS:
            raise DatasetError(
                f"decision: `{self.decision}` is not a decision; one of {', '.join(DECISIONS)}"
            )
        if self.since and self.until and self.since >= self.until:
            raise DatasetError("since: the range is empty (since is not before until)")

    def keeps(self, review: Review) -> bool:
        """The filters read in Python, the same on every database: a held call's tool name
        and a decision's action live inside JSON lists."""
        if self.tool and not any(
            fnmatchcase(str(call.get("name") or ""), self.tool) for call in review.tool_calls
        ):
            return False
        return not self.decision or self.decision in review.decision.actions


def selection(filters: Filters, reviews: QuerySet[Review] | None = None) -> QuerySet[Review]:
    """The decided reviews (those with a decision) among ``reviews`` (default: all) that the
    database-side filters keep; :meth:`Filters.keeps` has the last word on each."""
    filters.check()
    scope = Q(decision__isnull=False)
    if filters.assistant:
        scope &= Q(thread__assistant_key=filters.assistant)
    if filters.kind:
        scope &= Q(kind=filters.kind)
    if filters.tool:
        scope &= Q(kind=Review.Kind.TOOL_CALLS)
    if filters.rule:
        scope &= Q(handling__rule__rule_name=filters.rule)
    if filters.since is not None:
        scope &= Q(decision__decided_at__gte=filters.since)
    if filters.until is not None:
        scope &= Q(decision__decided_at__lt=filters.until)
    base = reviews if reviews is not None else Review.objects.all()
    return base.filter(scope)


def _chunks(reviews: QuerySet[Review]) -> Iterator[list[Review]]:
    rows = (
        reviews.select_related("thread", "decision", "handling")
        .order_by("pk")
        .iterator(chunk_size=CHUNK)
    )
    batch: list[Review] = []
    for review in rows:
        batch.append(review)
        if len(batch) == CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


def _vouching_events(reviews: list[Review]) -> dict[int, dict[str, Any]]:
    """Per review, its best vouching event: id, verb, chain, seq, hash, and the data of a
    decision record (what then ran). One statement a chunk."""
    found: dict[int, dict[str, Any]] = {}
    rows = (
        Event.objects.filter(review_id__in=[r.pk for r in reviews], verb__in=VOUCHING)
        .order_by("review_id", "pk")
        .values_list("review_id", "pk", "verb", "thread__thread_id", "seq", "hash", "data")
    )
    for review_id, pk, verb, chain, seq, hash_, data in rows:
        best = found.get(review_id)
        rank = VOUCHING.index(verb)
        if best is not None and best["rank"] < rank:
            continue
        found[review_id] = {
            "rank": rank,
            "id": pk,
            "verb": verb,
            "chain": str(chain) if chain else None,
            "seq": seq,
            "hash": hash_,
            "executed": (data or {}).get("executed") if verb == DECISION_RECORDED else None,
        }
    return found


def _rule(review: Review) -> dict[str, Any] | None:
    handling = getattr(review, "handling", None)  # no row: the default handling, no rule
    rule = handling.rule if handling is not None else None
    if not isinstance(rule, dict) or not rule.get("rule_name"):
        return None
    return {
        "name": rule["rule_name"],
        "version": rule.get("rule_version"),
        "id": rule.get("rule_id"),
    }


def _conversation(review: Review) -> list[dict[str, Any]]:
    """The conversation up to the pause: the review screen's cut for held calls and replies; for
    a typed interaction, up to the AI message whose tool call asked it (the thread goes on past
    the answer, which a dataset must not show as context)."""
    messages = conversation.held_messages(review)
    asked = conversation.interaction_call_ids(review)
    if asked:
        for index, message in enumerate(messages):
            if conversation.call_ids(message) & asked:
                return messages[: index + 1]
    return messages


def _record(review: Review, vouching: dict[str, Any] | None) -> dict[str, Any]:
    decision = review.decision
    event = None
    if vouching is not None:
        event = {k: vouching[k] for k in ("id", "verb", "chain", "seq", "hash")}
    return dataset_formats.record(
        review={
            "pk": review.pk,
            "kind": review.kind,
            "assistant": review.thread.assistant_key,
            "thread": str(review.thread.thread_id),
            "revision": review.revision,
            "digest": review.digest,
            "payload": review.payload,
        },
        conversation=_conversation(review),
        decision={
            "pk": decision.pk,
            "actions": decision.actions,
            "tool_calls": decision.tool_calls,
            "reply": decision.reply,
            "answer": decision.answer,
            "note": decision.note,
            "outcome": decision.outcome,
            "reviewer_id": decision.reviewer_id,
            "decided_by_id": decision.decided_by_id,
            "channel": decision.channel,
            "decided_at": decision.decided_at.isoformat(),
        },
        rule=_rule(review),
        executed=vouching.get("executed") if vouching else None,
        event=event,
    )


def records(
    reviews: QuerySet[Review], filters: Filters, redaction: Redaction | None = None
) -> Iterator[dict[str, Any]]:
    """The record of each decided review of ``reviews`` the filters keep (review order), its
    content redacted by ``redaction`` when given (ids, hashes and names stay as they are)."""
    for batch in _chunks(selection(filters, reviews)):
        kept = [review for review in batch if filters.keeps(review)]
        if not kept:
            continue
        vouching = _vouching_events(kept)
        for review in kept:
            row = _record(review, vouching.get(review.pk))
            if redaction:
                row = dataset_formats.redacted(row, redaction.text)
            yield row


def lines(rows: Iterable[dict[str, Any]], fmt: str) -> Iterator[str]:
    """The records as lines of ``fmt`` (:data:`FORMATS`)."""
    check_format(fmt)
    return dataset_formats.lines(rows, fmt)


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise DatasetError(f"format: `{fmt}` is not one of {', '.join(FORMATS)}")


def export(
    reviews: QuerySet[Review] | None,
    fmt: str,
    filters: Filters,
    *,
    everything: bool = False,
    redaction: Redaction | None = None,
    by: Any = None,
) -> Iterator[str]:
    """The dataset's lines, checked before the first is read: an unknown format, no filter
    and not ``everything``, or a selection without a decided review raise
    :class:`DatasetError`. (A Python-side filter, ``tool`` or ``decision``, that then keeps
    nothing gives no line: the command says so.)"""
    check_format(fmt)
    if not filters and not everything and reviews is None:
        raise DatasetError(
            "no filter: name at least one (assistant, tool, kind, decision, rule, since, "
            "until), or ask for every decided review"
        )
    base = reviews if reviews is not None else Review.objects.all()
    if not selection(filters, base).exists():
        raise DatasetError("nothing to export: no decided review matches")
    if redaction is None and redacting.current() is not None:
        # Values a reviewer is not shown leave the site whole: on the record, as a reveal is
        # (who, when, what was selected; never the values), before the first line is read.
        with transaction.atomic():
            record_event(
                None,
                "dataset_exported_unredacted",
                actor=by,
                format=fmt,
                filters={
                    f.name: str(getattr(filters, f.name))
                    for f in fields(filters)
                    if getattr(filters, f.name)
                },
                reviews=selection(filters, base).count(),
                selected=reviews is not None,
            )
    return lines(records(base, filters, redaction), fmt)
