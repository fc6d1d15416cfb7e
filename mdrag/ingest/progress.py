"""How far an index run is: the :class:`IndexProgress` it tells as it goes, and the counter that makes them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = ["IndexProgress", "ProgressCounter", "Stage"]


#: What a run is doing: files are read (parsed and chunked) while the model loads and while earlier
#: files are embedded; "saving": every file is written, the run commits and deletes what it replaced.
Stage = Literal["reading", "loading the model", "embedding", "saving"]


@dataclass(frozen=True)
class IndexProgress:
    """How far a run is: what :meth:`mdrag.ingest.pipeline.Indexer.run` tells ``RunEvents.progress``.

    A file is read (parsed and chunked: its chunks are known) before it is done (its chunks written to
    the store, or the file skipped). ``chunks_known`` grows as files are read; ``chunks_done`` counts
    the chunks of the files read that are written: embedded, or their vectors reused. Every count only
    grows; once the run is "saving", ``chunks_done == chunks_known`` and ``files_done == files_read``, which
    is ``files_total`` unless a ``pause`` stopped the run early.
    """

    stage: Stage
    files_done: int  # files written or skipped
    files_total: int  # files this run reads
    files_read: int  # files parsed and chunked
    chunks_done: int  # chunks written, or already in the store
    chunks_known: int  # chunks of the files read


class ProgressCounter:
    """Counts what a run did and tells ``report`` (see :class:`IndexProgress`) each time a count moves:
    as each file is read, as each batch of the embedder returns, as files are written or skipped."""

    def __init__(self, total: int, report: Callable[[IndexProgress], None] | None) -> None:
        self.stage: Stage = "reading"
        self.files_total = total
        self.files_done = 0
        self.files_read = 0
        self.chunks_done = 0
        self.chunks_known = 0
        self._report = report
        self._tell()

    def _tell(self) -> None:
        if self._report is not None:
            self._report(
                IndexProgress(
                    self.stage, self.files_done, self.files_total, self.files_read, self.chunks_done, self.chunks_known
                )
            )

    def now(self, stage: Stage) -> None:
        """The run moves on to ``stage``."""
        if stage != self.stage:
            self.stage = stage
            self._tell()

    def read(self, chunks: int) -> None:
        """A file was parsed and chunked into ``chunks`` chunks (none: it was skipped)."""
        self.files_read += 1
        self.chunks_known += chunks
        self._tell()

    def done(self, files: int) -> None:
        """``files`` files were written to the store, or skipped."""
        self.files_done += files
        self._tell()

    def wrote(self, chunks: int) -> None:
        """``chunks`` more chunks are written (or embedded, about to be written)."""
        if chunks:
            self.chunks_done += chunks
            self._tell()
