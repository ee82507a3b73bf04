"""Values the database cannot store: NUL characters, lone surrogates and non-finite numbers.

PostgreSQL refuses a NUL (``\\x00``) in ``text`` and in ``jsonb`` (``\\u0000``), and a lone
surrogate (``\\ud800``, which JSON's ``\\u`` escapes can spell) is not UTF-8 at all, so neither
can be stored, and storing them is what every decision does first. Nor can ``NaN``, ``Infinity``
or ``-Infinity``: Python's ``json`` reads them (and a number too large for a float, ``1e999``,
as infinity), but they are not JSON, and ``jsonb`` refuses them. Input is checked for all of
these where it is parsed (the decide API's body and path, the admin's JSON fields), so the caller
gets a 400 or a form error naming the field instead of a 500 from the database.
"""

from __future__ import annotations

import math
import re
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

#: A NUL, or any UTF-16 surrogate: in a Python ``str`` a surrogate is always a lone one (a valid
#: pair decodes to the one code point it stands for).
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable_reason(text: str) -> str | None:
    """Why ``text`` cannot be stored (None when it can)."""
    match = UNSTORABLE.search(text)
    if match is None:
        return None
    if match.group() == "\x00":
        return "contains a NUL character (\\u0000)"
    return f"contains a lone surrogate (\\u{ord(match.group()):04x}), which is not valid Unicode"


def non_finite_reason(number: float) -> str | None:
    """Why the float ``number`` cannot be stored as JSON (None when it can)."""
    if math.isfinite(number):
        return None
    shown = "NaN" if math.isnan(number) else ("Infinity" if number > 0 else "-Infinity")
    return (
        f"is {shown}: non-finite numbers (NaN, Infinity, -Infinity, or one too large for a "
        "float, such as 1e999) are not JSON"
    )


def find_unstorable(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first string in a parsed JSON ``value`` (object keys included), or number, that cannot
    be stored: ``(field path, reason)``, the path written as the decide API names fields
    (``edits.s1.day``, ``answers[0].text``); a bad key is reported at the object holding it. None
    when all is well. Iterative, so a deeply nested body cannot exhaust the stack."""
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            reason = unstorable_reason(item)
            if reason is not None:
                return where, reason
        elif isinstance(item, float):
            reason = non_finite_reason(item)
            if reason is not None:
                return where, reason
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                reason = unstorable_reason(str(key))
                if reason is not None:
                    return where, f"has a key that {reason}"
                children.append((f"{where}.{key}" if where else str(key), child))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(f"{where}[{i}]", child) for i, child in enumerate(item)]))
    return None


def validate_storable(value: Any) -> None:
    """A form field validator: refuse a value (a string, or parsed JSON) holding a NUL character,
    a lone surrogate or a non-finite number, with a message that says which and where."""
    found = find_unstorable(value)
    if found is None:
        return
    where, reason = found
    if where:
        raise ValidationError(
            _("`%(where)s` %(reason)s: it cannot be stored. Remove it."),
            code="unstorable",
            params={"where": where, "reason": reason},
        )
    raise ValidationError(
        _("This value %(reason)s: it cannot be stored. Remove it."),
        code="unstorable",
        params={"reason": reason},
    )
