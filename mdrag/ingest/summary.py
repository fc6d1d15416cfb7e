"""What an index run did: its :class:`IndexSummary`, the JSON of the CLI's summary."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mdrag.ingest.manifest import Manifest
from mdrag.ingest.scan import ScanResult

__all__ = ["NEW_INDEX", "IndexSummary", "report_scan", "warn"]

log = logging.getLogger(__name__)

NEW_INDEX = "new index"  # the ``rebuild`` of a first run: every file is indexed, as in any index's first run


@dataclass
class IndexSummary:
    """What one run did; ``to_dict()`` is the JSON shape of the CLI summary."""

    added: int = 0
    modified: int = 0
    deleted: int = 0
    unchanged: int = 0  # same mtime and size, or touched with the same content
    touched: int = 0  # of the unchanged: mtime or size changed, content did not ("already embedded")
    copies: int = 0  # of the added or modified: the same bytes as another file of the index, indexed once with it
    skipped: int = 0
    kept: int = 0  # files not found because their folder is missing, empty or unreadable: kept in the index
    excluded: int = 0  # files left out by .gitignore, index.include or index.exclude
    chunks_embedded: int = 0
    chunks_reused: int = 0  # content already embedded: vector taken from the store
    chunks_deleted: int = 0
    chunks_total: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0  # of which in the embedder (loading the model the first time included)
    rebuild: str | None = None  # why the whole corpus was re-chunked, if it was (NEW_INDEX: a first run)
    repaired: bool = False  # a previous run was interrupted and its leftovers were cleaned
    remaining: int = 0  # files to do that a paused run left for the next one (see RunEvents.pause)
    waited_s: float = 0.0  # how long this run waited for another process's run on the index to finish
    folders: list[str] = field(default_factory=list)  # the index's folders after the run
    missing_folders: list[str] = field(default_factory=list)  # folders of the index not found on disk
    removed_folders: list[str] = field(default_factory=list)  # folders taken out of the index (`mdrag remove`)
    skipped_files: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    parser_errors: int = 0  # of the skipped: an unexpected exception in the parser (a bug; `-vv` logs it)
    decoded: dict[str, str] = field(default_factory=dict)  # path -> encoding, for text files not in UTF-8
    unsupported: dict[str, int] = field(default_factory=dict)  # extension -> files with no parser
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["skipped_files"] = [{"path": p, "reason": r} for p, r in self.skipped_files]
        return d


def warn(summary: IndexSummary | None, msg: str) -> None:
    """Log ``msg`` as a warning, and add it to the summary's warnings."""
    log.warning("%s", msg)
    if summary is not None:
        summary.warnings.append(msg)


def report_scan(summary: IndexSummary, found: ScanResult, old: Manifest | None) -> None:
    """Copy what the scan saw into the summary, with what it means for the index."""
    summary.warnings.extend(found.warnings)
    summary.excluded = found.excluded
    summary.unsupported = dict(sorted(found.unsupported.items()))
    summary.missing_folders = list(found.missing)
    if old is None:
        return
    for root in [*found.missing, *found.empty]:
        n = sum(1 for f in old.files.values() if f.root == root)
        if n:
            warn(
                summary,
                f"folder {root} is missing or empty: its {n} indexed files are kept. "
                f"If you removed it on purpose, run `mdrag remove {root}`.",
            )
