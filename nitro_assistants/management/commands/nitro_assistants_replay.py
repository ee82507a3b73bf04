from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nitro_assistants import policy_rules
from nitro_assistants.models import Policy
from nitro_assistants.services import rule_trials


def _label(handling: dict[str, Any]) -> str:
    """``auto_approve (small refunds)``, ``review 2·Finance (large refunds)``, ``review``."""
    action = str(handling.get("action") or policy_rules.REVIEW)
    if action == policy_rules.REVIEW:
        approvals = int(handling.get("approvals") or 1)
        group = handling.get("group") or ""
        if approvals > 1 or group:
            action += f" {approvals}" + (f"·{group}" if group else "")
    name = handling.get("rule_name")
    return f"{action} ({name})" if name else action


def _yes_no(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


class Command(BaseCommand):
    help = (
        "Replay a draft rule set over the last N decided tool-call and reply reviews and show "
        "what would have changed, review by review, with the agreement with what people "
        "decided. Nothing is written. The draft: --rules FILE (a JSON list of rules: the whole "
        "rule set), --add FILE (draft rules added to the current ones), --draft NAME (a current "
        "shadow or disabled rule acting), or, with none of these, the current rules with every "
        "shadow rule acting. --dump prints the current rules as JSON, a start for a draft."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--rules", metavar="FILE", help="a draft rule set (JSON; - for stdin)")
        source.add_argument("--add", metavar="FILE", help="draft rules added to the current ones")
        source.add_argument(
            "--draft",
            metavar="NAME",
            action="append",
            default=[],
            help="a current rule (shadow or disabled) acting; repeat for more",
        )
        source.add_argument(
            "--dump", action="store_true", help="print the current rules as a JSON rule set"
        )
        parser.add_argument("--last", type=int, default=1000, help="decisions to replay (1000)")
        parser.add_argument(
            "--all", action="store_true", help="list every review, not only those that change"
        )
        parser.add_argument("--json", action="store_true", help="JSON instead of a table")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["dump"]:
            rows = Policy.objects.select_related("group", "escalate_to").order_by("position", "pk")
            self.stdout.write(json.dumps(rule_trials.rules_as_json(rows), indent=2))
            return
        if options["last"] <= 0:
            raise CommandError("--last must be a positive number of decisions")
        try:
            rule_set = self._rule_set(options)
        except policy_rules.PolicyError as exc:
            raise CommandError(str(exc)) from None
        replay = rule_trials.Replay(rule_set, options["last"])
        if options["json"]:
            self._json(replay, every=options["all"])
        else:
            self._table(replay, every=options["all"])

    def _read(self, path: str) -> Any:
        try:
            if path == "-":
                return json.load(sys.stdin)
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise CommandError(f"{path} is not JSON: {exc}") from None

    def _rule_set(self, options: dict[str, Any]) -> policy_rules.RuleSet:
        if options["rules"]:
            return rule_trials.rules_from_json(self._read(options["rules"]))
        if options["add"]:
            return rule_trials.rules_from_json(
                self._read(options["add"]), with_current=rule_trials.current_rules()
            )
        if options["draft"]:
            return rule_trials.current_rules(options["draft"])
        return rule_trials.current_rules(all_shadow=True)

    def _table(self, replay: rule_trials.Replay, *, every: bool) -> None:
        write = self.stdout.write
        write("review\tholding\tdecided\tthen\tdraft\tagreed then\tagreed draft")
        for row in replay:
            if not (every or row.changed):
                continue
            decided = row.decided
            what = f"{decided.decided or 'decided'} by {decided.by}"
            write(
                f"#{decided.review_id}\t{decided.what}\t{what}\t{_label(row.then)}\t"
                f"{_label(row.draft)}{'' if row.changed else ' (same)'}\t"
                f"{_yes_no(row.agreed_then)}\t{_yes_no(row.agreed_draft)}"
            )
        summary = replay.summary
        write("")
        write(
            f"{summary.looked_at} decided reviews replayed; {summary.changed} would be handled "
            f"otherwise. Decided by people: {summary.by_people}; agreement with them: "
            f"{_rate(summary.rate_then)} then, {_rate(summary.rate_draft)} with the draft "
            f"({summary.agreed_then} → {summary.agreed_draft} of {summary.by_people}). "
            "Nothing was written."
        )

    def _json(self, replay: rule_trials.Replay, *, every: bool) -> None:
        # Streamed: one review per line inside the list, the summary once they are all read.
        write = self.stdout.write
        write('{"reviews": [', ending="")
        first = True
        for row in replay:
            if not (every or row.changed):
                continue
            decided = row.decided
            item = {
                "review": decided.review_id,
                "decision": decided.decision_id,
                "holding": decided.what,
                "decided": decided.decided or None,
                "by": decided.by,
                "decided_at": decided.decided_at.isoformat(),
                "then": row.then,
                "draft": row.draft,
                "changed": row.changed,
                "agreed_then": row.agreed_then,
                "agreed_draft": row.agreed_draft,
            }
            write(("\n" if first else ",\n") + json.dumps(item), ending="")
            first = False
        write("\n" if not first else "", ending="")
        write(f'], "summary": {json.dumps(replay.summary.as_dict())}}}')
