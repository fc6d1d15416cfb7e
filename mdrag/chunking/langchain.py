"""``chunk.strategy: langchain``: md-qa's chunks, cut by LangChain's ``MarkdownTextSplitter``.

The parsed document is written back as markdown (each section's heading as
``#`` * level, then its blocks; frontmatter stays out, it is metadata) and cut
by ``MarkdownTextSplitter`` with ``chunk_size = chunk.size`` and
``chunk_overlap = chunk.overlap`` (1000 and 200 by default, the md-qa
specification's), lengths in characters, or in the model's tokens with
``chunk.unit: tokens``. Chunks may cross headings and are not fitted to the
model's window: each gets the heading path of the section that holds most of
its text, the line span of the source lines it holds (heading lines
included), and mdrag's header (``chunk.context``) as the headings strategy
gives it. Note that
``MarkdownTextSplitter`` matches its heading separator literally, so in
practice it cuts at blank lines, lines and words, not at headings.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mdrag.chunking.split import TokenCounter, token_counts
from mdrag.extras import require_extra
from mdrag.types import Chunk, Document

__all__ = ["Truncated", "langchain_chunks", "splitter_class"]


def splitter_class() -> Any:
    """``MarkdownTextSplitter``, or a MissingExtraError saying how to install it."""
    require_extra("langchain", "chunk.strategy: langchain")
    from langchain_text_splitters import MarkdownTextSplitter

    return MarkdownTextSplitter


@dataclass
class Truncated:
    """The chunks of one indexing run whose embedded text is longer than the model reads.

    The langchain strategy does not fit chunks to the model's window (MiniLM
    reads 256 word pieces, about 1,000 characters of English): the model
    ignores the end of a longer one. The indexer logs :meth:`message` once per run.
    """

    chunks: int = 0  # chunks made in the run
    over: int = 0  # of them, longer than the window
    max_tokens: int | None = None

    def add(self, chunks: Sequence[Chunk], count_tokens: TokenCounter, max_tokens: int) -> None:
        """Count ``chunks`` (one file's), and those whose embedded text is over ``max_tokens``."""
        counts = token_counts(count_tokens)([c.embed_text for c in chunks])
        self.chunks += len(chunks)
        self.over += sum(n > max_tokens for n in counts)
        self.max_tokens = max_tokens

    def message(self) -> str | None:
        """The run's warning, or None when every chunk fits."""
        if not self.over:
            return None
        return (
            f"chunk.strategy langchain: {self.over} of the {self.chunks} chunks made in this run are longer than "
            f"the embedding model reads ({self.max_tokens} tokens), which ignores the rest of each; lower "
            "chunk.size, or use chunk.strategy headings, which fits every chunk to the model"
        )


@dataclass
class _Piece:
    """A heading line or a block in the markdown written back from the document."""

    start: int
    end: int
    section: int
    line: int | None  # the file line of its first line, when known


def _markdown(doc: Document) -> tuple[str, list[_Piece]]:
    parts: list[str] = []
    pieces: list[_Piece] = []
    pos = 0

    def add(text: str, section: int, line: int | None) -> None:
        nonlocal pos
        if parts:
            pos += 2  # the blank line between parts
        parts.append(text)
        pieces.append(_Piece(pos, pos + len(text), section, line))
        pos += len(text)

    for si, section in enumerate(doc.sections):
        if section.level > 0 and section.heading_path:
            add(f"{'#' * section.level} {section.heading_path[-1]}", si, section.heading_line)
        for block in section.blocks:
            add(block.text, si, block.line_start)
    return "\n\n".join(parts), pieces


def _where(text: str, pieces: list[_Piece], starts: list[int], a: int, b: int) -> tuple[int, int | None, int | None]:
    """The section holding most of ``text[a:b]``, and the first and last source lines it holds."""
    share: dict[int, int] = {}
    first = last = None
    for p in pieces[max(bisect.bisect_right(starts, a) - 1, 0) : bisect.bisect_left(starts, b)]:
        lo, hi = max(a, p.start), min(b, p.end)
        if lo >= hi:
            continue
        share[p.section] = share.get(p.section, 0) + hi - lo
        if p.line is not None:
            if first is None:
                first = p.line + text.count("\n", p.start, lo)
            last = p.line + text.count("\n", p.start, hi - 1)
    section = max(share, key=lambda s: share[s]) if share else 0
    return section, first, last


def langchain_chunks(
    doc: Document,
    size: int,
    overlap: int,
    count_tokens: TokenCounter | None,
) -> list[tuple[str, int, int | None, int | None]]:
    """``doc`` cut by ``MarkdownTextSplitter``: (text, section index, first line, last line) per chunk.

    With ``count_tokens`` the sizes are the model's tokens (less [CLS] and [SEP]), else characters.
    """
    text, pieces = _markdown(doc)
    if not text.strip():
        return []
    length: Callable[[str], int] = len
    if count_tokens is not None:
        counter = count_tokens

        def length(t: str) -> int:
            return counter([t])[0] - 2

    splitter = splitter_class()(chunk_size=size, chunk_overlap=overlap, length_function=length)
    starts = [p.start for p in pieces]
    out = []
    a = -1
    for piece in splitter.split_text(text):
        # Each chunk is a slice of the text that starts after the one before it.
        found = text.find(piece, a + 1)
        a = found if found >= 0 else text.find(piece)
        out.append((piece, *_where(text, pieces, starts, a, a + len(piece))))
    return out
