"""Reading a file for the index: its bytes hashed, parsed (here or in a parse worker) and chunked.

With a time limit (``index.parse_timeout``), the parse worker stops a parse
that passes it, and the reading of a vault note and its chunking, done here,
stop at the same limit (counted afresh: the parse, and the reading and chunking
together, may each take that long); with a memory
limit (``index.max_parse_mb``), the worker caps a parse's memory, and a document
whose chunking is expected to need more is not chunked: either way the file is
skipped with the reason and the run goes on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import NamedTuple

from mdrag.chunking import (
    ChunkingMemoryError,
    ChunkingTimeoutError,
    ChunkLimits,
    ChunkSettings,
    Deadline,
    Truncated,
    chunk_document,
)
from mdrag.embedding.base import Embedder
from mdrag.errors import ParseError, ParserCrashError, UnsupportedFormatError
from mdrag.fileio import bytes_sha256, file_sha256
from mdrag.ingest import boilerplate
from mdrag.ingest.manifest import FileState
from mdrag.parsers import parse_file, vault
from mdrag.parsers.worker import ParseWorker
from mdrag.types import Chunk, Document

__all__ = ["FileReader", "Parsed", "read_hash"]


def read_hash(path: str) -> str | OSError:
    """The sha256 of the file's bytes, or why it cannot be read."""
    try:
        return file_sha256(Path(path))
    except OSError as e:
        return e


class Parsed(NamedTuple):
    """One file's parse: its state and chunks, or why it was skipped."""

    state: FileState | None  # None: skipped
    chunks: list[Chunk]
    reason: str | None = None
    encoding: str | None = None  # the text's encoding, when it was decoded
    crashed: bool = False  # skipped for an unexpected exception in the parser (ParserCrashError)
    warnings: Sequence[str] = ()  # the parser's non-fatal problems (Document.warnings)


@dataclass
class FileReader:
    """How a run reads its files: parsed here or in a parse ``worker``, chunked for its ``embedder`` by
    ``settings``. With ``timeout`` (seconds), the worker stops a parse that passes it, and the reading of a
    vault note and its chunking must also end within it; with ``max_mb``, a document whose chunking is
    expected to need more memory (MB) is skipped. ``truncated`` collects the chunks longer than the model reads
    (one warning for the run)."""

    embedder: Embedder
    settings: ChunkSettings
    worker: ParseWorker | None = None
    timeout: float = 0.0
    max_mb: float | None = None
    truncated: Truncated = field(default_factory=Truncated)

    def read(
        self,
        path: str,
        scanned: tuple[str, str, int, int],
        *,
        early: Document | Exception | None = None,
        drop: Sequence[str] = (),
        keep: Mapping[str, Sequence[str]] | None = None,
    ) -> Parsed:
        """Parse and chunk the file at ``path`` (``scanned``: its folder, its path there, its mtime and size, as
        the scan found them): its state and chunks, or why it is skipped. ``early``: what parsing it gave
        already (:func:`mdrag.ingest.boilerplate.read_pages`). ``drop``: the fingerprints of the blocks its site
        repeats, left out of its chunks (:mod:`mdrag.ingest.boilerplate`) and recorded in its state. ``keep``: the
        fingerprints of its passages other pages leave out for it (:mod:`mdrag.ingest.passages`), recorded in its
        state with their lines."""
        root, rel, mtime_ns, size = scanned
        worker, timeout, settings, embedder = self.worker, self.timeout, self.settings, self.embedder
        try:
            data = Path(path).read_bytes()
            if isinstance(early, Exception):
                raise early
            if early is not None:
                doc = early
            else:
                doc = worker.parse(path, timeout) if worker is not None else parse_file(path, data)
        except (ParseError, UnsupportedFormatError) as e:
            return Parsed(None, [], str(e).removeprefix(f"{path}: "), crashed=isinstance(e, ParserCrashError))
        except OSError as e:
            return Parsed(None, [], f"cannot read: {e}")
        deadline = Deadline(timeout) if timeout > 0 else None
        doc = boilerplate.strip(doc, drop)
        try:
            if settings.vault and doc.path.lower().endswith((".md", ".markdown")) and vault.applies(doc):
                doc = vault.read_note(doc, None if deadline is None else partial(deadline.check, "reading the note"))
            chunks = chunk_document(
                doc,
                root,
                rel,
                settings,
                embedder.count_tokens,
                embedder.max_tokens,
                ChunkLimits(deadline, self.max_mb, self.truncated),
            )
        except (ChunkingTimeoutError, ChunkingMemoryError) as e:
            return Parsed(None, [], str(e), doc.encoding, warnings=doc.warnings)
        state = FileState(root=root, rel_path=rel, mtime_ns=mtime_ns, size=size, hash=bytes_sha256(data))
        state.chunks = [c.id for c in chunks]
        state.dropped = list(drop) or None
        state.kept = boilerplate.lines_of(doc, keep) if keep else None
        if doc.links is not None:
            state.note = {"aliases": doc.aliases, "links": sorted({n for _, n in doc.links})}
        return Parsed(state, chunks, None, doc.encoding, warnings=doc.warnings)
