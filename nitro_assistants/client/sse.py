"""A server-sent events parser that takes the stream in chunks split anywhere."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServerSentEvent:
    """One event: its name (``message`` when the stream gave none), its data and its id.

    ``data`` is the parsed JSON when the data is JSON, otherwise the text as sent.
    """

    event: str
    data: Any
    id: str | None = None
    raw: str = ""


def parse_sse(chunks: Iterable[bytes | str]) -> Iterator[ServerSentEvent]:
    """Yield the events of an ``text/event-stream`` body given in arbitrary chunks.

    Follows the HTML living standard's parsing rules: lines end in CRLF, LF or CR (also split
    across chunks); ``:`` lines are comments; ``data`` lines are joined with newlines; an event is
    dispatched at a blank line; a field without a colon has an empty value; one leading space is
    stripped from a value. Bytes are decoded as UTF-8 incrementally, so a character split across
    chunks survives.
    """
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buffer = ""  # the start of a line whose end has not come yet (never holds a CR or LF)
    event: str = ""
    last_id: str | None = None
    data_lines: list[str] = []
    pending_cr = False  # the text so far ended in CR: a LF starting the next is part of it

    def dispatch() -> ServerSentEvent | None:
        nonlocal event, data_lines
        if not data_lines:
            event = ""
            return None
        text = "\n".join(data_lines)
        try:
            parsed: Any = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than Python recurses
            parsed = text
        out = ServerSentEvent(event=event or "message", data=parsed, id=last_id, raw=text)
        event, data_lines = "", []
        return out

    def lines_of(text: str) -> list[str]:
        """The lines ``text`` ends (after what came before it); keeps the unended rest."""
        nonlocal buffer, pending_cr
        if not text:  # an empty chunk (or a partial character) must not forget a trailing CR
            return []
        if pending_cr and text[0] == "\n":
            text = text[1:]
        pending_cr = False
        if "\n" not in text and "\r" not in text:  # no line ends here: one long line grows
            buffer += text
            return []
        text = buffer + text
        if "\r" in text:
            pending_cr = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        buffer = lines.pop()
        return lines

    def handle(lines: list[str]) -> Iterator[ServerSentEvent]:
        nonlocal event, last_id
        for line in lines:
            if not line:
                if (sse := dispatch()) is not None:
                    yield sse
                continue
            if line[0] == ":":
                continue
            field, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if field == "data":
                data_lines.append(value)
            elif field == "event":
                event = value
            elif field == "id" and "\0" not in value:
                last_id = value

    for chunk in chunks:
        text = decoder.decode(chunk) if isinstance(chunk, bytes) else chunk
        if lines := lines_of(text):
            yield from handle(lines)
    # Flush a last line that had no line ending, then an event that had no blank line after it:
    # a stream cut short still hands over what it carried.
    yield from handle(lines_of(decoder.decode(b"", final=True) + "\n"))
    if (sse := dispatch()) is not None:
        yield sse
