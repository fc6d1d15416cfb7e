"""Indexing: folders in, a committed run out (files -> scan -> plan -> parse -> chunk -> embed -> store).

:class:`~mdrag.ingest.pipeline.Indexer` runs the flow; :mod:`~mdrag.ingest.plan`
decides what a run must do, without side effects; :mod:`~mdrag.ingest.manifest`
records what the index holds, per file, and a run's commit. What readers see
while a run writes, and keeping an open index current, belong to the index's
state (:mod:`mdrag.index`). The stages with swappable backends are packages of
their own: :mod:`mdrag.parsers`, :mod:`mdrag.chunking`, :mod:`mdrag.embedding`,
:mod:`mdrag.store`. docs/architecture.md draws the flow.
"""
