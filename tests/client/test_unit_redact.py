"""Redaction of secrets echoed back inexactly (issue 34): a key cut short (its start, its end, a
piece of it), upper-cased, or percent-escaped in a URL's query string is still taken out; a short
secret is taken out whole, in any case, and never by its pieces."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from nitro_assistants.client import http
from nitro_assistants.client.http import REDACTED, Transport, redact

KEY = "sk-live-4f9a2c7e1b3d5a6f8e0c2b4d6a8f0e1c"
FRAGMENT = 8  # http.SECRET_FRAGMENT: what the tests below assume
B64 = "Zm9v+YmFy/YmF6=cXV4+cXV1eA=="  # a key with characters a URL escapes


def pieces(text: str, secret: str = KEY) -> list[str]:
    """Every FRAGMENT characters of ``secret`` in a row found in ``text``, any case."""
    low, secret = text.lower(), secret.lower()
    return [
        secret[i : i + FRAGMENT]
        for i in range(len(secret) - FRAGMENT + 1)
        if secret[i : i + FRAGMENT] in low
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(f"bad key {KEY[:12]}...", f"bad key {REDACTED}...", id="truncated-prefix"),
        pytest.param(f"bad key {KEY[:20]}…{KEY[-4:]}", f"bad key {REDACTED}…{KEY[-4:]}", id="cut"),
        pytest.param(f"key ending ...{KEY[-10:]}.", f"key ending ...{REDACTED}.", id="suffix"),
        pytest.param(f"no key '{KEY[9:21]}' here", f"no key '{REDACTED}' here", id="middle"),
        pytest.param(f"INVALID KEY {KEY.upper()}!", f"INVALID KEY {REDACTED}!", id="upper"),
        pytest.param(f"key={KEY.title()}", f"key={REDACTED}", id="mixed-case"),
        pytest.param(
            f"GET https://api.test/v1?token={KEY}&page=2",
            f"GET https://api.test/v1?token={REDACTED}&page=2",
            id="query-string",
        ),
        pytest.param(
            "GET /v1?token=" + "".join(f"%{b:02X}" for b in KEY.encode()) + "&page=2",
            f"GET /v1?token={REDACTED}&page=2",
            id="query-string-all-escaped",
        ),
        pytest.param(
            "GET /v1?token=" + quote(KEY[:16].upper(), safe="") + "&x",
            f"GET /v1?token={REDACTED}&x",
            id="query-string-upper-cut",
        ),
    ],
)
def test_a_key_echoed_inexactly_is_redacted(text: str, expected: str) -> None:
    assert redact(text, [KEY]) == expected
    assert pieces(redact(text, [KEY])) == []


def test_a_url_escaped_key_is_redacted() -> None:
    escaped = quote(B64, safe="")  # Zm9v%2BYmFy%2FYmF6%3DcXV4...
    assert "%2B" in escaped and "%2F" in escaped
    for text in (escaped, escaped[:15], escaped.lower(), escaped[escaped.index("%3D") :]):
        assert redact(f"?key={text}&x=1", [B64]) == f"?key={REDACTED}&x=1", text


def test_pieces_shorter_than_the_fragment_are_left() -> None:
    """Seven characters of a long key, and ordinary words sharing a few with it, stay."""
    assert http.SECRET_FRAGMENT == FRAGMENT
    text = f"keys start with {KEY[:7]}; see {KEY[-7:]} and 'live' docs"
    assert redact(text, [KEY]) == text


def test_a_short_secret_is_redacted_whole_in_any_case_never_by_pieces() -> None:
    secret = "Pw-1234"  # shorter than the fragment
    assert len(secret) < FRAGMENT
    assert redact("login with PW-1234 or pw-1234.", [secret]) == (
        f"login with {REDACTED} or {REDACTED}."
    )
    assert redact("pw-12 and 1234 and pw- stay", [secret]) == "pw-12 and 1234 and pw- stay"
    assert redact("abc ABC", ["abc"]) == "abc ABC"  # under SECRET_MIN: words would go


def test_the_whole_key_and_its_repeats_are_one_redaction_each() -> None:
    assert redact(f"a{KEY}b {KEY}", [KEY]) == f"a{REDACTED}b {REDACTED}"
    assert redact(f"{KEY}{KEY.upper()}", [KEY]) == REDACTED


def test_case_changes_that_alter_length_keep_the_text_whole() -> None:
    text = f"İstanbul said {KEY.upper()} ok"  # "İ".lower() is two characters
    assert redact(text, [KEY]) == f"İstanbul said {REDACTED} ok"


def test_the_transport_redacts_its_key_cut_short_and_upper_cased() -> None:
    transport = Transport("http://x.test", KEY)
    assert transport.redact(f"got {KEY[:12].upper()}... from bearer-token docs") == (
        f"got {REDACTED}... from bearer-token docs"
    )
