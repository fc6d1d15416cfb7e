"""A memory limit on chunking one file: its need estimated from the parsed document before it starts.

The parse worker (:mod:`mdrag.parsers.worker`) caps a parse's memory at
``index.max_parse_mb``; chunking runs in the indexing process (it needs the
embedder's tokenizer), where nothing can be capped. Its peak memory is linear
in the document (benchmarks/chunk_scale.py measures it with tracemalloc, its
output chunks included): at most about 5 bytes per byte of text the document
holds (3-4 with long lines, 4-7 with paragraphs), 170 more per line and 490
more per section (a file of one-letter lines: 86 times its text; of tiny
sections: 19). :func:`check_memory` estimates it above those figures and
raises :class:`ChunkingMemoryError`, a ParseError, when the estimate passes
the limit: the indexer skips the file with the reason, as a parse that ran out
of memory, and goes on with the next.

    check_memory(doc, max_mb=2048)
"""

from __future__ import annotations

import sys

from mdrag.errors import ParseError
from mdrag.types import Document

__all__ = ["ChunkingMemoryError", "check_memory", "chunking_mb"]

_PER_TEXT_BYTE = 6  # bytes per byte of the blocks' strings (sys.getsizeof: ASCII 1 byte a character, CJK 2)
_PER_LINE = 256  # bytes per line of a block (a block counts one line more than its newlines)
_PER_SECTION = 1024  # bytes per section (its heading path, its chunks' headers)


class ChunkingMemoryError(ParseError):
    """Chunking one file would need more memory than its limit (``index.max_parse_mb``): the file is skipped."""


def chunking_mb(doc: Document) -> float:
    """The memory (MB) chunking ``doc`` is expected to need at most, its chunks included."""
    text = lines = 0
    for section in doc.sections:
        for block in section.blocks:
            text += sys.getsizeof(block.text)
            lines += block.text.count("\n") + 1
    return (_PER_TEXT_BYTE * text + _PER_LINE * lines + _PER_SECTION * len(doc.sections)) / 2**20


def check_memory(doc: Document, max_mb: float) -> None:
    """Raise ChunkingMemoryError when chunking ``doc`` is expected to need more than ``max_mb`` MB."""
    need = chunking_mb(doc)
    if need > max_mb:
        raise ChunkingMemoryError(
            f"chunking it would need about {need:.0f} MB of memory, more than the {max_mb:g} MB one file may use "
            "(setting index.max_parse_mb): skipped"
        )
