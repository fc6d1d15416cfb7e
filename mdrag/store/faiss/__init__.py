"""The FAISS store: rows in SQLite, vectors in a FAISS index file, BM25 in memory (the store: :mod:`.store`).

Its modules, by job: ``store`` (:class:`FaissStore` and its ``BACKEND`` declaration), ``rows`` (the SQLite
file), ``index`` (the vector index and its ``.faiss`` file), ``vectors`` (the stored vectors' digests),
``memory`` (what a store holds in memory, and its searches).
"""

from mdrag.store.faiss.store import BACKEND, FaissStore

__all__ = ["BACKEND", "FaissStore"]
