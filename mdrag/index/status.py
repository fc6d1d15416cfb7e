"""What `Index.status()` says of one index: a frozen value, read by the CLI, the keeper and the front ends."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["IndexStatus", "Partial"]


@dataclass(frozen=True)
class IndexStatus:
    """One index described: its store, model, files, chunks, last run, and what is damaged.

    ``to_dict()`` is the JSON `mdrag status --json` prints, its keys in this order.
    """

    index: str
    backend: str  # its store backend (faiss, milvus)
    backend_reason: str  # why that backend: the setting, or what `auto` found
    store_uri: str
    exists: bool  # the store holds the index
    model: dict[str, Any]  # the embedder that built it ({"model": ..., "dimension": ...})
    model_mismatch: str | None  # built with another embedder than the configured one: what to do; else None
    folders: list[str]  # the index's folders, as its manifest lists them
    files: int  # files committed (a run's progress is not counted)
    chunks: int  # chunks in the store (or, for another embedder's index, in its manifest)
    last_indexed: float | None  # unix time of the last finished run; None: never
    interrupted: bool  # the last run did not finish and no process runs now, or the manifest was changed outside mdrag
    building: bool  # a first build runs and has committed nothing yet
    damaged: str | None  # what the store lost or holds unlike its last run ("; " between); None: nothing
    chunking: dict[str, Any]  # how the files were cut (the manifest's, else the settings')
    manifest: str
    manifest_lost: bool  # the store holds chunks that no manifest lists
    verified: dict[str, Any] | None  # with --verify: what was read ("checked") and in how many "seconds"
    # The run of the process that holds the writers' lock now (this one or another):
    # {"pid", "files_done", "files_total", "first_build", "message"}; None: no run is indexing.
    indexing: dict[str, Any] | None
    # {"files_done", "files_total"}: the index holds part of the files of its first build (which goes on,
    # or was stopped: `mdrag index` finishes it), and searches answer from those; None: every file.
    partial: dict[str, int] | None

    def to_dict(self) -> dict[str, Any]:
        """The status as JSON-ready values, keyed by field name in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Partial:
    """An index searched from part of its files: its first build commits in steps, or was stopped
    (see :meth:`mdrag.index.Index.partial`)."""

    files_done: int  # files committed: what searches answer from
    files_total: int  # files the build found to index
    running: bool  # a process builds it now (False: the build was stopped; `mdrag index` finishes it)

    def message(self) -> str:
        """One line for people, said with each answer made from part of the files."""
        if self.running:
            return f"indexing: {self.files_done} of {self.files_total} files; results come from those"
        return (
            f"the index holds {self.files_done} of {self.files_total} files (its first build was stopped: "
            "`mdrag index` finishes it); results come from those"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the counts, ``running`` and ``message``."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "message": self.message()}
