"""Whether one index can be searched now, and what its store lost: the state checks of a search and a status.

A search is refused, with what to do next, when nothing is committed yet (a
first build runs: :class:`~mdrag.errors.IndexBuildingError`), when the index does
not exist, when its store lost every row the manifest lists, or when its manifest
was lost; it goes on, with a warning, when the store lost only some rows.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from mdrag.errors import MdragError, StoreDamagedError
from mdrag.index.visibility import ManifestState, Visibility
from mdrag.ingest.manifest import Manifest

if TYPE_CHECKING:
    from mdrag.store.base import Store

__all__ = ["Health"]

log = logging.getLogger(__name__)


class Health:
    """The state checks of one index's searches and status, with the rows its store holds counted once per
    opening of the store."""

    def __init__(self, name: str, manifest_path: Path, view: Visibility, open_lock: threading.Lock) -> None:
        self.name = name  # named in the messages
        self.manifest_path = manifest_path  # what the index should hold
        self._view = view  # the committed state searches see, and how far a first build is
        self._open_lock = open_lock  # the Index's: held while the store opens, so a count matches one opening
        self._missing: tuple[int, int] | tuple[()] | None = None  # see missing_rows; None: not counted yet

    def forget(self) -> None:
        """Count the rows again at the next check (the store was opened, or a run ended); call it with the
        Index's open lock held."""
        self._missing = None

    def missing_rows(self, store: Store, exists: bool, manifest: ManifestState | None = None) -> tuple[int, int] | None:
        """(stored, expected) chunks when the store holds fewer than the manifest lists, else None.

        ``exists``: the store holds the index (False: it holds nothing). Checked once per
        opening: the store's files may have been deleted or damaged behind mdrag's back
        (the next `mdrag index` repairs that). ``manifest``: the manifest as a search just
        read it (:meth:`Visibility.manifest_state`), so that it is not parsed again; None: read now.
        """
        with self._open_lock:
            if self._missing is None:
                if manifest is not None:
                    committed = manifest.committed
                    expected, roots = (len(committed[0]) if committed else 0), self._view.seen_roots
                else:
                    m = Manifest.load(self.manifest_path)
                    expected = len(m.visible()[0]) if m is not None else 0  # committed: a run's own may not be
                    roots = m.roots if m is not None else []
                if not exists:
                    stored = 0
                else:
                    stored = store.count(roots) if roots else expected
                self._missing = (stored, expected) if stored < expected else ()
            return self._missing or None

    @staticmethod
    def loss(store: Store, missing: tuple[int, int], exists: bool) -> str:
        """What a store missing rows (see :meth:`missing_rows`) lost, naming the store."""
        stored, expected = missing
        held = getattr(store, "rows_without_records", lambda: 0)() if not exists else 0
        if held:  # the FAISS store's meta table was lost: its rows are there, but not which model made them
            return (
                f"the index store {store.uri} lost the records that name the model that built it (its meta "
                f"table), though it holds {held} chunk rows of the {expected} its manifest lists"
            )
        if not exists:
            return (
                f"the index store {store.uri} lost its data: it holds none of the {expected} chunks its "
                "manifest lists (its files were deleted, emptied or damaged)"
            )
        return (
            f"the index store holds {stored} of the {expected} chunks its manifest lists (its files were "
            "deleted or damaged)"
        )

    def check_search(self, store: Store, exists: bool, manifest: ManifestState) -> None:
        """Refuse a search of an index with nothing committed yet, one that does not exist, or one whose store
        lost every row; warn when it lost some (the results are then incomplete)."""
        if manifest.building or (not exists and self._view.progress is not None):
            raise self._view.building_error()  # nothing committed yet: not "does not exist", nor "lost its data"
        missing = self.missing_rows(store, exists, manifest)
        if missing is None and not exists:
            raise MdragError(f"index {self.name!r} does not exist in {store.uri}: run `mdrag index DIR` first")
        if missing is not None:
            msg = f"{self.loss(store, missing, exists)}: run `mdrag index` to repair it"
            if not missing[0]:
                raise StoreDamagedError(msg[0].upper() + msg[1:] + ".")
            log.warning("%s; until then results are incomplete", msg)

    def nothing_committed(self, store: Store, exists: bool, manifest: ManifestState) -> MdragError:
        """The error of a search that may see no chunk at all: the manifest was lost, when nothing is being
        built (a build writes its manifest before its first chunk); else how far the first build is."""
        if (exists and not manifest.building and self._view.progress is None) and (
            self.manifest_path.exists() or store.count() > 0
        ):
            lost = "cannot be read" if self.manifest_path.exists() else "is missing"
            return MdragError(
                f"the manifest {self.manifest_path} {lost}, and it says which of the chunks of "
                f"{store.uri} are whole: run `mdrag index` to write it again from the store's "
                "folders (its stored vectors are reused)"
            )
        return self._view.building_error()
