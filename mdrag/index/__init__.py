"""One index and its state: what its readers see while a writer changes it (``from mdrag.index import Index``).

:class:`~mdrag.index.index.Index` joins the two flows: it runs the indexing
pipeline (:mod:`mdrag.ingest`) and answers searches (:mod:`mdrag.retrieval`).
Beside it, each module holds one part of the index's state:
:mod:`~mdrag.index.snapshot` (the committed state this process's searches read),
:mod:`~mdrag.index.visibility` (which committed state that is, across processes),
:mod:`~mdrag.index.health` (whether a search may read it, or what the store lost),
:mod:`~mdrag.index.writers` (one writer at a time, across processes, and how far its run is),
:mod:`~mdrag.index.verify` (what `status --verify` found damaged),
:mod:`~mdrag.index.status` (what ``Index.status()`` and ``Index.partial()`` say of it), and
:mod:`~mdrag.index.keeper` (an open index kept current for a long-running front end or program,
``from mdrag.index import IndexKeeper``) with :mod:`~mdrag.index.watching` (its file watch and rescans).
"""

from mdrag.index.index import Index, make_embedder, open_index
from mdrag.index.keeper import IndexKeeper, KeeperState
from mdrag.index.status import IndexStatus, Partial

__all__ = ["Index", "IndexKeeper", "IndexStatus", "KeeperState", "Partial", "make_embedder", "open_index"]
