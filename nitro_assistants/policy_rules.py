"""Review policies' rules as data: what a rule is, what it matches and the handling it gives a
review. Pure Python, no Django import; :mod:`nitro_assistants.services.policy_enforcement`
applies them to reviews.

A rule matches a held tool call (or a reply draft) by assistant, review kind, tool name (a glob)
and conditions on the call's arguments (or, for a reply, on ``{"content": <the draft>}``). The
first rule that matches, in order, gives the call its :class:`Handling`: decided at once
(``auto_approve`` / ``auto_reject``) or reviewed by people (``review``: how many approvals, which
group, priority, deadline). A review holding several calls gets the strictest handling among its
calls; a call no rule matches gets the default (one approval, anyone who may decide).

A condition is ``{"path": "order.total", "op": "gt", "value": 100}``. The path walks the
arguments: dotted keys, ``[n]`` or ``.n`` for a list index, an optional leading ``$.``. A path the
arguments do not have never matches (whatever the operator, ``ne`` included). A condition that
cannot be evaluated on the value it reads (a number compared with something that is not one,
``"5000" gt 100``; an order between a text and a number; a text test on a list) is neither true nor
false: its rule **fails closed**. The call gets the strictest handling among the rules that could
apply (those that cannot be evaluated, and the first that matches for certain, or the default),
and the handling says so (:attr:`Handling.unsure`).

:func:`compile_rules` turns rows into a :class:`RuleSet` once; :meth:`RuleSet.handling` then costs
a few microseconds per call even with a thousand rules (rules are bucketed by assistant, kind and
exact tool name; globs are compiled once).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import heapq
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from nitro_assistants.exceptions import InvalidArgumentError
from nitro_assistants.previews import call_path

AUTO_APPROVE: Final = "auto_approve"
AUTO_REJECT: Final = "auto_reject"
REVIEW: Final = "review"
ACTIONS: Final = (REVIEW, AUTO_APPROVE, AUTO_REJECT)

#: A rule's mode: enforced, or in the shadow (tried on every review and what it would have done
#: recorded, never acting).
ENFORCE: Final = "enforce"
SHADOW: Final = "shadow"
MODES: Final = (ENFORCE, SHADOW)

#: What happens when a review's deadline passes.
ESCALATE: Final = "escalate"
APPROVE: Final = "approve"
REJECT: Final = "reject"
#: The review ends ``expired``: nobody answered in time, and the assistant is told so.
EXPIRE: Final = "expire"
NOTHING: Final = ""
DEADLINE_ACTIONS: Final = (NOTHING, ESCALATE, APPROVE, REJECT, EXPIRE)
#: After an escalation, a second deadline may decide.
AFTER_ESCALATION_ACTIONS: Final = (NOTHING, APPROVE, REJECT, EXPIRE)

OPERATORS: Final = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "contains", "matches")
MAX_APPROVALS: Final = 10
MAX_CONDITIONS: Final = 20
#: How many argument paths a rule may name as to be shown before approval.
MAX_MUST_SHOW: Final = 20
_MISSING: Final = object()
_SEGMENT = re.compile(r"[^.\[\]]+|\[\d+\]")


class PolicyError(InvalidArgumentError):
    """A rule that cannot be used, with the field at fault (``conditions``, ``tool``...)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


# -- paths and conditions -------------------------------------------------------------------------


def parse_path(path: Any) -> tuple[str | int, ...]:
    """``"items[0].sku"`` → ``("items", 0, "sku")``; raises :class:`PolicyError`."""
    if not isinstance(path, str) or not path.strip():
        raise PolicyError("A condition needs a `path`: a non-blank string", field="conditions")
    text = path.strip()
    if text.startswith("$"):
        text = text[1:].lstrip(".")
    if not text:
        raise PolicyError(f"The path {path!r} names no argument", field="conditions")
    parts: list[str | int] = []
    position = 0
    for match in _SEGMENT.finditer(text):
        between = text[position : match.start()]
        if between not in ("", "."):
            raise PolicyError(f"The path {path!r} is not a valid path", field="conditions")
        token = match.group()
        if token.startswith("["):
            parts.append(int(token[1:-1]))
        elif token.isdigit():
            parts.append(int(token))
        else:
            parts.append(token)
        position = match.end()
    if text[position:] or text.endswith(".") or not parts:
        raise PolicyError(f"The path {path!r} is not a valid path", field="conditions")
    return tuple(parts)


def resolve(document: Any, path: Sequence[str | int]) -> Any:
    """The value at ``path`` in ``document``, or :data:`_MISSING`."""
    value = document
    for part in path:
        if isinstance(part, int) and isinstance(value, list):
            if not -len(value) <= part < len(value):
                return _MISSING
            value = value[part]
        elif isinstance(value, Mapping):
            key = str(part)
            if key not in value:
                return _MISSING
            value = value[key]
        else:
            return _MISSING
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(left: Any, right: Any) -> bool:
    """Equality of JSON values where ``true`` is not ``1`` (Python's ``True == 1`` is)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    return bool(left == right)


def _comparable(left: Any, right: Any) -> bool:
    return (_number(left) and _number(right)) or (isinstance(left, str) and isinstance(right, str))


@dataclasses.dataclass(frozen=True)
class Condition:
    path: tuple[str | int, ...]
    op: str
    value: Any
    pattern: re.Pattern[str] | None = None

    def holds(self, document: Any) -> bool:
        """Whether the condition holds for certain (see :meth:`test`)."""
        return self.test(document) is True

    def test(self, document: Any) -> bool | None:
        """True or False, or None when the condition cannot be evaluated on the value: a number
        compared with something that is not a number (``"5000" gt 100``, ``5000 eq "5000"``),
        an order between values of different types, a text test on a value that is not a
        text. A rule with such a condition fails closed (:meth:`RuleSet.handling`)."""
        actual = resolve(document, self.path)
        if actual is _MISSING:
            return False
        op, expected = self.op, self.value
        if op in ("eq", "ne"):
            if _number(actual) != _number(expected) and not _equal(actual, expected):
                return None
            same = _equal(actual, expected)
            return same if op == "eq" else not same
        if op in ("lt", "lte", "gt", "gte"):
            if not _comparable(actual, expected):
                return None
            if op == "lt":
                return bool(actual < expected)
            if op == "lte":
                return bool(actual <= expected)
            if op == "gt":
                return bool(actual > expected)
            return bool(actual >= expected)
        if op == "in":
            if any(_equal(actual, item) for item in expected):
                return True
            if any(_number(actual) != _number(item) for item in expected):
                return None
            return False
        if op == "contains":
            if isinstance(actual, str):
                return expected in actual if isinstance(expected, str) else None
            if isinstance(actual, list):
                if any(_equal(item, expected) for item in actual):
                    return True
                if any(_number(item) != _number(expected) for item in actual):
                    return None
                return False
            if isinstance(actual, Mapping):
                return expected in actual if isinstance(expected, str) else None
            return None
        assert self.pattern is not None  # matches
        if not isinstance(actual, str):
            return None
        return self.pattern.search(actual) is not None

    def describe(self) -> str:
        """``amount gt 100``, as a reader would write it."""
        path = ".".join(str(part) for part in self.path)
        return f"{path} {self.op} {json.dumps(self.value, default=str)}"


def clean_condition(raw: Any, index: int = 0) -> Condition:
    """One condition from its JSON form; raises :class:`PolicyError` naming what is wrong."""
    where = f"Condition {index + 1}"
    if not isinstance(raw, Mapping):
        raise PolicyError(
            f'{where} must be an object: {{"path", "op", "value"}}', field="conditions"
        )
    unknown = sorted(set(raw) - {"path", "op", "value"})
    if unknown:
        raise PolicyError(f"{where} has an unknown key {unknown[0]!r}", field="conditions")
    try:
        path = parse_path(raw.get("path"))
    except PolicyError as exc:
        raise PolicyError(f"{where}: {exc}", field="conditions") from None
    op = raw.get("op")
    if op not in OPERATORS:
        raise PolicyError(
            f"{where}: unknown operator {op!r}; use one of {', '.join(OPERATORS)}",
            field="conditions",
        )
    if "value" not in raw:
        raise PolicyError(f"{where} needs a `value`", field="conditions")
    value = raw["value"]
    pattern = None
    if op in ("lt", "lte", "gt", "gte") and not (_number(value) or isinstance(value, str)):
        raise PolicyError(f"{where}: `{op}` compares with a number or a text", field="conditions")
    if op == "in" and not isinstance(value, list):
        raise PolicyError(f"{where}: `in` takes a list of values", field="conditions")
    if op == "contains" and isinstance(value, dict | list):
        raise PolicyError(f"{where}: `contains` takes a text or a number", field="conditions")
    if op == "matches":
        if not isinstance(value, str):
            raise PolicyError(f"{where}: `matches` takes a regular expression", field="conditions")
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise PolicyError(
                f"{where}: {value!r} is not a regular expression ({exc})", field="conditions"
            ) from None
    return Condition(path=path, op=op, value=value, pattern=pattern)


def clean_must_show(raw: Any) -> tuple[tuple[str | int, ...], ...]:
    """A rule's ``must_show``: a list of argument paths (the conditions' syntax); raises
    :class:`PolicyError` naming what is wrong."""
    if raw in (None, ""):
        return ()
    if not isinstance(raw, list):
        raise PolicyError(
            'Must show: a list of argument paths, e.g. ["body", "customer.card"]',
            field="must_show",
        )
    if len(raw) > MAX_MUST_SHOW:
        raise PolicyError(
            f"A rule names at most {MAX_MUST_SHOW} paths to show; got {len(raw)}",
            field="must_show",
        )
    parsed: list[tuple[str | int, ...]] = []
    for index, path in enumerate(raw):
        try:
            parsed.append(parse_path(path))
        except PolicyError as exc:
            raise PolicyError(f"Must show, path {index + 1}: {exc}", field="must_show") from None
    return tuple(dict.fromkeys(parsed))


def clean_conditions(raw: Any) -> tuple[Condition, ...]:
    if raw in (None, ""):
        return ()
    if not isinstance(raw, list):
        raise PolicyError("`conditions` must be a list of conditions", field="conditions")
    if len(raw) > MAX_CONDITIONS:
        raise PolicyError(
            f"A rule takes at most {MAX_CONDITIONS} conditions; got {len(raw)}", field="conditions"
        )
    return tuple(clean_condition(item, i) for i, item in enumerate(raw))


# -- rules and their handling --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Handling:
    """What a rule gives a review. ``rule_id`` None: the default (no rule matched)."""

    action: str = REVIEW
    approvals: int = 1
    group: str = ""
    group_id: int | None = None
    priority: int = 0
    deadline: float | None = None  # seconds
    on_deadline: str = NOTHING
    escalate_to: str = ""
    escalate_to_id: int | None = None
    escalation_deadline: float | None = None
    on_escalation_deadline: str = NOTHING
    reason: str = ""
    rule_id: int | None = None
    rule_name: str = ""
    rule_version: int = 0
    #: The conditions that could not be evaluated and made this handling stricter (blank: none),
    #: e.g. ``rule 'Large refunds': amount gt 100 on "5000"``.
    unsure: str = ""
    #: The parts of the review an approval needs shown (:mod:`nitro_assistants.previews`):
    #: paths into its payload (``tool_calls.0.args.body``), from the ``must_show`` of the rules
    #: that matched each call (or its reply), whichever rule gave the review its handling.
    must_show: tuple[str, ...] = ()
    #: Whether an approval under this handling may give a scoped grant, and its caps (None: none).
    grants: bool = True
    grant_max_uses: int | None = None
    grant_max_seconds: float | None = None

    @property
    def strictness(self) -> tuple[int, int]:
        """Orders handlings: auto-approve < review (more approvals: stricter) < auto-reject."""
        rank = {AUTO_APPROVE: 0, REVIEW: 1, AUTO_REJECT: 2}[self.action]
        return (rank, self.approvals if self.action == REVIEW else 0)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Handling:
        names = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in data.items() if k in names}
        if "must_show" in kept:
            kept["must_show"] = tuple(str(p) for p in kept["must_show"] or ())
        return cls(**kept)


DEFAULT: Final = Handling()


@dataclasses.dataclass(frozen=True)
class Rule:
    """One compiled rule. ``assistant``/``kind``/``tool`` blank: any."""

    id: int
    position: int
    assistant: str
    kind: str
    tool: str
    conditions: tuple[Condition, ...]
    handling: Handling
    #: The argument paths (parsed) an approval of a call it matches needs shown.
    must_show: tuple[tuple[str | int, ...], ...] = ()
    #: A shadow rule: tried, and what it would have done recorded, never acting.
    shadow: bool = False

    def matches(self, assistant: str, kind: str, tool: str, document: Any) -> bool:
        if self.assistant and self.assistant != assistant:
            return False
        if self.kind and self.kind != kind:
            return False
        if self.tool and not fnmatch.fnmatchcase(tool, self.tool):
            return False
        return all(condition.holds(document) for condition in self.conditions)


def clean_rule(
    *,
    id: int,
    position: int = 0,
    assistant: str = "",
    kind: str = "",
    tool: str = "",
    conditions: Any = (),
    action: str = REVIEW,
    approvals: int = 1,
    group: str = "",
    group_id: int | None = None,
    priority: int = 0,
    deadline: float | None = None,
    on_deadline: str = NOTHING,
    escalate_to: str = "",
    escalate_to_id: int | None = None,
    escalation_deadline: float | None = None,
    on_escalation_deadline: str = NOTHING,
    reason: str = "",
    name: str = "",
    version: int = 0,
    must_show: Any = (),
    mode: str = ENFORCE,
    grants: bool = True,
    grant_max_uses: int | None = None,
    grant_max_seconds: float | None = None,
) -> Rule:
    """A :class:`Rule` from a row's fields; raises :class:`PolicyError` with the field at fault."""
    if mode not in MODES:
        raise PolicyError(f"Unknown mode {mode!r}", field="mode")
    if action not in ACTIONS:
        raise PolicyError(f"Unknown action {action!r}", field="action")
    if isinstance(approvals, bool) or not isinstance(approvals, int):
        raise PolicyError("`approvals` must be a whole number", field="approvals")
    if not 1 <= approvals <= MAX_APPROVALS:
        raise PolicyError(f"`approvals` must be from 1 to {MAX_APPROVALS}", field="approvals")
    if on_deadline not in DEADLINE_ACTIONS:
        raise PolicyError(f"Unknown deadline action {on_deadline!r}", field="on_deadline")
    if on_escalation_deadline not in AFTER_ESCALATION_ACTIONS:
        raise PolicyError(
            f"Unknown action {on_escalation_deadline!r} after an escalation",
            field="on_escalation_deadline",
        )
    for field_name, seconds in (
        ("deadline", deadline),
        ("escalation_deadline", escalation_deadline),
    ):
        if seconds is not None and seconds <= 0:
            raise PolicyError("A deadline must be longer than zero", field=field_name)
    if action == REVIEW:
        if on_deadline and deadline is None:
            raise PolicyError("Set the deadline this action applies after", field="deadline")
        if on_deadline == ESCALATE and not escalate_to:
            raise PolicyError("Name the group the review escalates to", field="escalate_to")
        if on_escalation_deadline and (on_deadline != ESCALATE or escalation_deadline is None):
            raise PolicyError(
                "An action after the escalation needs an escalation and its deadline",
                field="escalation_deadline",
            )
    elif action == AUTO_REJECT and not reason.strip():
        raise PolicyError("Say why the policy rejects these calls", field="reason")
    if grant_max_uses is not None and (
        isinstance(grant_max_uses, bool)
        or not isinstance(grant_max_uses, int)
        or grant_max_uses < 1
    ):
        raise PolicyError("A cap on a grant's uses must be 1 or more", field="grant_max_uses")
    if grant_max_seconds is not None and grant_max_seconds <= 0:
        raise PolicyError(
            "A cap on a grant's duration must be longer than zero", field="grant_max_duration"
        )
    if tool and any(c in tool for c in "\n\r\0"):
        raise PolicyError("The tool name pattern holds a control character", field="tool")
    review = action == REVIEW
    handling = Handling(
        action=action,
        approvals=approvals if review else 1,
        group=group if review else "",
        group_id=group_id if review else None,
        priority=priority,
        deadline=deadline if review else None,
        on_deadline=on_deadline if review and deadline is not None else NOTHING,
        escalate_to=escalate_to if review and on_deadline == ESCALATE else "",
        escalate_to_id=escalate_to_id if review and on_deadline == ESCALATE else None,
        escalation_deadline=escalation_deadline if review and on_deadline == ESCALATE else None,
        on_escalation_deadline=on_escalation_deadline if review else NOTHING,
        reason=reason.strip(),
        rule_id=id,
        rule_name=name,
        rule_version=version,
        grants=bool(grants) and review and approvals == 1,
        grant_max_uses=grant_max_uses,
        grant_max_seconds=grant_max_seconds,
    )
    return Rule(
        id=id,
        position=position,
        assistant=assistant,
        kind=kind,
        tool=tool,
        conditions=clean_conditions(
            list(conditions) if isinstance(conditions, tuple) else conditions
        ),
        handling=handling,
        must_show=clean_must_show(list(must_show) if isinstance(must_show, tuple) else must_show),
        shadow=mode == SHADOW,
    )


def _order(rule: Rule) -> tuple[int, int]:
    return (rule.position, rule.id)


def _has_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


class RuleSet:
    """Rules in order, bucketed so a call is checked against only the rules that could match it:
    those for its exact tool name, and the others (globs, any tool) for its assistant or for
    any assistant; globs are compiled once.

    Shadow rules (:attr:`Rule.shadow`) are kept aside (:attr:`shadow_rules`): they never give
    a handling; :meth:`shadow_verdicts` says what each would have done."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        everything = sorted(rules, key=_order)
        self.rules = [rule for rule in everything if not rule.shadow]
        self.shadow_rules = [rule for rule in everything if rule.shadow]
        self._with_shadow: dict[int, RuleSet] = {}
        self._exact: dict[str, list[Rule]] = {}
        self._other: dict[str, list[Rule]] = {}  # by assistant ("" for any)
        self._globs: dict[int, re.Pattern[str]] = {}
        for rule in self.rules:
            if rule.tool and not _has_glob(rule.tool):
                self._exact.setdefault(rule.tool, []).append(rule)
            else:
                self._other.setdefault(rule.assistant, []).append(rule)
                if rule.tool:
                    self._globs[rule.id] = re.compile(fnmatch.translate(rule.tool))
        for rule in self.shadow_rules:
            if _has_glob(rule.tool):
                self._globs[rule.id] = re.compile(fnmatch.translate(rule.tool))
        self._candidates: dict[tuple[str, str, str], list[Rule]] = {}
        #: Whether any rule names parts to show (else a review's handling never looks).
        self._shows = any(rule.must_show for rule in self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def _fits(self, rule: Rule, assistant: str, kind: str, tool: str) -> bool:
        if rule.assistant and rule.assistant != assistant:
            return False
        if rule.kind and rule.kind != kind:
            return False
        glob = self._globs.get(rule.id)
        if glob is not None:
            return glob.match(tool) is not None
        return not rule.tool or rule.tool == tool

    def candidates(self, assistant: str, kind: str, tool: str) -> list[Rule]:
        """The rules that could match a call of ``tool`` (by everything but its conditions), in
        order; worked out once per (assistant, kind, tool)."""
        key = (assistant, kind, tool)
        found = self._candidates.get(key)
        if found is None:
            pools = (
                self._exact.get(tool, ()),
                self._other.get("", ()),
                self._other.get(assistant, ()) if assistant else (),
            )
            found = [
                rule
                for rule in heapq.merge(*pools, key=_order)
                if self._fits(rule, assistant, kind, tool)
            ]
            if len(self._candidates) < 100_000:
                self._candidates[key] = found
        return found

    def first_match(self, assistant: str, kind: str, tool: str, document: Any) -> Rule | None:
        """The first rule whose conditions all hold for certain (no fail-closed)."""
        for rule in self.candidates(assistant, kind, tool):
            if all(condition.holds(document) for condition in rule.conditions):
                return rule
        return None

    def call_handling(self, assistant: str, kind: str, tool: str, document: Any) -> Handling:
        """One call's handling: the first rule that matches it, or the default; failing closed
        on a rule before it that cannot be evaluated on the call (the strictest of those and
        the match, marked :attr:`Handling.unsure`)."""
        unsure: list[tuple[Rule, Condition]] = []
        found = DEFAULT
        for rule in self.candidates(assistant, kind, tool):
            results = [(condition, condition.test(document)) for condition in rule.conditions]
            if any(result is False for _, result in results):
                continue
            undecided = [condition for condition, result in results if result is None]
            if not undecided:
                found = rule.handling
                break
            unsure.append((rule, undecided[0]))
        if not unsure:
            return found
        chosen = found
        for rule, _ in unsure:
            if rule.handling.strictness > chosen.strictness:
                chosen = rule.handling
        why = "; ".join(
            f"rule {rule.handling.rule_name or rule.id!r}: {condition.describe()} cannot be "
            f"evaluated on {json.dumps(resolve(document, condition.path), default=str)[:60]}"
            for rule, condition in unsure
        )
        return dataclasses.replace(chosen, unsure=why)

    def call_must_show(
        self, assistant: str, kind: str, tool: str, document: Any
    ) -> list[tuple[str | int, ...]]:
        """The argument paths an approval of one call needs shown: those of the rule that
        matches it and of every rule before it that could (failing closed, as
        :meth:`call_handling`)."""
        paths: list[tuple[str | int, ...]] = []
        for rule in self.candidates(assistant, kind, tool):
            results = [condition.test(document) for condition in rule.conditions]
            if any(result is False for result in results):
                continue
            paths += rule.must_show
            if all(result is True for result in results):
                break
        return paths

    def handling(
        self,
        assistant: str,
        kind: str,
        tool_calls: Sequence[Mapping[str, Any]] = (),
        reply: Mapping[str, Any] | None = None,
    ) -> Handling:
        """The handling of a review: its calls' (or its reply's) strictest."""
        documents: list[tuple[str, Any]]
        if kind == "reply":
            documents = [("", {"content": str((reply or {}).get("content") or "")})]
        else:
            documents = [
                (str(call.get("name") or ""), call.get("args") or {}) for call in tool_calls
            ]
        chosen: Handling | None = None
        for tool, document in documents:
            found = self.call_handling(assistant, kind, tool, document)
            if chosen is None or found.strictness > chosen.strictness:
                chosen = found
        chosen = chosen or DEFAULT
        if not self._shows or chosen.action != REVIEW:
            return chosen
        shown: list[str] = []
        named: Handling | None = None
        for index, (tool, document) in enumerate(documents):
            paths = self.call_must_show(assistant, kind, tool, document)
            if paths and named is None:
                named = self.call_handling(assistant, kind, tool, document)
            for path in paths:
                relative = ".".join(str(part) for part in path)
                shown.append(f"reply.{relative}" if kind == "reply" else call_path(index, path))
        if not shown:
            return chosen
        if chosen.rule_id is None and named is not None and named.strictness == chosen.strictness:
            # The default holds no parts to show: the rule that names them gives the handling
            # (as strict), so the review has a handling to keep them in.
            chosen = named
        return dataclasses.replace(chosen, must_show=tuple(dict.fromkeys(shown)))

    def with_acting(self, rule: Rule) -> RuleSet:
        """These enforced rules and ``rule`` acting at its position (built once per rule)."""
        found = self._with_shadow.get(rule.id)
        if found is None:
            found = RuleSet([*self.rules, dataclasses.replace(rule, shadow=False)])
            self._with_shadow[rule.id] = found
        return found

    def shadow_verdicts(
        self,
        assistant: str,
        kind: str,
        tool_calls: Sequence[Mapping[str, Any]] = (),
        reply: Mapping[str, Any] | None = None,
    ) -> list[Handling]:
        """What each shadow rule would have done to a review: for each that, enforced at its
        position among the enforced rules, would give the review its handling, that handling.
        A shadow rule that would not apply (it matches no call, or a rule before it or a
        stricter call's rule wins) has no verdict."""
        if not self.shadow_rules:
            return []
        tools = [""] if kind == "reply" else [str(call.get("name") or "") for call in tool_calls]
        verdicts = []
        for rule in self.shadow_rules:
            if not any(self._fits(rule, assistant, kind, tool) for tool in tools):
                continue
            found = self.with_acting(rule).handling(assistant, kind, tool_calls, reply)
            if found.rule_id == rule.id:
                verdicts.append(found)
        return verdicts


# -- shadow rules and replays: did a rule agree with what people decided? ---------------------

#: What people made of a review (:func:`people_decided`).
APPROVED: Final = "approved"  # every call (or the reply) approved as held
EDITED: Final = "edited"  # approved, with at least one edit
REJECTED: Final = "rejected"  # every call rejected or answered in the tool's place, or the reply
MIXED: Final = "mixed"  # some calls approved, others rejected


def people_decided(actions: Sequence[str]) -> str:
    """What a decision's actions (``Decision.actions``) amount to: :data:`APPROVED`,
    :data:`EDITED`, :data:`REJECTED` or :data:`MIXED`."""
    runs = [action for action in actions if action in ("approve", "edit")]
    if not runs:
        return REJECTED
    if len(runs) != len(actions):
        return MIXED
    return EDITED if "edit" in runs else APPROVED


def agrees(
    handling: Handling | Mapping[str, Any],
    decided: str,
    *,
    approvers: int = 1,
    in_group: bool = True,
) -> bool:
    """Whether a rule's handling agrees with what people decided (docs/governance.md):

    - ``auto_approve`` agrees with an approval of the review as it was held, without edits;
    - ``auto_reject`` agrees with a rejection of everything it held (an answer in a tool's
      place counts as a rejection: the tool did not run);
    - ``review`` (people decide) agrees when people decided the review, whatever they decided,
      as the rule asks: a rejection by anyone in its group, an approval by at least its number
      of approvals (``approvers``: how many distinct people approved). ``in_group``: the person
      whose decision was recorded is in the rule's group (or a superuser), or it names none."""
    data = handling.as_dict() if isinstance(handling, Handling) else handling
    action = data.get("action", REVIEW)
    if action == AUTO_APPROVE:
        return decided == APPROVED
    if action == AUTO_REJECT:
        return decided == REJECTED
    if not in_group:
        return False
    if decided == REJECTED:
        return True
    return approvers >= int(data.get("approvals") or 1)


class EditConflictError(PolicyError):
    """An edit would put a review under a rule whose group differs from the group that decides
    it now: no single group may decide it, so the edit is refused."""


def after_edit(current: Handling, fresh: Handling) -> Handling:
    """The handling of a review after an edit: never looser than ``current`` (the handling it
    had) nor than ``fresh`` (the rules evaluated from scratch on the edited, merged content),
    and who may decide never widens.

    - the same rule (and version) as now: ``current`` (an escalation's group stands);
    - an auto-rejection on either side wins; an auto-approval never loosens a review;
    - two reviews: the stricter one's rule, with the larger number of approvals and the group
      either names; two different groups raise :class:`EditConflictError`."""
    moved = _after_edit(current, fresh)
    shown = tuple(dict.fromkeys((*current.must_show, *fresh.must_show)))
    return moved if moved.must_show == shown else dataclasses.replace(moved, must_show=shown)


def _after_edit(current: Handling, fresh: Handling) -> Handling:
    if fresh.rule_id is not None and (fresh.rule_id, fresh.rule_version) == (
        current.rule_id,
        current.rule_version,
    ):
        return current
    if current.action == AUTO_REJECT:
        return current
    if fresh.action == AUTO_REJECT:
        return fresh
    if fresh.action == AUTO_APPROVE:
        return current
    if current.action == AUTO_APPROVE:
        return fresh
    if (
        current.group_id is not None
        and fresh.group_id is not None
        and current.group_id != fresh.group_id
    ):
        raise EditConflictError(
            f"This edit puts the review under rule {fresh.rule_name or fresh.rule_id!r}, "
            f"decided by {fresh.group or 'its group'}, while "
            f"{current.group or 'another group'} decides it now: no one group may decide it. "
            "Reject the call (the assistant may propose it again) or decide it as it is.",
            field="tool_calls",
        )
    fresh_first = (fresh.strictness, fresh.group_id is not None) > (
        current.strictness,
        current.group_id is not None,
    )
    base, other = (fresh, current) if fresh_first else (current, fresh)
    approvals = max(base.approvals, other.approvals)
    group_id = base.group_id if base.group_id is not None else other.group_id
    group = base.group if base.group_id is not None else other.group
    unsure = "; ".join(text for text in (base.unsure, other.unsure) if text)
    return dataclasses.replace(
        base, approvals=approvals, group_id=group_id, group=group, unsure=unsure
    )


def same_handling(left: Handling, right: Handling) -> bool:
    """Whether two handlings ask the same of a review (rule, action, quorum, group, the
    parts to show)."""
    return (
        left.rule_id,
        left.rule_version,
        left.action,
        left.approvals,
        left.group_id,
        set(left.must_show),
    ) == (
        right.rule_id,
        right.rule_version,
        right.action,
        right.approvals,
        right.group_id,
        set(right.must_show),
    )


def progress(approved: int, required: int, group: str) -> str:
    """``"1 of 2 approvals · waiting for someone in Finance"``."""
    label = "approval" if required == 1 else "approvals"
    text = f"{approved} of {required} {label}"
    if approved < required:
        text += f" · waiting for someone in {group}" if group else " · waiting for a reviewer"
    return text


__all__ = [
    "ACTIONS",
    "APPROVED",
    "AUTO_APPROVE",
    "AUTO_REJECT",
    "DEFAULT",
    "EDITED",
    "ENFORCE",
    "MIXED",
    "MODES",
    "OPERATORS",
    "REJECTED",
    "REVIEW",
    "SHADOW",
    "Condition",
    "EditConflictError",
    "Handling",
    "PolicyError",
    "Rule",
    "RuleSet",
    "after_edit",
    "agrees",
    "clean_condition",
    "clean_conditions",
    "clean_must_show",
    "clean_rule",
    "parse_path",
    "people_decided",
    "progress",
    "same_handling",
]
