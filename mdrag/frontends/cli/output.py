"""What the command line writes to a terminal: text it did not write made safe, and the log's format."""

from __future__ import annotations

import argparse
import logging
import sys


def safe_text(text: str) -> str:
    """``text`` without what could drive the terminal: file names and texts from documents are printed."""
    from mdrag.frontends.terminal import sanitize

    return sanitize(text)


def safe_name(text: str) -> str:
    """A file name or heading for a line of output: :func:`safe_text`, with line breaks shown as ``\\n`` and
    ``\\r`` (a name with a newline would start what looks like a line of its own)."""
    return safe_text(text).replace("\r", "\\r").replace("\n", "\\n")


def _own(record: logging.LogRecord) -> bool:
    """Whether ``record`` is mdrag's own, not a library's (faiss, transformers, httpx, ...)."""
    return record.name == "mdrag" or record.name.startswith("mdrag.")


class _TerminalSafe(logging.Formatter):
    """Log lines as :func:`safe_text` makes them; a library's lines name the library's logger."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        if not _own(record):
            head = f"mdrag: {record.levelname}: "
            line = line.replace(head, f"{head}{record.name}: ", 1)
        return safe_text(line)


class _LibrariesAt(logging.Filter):
    """Let through a library's records from ``level`` up, and all of mdrag's own: `-v` is mdrag's account
    of what it does (a library's notes, such as faiss's "Could not load library with AVX512 support", are
    debug output: -vv)."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level  # the least level of a library's record that is shown

    def filter(self, record: logging.LogRecord) -> bool:
        return _own(record) or record.levelno >= self.level


def setup_logging(args: argparse.Namespace) -> None:
    """Log to stderr at the level ``-v``/``-vv``/``-q`` ask for (``args.verbose``, ``args.quiet``), each line made
    safe for the terminal; a library's records from warnings up (or the level asked, when higher), all with ``-vv``."""
    level = logging.ERROR if args.quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    debug = args.verbose >= 2
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TerminalSafe("mdrag: %(levelname)s: %(message)s"))
    handler.addFilter(_LibrariesAt(logging.DEBUG if debug else max(level, logging.WARNING)))
    logging.basicConfig(level=level, handlers=[handler])
    # pymilvus logs every failed RPC with a traceback; mdrag reports the error itself.
    logging.getLogger("pymilvus").setLevel(logging.DEBUG if debug else logging.CRITICAL)
    if debug:  # libraries that set their own loggers' level (transformers: WARNING)
        for noisy in ("sentence_transformers", "transformers", "httpx2", "openai", "pypdf"):
            logging.getLogger(noisy).setLevel(logging.DEBUG)
