"""Rules tried before they act: how often each shadow rule agreed with what people decided, and
replays of a draft rule set over the last decided reviews. Nothing here writes.

A shadow rule's verdict on a review is recorded when the review is mirrored
(:func:`.policy_enforcement.shadow_verdicts`, kept in ``ReviewHandling.rule["shadow"]``); its
agreement is read from those verdicts and the reviews' decisions. A replay evaluates a rule set
(drafts from JSON, or the current rules with some marked draft) on each of the last N decisions'
reviews, as they were held, and compares: the handling each had then, the one the rule set gives,
and what people decided. Both stream their rows (``.iterator(chunk_size=...)``): the memory they
take does not grow with the number of reviews.

**Agreement** (:func:`nitro_assistants.policy_rules.agrees`): ``auto_approve`` agrees with an
approval without edits; ``auto_reject`` with a rejection of everything held; ``review`` when
people decided, a rejection by anyone, an approval by at least the rule's number of approvers,
and (a rule with a group) the person whose decision was recorded is in the group now or a
superuser. Only decisions people made count: those a rule, a deadline or a grant made are
counted apart (``not_people``)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Count, F, IntegerField, OuterRef, QuerySet, Subquery
from django.utils.dateparse import parse_duration

from nitro_assistants import policy_rules, rules
from nitro_assistants.models import Approval, Decision, Policy
from nitro_assistants.services.policy_enforcement import BRIEF_KEYS, brief, shadow_key

#: Rows a replay or an agreement reads per round trip.
CHUNK_SIZE = 2000
#: Decisions that no person made.
NOT_PEOPLE = frozenset({Decision.Channel.POLICY, Decision.Channel.DEADLINE, Decision.Channel.GRANT})
#: The fields a draft rule in JSON may have (those of a ``Policy`` row).
RULE_FIELDS = frozenset(
    {
        "name",
        "position",
        "enabled",
        "mode",
        "assistant",
        "kind",
        "tool",
        "conditions",
        "action",
        "reason",
        "approvals",
        "group",
        "priority",
        "deadline",
        "on_deadline",
        "escalate_to",
        "escalation_deadline",
        "on_escalation_deadline",
    }
)


# -- what people decided ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Decided:
    """One decided review as a trial reads it."""

    review_id: int
    decision_id: int
    kind: str
    assistant: str
    tool_calls: list[dict[str, Any]]
    reply: dict[str, Any] | None
    handling: dict[str, Any]  # ReviewHandling.rule, or {} (the default)
    decided: str  # policy_rules.APPROVED/EDITED/REJECTED/MIXED; "" when no person decided
    by: str  # Decision.reviewer_id
    decided_by_id: int | None
    approvers: int
    decided_at: datetime.datetime

    @property
    def what(self) -> str:
        """What it held, in a line: the calls' tool names, or ``reply``. Never the arguments
        nor the reply's text: the rule pages are not the review screen (which asks for the
        permission to read reviews, and redacts what the project says to)."""
        if self.kind == rules.REPLY:
            return "reply"
        return ", ".join(str(call.get("name") or "?") for call in self.tool_calls)


def _approvers() -> Subquery:
    """How many distinct people approved the review's content as it was decided."""
    return Subquery(
        Approval.objects.filter(review=OuterRef("review_id"), digest=OuterRef("review__digest"))
        .order_by()
        .values("review")
        .annotate(n=Count("user", distinct=True))
        .values("n")[:1],
        output_field=IntegerField(),
    )


#: What a trial reads of each decision and its review (and no more: a thread's messages are
#: left in the database), as ``values()``: no model instance is built per row.
DECISION_VALUES = (
    "pk",
    "reply",
    "tool_calls",
    "channel",
    "reviewer_id",
    "decided_by_id",
    "decided_at",
    "review_id",
    "review__kind",
    "review__payload",
    "review__handling__rule",
    "approvers",
    "assistant",
)


#: What :func:`verdicts` reads when it counts only: no content, only the handling's verdicts.
COUNT_VALUES = (
    *(name for name in DECISION_VALUES if name not in ("review__payload", "assistant")),
    "shadow",
)


def decisions(*, content: bool = True) -> QuerySet[Decision, dict[str, Any]]:
    """The decisions of tool-call and reply reviews, the latest first, as the rows
    :func:`as_decided` reads; without ``content``, not what the reviews held (nor their
    assistant), and of the handling only its shadow verdicts: a count reads a tenth of it."""
    found = Decision.objects.filter(review__kind__in=rules.REVIEW_KINDS).annotate(
        approvers=_approvers()
    )
    if content:
        found = found.annotate(assistant=F("review__thread__assistant_key"))
        names: tuple[str, ...] = DECISION_VALUES
    else:
        found = found.annotate(shadow=F("review__handling__rule__shadow"))
        names = COUNT_VALUES
    rows: QuerySet[Decision, dict[str, Any]] = found.order_by("-pk").values(*names)
    return rows


def actions_of(reply: Any, tool_calls: Any) -> list[str]:
    """A tool-call or reply decision's actions, as ``Decision.actions`` gives them."""
    if isinstance(reply, dict) and reply:
        return [str(reply.get("action"))]
    return [str(call.get("action")) for call in tool_calls or [] if isinstance(call, dict)]


def as_decided(row: Mapping[str, Any]) -> Decided:
    payload = row.get("review__payload")
    payload = payload if isinstance(payload, dict) else {}
    # The content as the assistant held it (and the rules saw it): before a quorum's edits.
    original = payload.get("original")
    held: dict[str, Any] = original if isinstance(original, dict) else payload
    handling = row.get("review__handling__rule")
    if "shadow" in row:  # read without content (:data:`COUNT_VALUES`): the verdicts only
        shadow = json.loads(row["shadow"]) if isinstance(row["shadow"], str) else row["shadow"]
        handling = {"shadow": shadow} if isinstance(shadow, dict) else {}
    person = row["channel"] not in NOT_PEOPLE and row["decided_by_id"] is not None
    found_calls, found_reply = held.get("tool_calls"), held.get("reply")
    calls: list[Any] = found_calls if isinstance(found_calls, list) else []
    return Decided(
        review_id=row["review_id"],
        decision_id=row["pk"],
        kind=row["review__kind"],
        assistant=str(row.get("assistant") or ""),
        tool_calls=[call for call in calls if isinstance(call, dict)],
        reply=found_reply if isinstance(found_reply, dict) else None,
        handling=dict(handling) if isinstance(handling, dict) else {},
        decided=(
            policy_rules.people_decided(actions_of(row["reply"], row["tool_calls"]))
            if person
            else ""
        ),
        by=row["reviewer_id"],
        decided_by_id=row["decided_by_id"],
        approvers=max(int(row["approvers"] or 0), 1),
        decided_at=row["decided_at"],
    )


class Membership:
    """Who is in which groups (and who is a superuser, in every group): each group's members
    read once, when first asked about (a handling may name a group no rule names now)."""

    def __init__(self, group_ids: Iterable[int | None] = ()) -> None:
        self._known: set[int] = set()
        self._pairs: set[tuple[int, int]] = set()
        self._superusers: set[int] | None = None
        self.learn(group_ids)

    def learn(self, group_ids: Iterable[int | None]) -> None:
        ids = {group_id for group_id in group_ids if group_id is not None} - self._known
        if not ids:
            return
        self._known |= ids
        user_model = get_user_model()
        through: Any = user_model.groups.through
        self._pairs |= set(
            through.objects.filter(group_id__in=ids).values_list("user_id", "group_id")
        )
        if self._superusers is None:
            self._superusers = set(
                user_model.objects.filter(is_superuser=True).values_list("pk", flat=True)
            )

    def allows(self, user_id: int | None, group_id: int | None) -> bool:
        if group_id is None:
            return True
        self.learn([group_id])
        return user_id in (self._superusers or set()) or (user_id, group_id) in self._pairs


def agreement_of(
    handling: Mapping[str, Any], decided: Decided, membership: Membership
) -> bool | None:
    """Whether ``handling`` agrees with what people decided; None when no person decided."""
    if not decided.decided:
        return None
    return policy_rules.agrees(
        handling,
        decided.decided,
        approvers=decided.approvers,
        in_group=membership.allows(decided.decided_by_id, handling.get("group_id")),
    )


# -- shadow rules' agreement -----------------------------------------------------------------


@dataclasses.dataclass
class Agreement:
    """How a shadow rule's verdicts compare with what people decided."""

    rule_id: int
    agreed: int = 0
    disagreed: int = 0
    #: Reviews it had a verdict on that a rule, a deadline or a grant decided.
    not_people: int = 0

    @property
    def counted(self) -> int:
        return self.agreed + self.disagreed

    @property
    def rate(self) -> float | None:
        """Agreed / (agreed + disagreed); None before people decided any."""
        return self.agreed / self.counted if self.counted else None


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A shadow rule's verdict on one decided review, and whether it agreed."""

    decided: Decided
    verdict: dict[str, Any]
    agrees: bool | None


def verdicts(policies: Sequence[Policy], *, content: bool = True) -> Iterator[tuple[int, Verdict]]:
    """Each recorded verdict of ``policies`` on a decided review, the latest first, as
    ``(rule id, verdict)``; streamed. Without ``content``, a verdict's review has no calls
    (and no assistant): enough to count."""
    keys = {shadow_key(policy.pk): policy.pk for policy in policies}
    if not keys:
        return
    membership = Membership(policy.group_id for policy in policies)
    rows = decisions(content=content).filter(
        review__handling__rule__shadow__has_any_keys=list(keys)
    )
    for decision in rows.iterator(chunk_size=CHUNK_SIZE):
        decided = as_decided(decision)
        recorded = decided.handling.get("shadow") or {}
        for key, rule_id in keys.items():
            verdict = recorded.get(key)
            if isinstance(verdict, dict):
                yield rule_id, Verdict(decided, verdict, agreement_of(verdict, decided, membership))


def shadow_agreement(policies: Sequence[Policy]) -> dict[int, Agreement]:
    """Per rule of ``policies`` (by id), how often its recorded verdicts agreed with what people
    decided (one streamed read for them all)."""
    found = {policy.pk: Agreement(policy.pk) for policy in policies}
    for rule_id, verdict in verdicts(policies, content=False):
        counts = found[rule_id]
        if verdict.agrees is None:
            counts.not_people += 1
        elif verdict.agrees:
            counts.agreed += 1
        else:
            counts.disagreed += 1
    return found


# -- replays ---------------------------------------------------------------------------------


def current_rules(drafts: Iterable[str] = (), *, all_shadow: bool = False) -> policy_rules.RuleSet:
    """The enabled enforced rules, with the rules named in ``drafts`` (shadow or disabled ones)
    acting as if enforced; ``all_shadow``: every enabled shadow rule too. Raises
    ``PolicyError`` naming a draft no rule has."""
    names = set(drafts)
    rows = list(Policy.objects.select_related("group", "escalate_to").order_by("position", "pk"))
    missing = names - {row.name for row in rows}
    if missing:
        raise policy_rules.PolicyError(
            f"No rule is named {', '.join(repr(name) for name in sorted(missing))}", field="rules"
        )
    chosen = []
    for row in rows:
        draft = row.name in names or (all_shadow and row.enabled and row.mode == Policy.Mode.SHADOW)
        if draft or (row.enabled and row.mode == Policy.Mode.ENFORCE):
            chosen.append(dataclasses.replace(row.compiled(), shadow=False))
    return policy_rules.RuleSet(chosen)


def picked_rules(pks: Iterable[int]) -> policy_rules.RuleSet:
    """Exactly the rules ``pks``, all acting (whatever their mode, enabled or not)."""
    rows = Policy.objects.filter(pk__in=list(pks)).select_related("group", "escalate_to")
    return policy_rules.RuleSet(dataclasses.replace(row.compiled(), shadow=False) for row in rows)


def _seconds(value: Any, field: str, where: str) -> float | None:
    if value in (None, ""):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        parsed = parse_duration(value)
        if parsed is not None:
            return parsed.total_seconds()
    raise policy_rules.PolicyError(
        f"{where}: `{field}` must be a number of seconds or a duration like 04:00:00",
        field=field,
    )


def rules_from_json(
    data: Any, *, with_current: policy_rules.RuleSet | None = None
) -> policy_rules.RuleSet:
    """A draft rule set from JSON: a list of rules, each an object with a ``Policy`` row's
    fields (``group`` and ``escalate_to`` by name, deadlines in seconds or as ``HH:MM:SS``);
    rules with ``"enabled": false`` are left out and ``mode`` is ignored (a draft acts).
    ``with_current``: rules the drafts are added to (:func:`current_rules`). Raises
    ``PolicyError`` saying which rule and which field is at fault."""
    if isinstance(data, dict) and isinstance(data.get("rules"), list):
        data = data["rules"]
    if not isinstance(data, list):
        raise policy_rules.PolicyError(
            'A rule set is a JSON list of rules (or {"rules": [...]})', field="rules"
        )
    group_names = {
        str(item.get(key))
        for item in data
        if isinstance(item, dict)
        for key in ("group", "escalate_to")
        if item.get(key)
    }
    groups = dict(Group.objects.filter(name__in=group_names).values_list("name", "pk"))
    compiled = []
    for index, item in enumerate(data):
        where = f"rule {index + 1}"
        if not isinstance(item, dict):
            raise policy_rules.PolicyError(f"{where} is not a JSON object", field="rules")
        unknown = sorted(set(item) - RULE_FIELDS)
        if unknown:
            raise policy_rules.PolicyError(
                f"{where}: unknown field {', '.join(map(repr, unknown))}", field=unknown[0]
            )
        if item.get("enabled") is False:
            continue
        where = f"rule {index + 1} ({item.get('name') or 'unnamed'})"
        kind = item.get("kind") or ""
        if kind not in ("", *rules.REVIEW_KINDS):
            raise policy_rules.PolicyError(
                f"{where}: `kind` is {', '.join(rules.REVIEW_KINDS)} or blank (any), not {kind!r}",
                field="kind",
            )
        for field in ("name", "assistant", "tool", "reason"):
            if not isinstance(item.get(field) or "", str):
                raise policy_rules.PolicyError(f"{where}: `{field}` must be a text", field=field)
        group, escalate_to = str(item.get("group") or ""), str(item.get("escalate_to") or "")
        for field, name in (("group", group), ("escalate_to", escalate_to)):
            if name and name not in groups:
                raise policy_rules.PolicyError(f"{where}: no group is named {name!r}", field=field)
        try:
            compiled.append(
                policy_rules.clean_rule(
                    id=-(index + 1),  # no row: ids of their own, below every row's
                    position=_whole(item.get("position", index), "position", where),
                    assistant=str(item.get("assistant") or ""),
                    kind=str(kind),
                    tool=str(item.get("tool") or ""),
                    conditions=item.get("conditions") or [],
                    action=str(item.get("action") or policy_rules.REVIEW),
                    approvals=item.get("approvals", 1),
                    group=group,
                    group_id=groups.get(group),
                    priority=_whole(item.get("priority", 0), "priority", where),
                    deadline=_seconds(item.get("deadline"), "deadline", where),
                    on_deadline=str(item.get("on_deadline") or ""),
                    escalate_to=escalate_to,
                    escalate_to_id=groups.get(escalate_to),
                    escalation_deadline=_seconds(
                        item.get("escalation_deadline"), "escalation_deadline", where
                    ),
                    on_escalation_deadline=str(item.get("on_escalation_deadline") or ""),
                    reason=str(item.get("reason") or ""),
                    name=str(item.get("name") or f"draft {index + 1}"),
                    version=0,
                )
            )
        except policy_rules.PolicyError as exc:
            raise policy_rules.PolicyError(f"{where}: {exc}", field=exc.field) from None
    if with_current is not None:
        compiled = [*with_current.rules, *compiled]
    return policy_rules.RuleSet(compiled)


def _whole(value: Any, field: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise policy_rules.PolicyError(f"{where}: `{field}` must be a whole number", field=field)
    return value


def rules_as_json(policies: Iterable[Policy]) -> list[dict[str, Any]]:
    """Rules as :func:`rules_from_json` reads them: a starting point for a draft."""
    found = []
    for row in policies:
        item: dict[str, Any] = {
            "name": row.name,
            "position": row.position,
            "assistant": row.assistant,
            "kind": row.kind,
            "tool": row.tool,
            "conditions": row.conditions,
            "action": row.action,
            "reason": row.reason,
            "approvals": row.approvals,
            "group": row.group.name if row.group else "",
            "priority": row.priority,
            "deadline": row.deadline.total_seconds() if row.deadline else None,
            "on_deadline": row.on_deadline,
            "escalate_to": row.escalate_to.name if row.escalate_to else "",
            "escalation_deadline": (
                row.escalation_deadline.total_seconds() if row.escalation_deadline else None
            ),
            "on_escalation_deadline": row.on_escalation_deadline,
        }
        if not row.enabled:
            item["enabled"] = False
        if row.mode != Policy.Mode.ENFORCE:
            item["mode"] = row.mode
        found.append(item)
    return found


@dataclasses.dataclass(frozen=True)
class ReplayRow:
    """One decided review replayed: the handling it had, the one the rule set gives, and
    whether each agreed with what people decided (None: no person decided it)."""

    decided: Decided
    then: dict[str, Any]
    draft: dict[str, Any]
    agreed_then: bool | None
    agreed_draft: bool | None

    @property
    def changed(self) -> bool:
        """Whether the rule set would have handled it otherwise (action, approvals or group)."""
        return _effect(self.then) != _effect(self.draft)


def _effect(handling: Mapping[str, Any]) -> tuple[Any, ...]:
    action = handling.get("action") or policy_rules.REVIEW
    review = action == policy_rules.REVIEW
    return (
        action,
        int(handling.get("approvals") or 1) if review else 1,
        handling.get("group_id") if review else None,
    )


@dataclasses.dataclass
class ReplaySummary:
    looked_at: int = 0
    changed: int = 0
    #: Reviews people decided (those a rule, deadline or grant decided are not counted).
    by_people: int = 0
    agreed_then: int = 0
    agreed_draft: int = 0

    @staticmethod
    def _rate(agreed: int, counted: int) -> float | None:
        return agreed / counted if counted else None

    @property
    def rate_then(self) -> float | None:
        return self._rate(self.agreed_then, self.by_people)

    @property
    def rate_draft(self) -> float | None:
        return self._rate(self.agreed_draft, self.by_people)

    def as_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "agreement_then": self.rate_then,
            "agreement_draft": self.rate_draft,
        }


class Replay:
    """A rule set replayed over the last ``last`` decisions' reviews; iterate it for the rows
    (streamed, the latest first), then read :attr:`summary`. Nothing is written."""

    def __init__(
        self, rule_set: policy_rules.RuleSet, last: int, *, chunk_size: int = CHUNK_SIZE
    ) -> None:
        self.rule_set = rule_set
        self.last = last
        self.chunk_size = chunk_size
        self.summary = ReplaySummary()

    def __iter__(self) -> Iterator[ReplayRow]:
        self.summary = summary = ReplaySummary()
        if self.last <= 0:
            return
        membership = Membership(
            rule.handling.group_id for rule in self.rule_set.rules if rule.handling.group_id
        )
        rule_set = self.rule_set
        for decision in decisions()[: self.last].iterator(chunk_size=self.chunk_size):
            decided = as_decided(decision)
            if decided.handling:
                then = {key: decided.handling.get(key) for key in BRIEF_KEYS}
            else:
                then = brief(policy_rules.DEFAULT)
            draft = brief(
                rule_set.handling(
                    decided.assistant, decided.kind, decided.tool_calls, decided.reply
                )
            )
            row = ReplayRow(
                decided=decided,
                then=then,
                draft=draft,
                agreed_then=agreement_of(then, decided, membership),
                agreed_draft=agreement_of(draft, decided, membership),
            )
            summary.looked_at += 1
            summary.changed += row.changed
            if decided.decided:
                summary.by_people += 1
                summary.agreed_then += bool(row.agreed_then)
                summary.agreed_draft += bool(row.agreed_draft)
            yield row


__all__ = [
    "Agreement",
    "Decided",
    "Replay",
    "ReplayRow",
    "ReplaySummary",
    "current_rules",
    "picked_rules",
    "rules_as_json",
    "rules_from_json",
    "shadow_agreement",
    "verdicts",
]
