"""PDF parser (pypdf): every page that has text is a section, cut where an outline entry starts.

Without an outline (bookmarks), each page is one level-0 section with no
heading path. With one, a page's text goes under the outline entry in force
there: the nested entry titles are its heading path (level = depth). An entry
starts on its destination page, at the line that reads as its title (after a
section number, if any); when no line does, at the line as far down the page's
text as its destination's height is down the page. A section never spans two
pages, so every chunk keeps its page number; text before the first entry has
no heading path.

Running headers and footers are left out: a page's first (or last) line
that, numbers aside, is the first (or last) line of at least
:data:`_RUNNING_PAGES` pages ("18 1.6. WEGE UND KNOTEN", "Page 3 of 9"),
unless it is all the page holds. Kept, it began every page's chunk and, on a
page where a new section starts below it, was a chunk of its own.
"""

from __future__ import annotations

import io
import logging
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError

from mdrag.errors import ParseError
from mdrag.types import Block, Document, Section

__all__ = ["parse"]

logger = logging.getLogger(__name__)

# Document-information fields copied into Document.metadata when they are text.
_INFO_FIELDS = {"/Title": "title", "/Author": "author", "/Subject": "subject", "/Keywords": "keywords"}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_FILE_NAME = re.compile(r"\.(pdf|docx?|odt|rtf|txt|pptx?|xlsx?|tex)$", re.IGNORECASE)
_MAX_OUTLINE_DEPTH = 32  # deeper nesting (or a loop pypdf did not catch) is cut here
_MAX_OUTLINE_ENTRIES = 10_000
_TITLE_LINES = 3  # a heading may wrap over this many lines of page text
_NUMBER = re.compile(r"[\divxlcdm.]{0,15}")  # a section number before a title: "1.2.", "iv.", "" (compared casefolded)
_RUNNING_PAGES = 3  # a first or last line on this many pages, numbers aside, is a running header or footer
_DIGITS = re.compile(r"\d+")


_quiet_lock = threading.Lock()  # guards the two globals below
_quiet_depth = 0  # parses in progress (threads may overlap)
_quiet_saved_level = logging.NOTSET  # the "pypdf" logger's level before the first one


@contextmanager
def _quiet_pypdf() -> Iterator[None]:
    """Keep only errors from pypdf's logger while PDFs are parsed.

    pypdf logs a warning for every recoverable flaw (over a thousand for the
    shared test PDFs, mostly about fonts). The level is restored when the last
    overlapping parse ends.
    """
    global _quiet_depth, _quiet_saved_level
    pypdf_logger = logging.getLogger("pypdf")
    with _quiet_lock:
        if _quiet_depth == 0:
            _quiet_saved_level = pypdf_logger.level
            pypdf_logger.setLevel(logging.ERROR)
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                pypdf_logger.setLevel(_quiet_saved_level)


def _page_text(raw: str) -> str:
    """Extracted page text with trailing spaces per line and blank edge lines removed."""
    raw = raw.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.rstrip() for line in raw.split("\n")]
    return "\n".join(lines).strip("\n")


def _page_list(numbers: list[int]) -> str:
    """ "page 3", "pages 2, 5-7" for ascending page numbers."""
    spans: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], 0]:
        if n != prev + 1:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
            start = n
        prev = n
    return ("page " if len(numbers) == 1 else "pages ") + ", ".join(spans)


@dataclass
class _Entry:
    """An outline entry: its titles from the top level down, and where it points."""

    path: list[str]
    page: int  # 0-based page index
    top: float | None  # the destination's height on the page, when given


def _outline(reader: PdfReader, doc_warnings: list[str], path: str) -> list[_Entry]:
    """The outline entries that point at a page, in page order (top of the page first).

    Entries with an empty title are left out of heading paths; entries whose
    destination is missing or broken are skipped. An unreadable outline gives
    a warning and no entries: the pages are then sections without headings.
    """
    entries: list[_Entry] = []

    def walk(items: Sequence[Any], parents: list[str], depth: int) -> None:
        last: list[str] = parents  # the path of the entry a nested list belongs to
        for item in items:
            if len(entries) >= _MAX_OUTLINE_ENTRIES:
                return
            if isinstance(item, list):
                if depth < _MAX_OUTLINE_DEPTH:
                    walk(item, last, depth + 1)
                continue
            title = " ".join(_CONTROL.sub("", str(item.title or "")).split())
            last = [*parents, title] if title else parents
            try:
                page = reader.get_destination_page_number(item)
            except Exception:  # a destination pypdf cannot resolve
                logger.debug("%s: outline entry %r: no destination page", path, title, exc_info=True)
                continue
            if page is None or not title:
                continue
            top = item.get("/Top")
            entries.append(_Entry(last, page, float(top) if isinstance(top, int | float) else None))

    try:
        walk(reader.outline, [], 0)
    except Exception as exc:  # a damaged outline: the pages still read
        doc_warnings.append(f"{path}: unreadable outline (bookmarks), pages have no headings: {exc}")
        return []
    # Top of the page first: a larger /Top is higher up. Entries without one keep their outline order.
    entries.sort(key=lambda e: (e.page, -e.top if e.top is not None else float("-inf")))
    return entries


def _running_key(line: str) -> str:
    """A page's first or last line as it recurs from page to page: numbers, case and spacing aside."""
    return " ".join(_DIGITS.sub("#", unicodedata.normalize("NFKC", line)).casefold().split())


def _strip_running(texts: list[str | None]) -> list[str | None]:
    """Each page's text less its running header and footer (see the module docstring); None stays None."""
    pages = [text.split("\n") if text else [] for text in texts]
    firsts = Counter(_running_key(lines[0]) for lines in pages if len(lines) > 1)
    lasts = Counter(_running_key(lines[-1]) for lines in pages if len(lines) > 1)
    out: list[str | None] = []
    for text, lines in zip(texts, pages):
        if len(lines) > 1 and firsts[_running_key(lines[0])] >= _RUNNING_PAGES:
            lines = lines[1:]
        if len(lines) > 1 and lasts[_running_key(lines[-1])] >= _RUNNING_PAGES:
            lines = lines[:-1]
        out.append("\n".join(lines).strip("\n") if text else text)
    return out


def _key(text: str) -> str:
    """Text compared with outline titles: ligatures resolved, no case, no spaces."""
    return "".join(unicodedata.normalize("NFKC", text).casefold().split())


def _title_line(lines: list[str], start: int, title: str) -> int | None:
    """The first line from ``start`` that (alone or with the next lines) reads as ``title``,
    possibly after a section number ("1.2 Title" for the entry "Title")."""
    want = _key(title)
    for i in range(start, len(lines)):
        first = _key(lines[i])
        number = _NUMBER.match(first)
        numbers = range(min(number.end() if number else 0, len(first) - 1) + 1)  # a line is more than a number
        joined = ""
        for line in lines[i : i + _TITLE_LINES]:
            joined += _key(line)
            if any(joined[n:] == want for n in numbers):
                return i
            if len(joined) >= len(want) + len(numbers):
                break
    return None


def _estimated_line(entry: _Entry, lines: list[str], box: tuple[float, float]) -> int:
    """The line at the entry's height on the page (``box`` is its bottom and top), in proportion."""
    bottom, top = box
    if entry.top is None or top <= bottom:
        return 0
    share = min(max((top - entry.top) / (top - bottom), 0.0), 1.0)
    return round(share * len(lines))


def _page_sections(
    text: str, number: int, box: tuple[float, float], starts: list[_Entry], in_force: list[str]
) -> tuple[list[Section], list[str]]:
    """One page's text cut where the outline entries ``starts`` begin, and the path in force after it.

    A part that holds nothing but its entry's title goes with the next part
    (a chapter heading right above its first subsection's).
    """
    lines = text.split("\n")
    sections: list[Section] = []
    cursor = 0
    path = in_force
    for entry in starts:
        found = _title_line(lines, cursor, entry.path[-1])
        at = max(cursor, found if found is not None else _estimated_line(entry, lines, box))
        part = "\n".join(lines[cursor:at]).strip("\n")
        if part.strip() and not (path and _key(part) == _key(path[-1])):
            sections.append(
                Section(heading_path=list(path), level=min(len(path), 6), blocks=[Block(part)], page=number)
            )
            cursor = at
        path = entry.path
    part = "\n".join(lines[cursor:]).strip("\n")
    if part.strip():
        sections.append(Section(heading_path=list(path), level=min(len(path), 6), blocks=[Block(part)], page=number))
    return sections, path


def _needs_crypto(exc: Exception) -> ParseError:
    return ParseError(f"encrypted PDF that needs the 'cryptography' package to decrypt: {exc}")


def _clean_title(value: str) -> str | None:
    """The /Title entry unless it is a placeholder such as "Untitled" or a file name."""
    title = " ".join(_CONTROL.sub("", value).split())
    title = title.removeprefix("Microsoft Word - ")
    if not title or title.lower().startswith("untitled") or _FILE_NAME.search(title):
        return None
    return title


def _open(data: bytes) -> PdfReader:
    try:
        reader = PdfReader(io.BytesIO(data))
    except FileNotDecryptedError as exc:
        raise ParseError(f"encrypted PDF without password: {exc}") from exc
    except DependencyError as exc:  # AES encryption without the cryptography package
        raise _needs_crypto(exc) from exc
    except Exception as exc:  # PdfReadError, EmptyFileError, ValueError, KeyError, ...
        raise ParseError(f"not a readable PDF: {type(exc).__name__}: {exc}") from exc
    if reader.is_encrypted:
        try:
            result = reader.decrypt("")  # many PDFs only restrict editing, with an empty user password
        except DependencyError as exc:
            raise _needs_crypto(exc) from exc
        except Exception as exc:
            raise ParseError(f"encrypted PDF: decryption failed: {exc}") from exc
        if result == PasswordType.NOT_DECRYPTED:
            raise ParseError("encrypted PDF without password (the empty password does not open it)")
    return reader


def _metadata(reader: PdfReader, doc_warnings: list[str], path: str) -> dict[str, Any]:
    try:
        info = reader.metadata
    except Exception as exc:
        doc_warnings.append(f"{path}: unreadable document information: {exc}")
        return {}
    meta: dict[str, Any] = {}
    if not info:
        return meta
    for key, name in _INFO_FIELDS.items():
        try:
            value: Any = info.get(key)
            value = value.get_object() if hasattr(value, "get_object") else value
        except Exception as exc:
            doc_warnings.append(f"{path}: unreadable {key} entry: {type(exc).__name__}: {exc}")
            continue
        if isinstance(value, str):
            text = _clean_title(value) if name == "title" else " ".join(_CONTROL.sub("", value).split())
            if text:
                meta[name] = text
    return meta


def parse(data: bytes, path: str) -> Document:
    """Parse a PDF's bytes; encrypted files open only with the empty password."""
    doc_warnings: list[str] = []
    with _quiet_pypdf():
        reader = _open(data)
        try:
            pages = list(reader.pages)
        except Exception as exc:
            raise ParseError(f"cannot read the page tree: {type(exc).__name__}: {exc}") from exc
        meta = _metadata(reader, doc_warnings, path)
        outline: dict[int, list[_Entry]] = {}  # 0-based page index -> the entries that start there
        for entry in _outline(reader, doc_warnings, path):
            outline.setdefault(entry.page, []).append(entry)
        texts: list[str | None] = []  # each page's text; None where extraction failed
        for number, page in enumerate(pages, start=1):
            try:
                texts.append(_page_text(page.extract_text() or ""))
            except DependencyError as exc:
                raise _needs_crypto(exc) from exc
            except Exception as exc:  # pypdf on a damaged page, or a bug in it: the other pages go on
                logger.debug("%s: page %d: text extraction failed", path, number, exc_info=True)
                doc_warnings.append(f"{path}: page {number}: text extraction failed: {type(exc).__name__}: {exc}")
                texts.append(None)
        texts = _strip_running(texts)
        sections: list[Section] = []
        blank: list[int] = []  # pages with no text: images, scans, empty pages
        in_force: list[str] = []  # the heading path of the outline entry the text is under
        for number, (page, text) in enumerate(zip(pages, texts), start=1):
            starts = outline.get(number - 1, [])
            if text is None:
                in_force = starts[-1].path if starts else in_force
                continue
            if text.strip():
                box = (float(page.mediabox.bottom), float(page.mediabox.top))
                page_sections, in_force = _page_sections(text, number, box, starts, in_force)
                sections.extend(page_sections)
            else:
                blank.append(number)
                in_force = starts[-1].path if starts else in_force
    if not sections:
        reason = "no extractable text (scanned PDF?)"
        if doc_warnings:
            reason += f"; {len(doc_warnings)} problem(s), first: {doc_warnings[0]}"
        raise ParseError(reason)
    if blank:
        doc_warnings.append(
            f"{path}: {len(blank)} of {len(pages)} pages {'has' if len(blank) == 1 else 'have'} no extractable "
            f"text ({_page_list(blank)}: images or scans?) and {'is' if len(blank) == 1 else 'are'} not indexed"
        )
    meta["pages"] = len(pages)
    return Document(path=path, sections=sections, metadata=meta, title=meta.get("title"), warnings=doc_warnings)
