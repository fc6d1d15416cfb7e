"""DOCX parser (python-docx): heading paragraphs start sections, tables become table blocks.

The body is read in document order, paragraphs and tables interleaved,
including those wrapped in content controls (``w:sdt``); the text of a text
box follows the paragraph it is anchored in. Footnotes and endnotes are
marked in the text where they are referenced ("[1]" for footnotes, "[i]"
for endnotes, Word's default numbering) and read in sections of their own at
the end, "Footnotes" and "Endnotes", each note a block that starts with its
mark. Then come "Comments" (each one "author: text") and "Headers and
footers" (each distinct header or footer once). Strict Office Open XML files
(ISO/IEC 29500 Strict, namespaces under purl.oclc.org) are read by mapping
their namespaces to the usual ones. A document with no text gives a Document
with no sections and a warning, not an error.
"""

from __future__ import annotations

import io
import logging
import re
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import docx
from docx.document import Document as DocxDocument
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.oxml import parse_xml
from docx.oxml.ns import qn
from docx.table import Table
from docx.text.paragraph import Paragraph

from mdrag.errors import ParseError
from mdrag.parsers.sections import SectionBuilder
from mdrag.types import Block, Document

__all__ = ["parse"]

logger = logging.getLogger(__name__)

_HEADING = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)
_CORE_FIELDS = ("title", "author", "subject", "keywords")
# Strict OOXML names "http://purl.oclc.org/ooxml/wordprocessingml/main" what the usual
# (transitional) files name "http://schemas.openxmlformats.org/wordprocessingml/2006/main".
_STRICT = re.compile(rb"http://purl\.oclc\.org/ooxml/(\w+)/(\w+)")
_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_NOT_NOTES = {"separator", "continuationSeparator", "continuationNotice"}  # w:type of the note-like lines
_ROMAN = tuple(zip("m cm d cd c xc l xl x ix v iv i".split(), (1000, 900, 500, 400, 100, 90, 50, 40, 10, 9, 5, 4, 1)))


def _roman(n: int) -> str:
    out = ""
    for letters, value in _ROMAN:
        count, n = divmod(n, value)
        out += letters * count
    return out


class _Notes:
    """Footnote or endnote marks, numbered in the order the body first refers to them."""

    def __init__(self, style: Callable[[int], str]) -> None:
        self.numbers: dict[str, int] = {}
        self.style = style

    def mark(self, note_id: str) -> str:
        number = self.numbers.setdefault(note_id, len(self.numbers) + 1)
        return f"[{self.style(number)}]"


class _Reader:
    """Text of paragraphs, tables and text boxes, with note marks, from any part of the package."""

    def __init__(self, doc: DocxDocument) -> None:
        self.doc = doc
        self.footnotes = _Notes(str)
        self.endnotes = _Notes(_roman)

    def walk(self, parent: Any) -> Iterator[Paragraph | Table]:
        """Paragraphs and tables under ``parent`` in order, descending into content controls."""
        for child in parent.iterchildren():
            if child.tag == qn("w:p"):
                yield Paragraph(child, self.doc)
            elif child.tag == qn("w:tbl"):
                yield Table(child, self.doc)
            elif child.tag == qn("w:sdt"):
                content = child.find(qn("w:sdtContent"))
                if content is not None:
                    yield from self.walk(content)
            elif child.tag == qn("w:customXml"):
                yield from self.walk(child)

    def paragraph_text(self, paragraph: Paragraph) -> str:
        """The paragraph's text with note marks; "" when it has only marks (or nothing)."""
        parts: list[str] = []
        plain = False
        for run in paragraph._p.xpath("w:r | w:hyperlink/w:r"):
            text = run.text
            plain = plain or bool(text.strip())
            parts.append(text)
            for ref in run.iterchildren(qn("w:footnoteReference"), qn("w:endnoteReference")):
                notes = self.footnotes if ref.tag == qn("w:footnoteReference") else self.endnotes
                parts.append(notes.mark(ref.get(qn("w:id"), "")))
        return "".join(parts).strip() if plain else ""

    def text_boxes(self, paragraph: Paragraph) -> list[str]:
        """The paragraphs of the text boxes anchored in ``paragraph`` (once each: not the
        fallback copy that Word writes for older readers, not a box inside a box twice)."""
        out: list[str] = []
        for box in paragraph._p.iter(qn("w:txbxContent")):
            ancestor = box.getparent()
            while ancestor is not None and ancestor is not paragraph._p:
                if ancestor.tag in (_FALLBACK, qn("w:txbxContent")):
                    break
                ancestor = ancestor.getparent()
            else:
                out.extend(self.lines(box))
        return out

    def lines(self, parent: Any) -> list[str]:
        """Every paragraph's text and every table's rows under ``parent``, with their text boxes."""
        out: list[str] = []
        for item in self.walk(parent):
            if isinstance(item, Table):
                text = _table_text(item)
                if text:
                    out.append(text)
                continue
            text = self.paragraph_text(item)
            if text:
                out.append(text)
            out.extend(self.text_boxes(item))
        return out


def _part_xml(doc: DocxDocument, reltype: str) -> Any | None:
    """The root element of the document part's related part of ``reltype``, if there is one."""
    for rel in doc.part.rels.values():
        if rel.reltype == reltype and not rel.is_external:
            return parse_xml(rel.target_part.blob)
    return None


def _note_blocks(doc: DocxDocument, reader: _Reader, reltype: str, kind: str, notes: _Notes) -> list[Block]:
    """One block per note, "[mark] text", in mark order (notes the body never refers to last)."""
    root = _part_xml(doc, reltype)
    if root is None:
        return []
    texts: dict[str, str] = {}
    for note in root.iterchildren(qn(f"w:{kind}")):
        if note.get(qn("w:type")) not in _NOT_NOTES:
            text = "\n".join(reader.lines(note))
            if text:
                texts[note.get(qn("w:id"), "")] = text
    for note_id in texts:
        notes.mark(note_id)  # numbers the notes that no reference numbered
    return [Block(f"{notes.mark(i)} {texts[i]}") for i in sorted(texts, key=lambda i: notes.numbers[i])]


def _comment_blocks(doc: DocxDocument, reader: _Reader) -> list[Block]:
    root = _part_xml(doc, RT.COMMENTS)
    if root is None:
        return []
    blocks: list[Block] = []
    for comment in root.iterchildren(qn("w:comment")):
        text = "\n".join(reader.lines(comment))
        author = " ".join((comment.get(qn("w:author")) or "").split())
        if text:
            blocks.append(Block(f"{author}: {text}" if author else text))
    return blocks


def _header_footer_blocks(doc: DocxDocument, reader: _Reader) -> list[Block]:
    """Each distinct header and footer text once, in the order the sections name them."""
    refs = doc.element.body.xpath("./w:sectPr/w:headerReference | ./w:p/w:pPr/w:sectPr/w:headerReference")
    refs += doc.element.body.xpath("./w:sectPr/w:footerReference | ./w:p/w:pPr/w:sectPr/w:footerReference")
    seen: set[str] = set()
    blocks: list[Block] = []
    for ref in refs:
        rid = ref.get(qn("r:id"))
        if rid is None or rid not in doc.part.rels or doc.part.rels[rid].is_external:
            continue
        text = "\n".join(reader.lines(parse_xml(doc.part.rels[rid].target_part.blob)))
        if text and text not in seen:
            seen.add(text)
            blocks.append(Block(text))
    return blocks


def _strict_to_transitional(data: bytes) -> bytes | None:
    """The package with Strict OOXML namespaces mapped to the usual ones, or None if it is not Strict."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            if not _STRICT.search(package.read("_rels/.rels")):
                return None
            out = io.BytesIO()
            with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as converted:
                for info in package.infolist():
                    content = package.read(info)
                    if info.filename.endswith((".xml", ".rels")):
                        content = _STRICT.sub(rb"http://schemas.openxmlformats.org/\1/2006/\2", content)
                    converted.writestr(info, content)
    except (zipfile.BadZipFile, KeyError, OSError):
        return None  # not a package with relationships: python-docx says what is wrong
    return out.getvalue()


def _open(data: bytes) -> DocxDocument:
    strict = _strict_to_transitional(data)
    try:
        return docx.Document(io.BytesIO(strict or data))
    except zipfile.BadZipFile as exc:
        raise ParseError(
            f"not a readable DOCX file: not a ZIP package ({exc}); save it as a Word .docx document"
        ) from exc
    except Exception as exc:  # KeyError, ValueError (another Office format), lxml errors
        if strict is not None:
            raise ParseError(
                f"Strict Office Open XML that could not be read ({type(exc).__name__}: {exc}); "
                "save it as a regular .docx (Word Document)"
            ) from exc
        if isinstance(exc, KeyError) and "officeDocument" in str(exc):
            raise ParseError(
                "not a readable DOCX file: the package has no main document part; "
                "save it again as a Word .docx document"
            ) from exc
        raise ParseError(f"not a readable DOCX file: {type(exc).__name__}: {exc}") from exc


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
    doc = _open(data)
    reader = _Reader(doc)
    warnings: list[str] = []
    metadata = _core_properties(doc, warnings, path)
    builder = SectionBuilder()
    style_title: str | None = None
    first_heading: str | None = None
    list_lines: list[str] = []  # consecutive list items, kept together in one block

    def flush_list() -> None:
        if list_lines:
            builder.add(Block("\n".join(list_lines)))
            list_lines.clear()

    for item in reader.walk(doc.element.body):
        if isinstance(item, Table):
            flush_list()
            try:
                text = _table_text(item)
            except Exception as exc:
                warnings.append(f"{path}: table skipped: {type(exc).__name__}: {exc}")
                continue
            if text:
                builder.add(Block(text, kind="table"))
            continue
        text = reader.paragraph_text(item)
        boxes = reader.text_boxes(item)
        level = _heading_level(item) if text else None
        if level is None:
            if text and _is_list_item(item):
                list_lines.append("- " + text)
            elif text:
                flush_list()
                builder.add(Block(text))
            if boxes:
                flush_list()
                for box in boxes:
                    builder.add(Block(box))
            continue
        flush_list()
        title = " ".join(text.split())
        if item.style is not None and (item.style.name or "").lower() == "title":
            style_title = style_title or title
        first_heading = first_heading or title
        builder.heading(level, title)
        for box in boxes:
            builder.add(Block(box))
    flush_list()
    extra: list[tuple[str, Callable[[], list[Block]]]] = [
        ("Footnotes", lambda: _note_blocks(doc, reader, RT.FOOTNOTES, "footnote", reader.footnotes)),
        ("Endnotes", lambda: _note_blocks(doc, reader, RT.ENDNOTES, "endnote", reader.endnotes)),
        ("Comments", lambda: _comment_blocks(doc, reader)),
        ("Headers and footers", lambda: _header_footer_blocks(doc, reader)),
    ]
    for heading, read in extra:
        try:
            blocks = read()
        except Exception as exc:  # a damaged part: the body is still read
            logger.debug("%s: %s not read", path, heading.lower(), exc_info=True)
            warnings.append(f"{path}: {heading.lower()} skipped: {type(exc).__name__}: {exc}")
            continue
        builder.heading(1, heading)  # a section of its own, dropped when it has no blocks
        for block in blocks:
            builder.add(block)
    sections = builder.finish()
    if not sections:
        warnings.append(f"{path}: the document has no text")
    doc_title: str | None = metadata.get("title") or style_title or first_heading
    return Document(path=path, sections=sections, metadata=metadata, title=doc_title, warnings=warnings)
