"""Reading the project's Markdown for the docs tests: fenced code blocks with their markers,
sections under a heading, and table rows."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
#: docs/benchmarks.md is written by bench/run_all.py (its blocks are measured output); the
#: others are written by hand and are what a reader copies from.
DOCS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "benchmarks.md"),
]

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_MARKER = re.compile(r"<!--\s*(fragment|run)\b:?\s*(.*?)\s*-->")
_INLINE_FRAGMENT = re.compile(r"^\s*(#|//)\s*fragment\b")


@dataclass(frozen=True)
class Block:
    """One fenced code block. ``marker`` is ``"fragment"`` or ``"run"`` (with ``name``: which
    docs test runs it), or ``""`` when the block is not marked."""

    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: str
    name: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of ``path``. A block is marked by an HTML comment on the line
    before its fence (``<!-- fragment: why -->`` or ``<!-- run: name -->``), or, for a
    fragment, by a first line ``# fragment: ...`` (``// fragment`` in JSON-like code)."""
    lines = path.read_text().splitlines()
    found = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence = opening.group(2)
        start = index
        index += 1
        body = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index])
            index += 1
        index += 1  # the closing fence
        previous = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
        marker, name = "", ""
        if (comment := _MARKER.search(previous)) is not None:
            marker, name = comment.group(1), comment.group(2)
        elif body and _INLINE_FRAGMENT.match(body[0]):
            marker = "fragment"
        found.append(
            Block(
                path=path,
                line=start + 1,
                lang=opening.group(3),
                code="\n".join(body) + "\n",
                marker=marker,
                name=name if marker == "run" else "",
            )
        )
    return found


def all_blocks() -> list[Block]:
    return [block for path in DOCS for block in blocks(path)]


def section(path: Path, heading: str) -> str:
    """The text under the heading whose title is ``heading``, up to the next heading of the same
    or a higher level (fenced blocks are not mistaken for headings)."""
    lines = path.read_text().splitlines()
    in_fence = False
    start = level = None
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not line.startswith("#"):
            continue
        hashes, _, title = line.partition(" ")
        if start is None:
            if title.strip() == heading:
                start, level = index + 1, len(hashes)
        elif len(hashes) <= (level or 0):
            return "\n".join(lines[start:index])
    if start is None:
        raise AssertionError(f"{path.relative_to(ROOT)} has no heading {heading!r}")
    return "\n".join(lines[start:])


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the Markdown tables in ``text``, as cells (header and rule left out)."""
    rows = []
    header_next = True
    for line in text.splitlines():
        if not line.startswith("|"):
            header_next = True
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if header_next:  # the header row
            header_next = False
            continue
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        rows.append(cells)
    return rows


def code_names(cell: str) -> list[str]:
    """The ``backticked`` names of a table cell, leaving out what is said in parentheses."""
    previous = None
    while previous != cell:  # innermost parentheses first
        previous, cell = cell, re.sub(r"\([^()]*\)", "", cell)
    return re.findall(r"`([^`]+)`", cell)
