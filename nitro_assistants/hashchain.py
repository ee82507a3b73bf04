"""The hash chain over the audit trail, in pure Python (no Django): the canonical content of an
event, the link hash, and the walk that finds the first broken link.

One chain per thread (its events in ``seq`` order) and one for the events about no thread (API
keys, prunes): the *installation* chain. Each event stores ``hash = sha256(prev_hash + "\\n" +
canonical content)``, where ``prev_hash`` is the hash of the event before it in its chain (empty
for the first). Changing, deleting, moving or inserting an event by hand breaks a link; the head
of each chain (its last ``seq`` and hash) is kept apart, so a missing tail shows too.

The canonical form is a format: ``FORMAT`` names it and it never changes once written (a new
form gets a new number, and the walk reads each event by the form it names).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

FORMAT = 1
INSTALLATION = "installation"
#: The verb of a checkpoint: the first events of a chain were pruned; it names the last of them.
PRUNED = "audit_pruned"


def normalized(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists, keys strings), with whole floats
    as integers: PostgreSQL's ``jsonb`` hands ``1e16`` back as ``10000000000000000``."""
    return _whole(json.loads(json.dumps(value)))


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def timestamp(at: datetime) -> str:
    """``at`` in UTC to the microsecond, the only form ``at`` takes in the hash."""
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def canonical(
    *,
    chain: str,
    verb: str,
    data: Any,
    at: datetime,
    review: Any = None,
    run: Any = None,
    actor: str = "",
    whole: bool = False,
) -> bytes:
    """The bytes an event's hash covers: what it says, about what, by whom, when, in which
    chain. Its position is covered by the previous hash it is chained to. ``data`` is JSON as
    stored (:func:`normalized`); ``whole``: it is :func:`normalized`'s result itself (a writer's,
    not read back), whose floats need no evening out."""
    content = {
        "format": FORMAT,
        "chain": chain,
        "verb": verb,
        # Writers store ``normalized(data)``; what the database hands back is JSON already, so
        # only whole floats need evening out here (the JSON round trip would cost a third).
        "data": data if whole else _whole(data),
        "at": timestamp(at),
        "review": None if review is None else str(review),
        "run": None if run is None else str(run),
        "actor": actor or None,
    }
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def link_hash(prev_hash: str, content: bytes) -> str:
    return hashlib.sha256(prev_hash.encode() + b"\n" + content).hexdigest()


@dataclass(frozen=True)
class Link:
    """One stored event as the walk reads it."""

    pk: int
    chain: str
    seq: int | None
    verb: str
    data: Any
    at: datetime
    review: Any
    run: Any
    actor: str
    actor_id: Any
    prev_hash: str
    hash: str

    def content(self) -> bytes:
        return canonical(
            chain=self.chain,
            verb=self.verb,
            data=self.data,
            at=self.at,
            review=self.review,
            run=self.run,
            actor=self.actor,
        )

    def describe(self) -> str:
        return f"event #{self.pk} ({self.verb} at {timestamp(self.at)}, seq {self.seq})"


@dataclass(frozen=True)
class Break:
    """The first broken link of a chain: where, what the walk expected and what it found."""

    chain: str
    pk: int | None
    problem: str
    expected: str
    found: str

    def __str__(self) -> str:
        where = f"chain {self.chain}"
        return f"{where}: {self.problem} (expected {self.expected}; found {self.found})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "chain": self.chain,
            "event": self.pk,
            "problem": self.problem,
            "expected": self.expected,
            "found": self.found,
        }


@dataclass(frozen=True)
class Start:
    """Where a chain's walk starts: the seq and previous hash its first stored event must have
    (1 and "" for a whole chain; after a checkpoint, the pruned prefix's end)."""

    seq: int = 1
    prev_hash: str = ""
    why: str = "the chain's first event"


@dataclass
class Walk:
    """The state of one chain's walk; feed it links in ``seq`` order, then :meth:`end` it."""

    chain: str
    start: Start = field(default_factory=Start)
    seen: int = 0
    last: Link | None = None
    broken: Break | None = None

    def feed(self, link: Link) -> Break | None:
        if self.broken is not None:
            return self.broken
        self.broken = self._check(link)
        self.seen += 1
        self.last = link
        return self.broken

    def _check(self, link: Link) -> Break | None:
        expected_seq = (
            self.last.seq + 1 if self.last and self.last.seq is not None else self.start.seq
        )
        expected_prev = self.last.hash if self.last else self.start.prev_hash
        after = self.last.describe() if self.last else self.start.why
        if link.seq is None or not link.hash:
            return Break(
                self.chain,
                link.pk,
                f"{link.describe()} is not chained (inserted by hand?)",
                f"seq {expected_seq} with a hash",
                "no seq or hash",
            )
        actual = link_hash(link.prev_hash, link.content())
        if actual != link.hash:
            return Break(
                self.chain,
                link.pk,
                f"{link.describe()} was changed after it was written",
                f"its content to hash to {link.hash}",
                actual,
            )
        if link.actor_id is not None and str(link.actor_id) != link.actor:
            return Break(
                self.chain,
                link.pk,
                f"{link.describe()} names another actor than it recorded",
                f"actor {link.actor or 'none'}",
                f"actor {link.actor_id}",
            )
        if link.prev_hash != expected_prev:
            if link.seq > expected_seq:
                problem = (
                    f"{link.seq - expected_seq} event(s) missing before {link.describe()}, "
                    f"after {after}"
                )
            elif link.seq < expected_seq:
                problem = f"{link.describe()} is out of order: it comes after {after}"
            else:
                problem = (
                    f"{link.describe()} is out of place: it was chained after another event "
                    f"than {after} (reordered, or one deleted and another inserted)"
                )
            return Break(
                self.chain,
                link.pk,
                problem,
                f"seq {expected_seq} chained to {expected_prev or 'nothing'}",
                f"seq {link.seq} chained to {link.prev_hash or 'nothing'}",
            )
        if link.seq != expected_seq:
            return Break(
                self.chain,
                link.pk,
                f"{link.describe()} is numbered out of place",
                f"seq {expected_seq}",
                f"seq {link.seq}",
            )
        return None

    def end(self, head: tuple[int, str] | None) -> Break | None:
        """The chain ends where its head says: nothing missing from its end."""
        if self.broken is not None or head is None:
            return self.broken
        seq, hash_ = head
        last_seq = self.last.seq if self.last else self.start.seq - 1
        last_hash = self.last.hash if self.last else self.start.prev_hash
        if (last_seq, last_hash) != (seq, hash_):
            ends = self.last.describe() if self.last else "no event"
            self.broken = Break(
                self.chain,
                self.last.pk if self.last else None,
                f"the chain ends at {ends}, not where its head says "
                f"({max(seq - (last_seq or 0), 0)} event(s) missing from its end?)",
                f"seq {seq} hashed {hash_}",
                f"seq {last_seq} hashed {last_hash or 'nothing'}",
            )
        return self.broken


#: What a checkpoint's signature covers, by name (the ``data`` of its ``audit_pruned`` event): the
#: chain, the range pruned (``first_seq`` to ``through_seq``, chained from ``from_hash`` to
#: ``through_hash``), how many events went, the cutoff and when. A new form gets a new name.
CHECKPOINT_FORMAT = "checkpoint-1"
CHECKPOINT_FIELDS = (
    "first_seq",
    "through_seq",
    "from_hash",
    "through_hash",
    "events",
    "before",
    "pruned_at",
)
#: Where the signature is kept in a checkpoint's ``data``.
SIGNATURE = "signature"
NO_KEY = (
    "it cannot be vouched for: no AUDIT_KEY is configured (set NITRO_ASSISTANTS['AUDIT_KEY'] "
    "to the key the prune signed with)"
)


def is_checkpoint(verb: str, data: Any) -> bool:
    """An event that says its chain's first events were pruned (not the prune's summary)."""
    return verb == PRUNED and isinstance(data, Mapping) and data.get("through_seq") is not None


def checkpoint_content(chain: str, data: Mapping[str, Any]) -> bytes:
    """The bytes a checkpoint's signature covers: its chain and :data:`CHECKPOINT_FIELDS`."""
    content = {"format": CHECKPOINT_FORMAT, "chain": chain}
    content.update({name: _whole(data.get(name)) for name in CHECKPOINT_FIELDS})
    return json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign_checkpoint(key: str, chain: str, data: Mapping[str, Any]) -> str:
    """HMAC-SHA256, keyed with the audit key (which the database never holds), of what the
    checkpoint says: whoever can write to the database but has not the key cannot make one."""
    return hmac.new(key.encode(), checkpoint_content(chain, data), hashlib.sha256).hexdigest()


def checkpoint_problem(key: str, chain: str, data: Mapping[str, Any]) -> str | None:
    """Why a checkpoint cannot be trusted (None: it is signed with ``key``, as it says)."""
    signature = data.get(SIGNATURE)
    if not isinstance(signature, str) or not signature:
        return "it is not signed (written before AUDIT_KEY, or forged)"
    if not key:
        return NO_KEY
    if not hmac.compare_digest(signature, sign_checkpoint(key, chain, data)):
        return "its signature does not match what it says (forged, changed, or another key's)"
    return None


@dataclass(frozen=True)
class Checkpoint:
    """A chain's checkpoint event as the walk reads it: its event's pk, verb, time and data."""

    pk: int | None
    at: datetime
    data: Mapping[str, Any]

    def describe(self) -> str:
        return (
            f"checkpoint event #{self.pk} ({PRUNED} at {timestamp(self.at)}, "
            f"pruning through seq {self.data.get('through_seq')})"
        )


def start_after(
    chain: str, checkpoints: Iterable[Checkpoint], key: str
) -> tuple[Start, Break | None]:
    """Where a chain starts once its first events were pruned: right after its latest
    checkpoint signed with ``key``; and the first checkpoint that is not (unsigned, forged,
    changed, or none can be checked without a key), as the chain's break. A chain whose first
    events are gone with no good checkpoint then breaks at its first event: it is expected at
    seq 1 (or after the good checkpoint)."""
    best: Checkpoint | None = None
    broken: Break | None = None
    for checkpoint in sorted(checkpoints, key=lambda c: (c.pk is None, c.pk or 0)):
        problem = checkpoint_problem(key, chain, checkpoint.data)
        if problem is not None:
            broken = broken or Break(
                chain,
                checkpoint.pk,
                f"{checkpoint.describe()} is not to be trusted: {problem}",
                "a checkpoint signed with AUDIT_KEY",
                "no valid signature" if key else "no AUDIT_KEY to check it with",
            )
            continue
        if best is None or int(checkpoint.data["through_seq"]) > int(best.data["through_seq"]):
            best = checkpoint
    if best is None:
        return Start(), broken
    through = int(best.data["through_seq"])
    return Start(
        seq=through + 1,
        prev_hash=str(best.data.get("through_hash") or ""),
        why=f"the {through} event(s) pruned before {best.data.get('before')} "
        f"(signed checkpoint event #{best.pk})",
    ), broken


def walk(
    chain: str, links: Iterable[Link], *, start: Start | None = None, head: tuple[int, str] | None
) -> Iterator[Link | Break]:
    """Walk one chain's links (``seq`` order): yields each link, and the first break if any."""
    state = Walk(chain, start or Start())
    for link in links:
        yield link
        broken = state.feed(link)
        if broken is not None:
            yield broken
            return
    broken = state.end(head)
    if broken is not None:
        yield broken


def verify_export(
    rows: Iterable[Mapping[str, Any]], *, key: str = "", partial: bool = False
) -> list[Break]:
    """Walk an export's chains without the database (the rows of its JSONL, parsed): the first
    break of each chain, none when every chain is whole and ends at the head the export names.

    Each chain must start at seq 1 or right after a checkpoint of its own in the export signed
    with ``key`` (the installation's AUDIT_KEY): an export whose first lines were cut, or a
    chain whose first events were deleted behind a forged checkpoint, is broken. Any checkpoint
    not signed with ``key`` is a break (without a key, none can be vouched for). ``partial``: the
    export is of a time range, and each chain is checked from its first exported event (which
    says nothing of the events before it: check those against an export of the whole chain)."""
    links: dict[str, list[Link]] = {}
    heads: dict[str, tuple[int, str]] = {}
    for row in rows:
        if "chain_head" in row:
            head = row["chain_head"]
            heads[str(head["chain"])] = (int(head["seq"]), str(head["hash"]))
            continue
        link = Link(
            pk=row["id"],
            chain=row["chain"],
            seq=row["seq"],
            verb=row["verb"],
            data=row["data"],
            at=datetime.fromisoformat(row["at"]),
            review=row["review"],
            run=row["run"],
            actor=row["actor"] or "",
            actor_id=None,
            prev_hash=row["prev_hash"],
            hash=row["hash"],
        )
        links.setdefault(link.chain, []).append(link)
    breaks = []
    for chain in sorted(set(links) | set(heads)):
        mine = sorted(links.get(chain, []), key=lambda link: link.seq or 0)
        first = mine[0] if mine else None
        checkpoints = [
            Checkpoint(link.pk, link.at, link.data)
            for link in mine
            if is_checkpoint(link.verb, link.data)
        ]
        start, broken = start_after(chain, checkpoints, key)
        if partial and first is not None and first.seq is not None and first.seq > start.seq:
            start = Start(first.seq, first.prev_hash, "the export's first event of the chain")
        if broken is not None:
            breaks.append(broken)
            continue
        for item in walk(chain, mine, start=start, head=heads.get(chain)):
            if isinstance(item, Break):
                breaks.append(item)
    return breaks
