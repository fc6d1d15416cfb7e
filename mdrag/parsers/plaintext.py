"""Plain-text parser: one section whose blocks are the file's paragraphs (runs of lines between blank lines).

Each paragraph keeps its lines as written (trailing spaces dropped) and its
line span. Plain text has no headings; the document's title is its first line
where that line looks like one (a paragraph of its own, or underlined with
``=`` or ``-``; short; not ending like a sentence), else the file's name
without its extension.
"""

from __future__ import annotations

import re
from pathlib import Path

from mdrag.parsers.text import decode_text
from mdrag.types import Block, Document, Section

__all__ = ["parse"]

_TITLE_MAX_CHARS = 80  # a longer first line is prose, not a title
_UNDERLINE = re.compile(r"^\s*(=+|-+)\s*$")


def parse(data: bytes, path: str) -> Document:
    """Parse a text file's bytes; :func:`~mdrag.parsers.text.decode_text` reads the encoding."""
    text, encoding = decode_text(data)
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    blocks = list(_paragraphs(lines))
    sections = [Section(heading_path=[], level=0, blocks=blocks)] if blocks else []
    title = _title(blocks) or Path(path).stem or None
    return Document(path=path, sections=sections, title=title, encoding=encoding)


def _paragraphs(lines: list[str]) -> list[Block]:
    """The runs of lines that are not blank (whitespace only counts as blank), each a Block with its span."""
    blocks: list[Block] = []
    start: int | None = None  # 0-based first line of the paragraph being read
    for i, line in enumerate([*lines, ""]):
        if line.strip():
            start = i if start is None else start
        elif start is not None:
            blocks.append(Block("\n".join(lines[start:i]), line_start=start + 1, line_end=i))
            start = None
    return blocks


def _title(blocks: list[Block]) -> str | None:
    """The first line when it looks like a title, else None."""
    if not blocks:
        return None
    first = blocks[0].text.split("\n")
    underlined = len(first) == 2 and _UNDERLINE.match(first[1]) is not None
    if len(first) != 1 and not underlined:
        return None
    title = " ".join(first[0].split())
    if len(title) > _TITLE_MAX_CHARS or not any(c.isalpha() for c in title) or title[-1] in ".,;:!?":
        return None
    return title
