"""What the command line writes to a terminal: text it did not write made safe, and the log's format."""

from __future__ import annotations

import argparse
import logging
import sys


def _safe(text: str) -> str:
    """``text`` without what could drive the terminal: file names and texts from documents are printed."""
    from mdrag.frontends.terminal import sanitize

    return sanitize(text)


def _name(text: str) -> str:
    """A file name or heading for a line of output: :func:`_safe`, with line breaks shown as ``\\n`` and
    ``\\r`` (a name with a newline would start what looks like a line of its own)."""
    return _safe(text).replace("\r", "\\r").replace("\n", "\\n")


class _TerminalSafe(logging.Formatter):
    """Log lines as :func:`_safe` makes them."""

    def format(self, record: logging.LogRecord) -> str:
        return _safe(super().format(record))


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.ERROR if args.quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TerminalSafe("mdrag: %(levelname)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    # pymilvus logs every failed RPC with a traceback; mdrag reports the error itself.
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL if args.verbose < 2 else logging.DEBUG)
    for noisy in ("sentence_transformers", "transformers", "httpx2", "openai", "pypdf"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING) if args.verbose < 2 else logging.DEBUG)
