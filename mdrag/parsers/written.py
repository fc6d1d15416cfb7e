"""A parsed document written out as text, for a format whose parser gives no source lines (HTML, DOCX).

Such a file's lines say nothing to a reader (an HTML page's markup), so `mdrag get` and the page's
viewer show the text mdrag reads from it instead: headings written as Markdown headings (each once,
where its heading path first appears), a section's blocks one blank line apart, a blank line between
sections and, in a PDF, each page's start marked ``[page N]``. :func:`write_out` writes it;
:func:`number_blocks` gives every block of such a document the lines it holds in that text, so that
its chunks carry lines (``line_start``/``line_end``) that `get` and the viewer mark, as a Markdown
file's chunks carry the file's own.

Both are worked out from the parsed document alone: parsing the same file again gives the same text
and the same lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mdrag.types import Document

__all__ = ["Written", "number_blocks", "write_out"]


@dataclass
class Written:
    """A document written out: its lines, where its sections and headings are, and where each block is."""

    lines: list[str] = field(default_factory=list)  # the text, line by line
    spans: list[tuple[list[str], int, int, int | None]] = field(default_factory=list)  # each section's
    # heading path, first and last line (1-based), page
    headings: dict[tuple[str, ...], int] = field(default_factory=dict)  # heading path -> line of its heading
    blocks: list[tuple[int, int]] = field(default_factory=list)  # each block's first and last line, in order


def write_out(doc: Document) -> Written:
    """``doc`` written out as text (see the module docstring), with each section's and block's lines."""
    out = Written()
    lines = out.lines
    before: list[str] = []
    page: int | None = None
    for s in doc.sections:
        if s.page is not None and s.page != page:
            page = s.page
            lines += [""] if lines else []
            first = len(lines) + 1  # the first section on a page starts at its marker
            lines += [f"[page {page}]", ""]
        else:
            first = len(lines) + 1
        same = next((i for i, (a, b) in enumerate(zip(before, s.heading_path, strict=False)) if a != b), None)
        common = min(len(before), len(s.heading_path)) if same is None else same
        for depth in range(common, len(s.heading_path)):
            out.headings.setdefault(tuple(s.heading_path[: depth + 1]), len(lines) + 1)
            lines += ["#" * min(depth + 1, 6) + " " + s.heading_path[depth], ""]
        line = len(lines) + 1
        for block in s.blocks:  # the section's text is its blocks joined by blank lines
            last = line + block.text.count("\n")
            out.blocks.append((line, last))
            line = last + 2
        lines += s.text.split("\n")
        out.spans.append((s.heading_path, first, len(lines), page))
        lines.append("")
        before = s.heading_path
    while lines and not lines[-1].strip():
        lines.pop()
    return out


def number_blocks(doc: Document) -> None:
    """Give each block of ``doc`` its lines in the document written out, and mark the document so
    (``text_lines``): where its parser gave no block a source line and no section a page (HTML, DOCX)."""
    blocks = [b for s in doc.sections for b in s.blocks]
    if doc.text_lines or not blocks or any(b.line_start is not None for b in blocks):
        return
    if any(s.page is not None for s in doc.sections):
        return  # a PDF's pages say where its text is
    for block, (first, last) in zip(blocks, write_out(doc).blocks):
        block.line_start, block.line_end = first, last
    doc.text_lines = True
