"""What a reviewer is shown of a held call, and whether a part a rule names was shown: pure
Python, no Django. The admin draws values by the same thresholds (``admin/content.py``), the
API's read lists the parts a client must show, and ``services.decide`` refuses an approval of a
part that was collapsed or redacted and not opened (docs/redaction.md, "Complete previews").

A **path** here is a dotted path into a review's payload, as the API's ``redacted`` list writes
it: ``tool_calls.0.args.customer.card``, ``tool_calls.1.args.items.0``; list items by index.

A value is **collapsed** when the review screen draws it folded, its first line showing: a text
(a number, a string) longer than :data:`LONG_CHARS` characters or of :data:`LONG_LINES` lines or
more; an object or list nested deeper than :data:`MAX_DEPTH` levels is drawn as indented JSON,
collapsed by the same measure. A part is collapsed when a collapsed value holds it or lies
within it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from nitro_assistants.exceptions import InvalidArgumentError

#: A value longer than this (characters, or lines) is drawn collapsed, its first line showing.
LONG_CHARS: Final = 600
LONG_LINES: Final = 10
#: Nested objects are drawn as rows down to this depth; deeper ones as indented JSON.
MAX_DEPTH: Final = 2
#: How many paths a decision may say it showed, and how long each may be.
MAX_SHOWN: Final = 500
MAX_PATH: Final = 500


def is_long(text: str) -> bool:
    """Whether ``text`` is drawn collapsed."""
    return len(text) > LONG_CHARS or text.count("\n") >= LONG_LINES


def as_text(value: Any, depth: int) -> str | None:
    """The text a value is drawn as when it is drawn as one text (None: drawn as rows or a
    list, each item on its own): scalars as themselves, what is nested deeper than
    :data:`MAX_DEPTH` as indented JSON."""
    if value is None or value == "" or value == [] or value == {} or isinstance(value, bool):
        return None
    if isinstance(value, int | float | str):
        return str(value)
    if depth >= MAX_DEPTH or not isinstance(value, Mapping | list):
        if isinstance(value, Mapping | list):
            return json.dumps(value, indent=2, ensure_ascii=False, default=str)
        return str(value)
    return None


def collapsed_args(args: Any, path: str) -> list[str]:
    """The paths of the values within a call's ``args`` (at ``path``) that are drawn collapsed,
    as the review screen draws them: each argument a row (depth 0), objects within as rows."""
    found: list[str] = []
    for key, item in args.items() if isinstance(args, Mapping) else ():
        found += collapsed(item, f"{path}.{key}", 0)
    return found


def collapsed(value: Any, path: str, depth: int) -> list[str]:
    """The paths of the values within ``value`` (at ``path``, drawn at ``depth``) that are
    drawn collapsed."""
    text = as_text(value, depth)
    if text is not None:
        return [path] if is_long(text) else []
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            found += collapsed(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += collapsed(item, f"{path}.{index}", depth + 1)
    return found


def segments(path: str) -> list[str]:
    return path.split(".") if path else []


def overlaps(left: str, right: str) -> bool:
    """Whether one of two paths lies within the other (or they are the same)."""
    a, b = segments(left), segments(right)
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def within(path: str, outer: str) -> bool:
    """Whether ``path`` is ``outer`` or lies within it."""
    a, b = segments(path), segments(outer)
    return a[: len(b)] == b


def call_path(index: int, relative: Sequence[str | int]) -> str:
    """A rule's argument path (parsed) as a path into the payload of a review's call ``index``."""
    return ".".join(["tool_calls", str(index), "args", *(str(part) for part in relative)])


def resolve(payload: Any, path: str) -> tuple[bool, Any]:
    """``(found, value)`` at ``path`` in ``payload``."""
    value = payload
    for part in segments(path):
        if isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        elif isinstance(value, Mapping) and part in value:
            value = value[part]
        else:
            return False, None
    return True, value


@dataclasses.dataclass(frozen=True)
class Part:
    """A part of a review a rule says must be shown before it is approved."""

    path: str
    #: The call it belongs to (its index in the review's calls), or None (a reply).
    call: int | None
    #: The collapsed values that hold it or lie within it: each to be opened.
    folds: tuple[str, ...]
    #: The redacted values that hold it or lie within it: the review is revealed first.
    redactions: tuple[str, ...]

    @property
    def collapsed(self) -> bool:
        return bool(self.folds)

    @property
    def redacted(self) -> bool:
        return bool(self.redactions)

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "collapsed": self.collapsed, "redacted": self.redacted}


def parts(payload: Any, required: Iterable[str], hidden: Iterable[str] = ()) -> list[Part]:
    """The ``required`` paths ``payload`` has, each with what hides it: the collapsed values
    (as the review screen draws the calls' arguments) and the redacted ones (``hidden``: the
    paths a reviewer is not shown whole). A path the payload does not have has nothing to show."""
    hidden = list(hidden)
    calls = payload.get("tool_calls") if isinstance(payload, Mapping) else None
    folds_by_call: dict[int, list[str]] = {}
    found: list[Part] = []
    for path in dict.fromkeys(required):
        present, _ = resolve(payload, path)
        if not present:
            continue
        pieces = segments(path)
        call: int | None = None
        folds: list[str] = []
        if len(pieces) >= 3 and pieces[0] == "tool_calls" and pieces[1].isdigit():
            call = int(pieces[1])
            if call not in folds_by_call and isinstance(calls, list) and call < len(calls):
                args = calls[call].get("args") if isinstance(calls[call], Mapping) else None
                folds_by_call[call] = collapsed_args(args, f"tool_calls.{call}.args")
            folds = [fold for fold in folds_by_call.get(call, []) if overlaps(fold, path)]
        found.append(
            Part(
                path=path,
                call=call,
                folds=tuple(folds),
                redactions=tuple(h for h in hidden if overlaps(h, path)),
            )
        )
    return found


def clean_shown(raw: Any) -> list[str] | None:
    """What a decision says was shown: a list of paths (None when it says nothing). Raises
    ``InvalidArgumentError`` (a ``ValueError``) saying what is wrong."""
    if raw is None:
        return None
    if not isinstance(raw, list | tuple):
        raise InvalidArgumentError(
            "`shown` must be a list of the paths shown (tool_calls.0.args.body)"
        )
    if len(raw) > MAX_SHOWN:
        raise InvalidArgumentError(f"`shown` takes at most {MAX_SHOWN} paths; got {len(raw)}")
    paths: list[str] = []
    for item in raw:
        if not isinstance(item, str) or not item.strip() or len(item) > MAX_PATH:
            raise InvalidArgumentError(
                f"Each path of `shown` must be a non-blank string of at most {MAX_PATH} "
                "characters (tool_calls.0.args.body)"
            )
        if any(char == "\x00" or "\ud800" <= char <= "\udfff" for char in item):
            # What the decision records must be storable (PostgreSQL's jsonb refuses these).
            raise InvalidArgumentError("A path of `shown` holds a NUL or a lone surrogate")
        paths.append(item.strip())
    return list(dict.fromkeys(paths))


def opened(part: Part, shown: Iterable[str]) -> bool:
    """Whether ``shown`` covers every collapsed value of ``part``: the part itself (or what
    holds it) was shown whole, or each collapsed value of it was opened."""
    shown = list(shown)
    if any(within(part.path, path) for path in shown):
        return True
    return all(any(within(fold, path) for path in shown) for fold in part.folds)


def unshown(
    found: Iterable[Part], shown: Iterable[str], *, revealed: bool, edited: Iterable[str] = ()
) -> list[tuple[Part, str]]:
    """The parts an approval may not go ahead without, each with why: collapsed and not
    opened (``shown``), or redacted and the review not ``revealed``. A part within an argument
    the decision's edit replaced (``edited``: its paths) was written by the reviewer."""
    shown, edited = list(shown), list(edited)
    missing: list[tuple[Part, str]] = []
    for part in found:
        if any(within(part.path, path) for path in edited):
            continue
        if part.redacted and not revealed:
            missing.append((part, "redacted"))
        elif part.collapsed and not opened(part, shown):
            missing.append((part, "collapsed"))
    return missing


__all__ = [
    "LONG_CHARS",
    "LONG_LINES",
    "MAX_DEPTH",
    "Part",
    "call_path",
    "clean_shown",
    "collapsed",
    "collapsed_args",
    "is_long",
    "opened",
    "overlaps",
    "parts",
    "unshown",
    "within",
]
