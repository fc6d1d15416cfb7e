"""Parser registry: file extension -> ``parse(data, path) -> Document``.

A parser is any callable taking the file's bytes and its absolute path and
returning a :class:`~mdrag.types.Document`; it raises
:class:`~mdrag.errors.ParseError` naming the reason when the file cannot be
parsed. The built-in parsers (Markdown, PDF, DOCX, HTML, reStructuredText,
plain text, MDX) are registered with the same table third-party ones use,
through small wrappers that import the parser module (and its heavy library)
only when a file of that kind is first parsed, so ``import mdrag.parsers``
stays cheap.

Third-party parsers are found through the ``mdrag.parsers`` entry-point group::

    [project.entry-points."mdrag.parsers"]
    asciidoc = "mdrag_asciidoc:parser"   # the name is ignored

where ``parser`` is callable as a parser and has an ``extensions`` attribute
(an iterable of strings such as ``[".adoc"]``); a parser whose document is the
file's own lines, numbered as in the file, may say so with a true
``keeps_source_lines`` attribute (:func:`keeps_source_lines`: ``get`` then shows a
line range of such a file without parsing it). Entry points are loaded once, on
the first lookup; one that fails to load is logged and skipped.

Precedence, lowest first: built-ins, entry points, :func:`register_parser`
calls. Within each, a later registration overrides an earlier one.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from mdrag.errors import ParseError, ParserCrashError, UnsupportedFormatError
from mdrag.parsers.written import number_blocks
from mdrag.types import Document

__all__ = [
    "ENTRY_POINT_GROUP",
    "Parser",
    "get_parser",
    "keeps_source_lines",
    "parse_file",
    "register_parser",
    "supported_extensions",
]

logger = logging.getLogger(__name__)

#: The entry-point group third-party parsers register under.
ENTRY_POINT_GROUP = "mdrag.parsers"

#: ``parse(data, path) -> Document``; raises ParseError when the file cannot be parsed.
Parser = Callable[[bytes, str], Document]

_registry: dict[str, Parser] = {}  # normalized extension (".md") -> parser
_entry_points_loaded = False  # set once the entry-point group has been read
_lock = threading.RLock()  # guards the one-time entry-point load


def _normalize_extension(ext: str) -> str:
    ext = ext.strip().lower()
    if not ext or ext == ".":
        raise ValueError(f"invalid file extension: {ext!r}")
    return ext if ext.startswith(".") else "." + ext


def _add(extensions: Iterable[str] | str, parser: Parser) -> None:
    """Register ``parser`` for ``extensions`` without loading entry points first."""
    if not callable(parser):
        raise TypeError(f"parser must be callable, not {type(parser).__name__}")
    exts = [extensions] if isinstance(extensions, str) else list(extensions)
    if not exts:
        raise ValueError("a parser needs at least one file extension")
    normalized = [_normalize_extension(e) for e in exts]  # validate all before adding any
    with _lock:
        for ext in normalized:
            _registry[ext] = parser


def register_parser(extensions: Iterable[str], parser: Parser) -> None:
    """Register ``parser`` for ``extensions`` (".md" or "md", any case).

    A later registration for the same extension overrides an earlier one,
    including the built-ins and those from entry points.
    """
    _load_entry_points()  # so that entry points cannot override this call later
    _add(extensions, parser)


def _load_entry_points() -> None:
    global _entry_points_loaded
    with _lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        try:
            import importlib.metadata  # here: a command that parses nothing does not import it

            eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        except Exception:
            logger.warning("cannot list %r entry points", ENTRY_POINT_GROUP, exc_info=True)
            return
        for ep in eps:
            try:
                obj = ep.load()
                _add(obj.extensions, obj)
            except Exception as exc:
                logger.warning(
                    "skipping parser entry point %r (%s): %s: %s",
                    getattr(ep, "name", "?"),
                    getattr(ep, "value", "?"),
                    type(exc).__name__,
                    exc,
                )
            else:
                logger.debug("loaded parser entry point %s for %s", ep.value, obj.extensions)


def supported_extensions() -> list[str]:
    """All registered extensions, sorted (e.g. ``[".docx", ".htm", ...]``)."""
    _load_entry_points()
    with _lock:
        return sorted(_registry)


def get_parser(path: str | os.PathLike[str]) -> Parser:
    """The parser for ``path``'s extension (the longest registered suffix wins).

    Raises UnsupportedFormatError naming the file and the supported extensions.
    """
    _load_entry_points()
    name = Path(path).name.lower()
    with _lock:
        matches = [ext for ext in _registry if name.endswith(ext)]
        if matches:
            return _registry[max(matches, key=len)]
        supported = ", ".join(sorted(_registry))
    raise UnsupportedFormatError(f"no parser for {os.fspath(path)!r}: supported extensions are {supported}")


def keeps_source_lines(parser: Parser) -> bool:
    """Whether ``parser`` declares that its document is the file's own lines (its ``keeps_source_lines``
    attribute): the built-in Markdown and text parsers do; a parser that says nothing does not."""
    return getattr(parser, "keeps_source_lines", False) is True


def parse_file(path: str | os.PathLike[str], data: bytes | None = None, *, parser: Parser | None = None) -> Document:
    """Parse one file; reads it when ``data`` is None.

    ``parser`` is used instead of the one registered for the extension when
    given (the parse worker's child process gets its parser that way).

    Raises UnsupportedFormatError when no parser handles the extension, and
    ParseError (message starting with the path) for anything else that goes
    wrong: an unreadable file or a parser's own ParseError. Any other exception
    from a parser is a bug in it, or input it does not handle: it raises
    ParserCrashError (a ParseError) and logs the traceback at debug level.

    A document whose parser gives no source lines nor pages (HTML, DOCX) gets
    the lines of its text as `mdrag get` writes it out
    (:func:`~mdrag.parsers.written.number_blocks`).
    """
    abspath = os.path.abspath(os.fspath(path))
    if parser is None:
        parser = get_parser(abspath)
    if data is None:
        try:
            data = Path(abspath).read_bytes()
        except OSError as exc:
            raise ParseError(f"{abspath}: cannot read file: {exc.strerror or exc}") from exc
    try:
        doc = parser(data, abspath)
    except ParseError as exc:
        raise ParseError(f"{abspath}: {exc}") from exc
    except MemoryError as exc:
        raise ParseError(f"{abspath}: the parser ran out of memory") from exc
    except Exception as exc:
        logger.debug("%s: unexpected exception in %r", abspath, parser, exc_info=True)
        raise ParserCrashError(
            f"{abspath}: unexpected {type(exc).__name__} in the parser: {exc} (a parser bug; `-vv` logs the traceback)"
        ) from exc
    if not isinstance(doc, Document):
        raise ParserCrashError(f"{abspath}: the parser returned {type(doc).__name__}, not a Document")
    number_blocks(doc)
    return doc


class _Lazy:
    """A parser that imports ``mdrag.parsers.<module>`` on its first call.

    A class rather than a closure so that it pickles (by reference to this
    module) into :class:`~mdrag.parsers.worker.ParseWorker`'s child process.
    """

    def __init__(self, module: str, requirement: str, keeps_source_lines: bool = False) -> None:
        self.module = module  # the submodule of mdrag.parsers holding parse(data, path)
        self.requirement = requirement  # the packages it needs, named when the import fails
        self.keeps_source_lines = keeps_source_lines  # its document is the file's own lines (keeps_source_lines())

    def __call__(self, data: bytes, path: str) -> Document:
        try:
            mod = importlib.import_module(f"{__name__}.{self.module}")
        except ModuleNotFoundError as exc:
            raise ParseError(
                f"the {self.module} parser needs {self.requirement} ({exc}); install it to index this file"
            ) from exc
        result: Document = mod.parse(data, path)
        return result

    def __repr__(self) -> str:
        return f"<parser mdrag.parsers.{self.module} (imported on first use)>"


_add([".md", ".markdown"], _Lazy("markdown", "markdown-it-py and python-frontmatter", keeps_source_lines=True))
_add([".pdf"], _Lazy("pdf", "pypdf"))
_add([".docx"], _Lazy("docx", "python-docx"))
_add([".html", ".htm"], _Lazy("html", "beautifulsoup4"))
_add([".rst", ".rest"], _Lazy("rst", "docutils"))
_add([".txt"], _Lazy("plaintext", "charset-normalizer", keeps_source_lines=True))
_add([".mdx"], _Lazy("mdx", "markdown-it-py and python-frontmatter"))
