"""The audit trail's hash chains checked and pruned: :func:`verify` walks them (every chain, one
thread's, or a time range) and reports the first broken link of each; :func:`prune` deletes old
events behind a checkpoint signed with ``AUDIT_KEY``. Appending is :mod:`.chain_append`'s."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import router, transaction
from django.db.models import Q
from django.utils import timezone

from nitro_assistants import hashchain, rules, signals
from nitro_assistants.conf import app_settings
from nitro_assistants.exceptions import NitroAssistantsError
from nitro_assistants.models import AuditChain, Event, Review, Thread
from nitro_assistants.services.chain_append import append
from nitro_assistants.services.sql.events import lock_head

#: Rows read per round trip by the walk and the export (a server-side cursor on PostgreSQL).
CHUNK = 5000

LINK_FIELDS = (
    "pk",
    "thread__thread_id",
    "seq",
    "verb",
    "data",
    "at",
    "review_id",
    "run_id",
    "actor_ref",
    "actor_id",
    "prev_hash",
    "hash",
)


def _link(row: tuple[Any, ...]) -> hashchain.Link:
    pk, thread, seq, verb, data, at, review, run, actor, actor_id, prev, hash_ = row
    return hashchain.Link(
        pk=pk,
        chain=hashchain.INSTALLATION if thread is None else str(thread),
        seq=seq,
        verb=verb,
        data=data,
        at=at,
        review=review,
        run=run,
        actor=actor,
        actor_id=actor_id,
        prev_hash=prev,
        hash=hash_,
    )


@dataclass
class Verification:
    """What a walk found: how many events and chains it checked, and the first break."""

    events: int = 0
    chains: int = 0
    broken: hashchain.Break | None = None
    breaks: list[hashchain.Break] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.broken is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events": self.events,
            "chains": self.chains,
            "broken": self.broken.as_dict() if self.broken else None,
        }


def _scope(
    thread: Thread | None, since: datetime.datetime | None, until: datetime.datetime | None
) -> Q:
    scope = Q()
    if thread is not None:
        scope &= Q(thread=thread)
    if since is not None:
        scope &= Q(at__gte=since)
    if until is not None:
        scope &= Q(at__lt=until)
    return scope


def count(
    *,
    thread: Thread | None = None,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
) -> int:
    """How many events :func:`verify` would walk (for a progress bar)."""
    return Event.objects.filter(_scope(thread, since, until)).count()


def verify(
    *,
    thread: Thread | None = None,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
    progress: Callable[[int], None] | None = None,
) -> Verification:
    """Walk the chains (every chain, or one thread's; all their events, or those written in
    ``[since, until)``) and report the first broken link of each. A whole chain must start at
    seq 1 (or right after its latest checkpoint signed with ``AUDIT_KEY``) and end at its head;
    a time range starts at the event before it, which must be there. A checkpoint not signed
    with ``AUDIT_KEY`` (unsigned, forged, changed; or any, when no key is configured) is its
    chain's break."""
    result = Verification()
    ranged = since is not None or until is not None
    scope = _scope(thread, since, until)
    rows = (
        Event.objects.filter(scope)
        .order_by("thread_id", "seq", "pk")
        .values_list(*LINK_FIELDS)
        .iterator(chunk_size=CHUNK)
    )
    heads = _heads(thread)
    checkpoints = _checkpoints(thread)
    audit_key = app_settings.AUDIT_KEY
    checked: set[str] = set()
    state: hashchain.Walk | None = None

    def finish(walk: hashchain.Walk | None) -> None:
        if walk is None:
            return
        broken = walk.end(None if ranged else heads.get(walk.chain, (0, "")))
        if broken is not None:
            result.breaks.append(broken)
            result.broken = result.broken or broken

    for row in rows:
        link = _link(row)
        if state is None or state.chain != link.chain:
            finish(state)
            checked.add(link.chain)
            result.chains += 1
            start, broken = _start(link, ranged, checkpoints, audit_key)
            state = hashchain.Walk(link.chain, start, broken=broken)
        state.feed(link)
        result.events += 1
        if progress is not None and result.events % 1000 == 0:
            progress(result.events)
    finish(state)
    if not ranged:  # a head whose chain has no event left: they were all deleted
        for key, head in heads.items():
            if key not in checked and head[0] > 0:
                result.chains += 1
                start, broken = hashchain.start_after(key, checkpoints.get(key, []), audit_key)
                finish(hashchain.Walk(key, start, broken=broken))
    if progress is not None:
        progress(result.events)
    return result


def _heads(thread: Thread | None) -> dict[str, tuple[int, str]]:
    heads = AuditChain.objects.all()
    if thread is not None:
        heads = heads.filter(chain=str(thread.thread_id))
    return {
        key: (int(seq), str(hash_)) for key, seq, hash_ in heads.values_list("chain", "seq", "hash")
    }


def _chain_filter(key: str) -> Q:
    if key == hashchain.INSTALLATION:
        return Q(thread__isnull=True)
    return Q(thread__thread_id=key)


def _checkpoints(thread: Thread | None) -> dict[str, list[hashchain.Checkpoint]]:
    """Each chain's checkpoints (one query): where what is left of it starts, if signed."""
    rows = Event.objects.filter(verb=hashchain.PRUNED).exclude(data__through_seq=None)
    if thread is not None:
        rows = rows.filter(thread=thread)
    found: dict[str, list[hashchain.Checkpoint]] = {}
    for pk, key, at, data in rows.values_list("pk", "thread__thread_id", "at", "data"):
        found.setdefault(hashchain.INSTALLATION if key is None else str(key), []).append(
            hashchain.Checkpoint(pk, at, data)
        )
    return found


def _start(
    first: hashchain.Link,
    ranged: bool,
    checkpoints: dict[str, list[hashchain.Checkpoint]],
    key: str,
) -> tuple[hashchain.Start, hashchain.Break | None]:
    """Where a chain's walk starts: its beginning (or its latest signed checkpoint), or, for a
    time range, the event right before the first one in it; and a checkpoint that is not
    signed with ``key``, as the chain's break."""
    start, broken = hashchain.start_after(first.chain, checkpoints.get(first.chain, []), key)
    if not ranged or first.seq is None or first.seq <= start.seq:
        return start, broken
    before = (
        Event.objects.filter(_chain_filter(first.chain), seq=first.seq - 1)
        .values_list("hash", flat=True)
        .first()
    )
    if before is None:
        return hashchain.Start(
            seq=first.seq - 1, prev_hash="", why="the event before the range"
        ), broken
    return hashchain.Start(
        seq=first.seq, prev_hash=before, why="the event before the range"
    ), broken


def verify_and_signal() -> Verification:
    """The periodic check: walk every chain; ``audit_broken`` when a link is broken."""
    result = verify()
    if not result.ok:
        signals.audit_broken.send(sender=Event, verification=result, broken=result.broken)
    return result


def heads(keys: Iterable[str] | None = None) -> Iterator[tuple[str, int, str]]:
    """The chains' heads (chain, seq, hash), in chain order, read as a stream."""
    rows = AuditChain.objects.order_by("chain")
    if keys is not None:
        rows = rows.filter(chain__in=list(keys))
    yield from rows.values_list("chain", "seq", "hash").iterator(chunk_size=CHUNK)


# -- retention -----------------------------------------------------------------------------------


class PruneError(NitroAssistantsError):
    """A prune refused (no ``AUDIT_KEY`` to sign its checkpoints)."""


NO_AUDIT_KEY = (
    "Pruning needs NITRO_ASSISTANTS['AUDIT_KEY']: each checkpoint that replaces the pruned events "
    "is signed with it, so that whoever can write to the database cannot cut a chain's start "
    "behind a checkpoint of their own. Set it to a long random secret kept outside the database "
    "(not SECRET_KEY), and keep it: verify needs it to vouch for the checkpoints."
)


@dataclass
class Pruned:
    events: int = 0
    chains: int = 0
    kept_open: int = 0


def prune(before: datetime.datetime, *, actor: Any = None) -> Pruned:
    """Delete the events written before ``before``, chain by chain, leaving each chain
    verifiable: a checkpoint event (``audit_pruned``) appended to the chain names how many
    events went, up to which seq, and the hash of the last (which covers all before it). A
    thread with an open review keeps its events. The prune itself is recorded on the
    installation's chain. Each checkpoint is signed with ``AUDIT_KEY`` (HMAC-SHA256 over what
    it says, :func:`hashchain.sign_checkpoint`); without it, :class:`PruneError` and nothing goes."""
    key = app_settings.AUDIT_KEY
    if not key:
        raise PruneError(NO_AUDIT_KEY)
    open_threads = Review.objects.filter(status__in=sorted(rules.OPEN_STATUSES)).values("thread_id")
    result = Pruned()
    result.kept_open = (
        Event.objects.filter(at__lt=before, thread__in=open_threads)
        .values("thread")
        .distinct()
        .count()
    )
    candidates = (
        Event.objects.filter(at__lt=before)
        .exclude(thread__in=open_threads)
        .order_by()
        .values_list("thread_id", flat=True)
        .distinct()
    )
    for thread_pk in list(candidates.iterator(chunk_size=CHUNK)):
        result.events += _prune_chain(thread_pk, before, actor, key)
        result.chains += 1
    with transaction.atomic():
        append(
            [
                Event(
                    thread=None,
                    verb=hashchain.PRUNED,
                    actor=actor if getattr(actor, "pk", None) else None,
                    data={
                        "before": hashchain.timestamp(before),
                        "events": result.events,
                        "chains": result.chains,
                        "kept_open": result.kept_open,
                    },
                )
            ]
        )
    return result


def _prune_chain(
    thread_pk: int | None, before: datetime.datetime, actor: Any, audit_key: str
) -> int:
    scope = Q(thread__isnull=True) if thread_pk is None else Q(thread_id=thread_pk)
    with transaction.atomic():
        thread = None if thread_pk is None else Thread.objects.get(pk=thread_pk)
        key = hashchain.INSTALLATION if thread is None else str(thread.thread_id)
        db = router.db_for_write(Event)
        lock_head(db, key)  # no writer appends to this chain while its start moves
        old = Event.objects.filter(scope, at__lt=before).exclude(seq=None)
        last = old.order_by("-seq").values_list("seq", "hash").first()
        if last is None:
            return 0
        through_seq, through_hash = last
        # Everything up to the last old event goes, so the chain left starts right after it.
        doomed = Event.objects.filter(scope, seq__lte=through_seq)
        first_seq, from_hash = doomed.order_by("seq").values_list("seq", "prev_hash")[0]
        count, _ = doomed.delete()
        data: dict[str, Any] = {
            "before": hashchain.timestamp(before),
            "events": count,
            "first_seq": first_seq,
            "from_hash": from_hash,
            "through_seq": through_seq,
            "through_hash": through_hash,
            "pruned_at": hashchain.timestamp(timezone.now()),
        }
        data[hashchain.SIGNATURE] = hashchain.sign_checkpoint(audit_key, key, data)
        append(
            [
                Event(
                    thread=thread,
                    verb=hashchain.PRUNED,
                    actor=actor if getattr(actor, "pk", None) else None,
                    data=data,
                )
            ]
        )
    return count
