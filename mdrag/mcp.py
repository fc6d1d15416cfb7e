"""The MCP server (`mdrag mcp`): docset tools for AI coding assistants, over stdio.

Built on the official MCP Python SDK's low-level :class:`mcp.server.Server`,
which lets this module own the tool schemas and the errors::

    search_docs(docset, keywords, generalized_keywords)
        navigation instructions from the docset's template (REQ-1, REQ-6),
        plus up to 3 ranked sections when mdrag's index of the docset is open
    list_docsets()
        {"docsets": [{"id", "name", "version", "aliases", "local_path", ...}]} (REQ-2)
    search(query, docset=None, k=5)
        {"results": [{"docset", "text", "path", "rel_path", "heading_path", "score", ...}],
         "indexed": {docset id: what the last index refresh did}}

Errors (REQ-7, REQ-8):

- an :class:`~mdrag.errors.MdragError` (unknown docset, no ``.knowledge/config.yaml``,
  bad arguments, docset folder missing) is a tool result with ``isError: true``
  whose text says what to do next;
- an unknown tool name is a JSON-RPC error ``-32601`` (method not found): the
  SDK leaves unknown names to the ``tools/call`` handler, which raises
  :class:`mcp.MCPError`;
- a line on stdin that is not JSON is answered ``-32700`` (parse error), and
  JSON that is not a JSON-RPC message ``-32600`` (invalid request), both with
  ``id: null``: the SDK's stdio transport only logs such lines, so
  :func:`run_stdio` wraps its read stream (:class:`_AnswerMalformed`).

Each docset has its own mdrag index, ``docset_<id>``, in the Milvus Lite file
``$MDRAG_HOME/cache/docsets.db`` (or the configured ``milvus_uri``). The
``search`` tool opens it on first use and indexes the docset's folder
incrementally (a restart re-embeds nothing), then refreshes it when the last
refresh is older than :data:`REFRESH_INTERVAL_S`. Index work runs in worker
threads, one update at a time per docset, so the server keeps answering.

``search_docs`` must answer within 10 ms (REQ-9) and never indexes: the ranked
sections are added only when the docset's index is already open in this
process and the lookup finishes within :data:`HINT_BUDGET_S` of the call's
start. A lookup embeds the keywords and searches the index (~15 ms on two CPU
cores, measured), so it often misses the budget: it then finishes in the
background (one at a time) and is kept, and a later call with the same
keywords includes it at once.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from hashlib import sha1
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mdrag import __version__
from mdrag.errors import DocsetError, MdragError, ProtocolError
from mdrag.knowledge import MAX_KEYWORDS, KnowledgeBase

if TYPE_CHECKING:
    from mdrag.index import Index
    from mdrag.indexer import IndexSummary
    from mdrag.knowledge import Docset
    from mdrag.types import SearchResult

__all__ = [
    "HINT_BUDGET_S",
    "REFRESH_INTERVAL_S",
    "SERVER_NAME",
    "TOOLS",
    "KnowledgeTools",
    "build_server",
    "index_name",
    "run_stdio",
]

log = logging.getLogger(__name__)

SERVER_NAME = "agentic-knowledge"
REFRESH_INTERVAL_S = 30.0  # a docset index older than this is refreshed by the next `search`
HINT_BUDGET_S = 0.006  # search_docs waits at most this long (from its start) for ranked sections
HINT_SECTIONS = 3  # ranked sections appended to search_docs
MAX_K = 50  # the most results `search` returns
_HINT_CACHE_SIZE = 256  # (index, query) -> sections kept for search_docs

SERVER_INSTRUCTIONS = (
    "Local documentation sets (docsets) for this project. Call list_docsets first to learn their names. "
    "Use search_docs to get the folder and terms for searching a docset's files with your own tools "
    "(grep, file reading); use search for ranked passages when a semantic lookup in natural language "
    "is the better fit."
)

_TERMS_SCHEMA = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": MAX_KEYWORDS}
_READ_ONLY = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)

TOOLS: tuple[types.Tool, ...] = (
    types.Tool(
        name="search_docs",
        title="Search documentation (navigation instructions)",
        description=(
            "Get instructions for finding something in a local documentation set (docset) with your own "
            "file search tools (grep, ripgrep, reading files): the docset's folder and the terms to try, in "
            "order. Use it when you can read files and want to search the docs yourself, e.g. for exact "
            "names, API symbols, options or error messages. Call list_docsets first to learn the docset "
            "names. When mdrag has already indexed the docset (after a `search` call), a few ranked "
            "sections are appended as starting points."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "docset": {
                    "type": "string",
                    "description": "Docset id or alias, as listed by list_docsets (e.g. 'react').",
                },
                "keywords": {
                    **_TERMS_SCHEMA,
                    "description": "Specific terms to search for first, e.g. ['useEffect', 'cleanup function'].",
                },
                "generalized_keywords": {
                    **_TERMS_SCHEMA,
                    "description": "Broader terms to try when the specific ones find nothing, "
                    "e.g. ['hooks', 'side effects'].",
                },
            },
            "required": ["docset", "keywords", "generalized_keywords"],
        },
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="list_docsets",
        title="List documentation sets",
        description=(
            "List the documentation sets (docsets) configured for this project in .knowledge/config.yaml: "
            "id, name, version, aliases and local_path (the folder holding its files) of each, as JSON "
            '{"docsets": [...]}. Call this first to discover the docset names that search_docs and '
            "search accept."
        ),
        input_schema={"type": "object", "properties": {}},
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="search",
        title="Semantic search in documentation",
        description=(
            "Semantic search over the docsets' content with mdrag's local embedding index: returns the most "
            'relevant sections as JSON {"results": [{docset, text, path, rel_path, heading_path, score}]}, '
            "best first, score 0-1. Use it for questions in natural language, or when you do not know the "
            "words the docs use; use search_docs instead to grep the files yourself. Searches one docset, or "
            "all of them when docset is omitted. The first call for a docset indexes its files, which can "
            "take a while for a large docset; later calls are fast and pick up changed files."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "What to look for, in natural language, e.g. 'How do I create a custom shortcode?'.",
                },
                "docset": {
                    "type": "string",
                    "description": "Docset id or alias from list_docsets; omit it to search every docset.",
                },
                "k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_K,
                    "default": 5,
                    "description": f"How many sections to return (1-{MAX_K}).",
                },
            },
            "required": ["query"],
        },
        annotations=_READ_ONLY,
    ),
)
_TOOL_NAMES = tuple(t.name for t in TOOLS)


def index_name(docset_id: str) -> str:
    """The mdrag index of a docset: ``docset_`` + its id with other characters than [A-Za-z0-9_] as ``_``.

    Index names hold at most 64 characters; a longer one is cut and ends with a
    hash of the id, so two long ids never share an index.
    """
    name = "docset_" + re.sub(r"[^A-Za-z0-9_]", "_", docset_id)
    if len(name) > 64:
        name = name[:55] + "_" + sha1(docset_id.encode()).hexdigest()[:8]
    return name


# -- arguments ---------------------------------------------------------------


def _string(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if value is None:
        raise ProtocolError(f"missing argument {key!r}: give it as a string")
    if not isinstance(value, str):
        raise ProtocolError(f"argument {key!r} must be a string, got {json.dumps(value)[:80]}")
    return value


def _terms(args: Mapping[str, Any], key: str) -> list[str] | str:
    """An array of strings (a single string is accepted too); the knowledge base checks the rest."""
    value = args.get(key)
    if value is None:
        raise ProtocolError(f'missing argument {key!r}: give an array of search terms, e.g. ["install"]')
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f"argument {key!r} must be an array of strings, got {json.dumps(value)[:80]}")
    return value


def _k(args: Mapping[str, Any]) -> int:
    value = args.get("k", 5)
    if value is None:
        return 5
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_K:
        raise ProtocolError(f"argument 'k' must be an integer from 1 to {MAX_K}, got {json.dumps(value)[:80]}")
    return value


def _text_result(text: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


# -- docset indexes ----------------------------------------------------------


@dataclass
class _DocsetIndex:
    """One docset's mdrag index and when it was last brought up to date."""

    index: Index  # the docset's own index in the docsets store
    folder: str | None = None  # the folder the last update indexed
    updated_at: float = 0.0  # time.monotonic() of the last successful update; 0: never
    summary: IndexSummary | None = None  # what the last update did
    lock: anyio.Lock = field(default_factory=anyio.Lock)  # one update at a time


class KnowledgeTools:
    """The three tools over a :class:`~mdrag.knowledge.KnowledgeBase`; :meth:`server` wraps them in MCP.

    :meth:`call` is the ``tools/call`` handler without the protocol: it returns
    a ``CallToolResult`` (errors included) or raises ``MCPError`` for an unknown
    tool name.
    """

    def __init__(
        self, kb: KnowledgeBase, refresh_interval: float = REFRESH_INTERVAL_S, hint_budget: float = HINT_BUDGET_S
    ) -> None:
        self.kb = kb  # docsets, templates, config discovery and reload
        self.refresh_interval = refresh_interval  # seconds before `search` refreshes an index again
        self.hint_budget = hint_budget  # seconds search_docs may spend on ranked sections
        self._indexes: dict[str, _DocsetIndex] = {}  # by index name; opened by `search`
        self._hints: OrderedDict[tuple[str, str], list[SearchResult]] = OrderedDict()  # LRU for search_docs
        self._hint_busy = False  # a lookup for search_docs is running in a worker thread
        self._hints_lock = threading.Lock()  # guards the two above (worker threads write them)

    # -- MCP ---------------------------------------------------------------

    def server(self) -> Server[Any]:
        """An MCP server (the SDK's low-level ``Server``) serving these tools."""

        async def list_tools(
            ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return types.ListToolsResult(tools=list(TOOLS))

        async def call_tool(
            ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            return await self.call(params.name, params.arguments or {})

        @asynccontextmanager
        async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
            try:
                yield {}
            finally:
                await self.aclose()

        return Server(
            SERVER_NAME,
            version=__version__,
            title="mdrag: agentic knowledge",
            instructions=SERVER_INSTRUCTIONS,
            lifespan=lifespan,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

    async def call(self, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Run tool ``name``; mdrag errors become ``isError`` results, an unknown name an MCPError."""
        start = time.perf_counter()
        try:
            if name == "search_docs":
                return _text_result(await self.search_docs(arguments, start))
            if name == "list_docsets":
                return _text_result(self.list_docsets())
            if name == "search":
                return _text_result(json.dumps(await self.search(arguments), ensure_ascii=False))
        except MdragError as e:
            return _text_result(str(e), is_error=True)
        except Exception as e:  # a bug or a library failure: logged, and told to the assistant
            log.exception("tool %s failed", name)
            return _text_result(f"{name} failed: {type(e).__name__}: {e}", is_error=True)
        raise MCPError(
            code=types.METHOD_NOT_FOUND,
            message=f"Unknown tool {name!r}: this server has {', '.join(_TOOL_NAMES)}",
            data=name,
        )

    # -- the tools ---------------------------------------------------------

    def list_docsets(self) -> str:
        """``{"docsets": [...]}`` as JSON text (REQ-2)."""
        return json.dumps({"docsets": self.kb.list_docsets()}, ensure_ascii=False)

    async def search_docs(self, args: Mapping[str, Any], start: float | None = None) -> str:
        """The docset's navigation instructions (REQ-1), and ranked sections when they come in time."""
        start = time.perf_counter() if start is None else start
        docset = _string(args, "docset")
        keywords = _terms(args, "keywords")
        text = self.kb.instructions(docset, keywords, _terms(args, "generalized_keywords"))
        if self._indexes:
            hint = await self._hint(docset, keywords, start + self.hint_budget)
            if hint:
                text += "\n\nTop sections from mdrag's index:\n" + hint
        return text

    async def search(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Ranked sections from mdrag's index of one docset or all of them."""
        query = _string(args, "query")
        if not query.strip():
            raise ProtocolError("argument 'query' is empty: say what to look for")
        k = _k(args)
        name = _string(args, "docset") if args.get("docset") is not None else None
        docsets: Sequence[Docset] = [self.kb.resolve(name)] if name is not None else self.kb.config().docsets
        out: dict[str, Any] = {"query": query, "results": [], "indexed": {}}
        if not docsets:
            out["note"] = "no docsets are configured: add one to .knowledge/config.yaml"
            return out
        hits: list[tuple[Docset, SearchResult]] = []
        skipped: dict[str, str] = {}
        for ds in docsets:
            try:
                entry, refreshed = await self._ready(self.kb.resolve(ds.id))  # checks its folder again
            except DocsetError as e:
                if name is not None or len(docsets) == 1:
                    raise
                skipped[ds.id] = str(e)
                continue
            out["indexed"][ds.id] = self._index_state(entry, refreshed)
            found = await anyio.to_thread.run_sync(entry.index.search, query, k)
            hits.extend((ds, r) for r in found)
        if skipped and len(skipped) == len(docsets):
            raise DocsetError("no docset can be searched yet:\n" + "\n".join(skipped.values()))
        hits.sort(key=lambda h: -h[1].score)
        out["results"] = [_result_dict(ds, r) for ds, r in hits[:k]]
        if skipped:
            out["skipped"] = skipped
        return out

    # -- indexes -----------------------------------------------------------

    def _entry(self, ds: Docset) -> _DocsetIndex:
        name = index_name(ds.id)
        entry = self._indexes.get(name)
        if entry is None:
            from mdrag.config import load_config
            from mdrag.index import Index

            base = load_config()
            uri = base["milvus_uri"] or str(base.cache_dir / "docsets.db")
            entry = _DocsetIndex(Index(load_config({"index": name, "milvus_uri": uri})))
            self._indexes[name] = entry
        return entry

    async def _ready(self, ds: Docset) -> tuple[_DocsetIndex, IndexSummary | None]:
        """The docset's index, updated when new, moved, or older than ``refresh_interval``."""
        folder = str(ds.local_path)
        if not Path(folder).is_dir():
            raise DocsetError(
                f"docset {ds.id!r} has no files yet: its folder {folder} does not exist. Run "
                f"`mdrag knowledge init {ds.id}` to fetch its sources, or create the folder and put the "
                "documentation there."
            )
        entry = self._entry(ds)
        async with entry.lock:
            stale = time.monotonic() - entry.updated_at >= self.refresh_interval
            if entry.folder == folder and not stale:
                return entry, None
            summary: IndexSummary = await anyio.to_thread.run_sync(entry.index.update, [folder])
            moved = [r for r in summary.folders if r != str(Path(folder).resolve())]
            if moved:  # the docset's folder moved: its old one leaves the index
                await anyio.to_thread.run_sync(entry.index.remove, moved)
            entry.folder, entry.updated_at, entry.summary = folder, time.monotonic(), summary
            if summary.chunks_embedded or summary.chunks_deleted or summary.rebuild:
                self._forget_hints(entry.index.name)
            log.info("docset %s: %s", ds.id, summary.to_dict())
            return entry, summary

    @staticmethod
    def _index_state(entry: _DocsetIndex, refreshed: IndexSummary | None) -> dict[str, Any]:
        """What the update in this call did (all zero when none ran), and the index's size."""
        s = refreshed
        return {
            "index": entry.index.name,
            "refreshed": s is not None,
            "chunks_embedded": s.chunks_embedded if s else 0,
            "chunks_reused": s.chunks_reused if s else 0,
            "chunks_deleted": s.chunks_deleted if s else 0,
            "chunks_total": entry.summary.chunks_total if entry.summary else 0,
            "seconds": round(s.seconds, 3) if s else 0.0,
            "age_s": round(time.monotonic() - entry.updated_at, 1),
        }

    # -- ranked sections for search_docs -------------------------------------

    async def _hint(self, docset: str, keywords: list[str] | str, deadline: float) -> str:
        """Up to HINT_SECTIONS lines from the docset's open index, or "" when none come by ``deadline``."""
        try:
            ds = self.kb.resolve(docset)
            entry = self._indexes.get(index_name(ds.id))
            if entry is None or entry.folder != str(ds.local_path):
                return ""
            query = keywords if isinstance(keywords, str) else ", ".join(keywords)
            key = (entry.index.name, query)
            with self._hints_lock:
                hits = self._hints.get(key)
                start = hits is None and not self._hint_busy  # one lookup at a time: they would slow each other
                if start:
                    self._hint_busy = True
            if start:
                index = entry.index

                def lookup() -> None:
                    try:
                        found = index.search(query, HINT_SECTIONS)
                        with self._hints_lock:
                            self._hints[key] = found
                            while len(self._hints) > _HINT_CACHE_SIZE:
                                self._hints.popitem(last=False)
                    except Exception:
                        log.warning("ranked sections for search_docs failed", exc_info=True)
                    finally:
                        self._hint_busy = False

                with anyio.move_on_after(max(deadline - time.perf_counter(), 0.0)):
                    await anyio.to_thread.run_sync(lookup, abandon_on_cancel=True)
            with self._hints_lock:
                hits = self._hints.get(key)
                if hits is not None:
                    self._hints.move_to_end(key)
        except Exception:  # the sections are extra: never fail the instructions for them
            log.warning("ranked sections for search_docs failed", exc_info=True)
            return ""
        return "\n".join(f"- {_where(r)} (score {r.score:.2f})" for r in hits or [])

    def _forget_hints(self, index: str) -> None:
        with self._hints_lock:
            for key in [key for key in self._hints if key[0] == index]:
                del self._hints[key]

    async def aclose(self) -> None:
        """Close the docset indexes (and so the Milvus Lite file)."""
        entries, self._indexes = list(self._indexes.values()), {}
        for entry in entries:
            try:
                async with entry.lock:
                    await anyio.to_thread.run_sync(entry.index.close)
            except Exception:
                log.warning("closing index %s failed", entry.index.name, exc_info=True)


def _where(r: SearchResult) -> str:
    return f"{r.rel_path} > {r.heading}" if r.heading else r.rel_path


def _result_dict(ds: Docset, r: SearchResult) -> dict[str, Any]:
    d: dict[str, Any] = {
        "docset": ds.id,
        "text": r.text,
        "path": r.path,
        "rel_path": r.rel_path,
        "heading_path": r.heading_path,
        "score": round(r.score, 4),
    }
    if r.line_start is not None:
        d["line_start"], d["line_end"] = r.line_start, r.line_end
    return d


def build_server(kb: KnowledgeBase, refresh_interval: float = REFRESH_INTERVAL_S) -> Server[Any]:
    """The MCP server for ``kb``, for in-process use (``mcp.Client(server)``) and :func:`run_stdio`."""
    return KnowledgeTools(kb, refresh_interval).server()


# -- stdio ---------------------------------------------------------------------


class _AnswerMalformed:
    """A read stream that answers lines the transport could not parse, and passes the rest on.

    The SDK's stdio transport puts an exception on the read stream for such a
    line and the server drops it; JSON-RPC 2.0 asks for an error response with
    ``id: null``: -32700 when the line is not JSON, -32600 when it is JSON but
    no JSON-RPC message.
    """

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner  # the transport's read stream
        self._write = write  # the transport's write stream, shared with the server

    @property
    def last_context(self) -> Any:  # the sender context the SDK's context streams carry
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item  # type: ignore[no-any-return]
            await self._reply(item)

    async def _reply(self, exc: Exception) -> None:
        not_json = isinstance(exc, ValidationError) and any(e["type"] == "json_invalid" for e in exc.errors())
        if not_json or not isinstance(exc, ValidationError):
            error = types.ErrorData(code=types.PARSE_ERROR, message="Parse error: the message is not valid JSON")
        else:
            error = types.ErrorData(
                code=types.INVALID_REQUEST, message="Invalid Request: the message is not a JSON-RPC 2.0 message"
            )
        log.warning("malformed message from the client: %s", error.message)
        try:
            await self._write.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=error)))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _AnswerMalformed:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _AnswerMalformed:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def _serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(_AnswerMalformed(read, write), write, server.create_initialization_options())


def run_stdio(start: Path | None = None) -> None:
    """Serve the MCP tools on stdin/stdout until stdin closes; logs go to stderr.

    ``start``: where to look for ``.knowledge/config.yaml`` (default: the
    current directory, then its parents). A missing or broken config does not
    stop the server: each tool call reports it, and a config created later is
    picked up by the next call.
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="mdrag mcp: %(levelname)s: %(message)s")
    from mdrag.config import load_config

    server = build_server(KnowledgeBase(start, allowed_outside=load_config()["knowledge.allowed_paths"]))
    try:
        anyio.run(_serve_stdio, server)
    except KeyboardInterrupt:
        pass
