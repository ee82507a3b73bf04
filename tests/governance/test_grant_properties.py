"""Properties of grants (issue 36), derandomized: whatever a granter asks for, a grant that is
accepted covers the call approved and nothing wider (a larger number, another value, another
type, another tool's arguments), and one that would be wider is refused."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nitro_assistants import grant_rules
from nitro_assistants.grant_rules import Caps, GrantError

json_scalars = st.one_of(
    st.booleans(),
    st.integers(-1000, 1000),
    st.floats(-1000, 1000, allow_nan=False),
    st.text(max_size=5),
    st.none(),
)
constraints = st.one_of(
    st.fixed_dictionaries({"eq": json_scalars}),
    st.fixed_dictionaries({"max": st.one_of(st.integers(-10, 1000), st.floats(-10, 1000))}),
    st.fixed_dictionaries({"in": st.lists(st.text(max_size=5), max_size=4)}),
)


@settings(derandomize=True, max_examples=400, deadline=None)
@given(
    held=st.dictionaries(st.sampled_from(["amount", "cur", "order"]), json_scalars, min_size=1),
    narrowing=st.dictionaries(st.sampled_from(["amount", "cur", "order", "x"]), constraints),
    later=st.dictionaries(st.sampled_from(["amount", "cur", "order"]), json_scalars, min_size=1),
)
def test_an_accepted_grant_covers_the_call_and_never_anything_wider(
    held: dict[str, Any], narrowing: dict[str, Any], later: dict[str, Any]
) -> None:
    call = {"id": "c", "name": "refund", "args": held}
    try:
        spec = grant_rules.clean_spec(
            {"scope": "thread", "uses": 1, "args": narrowing},
            tool_calls=[call],
            approved=["c"],
            caps=Caps(),
        )
    except GrantError:
        return
    maxima_at_the_call = all(c.get("max", held[n]) == held[n] for n, c in spec.constraints.items())
    # The call approved is covered, unless a maximum was set below it (narrower still).
    assert grant_rules.covers(spec.constraints, held) == maxima_at_the_call
    if not grant_rules.covers(spec.constraints, later):
        return
    assert set(later) == set(held)
    for name, value in later.items():
        approved = held[name]
        constraint = spec.constraints[name]
        if "max" in constraint:  # a number from 0 up to at most the one approved
            assert type(value) in (int, float) and 0 <= value <= approved
        elif "in" in constraint:  # a text the granter listed
            assert isinstance(value, str) and value in narrowing[name]["in"]
        else:  # exactly the value approved, of its type
            assert type(value) is type(approved) and value == approved
