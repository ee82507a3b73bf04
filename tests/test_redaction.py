"""The redactors, pure: what each built-in finds and what it leaves, checksums, host patterns
and callables, a failing or slow redactor, and the JSON walk (no Django, no database)."""

from __future__ import annotations

import logging
import time

import pytest

from nitro_assistants.redaction import HIDDEN, Redaction, build, iban_valid, luhn_valid, mark

EVERYTHING = build(
    ["secrets", "token", "card", "iban", "email", "phone"], secrets=["Zq9xK2mPw7Lr4Tn8"]
)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("pay with 4242 4242 4242 4242 now", "pay with [redacted card] now"),
        ("card 4242-4242-4242-4242.", "card [redacted card]."),
        ("5555555555554444", "[redacted card]"),
        # Sixteen digits that fail Luhn: an order number, not a card.
        ("order 4242424242424241", "order 4242424242424241"),
        ("iban GB82 WEST 1234 5698 7654 32 please", "iban [redacted iban] please"),
        ("DE89370400440532013000", "[redacted iban]"),
        # The IBAN's shape with a wrong checksum.
        ("GB83WEST12345698765432", "GB83WEST12345698765432"),
        ("write to bob.smith+x@example.co.uk today", "write to [redacted email] today"),
        ("call +44 20 7946 0958", "call [redacted phone]"),
        ("call (555) 123-4567 or 555-123-4567", "call [redacted phone] or [redacted phone]"),
        ("key sk-proj-AbCdEfGhIjKlMnOpQrSt", "key [redacted token]"),
        ("slack xoxb-1234567890-abcdefghij", "slack [redacted token]"),
        ("aws AKIAIOSFODNN7EXAMPLE", "aws [redacted token]"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sflKxwRJSMeKKF2QT4", "jwt [redacted token]"),
    ],
)
def test_each_builtin_finds_its_values(text: str, shown: str) -> None:
    assert EVERYTHING.text(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "Tuesday at 10:00",
        "appointment 42 on 2026-12-04 21:07:42",
        "thread 123e4567-e89b-12d3-a456-426614174000",
        "version 1.2.3.4, 12.50 EUR, qty 3",
        "amount 1234567890",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert EVERYTHING.text(text) == text


def test_a_configured_secret_is_found_cut_short_and_in_any_case() -> None:
    # Error texts go through the same redactor: an echo that is not exact still goes.
    assert "Zq9x" not in EVERYTHING.text("auth failed for ZQ9XK2MPW7LR")
    assert "K2mPw7Lr4Tn8" not in EVERYTHING.text("…K2mPw7Lr4Tn8 was refused")


def test_checksums() -> None:
    assert luhn_valid("4111111111111111")
    assert not luhn_valid("4111111111111112")
    assert iban_valid("NL91 ABNA 0417 1643 00")
    assert not iban_valid("NL92 ABNA 0417 1643 00")


def test_host_patterns_and_callables_run_after_the_builtins() -> None:
    redaction = build(
        ["card"],
        patterns={"order": r"ORD-\d{6}"},
        callables={"names": lambda text: text.replace("Alice", mark("name"))},
    )
    assert redaction.text("Alice's ORD-123456, card 4111 1111 1111 1111") == (
        "[redacted name]'s [redacted order], card [redacted card]"
    )


def test_a_redactor_that_raises_hides_the_value_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    def broken(text: str) -> str:
        raise ValueError("boom")

    redaction = Redaction((("broken", broken),))
    with caplog.at_level(logging.ERROR, "nitro_assistants.redaction"):
        assert redaction.text("card 4111 1111 1111 1111") == HIDDEN
    assert "broken" in caplog.text


def test_a_redactor_past_its_time_limit_hides_the_value(caplog: pytest.LogCaptureFixture) -> None:
    def slow(text: str) -> str:
        time.sleep(0.03)
        return text

    redaction = Redaction((("slow", slow),), time_limit=0.01)
    with caplog.at_level(logging.ERROR, "nitro_assistants.redaction"):
        assert redaction.text("secret stuff") == HIDDEN
    assert "slow" in caplog.text and "limit" in caplog.text


def test_a_redactor_returning_no_string_hides_the_value() -> None:
    redaction = Redaction((("none", lambda text: None),))  # type: ignore[arg-type,return-value]
    assert redaction.text("x") == HIDDEN


def test_any_json_value_is_walked_and_the_hidden_paths_named() -> None:
    value = {
        "tool_calls": [{"name": "pay", "args": {"card": "4111 1111 1111 1111", "n": 3}}],
        "note": None,
        "ok": True,
    }
    hidden: list[str] = []
    shown = EVERYTHING.value(value, hidden)
    assert shown == {
        "tool_calls": [{"name": "pay", "args": {"card": "[redacted card]", "n": 3}}],
        "note": None,
        "ok": True,
    }
    assert hidden == ["tool_calls.0.args.card"]
    # The value itself is not changed.
    assert value["tool_calls"][0]["args"]["card"] == "4111 1111 1111 1111"  # type: ignore[index]


def test_no_redactors_return_the_value_itself() -> None:
    value = {"a": "4111 1111 1111 1111"}
    assert Redaction().value(value) is value


def test_a_text_stored_cut_short_loses_the_value_the_cut_split() -> None:
    from nitro_assistants import redaction

    red = redaction.build(["card", "email", "iban", "phone", "token"])
    # The split word goes, and every word before it holding a digit or an "@".
    assert red.cut_text("Refund to jane.doe@exa…") == "Refund to …"
    assert red.cut_text("Pay DE89 3704 0044 05…") == "Pay …"
    assert red.cut_text("Charge 4111 1111 11…") == "Charge …"
    assert red.cut_text("Change the appointment on Tues…") == "Change the appointment on …"
    assert red.cut_text("4111 1111…") == "…"
    # Not cut: only what the redactors find.
    assert red.cut_text("Order 12345 arrived") == "Order 12345 arrived"
    # No redactors: nothing is changed.
    assert redaction.build([]).cut_text("Charge 4111 1111 11…") == "Charge 4111 1111 11…"
