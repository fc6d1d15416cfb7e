"""Indexing: folders in, a committed index out (files -> scan -> plan -> parse -> chunk -> embed -> store).

:class:`~mdrag.ingest.pipeline.Indexer` runs the flow; :mod:`~mdrag.ingest.plan`
decides what a run must do, without side effects; the manifest, snapshot and
visibility modules keep what readers see consistent while a writer works; and
:class:`~mdrag.ingest.keeper.IndexKeeper` keeps an open index current for a
long-running front end. The stages with swappable backends are packages of
their own: :mod:`mdrag.parsers`, :mod:`mdrag.chunking`, :mod:`mdrag.embedding`,
:mod:`mdrag.store`. docs/architecture.md draws the flow.
"""
