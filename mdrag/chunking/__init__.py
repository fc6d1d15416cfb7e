"""Parsed documents to chunks: the step between parsing and embedding. Pure, no I/O.

A chunk is a slice of a file's text with its heading path, line span, the
header embedded before it (``chunk.context``) and its frontmatter metadata.
Its id comes from the root, the file's path, its position and the hash of
its embedded text, so an unchanged file keeps its ids. Two strategies cut
(``chunk.strategy``):

- ``headings`` (the default, :mod:`mdrag.chunking.headings`): a chunk never
  crosses a heading; sections are cut by size with overlap, code blocks and
  tables are kept whole (a longer table is cut between rows, each piece under
  its header), and every chunk fits the embedding model's window
  (:mod:`mdrag.chunking.window`).
- ``langchain`` (:mod:`mdrag.chunking.langchain`): md-qa's chunks, cut by
  LangChain's ``MarkdownTextSplitter``; they may cross headings and are not
  fitted to the window (:class:`Truncated` counts those that pass it).

Both give :data:`~mdrag.chunking.build.Cut` pieces, which
:class:`~mdrag.chunking.build.ChunkBuilder` makes chunks. The modules:
``settings`` (:class:`ChunkSettings`, :class:`ChunkLimits`), ``build`` (ids, headers, the chunks),
``split`` (cutting text under a size limit, token counts), ``units`` (a
section's blocks as one text), ``window``, ``headings``, ``langchain``,
``deadline`` (the time limit on one file's chunking), ``memory`` (its memory
limit, checked before it starts).

Every step is linear in the size of the file: a 20 MB text file is chunked
in seconds (benchmarks/chunk_scale.py measures it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mdrag.chunking.settings import ChunkLimits, ChunkSettings
from mdrag.errors import ConfigError

if TYPE_CHECKING:
    from mdrag.chunking.build import chunk_id, content_hash
    from mdrag.chunking.deadline import ChunkingTimeoutError, Deadline
    from mdrag.chunking.langchain import Truncated
    from mdrag.chunking.memory import ChunkingMemoryError
    from mdrag.chunking.split import TokenCounter, split_text
    from mdrag.types import Chunk, Document

#: The package's names from its modules, each module imported on first use: a command that only searches an
#: index (a one-shot `mdrag search`) reads the chunk settings and cuts nothing.
_LAZY = {
    "chunk_id": "build",
    "content_hash": "build",
    "ChunkingTimeoutError": "deadline",
    "Deadline": "deadline",
    "Truncated": "langchain",
    "ChunkingMemoryError": "memory",
    "TokenCounter": "split",
    "split_text": "split",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"mdrag.chunking.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ChunkLimits",
    "ChunkSettings",
    "ChunkingMemoryError",
    "ChunkingTimeoutError",
    "Deadline",
    "Truncated",
    "chunk_document",
    "chunk_id",
    "content_hash",
    "split_text",
]


def chunk_document(
    doc: Document,
    root: str,
    rel_path: str,
    settings: ChunkSettings | None = None,
    count_tokens: TokenCounter | None = None,
    max_tokens: int | None = None,
    limits: ChunkLimits | None = None,
) -> list[Chunk]:
    """Cut a parsed document into chunks.

    ``count_tokens``/``max_tokens`` come from the embedder: with them, no chunk's
    embedded text is longer than the model's window (strategy headings; with
    langchain, ``limits.truncated`` counts those that are), a block that fits the
    window is never cut, and ``settings.unit == "tokens"`` counts sizes in the
    model's tokens. With ``limits.deadline``, a document whose chunking passes it
    raises :class:`ChunkingTimeoutError` (a ParseError): the indexer skips the file. With ``limits.max_mb``, a
    document whose chunking is expected to need more memory (MB) raises :class:`ChunkingMemoryError`
    (a ParseError) before it starts.
    """
    from mdrag.chunking.build import ChunkBuilder
    from mdrag.chunking.headings import heading_cuts
    from mdrag.chunking.langchain import langchain_chunks
    from mdrag.chunking.memory import check_memory

    settings = settings or ChunkSettings()
    limits = limits or ChunkLimits()
    deadline, max_mb, truncated = limits.deadline, limits.max_mb, limits.truncated
    if max_mb is not None:
        check_memory(doc, max_mb)
    if settings.unit == "tokens" and count_tokens is None:
        raise ConfigError("chunk.unit 'tokens' needs an embedder that can count tokens")
    if deadline is not None and count_tokens is not None:
        count_tokens = deadline.guard(count_tokens)
    build = ChunkBuilder(doc, root, rel_path, settings.context, settings.path_words)
    if settings.strategy == "langchain":
        counter = count_tokens if settings.unit == "tokens" else None
        cuts = langchain_chunks(doc, settings.size, settings.overlap, counter)
        if deadline is not None:
            deadline.check()
        chunks = build.chunks(cuts)
        if truncated is not None and count_tokens is not None and max_tokens is not None:
            truncated.add(chunks, count_tokens, max_tokens)
        return chunks
    return build.chunks(heading_cuts(doc, settings, count_tokens, max_tokens, build.header, deadline))
