"""What a reviewer must not read: redactors, and any JSON-like value with their finds replaced.

Pure Python, no Django: ``nitro_assistants.redacting`` builds a :class:`Redaction` from the
``REDACT`` setting; the admin, the API, notifications and exports show values through it. Stored
data and what is sent to the assistant never pass through here.

A redactor takes a string and returns it with what it finds replaced. The built-in ones are
written so that they run in time linear in the text (no nested quantifiers), and the ones whose
shape alone says too little are confirmed by a checksum (Luhn for card numbers, mod 97 for
IBANs), so an order number is not taken for a card.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nitro_assistants.client.http import SECRET_FRAGMENT, SECRET_MIN
from nitro_assistants.client.http import redact as redact_secrets

logger = logging.getLogger("nitro_assistants.redaction")

#: A redactor: a string in, the same string with what it hides replaced out.
Redactor = Callable[[str], str]

#: What a value hidden because its redactor failed (raised, returned no string, or ran past
#: the time limit) is shown as: nothing of it, since nobody knows what it held.
HIDDEN = "[hidden: could not be redacted]"
#: Every replacement starts with this, so a caller can tell a shown value was redacted.
MARK = "[redacted"

#: Seconds one redactor may take on one value before the value is hidden instead.
DEFAULT_TIME_LIMIT = 0.05


def mark(name: str) -> str:
    """The text a find of redactor ``name`` is replaced by: ``[redacted card]``."""
    return f"{MARK} {name}]"


def luhn_valid(digits: str) -> bool:
    """Whether ``digits`` (digits only) pass the Luhn check payment card numbers carry."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        number = int(char)
        if index % 2:
            number = number * 2 - 9 if number > 4 else number * 2
        total += number
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """Whether ``text`` (spaces allowed) is an IBAN by its mod-97 checksum (ISO 13616)."""
    compact = text.replace(" ", "").upper()
    if not 15 <= len(compact) <= 34 or not compact.isalnum():
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def pattern_redactor(name: str, pattern: re.Pattern[str] | str) -> Redactor:
    """A redactor replacing every match of ``pattern`` (a host's ``REDACT['PATTERNS']``)."""
    compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    replacement = mark(name)

    def redact(text: str) -> str:
        return compiled.sub(replacement, text)

    return redact


def checked_redactor(name: str, pattern: re.Pattern[str], valid: Callable[[str], bool]) -> Redactor:
    """A redactor replacing the matches of ``pattern`` that ``valid`` confirms."""
    replacement = mark(name)

    def redact(text: str) -> str:
        return pattern.sub(lambda m: replacement if valid(m.group(0)) else m.group(0), text)

    return redact


_EMAIL = re.compile(r"(?i)(?<![\w.+-])[\w.+-]{1,64}@[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63})+")
# Nine to fifteen digits written as a phone number: a leading "+", or groups parted by spaces,
# dots, dashes or a parenthesised area code. Not inside a longer word or number (a UUID, an id),
# and never a date (eight digits) nor a bare run of digits (an order or account number).
_PHONE = re.compile(
    r"(?<![\w+.-])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{1,4}\)[\s.-]?|\d{1,4}[\s.-])"
    r"(?:\d{1,4}[\s.-]){0,3}\d{2,6}(?![\w:-]|\.\d)"
)
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
# Grouped by four (printed) or in one run, a short group last: "GB82 WEST 1234 5698 7654 32".
_IBAN = re.compile(
    r"(?i)(?<![a-z0-9])[a-z]{2}\d{2}(?: ?[a-z0-9]{4}){2,7}(?: ?[a-z0-9]{1,4})?(?![a-z0-9])"
)
# Shapes of API keys and tokens that are secrets by their look alone: provider prefixes, JWTs,
# and a long random-looking run after an "sk-"/"pk_" style prefix.
_TOKEN = re.compile(
    r"\b(?:"
    r"(?:sk|pk|rk)[-_](?:live|test|proj|ant)?[-_]?[A-Za-z0-9_-]{16,}"  # OpenAI, Stripe, Anthropic
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub
    r"|github_pat_[A-Za-z0-9_]{40,}"
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API key
    r"|lsv2_[a-z]{2}_[A-Za-z0-9_]{20,}"  # LangSmith
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # a JWT
    r")"
)


_DATE = re.compile(r"\d{4}-\d\d-\d\d")


def _phone_digits(text: str) -> bool:
    return 9 <= sum(c.isdigit() for c in text) <= 15 and not _DATE.match(text)


def _card_digits(text: str) -> bool:
    digits = text.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


#: The built-in redactors by name, in the order they run (cards before phones: a card number
#: written in groups is also a phone number's shape).
BUILTINS: dict[str, Redactor] = {
    "token": pattern_redactor("token", _TOKEN),
    "card": checked_redactor("card", _CARD, _card_digits),
    "iban": checked_redactor("iban", _IBAN, iban_valid),
    "email": pattern_redactor("email", _EMAIL),
    "phone": checked_redactor("phone", _PHONE, _phone_digits),
}


def secrets_redactor(secrets: Iterable[str]) -> Redactor:
    """A redactor for the app's own configured secrets: found in any case, percent-escaped, or
    by any eight characters of them in a row (a key cut short), and credential headers'
    values (the one mechanism error texts go through too, ``client.http.redact``)."""
    kept = tuple(s for s in secrets if s)
    # Most values hold none of them: one case-insensitive search for any piece a secret is
    # found by (whole, or SECRET_FRAGMENT characters of it) tells, before the position-by-
    # position walk that finds where. Percent-escaped text always takes the walk.
    pieces = {
        low[i : i + SECRET_FRAGMENT] if len(low) >= SECRET_FRAGMENT else low
        for low in (s.lower() for s in kept if len(s) >= SECRET_MIN)
        for i in range(max(1, len(low) - SECRET_FRAGMENT + 1))
    }
    anywhere = (
        re.compile("|".join(re.escape(p) for p in sorted(pieces)), re.IGNORECASE)
        if pieces
        else None
    )

    def redact(text: str) -> str:
        if anywhere is not None and ("%" in text or anywhere.search(text)):
            return redact_secrets(text, kept)
        return redact_secrets(text)  # credential headers' values only

    return redact


@dataclass(frozen=True)
class Redaction:
    """Named redactors applied in order, each given at most ``time_limit`` seconds a value."""

    redactors: tuple[tuple[str, Redactor], ...] = ()
    time_limit: float = DEFAULT_TIME_LIMIT

    def __bool__(self) -> bool:
        return bool(self.redactors)

    def text(self, text: str) -> str:
        """``text`` with every redactor's finds replaced; :data:`HIDDEN` if one failed."""
        for name, redactor in self.redactors:
            started = time.perf_counter()
            try:
                result = redactor(text)
            except Exception:
                logger.exception("Redactor %r raised: the value is hidden", name)
                return HIDDEN
            elapsed = time.perf_counter() - started
            if not isinstance(result, str):
                logger.error("Redactor %r returned %s, not a string: hidden", name, type(result))
                return HIDDEN
            if elapsed > self.time_limit:
                # Checked after the call: a redactor cannot be stopped half-way in this
                # process, but what it took too long over is never shown.
                logger.error(
                    "Redactor %r took %.3fs (limit %.3fs): the value is hidden",
                    name,
                    elapsed,
                    self.time_limit,
                )
                return HIDDEN
            text = result
        return text

    def cut_text(self, text: str, ellipsis: str = "…") -> str:
        """:meth:`text` of a text stored cut short (ending with ``ellipsis``, as a thread's
        subject is): the cut may have split a value, whose first part no redactor knows (four
        digits of a card number, a mail address without its domain), so the word it split and
        every word before it that holds a digit or an ``@`` are left out too."""
        if not self.redactors or not text.endswith(ellipsis):
            return self.text(text)
        words = text[: -len(ellipsis)].split(" ")
        words.pop()  # the word the cut split
        while words and (not words[-1] or any(c.isdigit() or c == "@" for c in words[-1])):
            words.pop()
        return self.text(" ".join(words)) + (" " if words else "") + ellipsis

    def value(self, value: Any, hidden: list[str] | None = None, path: str = "") -> Any:
        """A copy of the JSON-like ``value`` with every string in it redacted (mapping keys are
        kept as they are: they name fields, they do not hold them). The dotted path of each
        string that changed is added to ``hidden`` when given (``args.card``, ``items.0``)."""
        if not self.redactors:
            return value
        if isinstance(value, str):
            shown = self.text(value)
            if hidden is not None and shown != value:
                hidden.append(path)
            return shown
        if isinstance(value, Mapping):
            return {
                key: self.value(item, hidden, f"{path}.{key}" if path else str(key))
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [
                self.value(item, hidden, f"{path}.{index}" if path else str(index))
                for index, item in enumerate(value)
            ]
        return value


def build(
    builtins: Iterable[str],
    patterns: Mapping[str, re.Pattern[str] | str] | None = None,
    callables: Mapping[str, Redactor] | None = None,
    secrets: Iterable[str] = (),
    time_limit: float = DEFAULT_TIME_LIMIT,
) -> Redaction:
    """A :class:`Redaction` of the named built-ins (``"secrets"``: the given ``secrets``), the
    host's patterns (``re.error`` for one that does not compile) and callables, in that order."""
    redactors: list[tuple[str, Redactor]] = []
    chosen = set(builtins)
    if "secrets" in chosen:
        redactors.append(("secrets", secrets_redactor(secrets)))
    redactors += [(name, BUILTINS[name]) for name in BUILTINS if name in chosen]
    for name, pattern in (patterns or {}).items():
        redactors.append((name, pattern_redactor(name, pattern)))
    redactors += list((callables or {}).items())
    return Redaction(tuple(redactors), time_limit)
