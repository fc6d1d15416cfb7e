"""How far an index run is: the :class:`IndexProgress` it tells as it goes, and the counter that makes them."""

from __future__ import annotations

import posixpath
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["ChunkEstimate", "IndexProgress", "ProgressCounter", "Stage"]


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
    is ``files_total`` unless a ``pause`` stopped the run early. ``chunks_expected`` is the chunks the run
    will write: ``chunks_known`` once every file is read, until then an estimate (see :class:`ProgressCounter`).
    """

    stage: Stage
    files_done: int  # files written or skipped
    files_total: int  # files this run reads
    files_read: int  # files parsed and chunked
    chunks_done: int  # chunks written, or already in the store
    chunks_known: int  # chunks of the files read
    chunks_expected: int = 0  # chunks the run will write, estimated until every file is read (0: no estimate yet)
    # A first build (readers see only what its steps committed): the files its earlier steps committed, which
    # count with ``files_done`` and ``files_total`` for the whole build. 0: not a first build, or its first step.
    files_before: int = 0
    first_build: bool = False  # the run is an index's first build (or a rebuild into an empty store)


class ProgressCounter:
    """Counts what a run did and tells ``report`` (see :class:`IndexProgress`) each time a count moves:
    as each file is read, as each batch of the embedder returns, as files are written or skipped.

    Given ``sizes``, the (path, size) of the files to read, it tells the chunks the run is expected to write
    (:class:`ChunkEstimate`), from the files parsed so far: the parse runs ahead of the embedder (told with
    :meth:`parsed`), so that a first batch that takes a minute to embed leaves the estimate to more than its
    own files.
    """

    def __init__(
        self,
        total: int,
        report: Callable[[IndexProgress], None] | None,
        sizes: Sequence[tuple[str, int]] = (),
        first_build: int | None = None,
    ) -> None:
        self.stage: Stage = "reading"
        self.files_total = total
        self.files_done = 0
        self.files_read = 0
        self.chunks_done = 0
        self.chunks_known = 0
        self._report = report
        self._first_build = first_build  # a first build's files_before; None: not a first build
        self._estimate = ChunkEstimate(total, sizes)
        self._tell()

    def parsed(self, path: str, chunks: int) -> None:
        """The file at ``path`` was parsed into ``chunks`` chunks, ahead of :meth:`read`; any thread may tell
        it (it is only recorded, and counts in the estimate at the next report)."""
        self._estimate.parsed(path, chunks)

    def _tell(self) -> None:
        if self._report is not None:
            every_file = self.files_read >= self.files_total
            expected = self.chunks_known if every_file else max(self._estimate.chunks(), self.chunks_known)
            self._report(
                IndexProgress(
                    self.stage,
                    self.files_done,
                    self.files_total,
                    self.files_read,
                    self.chunks_done,
                    self.chunks_known,
                    expected,
                    self._first_build or 0,
                    self._first_build is not None,
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


class ChunkEstimate:
    """The chunks a run will write, estimated from what is known: the files parsed so far, and the sizes of
    those left. The bytes left of each kind of file (by suffix) hold as many chunks a byte as the bytes of that
    kind parsed (one large file parsed first says little of how many chunks the small ones left hold, and a
    Markdown page and an HTML page of one size hold very different numbers); the files of a kind none of which
    is parsed yet, as many chunks each as all the files parsed."""

    def __init__(self, total: int, sizes: Sequence[tuple[str, int]]) -> None:
        self._sizes = dict(sizes)  # the files to parse whose size is known, by path
        # By kind (suffix; "" for the files whose size is not known): the bytes and files left to parse, and the
        # bytes, chunks and files parsed.
        self._bytes_left: Counter[str] = Counter()
        self._files_left: Counter[str] = Counter({"": total - len(self._sizes)})
        for path, size in self._sizes.items():
            self._bytes_left[_kind(path)] += size
            self._files_left[_kind(path)] += 1
        self._done: dict[str, list[int]] = {}  # kind -> [bytes, chunks, files] parsed
        self._news: deque[tuple[str, int]] = deque()  # (path, chunks) parsed, not counted yet: any thread adds

    def parsed(self, path: str, chunks: int) -> None:
        """The file at ``path`` was parsed into ``chunks`` chunks; safe from any thread."""
        self._news.append((path, chunks))

    def chunks(self) -> int:
        """The chunks expected in all (0 before any file is parsed); exact once every file is."""
        while self._news:
            path, chunks = self._news.popleft()
            size = self._sizes.pop(path, None)
            kind = "" if size is None else _kind(path)
            self._files_left[kind] -= 1
            self._bytes_left[kind] -= size or 0
            done = self._done.setdefault(kind, [0, 0, 0])
            done[0] += size or 0
            done[1] += chunks
            done[2] += 1
        parsed_chunks = sum(c for _, c, _ in self._done.values())
        parsed_files = sum(f for _, _, f in self._done.values())
        more = 0.0
        for kind, files in self._files_left.items():
            if files <= 0 or not parsed_files:
                continue
            b, c, f = self._done.get(kind, (0, 0, 0))
            if b:  # as many chunks a byte as this kind's bytes parsed
                more += self._bytes_left[kind] * c / b
            elif f:  # this kind's files parsed held no bytes (or their sizes are not known): chunks a file
                more += files * c / f
            else:  # none of this kind parsed yet: as many chunks a file as all the files parsed
                more += files * parsed_chunks / parsed_files
        return parsed_chunks + round(more)


def _kind(path: str) -> str:
    """A file's kind, for the estimate: its suffix (".md", ".html"), "." for a file without one."""
    return posixpath.splitext(path)[1].lower() or "."
