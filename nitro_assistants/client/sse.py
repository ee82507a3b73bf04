"""A server-sent events parser that takes the stream in chunks split anywhere."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

_LINE_END = re.compile(r"[\r\n]")


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
    buffer = ""
    event: str = ""
    last_id: str | None = None
    data_lines: list[str] = []
    pending_cr = False

    def lines_of(text: str) -> Iterator[str]:
        nonlocal buffer, pending_cr
        if not text:  # an empty chunk (or a partial character) must not forget a trailing CR
            return
        if pending_cr and text.startswith("\n"):
            text = text[1:]
        pending_cr = False
        buffer += text
        while True:
            found = _LINE_END.search(buffer)
            if found is None:
                return
            idx = found.start()
            line, sep = buffer[:idx], buffer[idx]
            if sep == "\r":
                if idx + 1 < len(buffer):
                    buffer = buffer[idx + 2 :] if buffer[idx + 1] == "\n" else buffer[idx + 1 :]
                else:
                    buffer = ""
                    pending_cr = True
            else:
                buffer = buffer[idx + 1 :]
            yield line

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

    def handle(line: str) -> ServerSentEvent | None:
        nonlocal event, last_id
        if line == "":
            return dispatch()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            data_lines.append(value)
        elif field == "id" and "\0" not in value:
            last_id = value
        return None

    for chunk in chunks:
        text = decoder.decode(chunk) if isinstance(chunk, bytes) else chunk
        for line in lines_of(text):
            if (sse := handle(line)) is not None:
                yield sse
    # Flush a last line that had no line ending, then an event that had no blank line after it:
    # a stream cut short still hands over what it carried.
    for line in lines_of(decoder.decode(b"", final=True) + "\n"):
        if (sse := handle(line)) is not None:
            yield sse
    if (sse := dispatch()) is not None:
        yield sse
