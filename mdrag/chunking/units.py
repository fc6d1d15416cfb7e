"""A section's blocks as units (paragraphs, whole code blocks and tables), joined in one text.

A table's unit knows its header: its first row, and in Markdown the delimiter row under it, both
written short (``| --- | --- |``: a padded one of 350 dashes alone was more than the model's window).
Where a chunk starts among a table's rows, the header is written before them
(:meth:`SectionText.piece`), and no chunk is cut inside or just after it
(:meth:`SectionText.header_keeps`): a table's rows travel with their header.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mdrag.types import Block

__all__ = ["SectionText", "Unit", "block_units", "compact_table"]


@dataclass
class Unit:
    """A paragraph, a code block or a table: what a chunk holds whole, or cuts when it must."""

    text: str
    atomic: bool  # code block, table, or paragraphs around a fence: not cut if it fits, not used as overlap
    line_start: int | None  # the file line of the text's first line
    table: bool = False  # a table may be cut between rows to take in a remainder
    header: int = 0  # a table's: the length of its header (first row, and a Markdown delimiter row) in ``text``


_NEWLINE = re.compile("\n")
_SPACES = re.compile(r"[ \t]{2,}")
_DASHES = re.compile(r"-{4,}")
# A Markdown table's delimiter row: "| --- | :-: |", "---|---".
_DELIMITER = re.compile(r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
# A fence line inside a list item or a quote ("  ```yaml", "> ~~~"): its blank lines do not end a paragraph.
_FENCE = re.compile(r"^[ \t]*(?:(?:[-*+]|\d+[.)])[ \t]+|>[ \t]?)*(`{3,}|~{3,})")


def _fence_after(para: str, fence: str | None) -> str | None:
    """The fence still open after ``para`` (its marker, e.g. "```"), given the one open before it."""
    for line in para.split("\n"):
        m = _FENCE.match(line)
        if not m:
            continue
        mark = m.group(1)
        if fence is None:
            fence = mark
        elif mark[0] == fence[0] and len(mark) >= len(fence) and not line[m.end() :].strip():
            fence = None
    return fence


def compact_table(text: str) -> tuple[str, int]:
    """A table's rows with its Markdown header written short (runs of spaces, and of a delimiter row's
    dashes, shortened: it is repeated), and the length of its header in that text (0 for a table of one
    row, or a header alone: nothing to repeat).

    The other rows are left as written (their padding costs the model no word pieces), and lines stay
    lines: a row's file line is still found by counting them.
    """
    rows = [row.rstrip() for row in text.split("\n")]
    rows = [_DASHES.sub("---", _SPACES.sub(" ", row)) if _DELIMITER.match(row) else row for row in rows]
    head = 2 if len(rows) > 1 and _DELIMITER.match(rows[1]) and not _DELIMITER.match(rows[0]) else 1
    if head == 2:
        rows[0] = _SPACES.sub(" ", rows[0])
    header = len("\n".join(rows[:head])) if len(rows) > head else 0
    return "\n".join(rows), header


def block_units(blocks: Sequence[Block]) -> list[Unit]:
    """Paragraphs of text blocks, and whole code blocks and tables.

    The paragraphs of a text block that hold a fence (in a list item, say) stay
    together as one atomic unit: a fence is not cut at its blank lines.
    """
    out: list[Unit] = []
    for b in blocks:
        if b.kind == "table":
            text, header = compact_table(b.text)
            out.append(Unit(text, True, b.line_start, True, header))
            continue
        if b.kind != "text":
            out.append(Unit(b.text, True, b.line_start))
            continue
        line = b.line_start
        group: list[str] = []
        fence: str | None = None
        has_fence = False
        for para in b.text.split("\n\n"):
            group.append(para)
            after = _fence_after(para, fence)
            has_fence = has_fence or after is not None or fence is not None
            fence = after
            if fence is not None:
                continue
            text = "\n\n".join(group)
            if text.strip():
                lead = len(text) - len(text.lstrip("\n"))
                start = line + text[:lead].count("\n") if line is not None else None
                out.append(Unit(text.strip("\n"), has_fence, start))
            if line is not None:
                line += text.count("\n") + 2
            group, has_fence = [], False
        if group and "\n\n".join(group).strip():  # a fence left open runs to the end of the block
            text = "\n\n".join(group)
            lead = len(text) - len(text.lstrip("\n"))
            out.append(Unit(text.strip("\n"), True, line + lead if line is not None else None))
    return out


class SectionText:
    """A section's units joined by blank lines: every piece of the section is a slice of ``text``.

    Where a character lies (its unit, its line) is found by bisection over
    offsets computed once, so that asking for every chunk of a large section
    costs no more than reading it once.
    """

    def __init__(self, units: list[Unit]) -> None:
        self.text = "\n\n".join(u.text for u in units)  # what the pieces are sliced from
        self.spans: list[tuple[int, int]] = []  # where each unit lies in ``text``
        pos = 0
        for u in units:
            self.spans.append((pos, pos + len(u.text)))
            pos += len(u.text) + 2
        self.units = units
        self._starts = [a for a, _ in self.spans]  # each unit's start, for bisection
        self._newlines: list[int] | None = None  # offsets of every "\n" in ``text``, found at the first line()

    def line(self, pos: int) -> int | None:
        """The file line of the character at ``pos`` (which is not in a gap between units)."""
        k = max(bisect.bisect_right(self._starts, pos) - 1, 0)
        first = self.units[k].line_start
        if first is None:
            return None
        if self._newlines is None:
            self._newlines = [m.start() for m in _NEWLINE.finditer(self.text)]
        nl = self._newlines
        return first + bisect.bisect_left(nl, pos) - bisect.bisect_left(nl, self.spans[k][0])

    def atomic(self, lo: int, hi: int, tables: bool = True) -> list[tuple[int, int]]:
        """The spans of the atomic units inside ``lo..hi`` (tables too, or not)."""
        first = bisect.bisect_left(self._starts, lo)
        last = bisect.bisect_right(self._starts, hi)
        units = zip(self.spans[first:last], self.units[first:last])
        return [s for s, u in units if u.atomic and (tables or not u.table) and lo <= s[0] and s[1] <= hi]

    def _tables(self, lo: int, hi: int) -> list[tuple[int, int, Unit]]:
        """The tables with a header that ``lo..hi`` reaches into: start and end in ``text``, and the unit."""
        first = max(bisect.bisect_right(self._starts, lo) - 1, 0)
        last = bisect.bisect_left(self._starts, hi)
        units = zip(self.spans[first:last], self.units[first:last])
        return [(a, b, u) for (a, b), u in units if u.header and a < hi and lo < b]

    def prefix(self, pos: int) -> str:
        """What is written before a piece that starts at ``pos``: its table's header (and a line break) where
        ``pos`` is among a table's rows, else nothing."""
        return next((u.text[: u.header] + "\n" for a, b, u in self._tables(pos, pos + 1) if a + u.header < pos), "")

    def piece(self, lo: int, hi: int) -> str:
        """The text of the piece ``lo..hi``, as its chunk holds it: a slice, after the header of the table it
        starts in."""
        return self.prefix(lo) + self.text[lo:hi]

    def headers(self, lo: int, hi: int) -> list[str]:
        """The headers a piece of ``lo..hi`` may be given: those of the tables whose rows it reaches."""
        return [u.text[: u.header] for a, b, u in self._tables(lo, hi) if a + u.header + 1 < hi]

    def header_keeps(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Where no cut may fall (as ``keep`` spans of :func:`~mdrag.chunking.split.cut_spans`): inside each
        table header ``lo..hi`` reaches, or just after it, so that a header never ends a piece."""
        return [(a, a + u.header + 2) for a, b, u in self._tables(lo, hi)]
