"""The heading tree every parser builds: headings and blocks in reading order -> sections."""

from __future__ import annotations

from mdrag.types import Block, Section

__all__ = ["Heading", "SectionBuilder"]

#: (level 1-6, title) of one open heading.
Heading = tuple[int, str]


class SectionBuilder:
    """Collects :class:`~mdrag.types.Section` objects from a document read in order.

    Blocks go to the section being filled: the one before any heading (level
    0), then the one under the last heading. A heading closes the headings of
    its level and deeper; its section's ``heading_path`` is the titles of the
    headings still open, then its own. A title that is empty still closes
    deeper headings but is left out of heading paths. Sections without blocks
    are dropped.

    >>> b = SectionBuilder()
    >>> b.heading(1, "Guide"); b.heading(2, "Install"); b.add(Block("pip install mdrag-docs"))
    >>> [s.heading_path for s in b.finish()]
    [['Guide', 'Install']]
    """

    def __init__(self) -> None:
        self.sections: list[Section] = []  # the sections closed so far, each with blocks
        self.current = Section(heading_path=[], level=0)
        self.first_h1: str | None = None  # the first level-1 title that is not empty: a fallback document title
        self._stack: list[Heading] = []  # the open headings, outermost first

    @property
    def open_headings(self) -> tuple[Heading, ...]:
        """The open headings, outermost first."""
        return tuple(self._stack)

    def add(self, block: Block) -> None:
        """Append ``block`` to the section being filled."""
        self.current.blocks.append(block)

    def heading(self, level: int, title: str, line: int | None = None) -> None:
        """Start the section of a heading of ``level`` (1-6) titled ``title``, found on source ``line``."""
        if level == 1 and title and self.first_h1 is None:
            self.first_h1 = title
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, title))
        self._start(level, line)

    def restore(self, headings: tuple[Heading, ...]) -> None:
        """Close every heading opened since the open headings were ``headings``; what follows goes under them.

        Where the headings closed held no text (an aside's "Share this story"),
        what follows continues the section they interrupted instead of
        starting another: a photo credit before a share bar is not a section
        of its own.
        """
        self._stack = list(headings)
        self._start(headings[-1][0] if headings else 0)
        last = self.sections[-1] if self.sections else None
        if last is not None and (last.heading_path, last.level) == (self.current.heading_path, self.current.level):
            self.current = self.sections.pop()

    def finish(self) -> list[Section]:
        """The sections with blocks, in reading order."""
        self._close()
        return self.sections

    def _start(self, level: int, line: int | None = None) -> None:
        self._close()
        self.current = Section(heading_path=[t for _, t in self._stack if t], level=level, heading_line=line)

    def _close(self) -> None:
        if self.current.blocks:
            self.sections.append(self.current)
