"""Docsets: the project's ``.knowledge/config.yaml``, instructions for AI assistants, and git web sources.

A docset is a named folder of documentation. The package, one module per concern:

- ``model``: the values (``Docset``, ``WebSource``, ``KnowledgeConfig``, ``SourceResult``, ``Selection``).
- ``config``: finding and reading ``.knowledge/config.yaml``; where a docset's folder may be.
- ``git``: which git URLs a config may name, running git, and ``GitRepoLoader``, which clones a source.
- ``files``: which files of a clone become part of a docset, and copying them into its folder.
- ``metadata``: ``.agentic-metadata.json`` in each docset folder, and ``.knowledge/.gitignore``.
- ``base``: ``KnowledgeBase`` (the cached config, name lookup, instructions), ``init_docset``, ``refresh``
  and ``status``.
- ``docsets``: each docset's own mdrag index (its name, and bringing it in line with the docset's folder), for
  ``mdrag knowledge init/refresh`` and ``mdrag mcp``; imported by its users, not here, as it opens indexes.
- ``indexes``: ``DocsetIndexes``, the docsets' indexes kept current for a long-running front end (``mdrag mcp``):
  opened on first use, refreshed when due, searched while they update, their state and progress as values;
  imported by its users, not here.

Nothing here prints or parses a command line: progress goes to a callback, details to ``logging``, and every
failure is a :class:`~mdrag.errors.DocsetError` whose text says what to do next.
"""

from __future__ import annotations

from mdrag.knowledge.base import DEFAULT_TEMPLATE, MAX_KEYWORDS, KnowledgeBase, init_docset, refresh, status
from mdrag.knowledge.config import find_config, load_knowledge_config
from mdrag.knowledge.git import GitRepoLoader, validate_git_url
from mdrag.knowledge.metadata import METADATA_FILE
from mdrag.knowledge.model import DOCSET_NAME, Docset, KnowledgeConfig, Selection, SourceResult, WebSource

__all__ = [
    "DEFAULT_TEMPLATE",
    "DOCSET_NAME",
    "MAX_KEYWORDS",
    "METADATA_FILE",
    "Docset",
    "GitRepoLoader",
    "KnowledgeBase",
    "KnowledgeConfig",
    "Selection",
    "SourceResult",
    "WebSource",
    "find_config",
    "init_docset",
    "load_knowledge_config",
    "refresh",
    "status",
    "validate_git_url",
]
