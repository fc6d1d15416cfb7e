"""Retrieval: a question in, ranked results out (search -> fuse -> refuse when nothing matches).

:mod:`~mdrag.retrieval.search` asks the store for dense and BM25 lists,
:mod:`~mdrag.retrieval.fusion` merges them, :mod:`~mdrag.retrieval.relevance`
tells a weak match from an answer, and :mod:`~mdrag.retrieval.evaluate`
measures it all on a question set (``mdrag eval``).
"""
