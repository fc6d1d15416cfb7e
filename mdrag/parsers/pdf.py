"""PDF parser (pypdf): one level-0 section per page that has text."""

from __future__ import annotations

import io
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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
        sections: list[Section] = []
        blank: list[int] = []  # pages with no text: images, scans, empty pages
        for number, page in enumerate(pages, start=1):
            try:
                text = _page_text(page.extract_text() or "")
            except DependencyError as exc:
                raise _needs_crypto(exc) from exc
            except Exception as exc:  # pypdf on a damaged page, or a bug in it: the other pages go on
                logger.debug("%s: page %d: text extraction failed", path, number, exc_info=True)
                doc_warnings.append(f"{path}: page {number}: text extraction failed: {type(exc).__name__}: {exc}")
                continue
            if text.strip():
                sections.append(Section(heading_path=[], level=0, blocks=[Block(text)], page=number))
            else:
                blank.append(number)
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
