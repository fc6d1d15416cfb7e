"""A time limit on chunking one file: checked as chunking goes, so that a file that takes too long is skipped.

The parse worker (:mod:`mdrag.parsers.worker`) stops a parse that runs past
``index.parse_timeout``; chunking runs in the indexing process (it needs the
embedder's tokenizer), where nothing can be killed. So :func:`chunk_document`
takes a :class:`Deadline` (in its ``limits``) and checks it before every batch of sizes it asks
for (token counts or lengths) and between sections: a file whose chunking
passes the limit raises :class:`ChunkingTimeoutError`, a ParseError, and the
indexer skips it with the reason like a file whose parse timed out. The same
deadline covers the reading of a vault note before it is chunked
(:func:`mdrag.parsers.vault.read_note`, checked before each block).

    deadline = Deadline(120.0)
    chunks = chunk_document(doc, root, rel, limits=ChunkLimits(deadline=deadline))
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from mdrag.errors import ParseError

__all__ = ["ChunkingTimeoutError", "Deadline"]

_clock: Callable[[], float] = time.monotonic  # what the limit is measured with (a test counts checks instead)


class ChunkingTimeoutError(ParseError):
    """Chunking one file took longer than its limit (``index.parse_timeout``): the file is skipped."""


class Deadline:
    """A point in time chunking must finish by, ``seconds`` from now."""

    def __init__(self, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError(f"a chunking time limit must be a positive number of seconds, not {seconds!r}")
        self.seconds = seconds  # the limit, named in the error
        self.end = _clock() + seconds

    def check(self, step: str = "chunking") -> None:
        """Raise ChunkingTimeoutError once the limit is passed; ``step`` names what was under way."""
        if _clock() > self.end:
            raise ChunkingTimeoutError(
                f"{step} took longer than {self.seconds:g} s (setting index.parse_timeout): skipped"
            )

    def guard(self, sizes: Callable[[Sequence[str]], list[int]]) -> Callable[[Sequence[str]], list[int]]:
        """``sizes`` (a token counter or a length function), checking the limit before each call."""

        def checked(texts: Sequence[str]) -> list[int]:
            self.check()
            return sizes(texts)

        return checked
