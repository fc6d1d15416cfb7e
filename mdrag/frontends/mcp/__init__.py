"""The MCP server (`mdrag mcp`): docset tools for AI coding assistants, over stdio or HTTP.

The tools::

    search_docs(docset, keywords, generalized_keywords)
        navigation instructions: the docset's template (or the default one) with the keywords filled in,
        plus up to 3 ranked sections when mdrag's index of the docset is ready
    list_docsets()
        {"docsets": [{"id", "name", "version", "aliases", "local_path", ...}]}, [] when none is configured
    search(query, docset=None, k=5)
        {"results": [{"docset", "text", "path", "rel_path", "heading_path", "score", ...}],
         "indexed": {docset id: the index's state},
         "indexing": {docset id: {"state", "files_done", "files_total"}}, "note": ...}

Layered as websockets is, a core without I/O under thin I/O layers:

- ``schema``: the tools as a client sees them (names, descriptions, input schemas) and the checks of a
  call's arguments; no I/O.
- ``wire``: which JSON-RPC lines the SDK may read, and the error that answers the others (per JSON-RPC
  2.0); no I/O.
- ``tools``: :class:`KnowledgeTools`, the tools over the core (:mod:`mdrag.knowledge`, its docsets'
  indexes kept current in the background by :mod:`mdrag.knowledge.indexes`): arguments checked, results
  formatted.
- ``stdio``: :func:`run_stdio`, the SDK's stdio transport with each line checked by ``wire`` first.
- ``http``: :class:`~mdrag.frontends.mcp.http.MCPHTTPServer` (`mdrag mcp --http`), the SDK's streamable HTTP
  transport, one set of tools for every session, behind the WebSocket server's Origin and token checks.
"""

from __future__ import annotations

from mdrag.frontends.mcp.stdio import run_stdio
from mdrag.frontends.mcp.tools import KnowledgeTools, build_server

__all__ = ["KnowledgeTools", "build_server", "run_stdio"]
