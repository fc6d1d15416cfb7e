"""The FAISS store: rows in SQLite, vectors in a FAISS index file, BM25 in memory (the store: :mod:`.store`).

Its modules, by job: ``backend`` (its ``BACKEND`` declaration: light, what the registry reads), ``store``
(:class:`FaissStore`), ``rows`` (the SQLite file), ``index`` (the vector index and its ``.faiss`` file),
``vectors`` (the stored vectors' digests), ``memory`` (what a store holds in memory, and its searches).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mdrag.store.faiss.backend import BACKEND

if TYPE_CHECKING:
    from mdrag.store.faiss.store import FaissStore

__all__ = ["BACKEND", "FaissStore"]


def __getattr__(name: str) -> Any:
    if name == "FaissStore":  # imported when first asked for: the registry reads BACKEND alone
        from mdrag.store.faiss.store import FaissStore

        return FaissStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
