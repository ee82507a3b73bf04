"""Property-based tests are deterministic (issue 35): the same draws on every run, and no test
hopes a draw reaches a status code (a code a test must see is sent on purpose:
tests/interactions/test_openapi.py ``DIRECTED``)."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import settings as hypothesis_settings

TESTS = Path(__file__).resolve().parent


def test_the_loaded_hypothesis_profile_derandomizes() -> None:
    current = hypothesis_settings()
    assert current.derandomize is True
    assert current.database is None


def test_no_test_turns_derandomizing_off_or_seeds_the_draws() -> None:
    """Only tests/conftest.py loads a profile; no test seeds its draws or turns the profile's
    derandomizing off."""
    offenders = [
        f"{path.relative_to(TESTS)}:{n}"
        for path in sorted(TESTS.rglob("*.py"))
        if path != Path(__file__).resolve()
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"derandomize\s*=\s*False|@seed\(|hypothesis\.seed", line)
        or ("load_profile(" in line and path != TESTS / "conftest.py")
    ]
    assert offenders == [], offenders


def test_no_property_based_test_asserts_the_codes_its_draws_reached() -> None:
    """A set of status codes filled from random draws and then asserted is what failed CI: a
    run that drew differently missed a 409. Such a set has no place beside ``@given``."""
    offenders = [
        str(path.relative_to(TESTS))
        for path in sorted(TESTS.rglob("test_*.py"))
        if "@given" in (text := path.read_text())
        and re.search(r"\.add\(\s*response\.status_code\s*\)", text)
    ]
    assert offenders == [], offenders
