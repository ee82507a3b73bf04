"""Scoped approval grants as data: what a grant may say, and which held calls it covers. Pure
Python, no Django import; :mod:`nitro_assistants.services.grants` stores, compiles and uses them.

A grant is given with the approval of one held tool call ("approve calls like this"). It pins the
call's tool and a scope (this thread, this customer: the thread's subject, or this assistant) and
holds a constraint on **every** argument of the call:

- ``{"eq": value}``: the argument must be exactly the value approved (the default for each
  argument the granter does not narrow);
- ``{"max": n}``: a number from 0 to ``n``, where ``n`` is at most the number approved (never
  more: a grant is never wider than the call);
- ``{"in": [...]}``: a text among those listed, which must include the text approved.

A later call is covered when it names the same tool, has exactly the same argument names, and
each argument meets its constraint with the same JSON type (``true`` is not ``1``). A grant lasts
``duration`` seconds, or ``uses`` calls, or both (whichever ends first); at least one is needed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from nitro_assistants.exceptions import InteractionDecisionError, InteractionForbiddenError

THREAD: Final = "thread"
SUBJECT: Final = "subject"
ASSISTANT: Final = "assistant"
SCOPES: Final = (THREAD, SUBJECT, ASSISTANT)
#: The most a grant may last and be used, whatever the rules say.
MAX_SECONDS: Final = 366 * 24 * 3600
MAX_USES: Final = 100_000
MAX_SET: Final = 50
_KEYS: Final = frozenset({"scope", "uses", "duration", "args", "call"})


class GrantError(InteractionDecisionError):
    """A grant that cannot be given, with the request field at fault (``grant.args.amount``)."""


class GrantForbiddenError(InteractionForbiddenError):
    """Giving (or revoking) a grant without the ``grant_approval`` permission."""


@dataclasses.dataclass(frozen=True)
class Caps:
    """What the rule handling a review lets its grants be: none at all (``allowed`` False), or
    at most ``uses`` uses and ``seconds`` long (None: no cap)."""

    allowed: bool = True
    uses: int | None = None
    seconds: float | None = None

    def admits(self, uses: int | None, seconds: float | None) -> bool:
        if not self.allowed:
            return False
        if self.uses is not None and (uses is None or uses > self.uses):
            return False
        return not (self.seconds is not None and (seconds is None or seconds > self.seconds))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(left: Any, right: Any) -> bool:
    """JSON equality where ``true`` is not ``1`` and ``1`` is not ``1.0``'s text."""
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


def _whole(value: Any, name: str, *, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GrantError(f"`grant.{name}` must be a whole number", field=f"grant.{name}")
    if not 1 <= value <= top:
        raise GrantError(f"`grant.{name}` must be from 1 to {top}", field=f"grant.{name}")
    return value


def _constraint(name: str, approved: Any, raw: Any) -> dict[str, Any]:
    field = f"grant.args.{name}"
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise GrantError(
            f'`{field}` must be one of {{"eq": value}}, {{"max": number}}, {{"in": [texts]}}',
            field=field,
        )
    ((op, value),) = raw.items()
    if op == "eq":
        if not _same(value, approved):
            raise GrantError(
                f"`{field}` pins a value the call approved does not have: a grant is never "
                "wider than the call",
                field=field,
            )
        return {"eq": approved}
    if op == "max":
        if not _number(approved):
            raise GrantError(f"`{field}`: a maximum narrows a number only", field=field)
        if not _number(value) or value != value or value in (float("inf"), float("-inf")):
            raise GrantError(f"`{field}`: the maximum must be a number", field=field)
        if value > approved:
            raise GrantError(
                f"`{field}`: the maximum {value} is above the {approved} approved: a grant is "
                "never wider than the call",
                field=field,
            )
        if value < 0:
            raise GrantError(f"`{field}`: the maximum must be 0 or more", field=field)
        return {"max": value}
    if op == "in":
        if not isinstance(approved, str):
            raise GrantError(f"`{field}`: a set narrows a text only", field=field)
        if not isinstance(value, list) or not value or len(value) > MAX_SET:
            raise GrantError(
                f"`{field}`: the set must be a list of 1 to {MAX_SET} texts", field=field
            )
        if not all(isinstance(item, str) for item in value):
            raise GrantError(f"`{field}`: the set holds texts only", field=field)
        if approved not in value:
            raise GrantError(
                f"`{field}`: the set must include the {approved!r} approved", field=field
            )
        return {"in": sorted(set(value))}
    raise GrantError(f"`{field}`: unknown constraint {op!r}; use eq, max or in", field=field)


@dataclasses.dataclass(frozen=True)
class Spec:
    """A grant as given, cleaned: scope, tool, the constraint of every argument, and its limits."""

    scope: str
    tool: str
    call_id: str
    constraints: dict[str, dict[str, Any]]
    uses: int | None
    seconds: int | None


def clean_spec(
    raw: Any, *, tool_calls: Sequence[Mapping[str, Any]], approved: Iterable[str], caps: Caps
) -> Spec:
    """A grant given with a decision, checked against the calls it approves (``approved``: the
    ids of the calls the decision approves as they were held) and the rule's ``caps``. Raises
    :class:`GrantError` naming the field at fault; nothing is stored then."""
    if not isinstance(raw, Mapping):
        raise GrantError("`grant` must be an object", field="grant")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise GrantError(f"`grant` has an unknown key {unknown[0]!r}", field=f"grant.{unknown[0]}")
    scope = raw.get("scope")
    if scope not in SCOPES:
        raise GrantError(f"`grant.scope` must be one of {', '.join(SCOPES)}", field="grant.scope")
    uses = _whole(raw["uses"], "uses", top=MAX_USES) if raw.get("uses") is not None else None
    seconds = (
        _whole(raw["duration"], "duration", top=MAX_SECONDS)
        if raw.get("duration") is not None
        else None
    )
    if uses is None and seconds is None:
        raise GrantError(
            "A grant needs a `duration` (seconds) or a number of `uses`", field="grant.uses"
        )
    if not caps.allowed:
        raise GrantError("The rule handling this review allows no grants", field="grant")
    if caps.uses is not None and (uses is None or uses > caps.uses):
        raise GrantError(
            f"The rule handling this review allows grants of at most {caps.uses} uses",
            field="grant.uses",
        )
    if caps.seconds is not None and (seconds is None or seconds > caps.seconds):
        raise GrantError(
            f"The rule handling this review allows grants of at most {int(caps.seconds)} seconds",
            field="grant.duration",
        )
    approved_ids = set(approved)
    calls = [call for call in tool_calls if str(call.get("id")) in approved_ids]
    wanted = raw.get("call")
    if wanted is not None:
        calls = [call for call in calls if str(call.get("id")) == str(wanted)]
        if not calls:
            raise GrantError(
                "`grant.call` names no call this decision approves as held", field="grant.call"
            )
    elif len(calls) != 1:
        raise GrantError(
            "A grant follows one approved call: name it in `grant.call`"
            if calls
            else "A grant follows the approval of a call as held: nothing here is approved so",
            field="grant.call" if calls else "grant",
        )
    call = calls[0]
    held = call.get("args")
    args: Mapping[str, Any] = held if isinstance(held, Mapping) else {}
    narrowing = raw.get("args") or {}
    if not isinstance(narrowing, Mapping):
        raise GrantError("`grant.args` must be an object", field="grant.args")
    extra = sorted(set(narrowing) - set(args))
    if extra:
        raise GrantError(
            f"`grant.args.{extra[0]}`: the call has no such argument",
            field=f"grant.args.{extra[0]}",
        )
    constraints = {
        str(name): _constraint(str(name), value, narrowing[name])
        if name in narrowing
        else {"eq": value}
        for name, value in args.items()
    }
    return Spec(
        scope=str(scope),
        tool=str(call.get("name") or ""),
        call_id=str(call.get("id")),
        constraints=constraints,
        uses=uses,
        seconds=seconds,
    )


def covers(constraints: Mapping[str, Mapping[str, Any]], args: Any) -> bool:
    """Whether a call's ``args`` meet every constraint, with exactly the arguments constrained."""
    if not isinstance(args, Mapping) or set(args) != set(constraints):
        return False
    for name, constraint in constraints.items():
        value = args[name]
        if "eq" in constraint:
            if not _same(value, constraint["eq"]):
                return False
        elif "max" in constraint:
            if not _number(value) or not 0 <= value <= constraint["max"]:
                return False
        elif "in" in constraint:
            if not isinstance(value, str) or value not in constraint["in"]:
                return False
        else:  # a constraint this version does not know covers nothing
            return False
    return True


@dataclasses.dataclass(frozen=True)
class Grant:
    """One live grant, compiled: where it applies and what it covers."""

    id: int
    scope: str
    key: str
    tool: str
    constraints: Mapping[str, Mapping[str, Any]]
    expires_at: float | None  # a POSIX timestamp
    uses: int | None  # the uses it was given (for the rules' caps)
    seconds: int | None  # the duration it was given (for the rules' caps)
    group_id: int | None = None


class GrantSet:
    """Live grants bucketed by (scope, key, tool): a call is checked against the few grants of
    its thread, its subject and its assistant for its tool, whatever the number of grants."""

    def __init__(self, grants: Iterable[Grant]) -> None:
        self._by_key: dict[tuple[str, str, str], list[Grant]] = {}
        count = 0
        for grant in sorted(grants, key=lambda g: g.id):
            self._by_key.setdefault((grant.scope, grant.key, grant.tool), []).append(grant)
            count += 1
        self._count = count

    def __len__(self) -> int:
        return self._count

    def grant_for(
        self, keys: Mapping[str, str], tool: str, args: Any, now: float, caps: Caps
    ) -> Grant | None:
        """The oldest live grant covering one call; ``keys``: the call's thread, subject and
        assistant keys by scope (a blank key matches nothing)."""
        for scope in SCOPES:
            key = keys.get(scope) or ""
            if not key:
                continue
            for grant in self._by_key.get((scope, key, tool), ()):
                if grant.expires_at is not None and grant.expires_at <= now:
                    continue
                if not caps.admits(grant.uses, grant.seconds):
                    continue
                if covers(grant.constraints, args):
                    return grant
        return None

    def match(
        self,
        keys: Mapping[str, str],
        tool_calls: Sequence[Mapping[str, Any]],
        now: float,
        caps: Caps,
    ) -> dict[str, Grant] | None:
        """The grant covering each held call (by call id), or None unless every call is covered."""
        if not self._count or not tool_calls or not caps.allowed:
            return None
        found: dict[str, Grant] = {}
        for call in tool_calls:
            grant = self.grant_for(
                keys, str(call.get("name") or ""), call.get("args") or {}, now, caps
            )
            if grant is None:
                return None
            found[str(call.get("id"))] = grant
        return found


EMPTY: Final = GrantSet(())

__all__ = [
    "ASSISTANT",
    "EMPTY",
    "SCOPES",
    "SUBJECT",
    "THREAD",
    "Caps",
    "Grant",
    "GrantError",
    "GrantForbiddenError",
    "GrantSet",
    "Spec",
    "clean_spec",
    "covers",
]
