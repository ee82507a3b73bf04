"""Shadow rules cost a governed flow no statement: the statement budget's flow, run again with
shadow rules beside the rule that acts (their verdicts ride on the handling's row and event)."""

from __future__ import annotations

from typing import Any

import pytest

from nitro_assistants.models import Event, Policy, ReviewHandling
from nitro_assistants.testing import FakeAssistant
from tests.core import test_statement_budget as budget

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql("the budget is PostgreSQL's: the chain's heads move inside its insert"),
]


@pytest.mark.parametrize("live_cache", [None, "live"], ids=["per-process cache", "shared cache"])
def test_shadow_rules_add_no_statement_to_the_governed_flow(
    fake_assistant: FakeAssistant, enqueued: list[Any], settings: Any, live_cache: str | None
) -> None:
    trials = [
        Policy.objects.create(
            name="reschedules go through (trial)",
            mode=Policy.Mode.SHADOW,
            position=0,
            tool="reschedule_*",
            action=Policy.Action.AUTO_APPROVE,
        ),
        Policy.objects.create(
            name="reschedules refused (trial)",
            mode=Policy.Mode.SHADOW,
            position=0,  # created first: tried before the staff rule at 0
            tool="reschedule_appointment",
            action=Policy.Action.AUTO_REJECT,
            reason="trial",
        ),
    ]
    budget.test_a_governed_flow_stays_within_its_statement_budget(
        fake_assistant, enqueued, settings, live_cache, granted=False
    )
    handling = ReviewHandling.objects.get()
    assert {v["rule_name"] for v in handling.rule["shadow"].values()} == {t.name for t in trials}
    assert len(Event.objects.get(verb="policy_matched").data["shadow"]) == 2
