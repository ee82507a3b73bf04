"""Replays: a draft rule set (JSON, or the current rules with some marked draft) over the last
decided reviews, review by review, with the agreement rate; nothing is written."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from nitro_assistants import services
from nitro_assistants.models import Policy, Review
from nitro_assistants.services import governance, rule_trials
from tests.governance.conftest import approve, mirrored, reviewer
from tests.governance.test_shadow import edit, reject

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(queued: list[Any], refund_rules: dict[str, Policy], finance: Group) -> dict[str, Any]:
    """Decided refunds: 20 and 30 approved by the small-refund rule; 80 approved by bob, 90
    rejected by bob, 70 edited and approved by bob; 300 approved by two in Finance."""
    bob = reviewer("bob")
    alice, carol = reviewer("alice", finance), reviewer("carol", finance)
    found: dict[str, Any] = {}
    for amount in (20, 30):
        review = mirrored(amount)
        governance.apply_policy(review.pk)
        found[f"auto {amount}"] = review
    for amount, body in ((80, approve), (90, reject)):
        review = mirrored(amount)
        services.decide(review, bob, body(review), via="admin")
        found[f"bob {amount}"] = review
    review = mirrored(70)
    services.decide(review, bob, edit(review, 75), via="admin")
    found["bob edited 70"] = review
    review = mirrored(300)
    services.decide(review, alice, approve(review), via="admin")
    services.decide(review, carol, approve(review), via="admin")
    found["finance 300"] = review
    mirrored(85)  # pending: not replayed
    return found


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("nitro_assistants_replay", *args, stdout=out)
    return out.getvalue()


def as_json(*args: str) -> dict[str, Any]:
    return json.loads(run("--json", *args))


def draft_file(tmp_path: Path, rules: Any) -> str:
    path = tmp_path / "draft.json"
    path.write_text(json.dumps(rules))
    return str(path)


def test_a_draft_rule_set_replayed_shows_what_changes_and_agreement(
    history: dict[str, Any], tmp_path: Path
) -> None:
    # The draft: refunds up to 100 go through.
    path = draft_file(
        tmp_path,
        [
            {
                "name": "refunds up to 100",
                "tool": "refund_*",
                "conditions": [{"path": "amount", "op": "lte", "value": 100}],
                "action": "auto_approve",
            }
        ],
    )
    body = as_json("--rules", path, "--all")
    rows = {row["review"]: row for row in body["reviews"]}
    assert len(rows) == 6  # the pending one is not replayed
    bob_80 = rows[history["bob 80"].pk]
    assert (bob_80["then"]["action"], bob_80["draft"]["action"], bob_80["changed"]) == (
        "review",
        "auto_approve",
        True,
    )
    assert (bob_80["decided"], bob_80["agreed_then"], bob_80["agreed_draft"]) == (
        "approved",
        True,
        True,
    )
    bob_90 = rows[history["bob 90"].pk]
    assert (bob_90["decided"], bob_90["agreed_then"], bob_90["agreed_draft"]) == (
        "rejected",
        True,
        False,
    )
    edited = rows[history["bob edited 70"].pk]
    # The draft reads the call as the assistant held it (70), before bob's edit.
    assert (edited["decided"], edited["draft"]["action"], edited["agreed_draft"]) == (
        "edited",
        "auto_approve",
        False,
    )
    finance = rows[history["finance 300"].pk]
    assert finance["then"]["rule_name"] == "large refunds"
    assert finance["draft"]["action"] == "review"  # the draft has no rule for it: the default
    assert (finance["changed"], finance["agreed_then"], finance["agreed_draft"]) == (
        True,
        True,
        True,
    )
    auto = rows[history["auto 20"].pk]
    assert (auto["decided"], auto["by"], auto["changed"]) == (
        None,
        "policy:small refunds",
        False,
    )
    assert body["summary"] == {
        "looked_at": 6,
        "changed": 4,  # bob's three (review → auto_approve) and Finance's (2 → 1)
        "by_people": 4,
        "agreed_then": 4,
        "agreed_draft": 2,
        "agreement_then": 1.0,
        "agreement_draft": 0.5,
    }
    # Without --all only the reviews that would change are listed.
    changed = as_json("--rules", path)["reviews"]
    assert {row["review"] for row in changed} == {
        history[key].pk for key in ("bob 80", "bob 90", "bob edited 70", "finance 300")
    }
    # --last: the latest decisions only.
    assert as_json("--rules", path, "--all", "--last", "2")["summary"]["looked_at"] == 2


def test_the_table_lists_each_review_and_the_rates(history: dict[str, Any], tmp_path: Path) -> None:
    path = draft_file(tmp_path, [{"tool": "refund_*", "action": "auto_reject", "reason": "x"}])
    text = run("--rules", path)
    assert f"#{history['bob 80'].pk}\trefund_customer\tapproved by bob\treview\tauto_reject" in (
        text
    )
    assert "6 decided reviews replayed; 6 would be handled otherwise" in text
    assert "agreement with them: 100.0% then, 25.0% with the draft (4 → 1 of 4)" in text
    assert "Nothing was written." in text


def test_the_current_rules_with_shadow_rules_as_drafts(history: dict[str, Any]) -> None:
    Policy.objects.create(
        name="refuse refunds over 85 (trial)",
        mode=Policy.Mode.SHADOW,
        position=15,
        tool="refund_*",
        conditions=[{"path": "amount", "op": "gt", "value": 85}],
        action=Policy.Action.AUTO_REJECT,
        reason="trial",
    )
    Policy.objects.create(
        name="everything through (disabled)",
        enabled=False,
        tool="refund_*",
        action=Policy.Action.AUTO_APPROVE,
    )
    # No option: every shadow rule acts (the disabled one does not).
    body = as_json()
    changed = {row["review"]: row["draft"]["rule_name"] for row in body["reviews"]}
    assert changed == {
        history["bob 90"].pk: "refuse refunds over 85 (trial)",
        history["finance 300"].pk: "refuse refunds over 85 (trial)",
    }
    assert body["summary"]["agreed_draft"] == 3  # bob's rejection of 90 agrees; 300 does not
    # --draft NAME: that rule acts, whatever its mode or state; the shadow rule does not.
    body = as_json("--draft", "everything through (disabled)")
    assert {row["review"] for row in body["reviews"]} == {
        history[key].pk for key in ("bob 80", "bob 90", "bob edited 70", "finance 300")
    }
    # --add FILE: drafts added to the current enforced rules.
    # (tested through the service: the command's --add reads a file the same way)
    with pytest.raises(CommandError, match="No rule is named 'nope'"):
        run("--draft", "nope")


def test_add_puts_draft_rules_among_the_current_ones(
    history: dict[str, Any], tmp_path: Path
) -> None:
    path = draft_file(
        tmp_path,
        [
            {
                "name": "two in Finance above 60",
                "position": 25,
                "tool": "refund_*",
                "conditions": [{"path": "amount", "op": "gt", "value": 60}],
                "approvals": 2,
                "group": "Finance",
                "deadline": "04:00:00",
            }
        ],
    )
    body = as_json("--add", path)
    drafts = {row["review"]: row["draft"] for row in body["reviews"]}
    assert set(drafts) == {history[k].pk for k in ("bob 80", "bob 90", "bob edited 70")}
    assert {(d["rule_name"], d["approvals"], d["group"]) for d in drafts.values()} == {
        ("two in Finance above 60", 2, "Finance")
    }
    # bob is not in Finance and approved alone: a quorum of Finance would not agree; his
    # rejection is not by Finance either.
    assert body["summary"]["agreed_draft"] == 1  # only Finance's two approvals of 300


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"name": "x"}, "A rule set is a JSON list of rules"),
        ([{"tool": "refund_*", "acton": "auto_approve"}], "rule 1: unknown field 'acton'"),
        ([{"tool": "x", "action": "auto_reject"}], r"rule 1 \(unnamed\): Say why"),
        ([{"group": "Nobody"}], "no group is named 'Nobody'"),
        (
            [{"conditions": [{"path": "a", "op": "gt"}]}],
            r"rule 1 \(unnamed\): .*value",
        ),
        ([{"deadline": "soon"}], "`deadline` must be a number of seconds"),
        ([{"position": "1"}], "`position` must be a whole number"),
        ([{"kind": "question"}], "`kind` is tool_calls, reply or blank"),
        ([{"tool": ["refund"]}], "`tool` must be a text"),
        ([{"approvals": "2"}], "`approvals` must be a whole number"),
        (["refund"], "rule 1 is not a JSON object"),
    ],
)
def test_a_bad_draft_is_refused_with_the_rule_and_field_at_fault(
    tmp_path: Path, rules: Any, message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        run("--rules", draft_file(tmp_path, rules))


def test_a_file_that_is_not_json_or_not_there_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(CommandError, match="is not JSON"):
        run("--rules", str(bad))
    with pytest.raises(CommandError, match="Cannot read"):
        run("--rules", str(tmp_path / "missing.json"))
    with pytest.raises(CommandError, match="--last must be a positive"):
        run("--last", "0")


def test_dump_prints_the_current_rules_as_a_draft_that_replays_the_same(
    history: dict[str, Any], tmp_path: Path
) -> None:
    dumped = json.loads(run("--dump"))
    assert [rule["name"] for rule in dumped] == ["small refunds", "huge refunds", "large refunds"]
    body = as_json("--rules", draft_file(tmp_path, dumped))
    # The same rules as those that handled the reviews: nothing changes (the versions differ).
    assert body["reviews"] == []
    assert body["summary"]["agreed_draft"] == body["summary"]["agreed_then"] == 4


def snapshot() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the app and of auth, in full."""
    found = {}
    for model in [*apps.get_app_config("nitro_assistants").get_models(), Group]:
        found[model._meta.db_table] = sorted(
            model._base_manager.values_list(), key=lambda row: str(row)
        )
    return found


def test_a_replay_writes_nothing(history: dict[str, Any], tmp_path: Path) -> None:
    Policy.objects.create(
        name="trial", mode=Policy.Mode.SHADOW, tool="refund_*", action="auto_approve"
    )
    path = draft_file(tmp_path, [{"tool": "refund_*", "action": "auto_approve"}])
    before = snapshot()
    with CaptureQueriesContext(connection) as queries:
        run("--rules", path, "--all")
        run("--all", "--json")
        list(rule_trials.verdicts(list(Policy.objects.all())))
    assert snapshot() == before
    written = [
        q["sql"]
        for q in queries.captured_queries
        if not q["sql"].lstrip().upper().startswith(("SELECT", "DECLARE", "FETCH", "CLOSE"))
        and "SAVEPOINT" not in q["sql"].upper()
    ]
    assert written == []


def test_a_replay_streams_in_chunks_with_the_same_result(history: dict[str, Any]) -> None:
    rule_set = rule_trials.current_rules()
    whole = rule_trials.Replay(rule_set, 100)
    chunked = rule_trials.Replay(rule_set, 100, chunk_size=2)
    assert [r.decided.review_id for r in whole] == [r.decided.review_id for r in chunked]
    assert whole.summary == chunked.summary
    assert Review.objects.filter(decision__isnull=False).count() == whole.summary.looked_at
