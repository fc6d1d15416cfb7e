"""Front ends: the only code that talks to the outside world, each thin over the core.

:mod:`~mdrag.frontends.cli` (the ``mdrag`` command), :mod:`~mdrag.frontends.server`
(the WebSocket Q&A server and its page, :mod:`~mdrag.frontends.web`; its
messages in :mod:`~mdrag.frontends.protocol`, which does no I/O),
:mod:`~mdrag.frontends.client` (``mdrag ask``), and :mod:`~mdrag.frontends.mcp`
(the MCP server). The core never imports them (``tests/test_layout.py``).
"""
