"""DOCX parser (python-docx): heading paragraphs start sections, tables become table blocks.

The body is read in document order, paragraphs and tables interleaved,
including those wrapped in content controls (``w:sdt``). Headers, footers,
footnotes, comments and text boxes are not read. A document with no text
gives a Document with no sections and a warning, not an error.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from typing import Any

import docx
from docx.document import Document as DocxDocument
from docx.oxml.ns import qn
from docx.table import Table
from docx.text.paragraph import Paragraph

from mdrag.errors import ParseError
from mdrag.types import Block, Document, Section

__all__ = ["parse"]

logger = logging.getLogger(__name__)

_HEADING = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)
_CORE_FIELDS = ("title", "author", "subject", "keywords")


def _iter_body(doc: DocxDocument) -> Iterator[Paragraph | Table]:
    """Body paragraphs and tables in order, descending into content controls."""

    def walk(parent: Any) -> Iterator[Paragraph | Table]:
        for child in parent.iterchildren():
            if child.tag == qn("w:p"):
                yield Paragraph(child, doc)
            elif child.tag == qn("w:tbl"):
                yield Table(child, doc)
            elif child.tag == qn("w:sdt"):
                content = child.find(qn("w:sdtContent"))
                if content is not None:
                    yield from walk(content)
            elif child.tag == qn("w:customXml"):
                yield from walk(child)

    yield from walk(doc.element.body)


def _heading_level(paragraph: Paragraph) -> int | None:
    """1-6 for "Title" and "Heading N" styles (or a style with an outline level), else None."""
    style = paragraph.style
    if style is None:
        return None
    name = (style.name or "").strip()
    if name.lower() == "title":
        return 1
    match = _HEADING.match(name)
    if match:
        level = int(match.group(1))
    else:  # localized style names ("Überschrift 1") still carry an outline level
        values = style.element.xpath("./w:pPr/w:outlineLvl/@w:val")
        if not values or not str(values[0]).isdigit() or int(values[0]) > 8:
            return None
        level = int(values[0]) + 1
    return min(max(level, 1), 6)


def _is_list_item(paragraph: Paragraph) -> bool:
    ppr = paragraph._p.pPr
    if ppr is not None and ppr.numPr is not None:
        return True
    style = paragraph.style
    return style is not None and (style.name or "").lower().startswith("list")


def _table_text(table: Table) -> str:
    """One line per row, cells joined by " | "; merged cells appear once."""
    lines: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            if cell._tc is previous:  # a horizontally merged cell repeats
                continue
            previous = cell._tc
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)


def _core_properties(doc: DocxDocument, warnings: list[str], path: str) -> dict[str, Any]:
    try:
        props = doc.core_properties
        values = {name: getattr(props, name) for name in _CORE_FIELDS}
    except Exception as exc:
        warnings.append(f"{path}: unreadable document properties: {exc}")
        return {}
    return {k: " ".join(v.split()) for k, v in values.items() if isinstance(v, str) and v.strip()}


def parse(data: bytes, path: str) -> Document:
    """Parse a .docx file's bytes."""
    try:
        doc = docx.Document(io.BytesIO(data))
    except Exception as exc:  # PackageNotFoundError (not a zip), KeyError, ValueError, lxml errors
        raise ParseError(f"not a readable DOCX file: {type(exc).__name__}: {exc}") from exc

    warnings: list[str] = []
    metadata = _core_properties(doc, warnings, path)
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []  # (level, title) of the open headings
    current = Section(heading_path=[], level=0)
    style_title: str | None = None
    first_heading: str | None = None
    list_lines: list[str] = []  # consecutive list items, kept together in one block

    def flush_list() -> None:
        if list_lines:
            current.blocks.append(Block("\n".join(list_lines)))
            list_lines.clear()

    for item in _iter_body(doc):
        if isinstance(item, Table):
            flush_list()
            try:
                text = _table_text(item)
            except Exception as exc:
                warnings.append(f"{path}: table skipped: {type(exc).__name__}: {exc}")
                continue
            if text:
                current.blocks.append(Block(text, kind="table"))
            continue
        text = item.text.strip()
        if not text:
            continue
        level = _heading_level(item)
        if level is None:
            if _is_list_item(item):
                list_lines.append("- " + text)
            else:
                flush_list()
                current.blocks.append(Block(text))
            continue
        flush_list()
        title = " ".join(text.split())
        if item.style is not None and (item.style.name or "").lower() == "title":
            style_title = style_title or title
        first_heading = first_heading or title
        if current.blocks:
            sections.append(current)
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        current = Section(heading_path=[t for _, t in stack], level=level)
    flush_list()
    if current.blocks:
        sections.append(current)
    if not sections:
        warnings.append(f"{path}: the document has no text")
    doc_title: str | None = metadata.get("title") or style_title or first_heading
    return Document(path=path, sections=sections, metadata=metadata, title=doc_title, warnings=warnings)
