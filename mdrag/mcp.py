"""The MCP server (`mdrag mcp`): docset tools for AI coding assistants, over stdio.

Built on the official MCP Python SDK's low-level :class:`mcp.server.Server`,
which lets this module own the tool schemas and the errors::

    search_docs(docset, keywords, generalized_keywords)
        navigation instructions from the docset's template (REQ-1, REQ-6),
        plus up to 3 ranked sections when mdrag's index of the docset is ready
    list_docsets()
        {"docsets": [{"id", "name", "version", "aliases", "local_path", ...}]} (REQ-2)
    search(query, docset=None, k=5)
        {"results": [{"docset", "text", "path", "rel_path", "heading_path", "score", ...}],
         "indexed": {docset id: the index's state},
         "indexing": {docset id: {"state", "files_done", "files_total"}}, "note": ...}

Errors (REQ-7, REQ-8):

- an :class:`~mdrag.errors.MdragError` (unknown docset, no ``.knowledge/config.yaml``,
  bad arguments, docset folder missing) is a tool result with ``isError: true``
  whose text says what to do next;
- an unknown tool name is a JSON-RPC error ``-32601`` (method not found): the
  SDK leaves unknown names to the ``tools/call`` handler, which raises
  :class:`mcp.MCPError`;
- every line the client sends is checked before the SDK's stdio transport
  reads it (:class:`_CheckedLines`), which drops what it cannot parse and takes
  a request with an unusable ``id`` for a notification: such a line is answered
  per JSON-RPC 2.0 (``-32700`` parse error, ``-32600`` invalid request,
  ``-32602`` invalid params), with the request's ``id`` when it has a usable one,
  else ``id: null``; notifications and responses are never answered.

Each docset has its own mdrag index (:func:`index_name`) in the store that
``store.backend`` picks: with ``auto`` (the default), FAISS under
``$MDRAG_HOME/cache/faiss/`` for a new index, or the Milvus Lite file
``$MDRAG_HOME/cache/docsets.db`` (or the configured ``milvus_uri``) for one
already there or with ``milvus``, built or updated by
:func:`update_docset_index`: by ``mdrag knowledge init/refresh``, and by this
server through one :class:`~mdrag.keeper.IndexKeeper` per docset (the WebSocket
server's index upkeep; a gate shared by the keepers lets one docset's update run
at a time), which starts updating every docset's index when the server starts
and again when a ``search`` finds it older than :data:`REFRESH_INTERVAL_S`. A ``search``
waits at most :data:`SEARCH_WAIT_S` for an update (sending progress
notifications when the client asked for them), then answers with what is ready:
an index being refreshed is searched as it was; a docset whose first index is
still being built is reported with its progress (files done / total).

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
import os
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from hashlib import sha1
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import anyio
import anyio.to_thread
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mdrag import __version__
from mdrag.errors import DocsetError, IndexBuildingError, MdragError, ProtocolError
from mdrag.knowledge import MAX_KEYWORDS, KnowledgeBase
from mdrag.protocol import MAX_QUESTION_CHARS

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.index import Index
    from mdrag.keeper import IndexKeeper
    from mdrag.knowledge import Docset
    from mdrag.progress import IndexProgress
    from mdrag.summary import IndexSummary
    from mdrag.types import SearchResult

__all__ = [
    "HINT_BUDGET_S",
    "MAX_MESSAGE_BYTES",
    "MAX_QUERY_CHARS",
    "REFRESH_INTERVAL_S",
    "SEARCH_WAIT_S",
    "SERVER_NAME",
    "TOOLS",
    "KnowledgeTools",
    "build_server",
    "docset_folder",
    "docset_index",
    "index_name",
    "run_stdio",
    "update_docset_index",
]

log = logging.getLogger(__name__)

SERVER_NAME = "agentic-knowledge"
REFRESH_INTERVAL_S = 30.0  # a docset index older than this is refreshed by the next `search`
SEARCH_WAIT_S = 3.0  # `search` waits at most this long for an index update, then answers with what is ready
HINT_BUDGET_S = 0.006  # search_docs waits at most this long (from its start) for ranked sections
HINT_SECTIONS = 3  # ranked sections appended to search_docs
MAX_K = 50  # the most results `search` returns
MAX_QUERY_CHARS = MAX_QUESTION_CHARS  # as over the WebSocket: longer queries are refused, not truncated
MAX_MESSAGE_BYTES = 16 * 2**20  # a longer line from the client is refused unread
_MAX_DEPTH = 32  # JSON nesting a message may have (MCP's own messages use a few levels)
_CHECK_INLINE_CHARS = 2**16  # a longer line is checked in a worker thread
_PROGRESS_EVERY_S = 0.5  # how often a waiting `search` looks at the update's progress
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
            "names. When mdrag's index of the docset is ready, a few ranked sections are appended as "
            "starting points."
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
            "best first, score 0-1, with line_start and line_end for text files and page for PDFs. Use it for "
            "questions in natural language, or when you do not know the "
            "words the docs use; use search_docs instead to grep the files yourself. Searches one docset, or "
            "all of them when docset is omitted. The server indexes the docsets in the background; while a "
            'docset\'s first index is being built, the answer says so under "indexing" (files done / '
            "total) and has no results from it yet: use search_docs meanwhile."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
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


# -- docset indexes ------------------------------------------------------------

_HASHED = re.compile(r"_[0-9a-f]{8}$")


def index_name(docset_id: str, project: Path) -> str:
    """The mdrag index of a project's docset: ``docset_<slug>_<hash>``, distinct for distinct docsets.

    The slug is the id with other characters than [A-Za-z0-9_] as ``_``, cut to
    fit the 64 characters of an index name; the hash (8 hex digits of the SHA-1
    of the project folder and the id) tells apart ids with the same slug, such
    as ``react-dom`` and ``react.dom``, and one id in two projects (each keeps
    its own folder in its index; a shared index would lose one at each update).
    """
    slug = re.sub(r"[^A-Za-z0-9_]", "_", docset_id)[:48]
    key = f"{Path(project).resolve()}\n{docset_id}"
    return f"docset_{slug}_{sha1(key.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def _legacy_index_name(docset_id: str) -> str:
    """The index name mdrag gave a docset before :func:`index_name` added the hash (several ids shared one)."""
    name = "docset_" + re.sub(r"[^A-Za-z0-9_]", "_", docset_id)
    return name if len(name) <= 64 else name[:55] + "_" + sha1(docset_id.encode()).hexdigest()[:8]


def _docsets_config(name: str, base: Config | None = None) -> Config:
    """Settings of the docset index ``name``: ``base`` (default: the user's), in the docsets store."""
    from mdrag.config import load_config

    base = base or load_config()
    return base.with_overrides({"index": name, "milvus_uri": base["milvus_uri"] or str(base.cache_dir / "docsets.db")})


def docset_index(docset_id: str, project: Path, config: Config | None = None) -> Index:
    """The index of the project's docset ``docset_id`` in the docsets store (opened by its first use).

    ``config``: the settings to start from (flags applied), default the user's."""
    from mdrag.index import Index

    return Index(_docsets_config(index_name(docset_id, project), config))


def docset_folder(ds: Docset) -> str:
    """The docset's folder; DocsetError saying how to fill it when it does not exist."""
    folder = str(ds.local_path)
    if not Path(folder).is_dir():
        what = (  # a docset without web sources: `init` cannot fill it, it only indexes what is there
            f"Run `mdrag knowledge init {ds.id}` to fetch its sources, or create the folder and put the "
            "documentation there."
            if ds.web_sources
            else "Create it and put the documentation there (the docset has no web_sources to fetch it from)."
        )
        raise DocsetError(f"docset {ds.id!r} has no files yet: its folder {folder} does not exist. {what}")
    return folder


def update_docset_index(
    index: Index,
    ds: Docset,
    progress: Callable[[IndexProgress], None] | None = None,
    cancel: threading.Event | None = None,
    **how: Any,
) -> IndexSummary:
    """Bring ``index`` (see :func:`docset_index`) in line with the docset's folder; only changes are embedded.

    A folder the index held before (the docset's ``local_path`` moved) is taken
    out; the docset's index from before the hashed names (:func:`index_name`)
    loses the docset's folder, and is deleted when nothing else is left in it.
    ``progress``, ``cancel`` and ``how`` (``pause``, ``batch_chunks``: an
    :class:`~mdrag.keeper.IndexKeeper`'s steps) as for :meth:`mdrag.index.Index.update`.
    """
    folder = docset_folder(ds)
    summary = index.update([folder], progress=progress, cancel=cancel, **how)
    moved = [r for r in summary.folders if r != str(Path(folder).resolve())]
    if moved:  # the docset's folder moved: its old one leaves the index
        index.remove(moved)
    try:
        _retire_legacy_index(index, ds.id, folder)
    except MdragError as e:  # the docset's index is fine: only disk space is not given back
        log.warning("docset %s: its index under the old name could not be deleted: %s", ds.id, e)
    return summary


def _retire_legacy_index(index: Index, docset_id: str, folder: str) -> None:
    """Take ``folder`` out of the docset's index under its old name, and drop that index once it is empty.

    The old name may have been shared by other docsets (the reason for the new
    names), or by this docset id in other projects: their folders stay.
    """
    name = _legacy_index_name(docset_id)
    if _HASHED.search(name):  # it may be another docset's current index
        return
    config = _docsets_config(name, index.config)
    if not config.manifest_path(name).is_file():
        return
    from mdrag.index import Index

    legacy = Index(config, index.embedder)
    try:
        resolved = str(Path(folder).resolve())
        folders = legacy.folders
        if resolved in folders and len(folders) > 1:
            legacy.remove([resolved])
        elif folders in ([resolved], []):
            if legacy.store.open(create=False):
                legacy.store.drop()
            legacy.store.close()
            legacy.manifest_path.unlink(missing_ok=True)
            log.info("deleted index %s: docset %s is now indexed as %s", name, docset_id, index.name)
    finally:
        legacy.close()


# -- arguments ---------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def _describe(value: Any) -> str:
    """A client's value, short and safe to show in an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**18:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 60 else value[:57] + "...")  # escapes lone surrogates
    if isinstance(value, list):
        return f"an array of {len(value)} items"
    if isinstance(value, dict):
        return "an object"
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    return type(value).__name__


def _check_text(key: str, value: str) -> str:
    found = _SURROGATE.search(value)
    if found:
        raise ProtocolError(
            f"argument {key!r} holds a lone surrogate ({json.dumps(found.group())}, half of a UTF-16 pair): "
            "send valid Unicode text"
        )
    return value


def _string(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if value is None:
        raise ProtocolError(f"missing argument {key!r}: give it as a string")
    if not isinstance(value, str):
        raise ProtocolError(f"argument {key!r} must be a string, got {_describe(value)}")
    return _check_text(key, value)


def _query(args: Mapping[str, Any]) -> str:
    query = _string(args, "query")
    if not query.strip():
        raise ProtocolError("argument 'query' is empty: say what to look for")
    if len(query) > MAX_QUERY_CHARS:
        raise ProtocolError(
            f"argument 'query' is too long ({len(query)} characters, at most {MAX_QUERY_CHARS}): "
            "shorten it to the question itself"
        )
    return query


def _terms(args: Mapping[str, Any], key: str) -> list[str] | str:
    """An array of strings (a single string is accepted too); the knowledge base checks the rest."""
    value = args.get(key)
    if value is None:
        raise ProtocolError(f'missing argument {key!r}: give an array of search terms, e.g. ["install"]')
    if isinstance(value, str):
        return _check_text(key, value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f"argument {key!r} must be an array of strings, got {_describe(value)}")
    for i, v in enumerate(value):
        _check_text(f"{key}[{i}]", v)
    return value


def _k(args: Mapping[str, Any]) -> int:
    value = args.get("k", 5)
    if value is None:
        return 5
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_K:
        raise ProtocolError(f"argument 'k' must be an integer from 1 to {MAX_K}, got {_describe(value)}")
    return value


def _text_result(text: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


# -- the tools ---------------------------------------------------------------

Report = Callable[[float, float | None, str | None], Awaitable[None]]  # progress, total, message


@dataclass
class _DocsetIndex:
    """One docset's mdrag index and the keeper that updates it."""

    index: Index  # the docset's own index in the docsets store
    keeper: IndexKeeper  # runs its updates in a worker thread, one docset at a time (a shared gate)
    built: bool  # it held a committed state when the server opened it (the keeper's state says so later)

    def progress(self, building: IndexBuildingError | None = None) -> dict[str, Any] | None:
        """How far the running update is (``building``: another process's first build, when none runs
        here); None when none runs."""
        st = self.keeper.state
        if building is not None and (st.indexing is None or st.indexing[1] is None):  # this one waits for it
            state = "indexing" if building.total is not None else "scanning"
            return {"state": state, "files_done": building.done, "files_total": building.total}
        if st.indexing is not None:
            done, total = st.indexing
            state = "queued" if st.queued else ("indexing" if total is not None else "scanning")
            return {"state": state, "files_done": done, "files_total": total}
        if self.keeper.busy:
            return {"state": "queued" if st.queued else "scanning", "files_done": 0, "files_total": None}
        return None


class KnowledgeTools:
    """The three tools over a :class:`~mdrag.knowledge.KnowledgeBase`; :meth:`server` wraps them in MCP.

    :meth:`call` is the ``tools/call`` handler without the protocol: it returns
    a ``CallToolResult`` (errors included) or raises ``MCPError`` for an unknown
    tool name. Index updates run within :meth:`running` (the server's lifespan).
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        refresh_interval: float = REFRESH_INTERVAL_S,
        hint_budget: float = HINT_BUDGET_S,
        search_wait: float = SEARCH_WAIT_S,
        config: Config | None = None,
    ) -> None:
        self.kb = kb  # docsets, templates, config discovery and reload
        self.config = config  # the settings the docsets' indexes start from (None: the user's, read when used)
        self.refresh_interval = refresh_interval  # seconds before `search` refreshes an index again
        self.hint_budget = hint_budget  # seconds search_docs may spend on ranked sections
        self.search_wait = search_wait  # seconds `search` waits for an index update
        self._indexes: dict[str, _DocsetIndex] = {}  # by index name
        self._serving = False  # within running(): the keepers may start updates
        self._one_update = threading.Lock()  # one docset's update at a time: they would share the CPU
        self._hints: OrderedDict[tuple[str, int, str], list[SearchResult]] = OrderedDict()  # LRU for search_docs
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
            return await self.call(params.name, params.arguments or {}, ctx.session.report_progress)

        @asynccontextmanager
        async def lifespan(_: Server[Any]) -> AsyncIterator[dict[str, Any]]:
            async with self.running():
                yield {}

        return Server(
            SERVER_NAME,
            version=__version__,
            title="mdrag: agentic knowledge",
            instructions=SERVER_INSTRUCTIONS,
            lifespan=lifespan,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve: every docset's index starts updating in the background; at the end the updates stop
        (at their next file: the next run finishes them) and the indexes close."""
        self._serving = True
        try:
            self._update_all()
            yield
        finally:
            self._serving = False
            with anyio.CancelScope(shield=True):
                await self.aclose()

    async def call(self, name: str, arguments: Mapping[str, Any], report: Report | None = None) -> types.CallToolResult:
        """Run tool ``name``; mdrag errors become ``isError`` results, an unknown name an MCPError.

        ``report(progress, total, message)`` sends progress notifications while
        ``search`` waits for an index update (the SDK's, a no-op unless the
        client asked for them).
        """
        start = time.perf_counter()
        try:
            if name == "search_docs":
                return _text_result(await self.search_docs(arguments, start))
            if name == "list_docsets":
                return _text_result(self.list_docsets())
            if name == "search":
                return _text_result(json.dumps(await self.search(arguments, report), ensure_ascii=False))
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

    async def search(self, args: Mapping[str, Any], report: Report | None = None) -> dict[str, Any]:
        """Ranked sections from mdrag's index of one docset or all of them, after at most ``search_wait``."""
        deadline = time.monotonic() + self.search_wait
        query = _query(args)
        k = _k(args)
        name = _string(args, "docset") if args.get("docset") is not None else None
        docsets: Sequence[Docset] = [self.kb.resolve(name)] if name is not None else self.kb.config().docsets
        if not docsets:
            return {
                "query": query,
                "note": "no docsets are configured: add one to .knowledge/config.yaml",
                "results": [],
            }
        single = name is not None or len(docsets) == 1
        skipped: dict[str, str] = {}
        targets: list[tuple[Docset, _DocsetIndex, int]] = []  # with the updates finished before the wait
        for ds in docsets:
            try:
                folder = docset_folder(self.kb.resolve(ds.id))  # checks its folder again
            except DocsetError as e:
                if single:
                    raise
                skipped[ds.id] = str(e)
                continue
            entry = self._entry(ds)
            if not entry.keeper.busy and self._due(entry, folder):
                entry.keeper.request("refresh")
            targets.append((ds, entry, entry.keeper.state.updates))
        await self._wait([e for _, e, _ in targets], deadline, report)

        hits: list[tuple[Docset, SearchResult]] = []
        indexed: dict[str, Any] = {}
        indexing: dict[str, Any] = {}
        for ds, entry, updates in targets:
            found, building = await self._search_entry(entry, query, k)
            progress = entry.progress(building)
            if found is not None:
                indexed[ds.id] = self._index_state(entry, refreshed=entry.keeper.state.updates > updates)
                hits.extend((ds, r) for r in found)
                if not found and progress is not None:  # what the update writes may hold the answer
                    indexing[ds.id] = progress
            elif progress is not None:
                indexing[ds.id] = progress
            elif single:
                raise DocsetError(entry.keeper.state.error or f"docset {ds.id!r} has no index yet: call search again")
            else:
                skipped[ds.id] = entry.keeper.state.error or "no index yet: call search again"
        if skipped and len(skipped) == len(docsets):
            raise DocsetError("no docset can be searched yet:\n" + "\n".join(skipped.values()))
        hits.sort(key=lambda h: -h[1].score)
        out: dict[str, Any] = {"query": query}
        if indexing:
            out["note"] = _indexing_note(indexing)
            out["indexing"] = indexing
        out["results"] = [_result_dict(ds, r) for ds, r in hits[:k]]
        if not hits and not indexing and targets:
            threshold = targets[0][1].index.config["search.threshold"]
            out["note"] = (
                f"no section scored above the relevance threshold (search.threshold {threshold:g}): the docs may "
                "not cover this. Try other words, or search_docs to search the files yourself."
            )
        out["indexed"] = indexed
        if skipped:
            out["skipped"] = skipped
        return out

    # -- indexes -----------------------------------------------------------

    def _entry(self, ds: Docset) -> _DocsetIndex:
        """The docset's index and keeper, made (and its first update started) on first use."""
        project = self.kb.config().root.parent
        name = index_name(ds.id, project)
        entry = self._indexes.get(name)
        if entry is None:
            if not self._serving:
                raise MdragError("the MCP server is stopping: start it again")
            from mdrag.keeper import IndexKeeper

            index = docset_index(ds.id, project, self.config)

            def update(folders: object, **how: Any) -> IndexSummary:
                return update_docset_index(index, self.kb.resolve(ds.id), **how)  # its folder as configured now

            entry = _DocsetIndex(index, IndexKeeper(index, update=update, gate=self._one_update), bool(index.folders))
            self._indexes[name] = entry
            entry.keeper.start()
        return entry

    def _due(self, entry: _DocsetIndex, folder: str) -> bool:
        """Whether the index needs an update: its folder moved, or it is older than refresh_interval."""
        st = entry.keeper.state
        if st.finished_at is None or (st.error is None and str(Path(folder).resolve()) not in st.folders):
            return True
        return time.monotonic() - st.finished_at >= self.refresh_interval

    def _update_all(self) -> None:
        """Start an update of every docset's index (those with a folder), one after the other."""
        try:
            docsets = self.kb.config().docsets
        except MdragError as e:
            log.warning("docset indexes not updated at start: %s", e)
            return
        for ds in docsets:
            if Path(ds.local_path).is_dir():  # a docset with no files yet is reported by `search`
                try:
                    self._entry(self.kb.resolve(ds.id))  # resolve: its folder checked again
                except MdragError as e:
                    log.warning("docset %s: index not updated: %s", ds.id, e)

    async def _wait(self, entries: Sequence[_DocsetIndex], deadline: float, report: Report | None) -> None:
        """Until the entries' updates finish or ``deadline``; ``report`` is told the files done as they grow."""
        sent: float | None = None  # the last progress sent: each must be larger (MCP)
        while True:
            pending = [e for e in entries if e.keeper.busy]
            if not pending:
                return
            states = [e.keeper.state.indexing for e in pending]
            if report is not None and all(s is not None and s[1] is not None for s in states):
                done = sum(s[0] for s in states if s is not None)
                if sent is None or done > sent:
                    total = sum(s[1] or 0 for s in states if s is not None)
                    try:
                        await report(done, total, f"indexing: {done} of {total} files done")
                    except Exception:  # the client went away: its answer cannot be sent either
                        log.debug("progress notification failed", exc_info=True)
                    sent = done
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await anyio.to_thread.run_sync(pending[0].keeper.wait, None, min(left, _PROGRESS_EVERY_S))

    async def _search_entry(
        self, entry: _DocsetIndex, query: str, k: int
    ) -> tuple[list[SearchResult] | None, IndexBuildingError | None]:
        """Results from the entry's index, or None while it has none to give (its first build runs, here or
        in another process: that one's progress comes with it)."""
        st = entry.keeper.state
        if st.state == "empty":  # an empty folder: no collection either
            return [], None
        if st.state != "ready" and entry.keeper.busy:  # a first build may run, here or in another process
            building = await anyio.to_thread.run_sync(entry.index.building)
            if building is not None or not entry.built:
                return None, building  # the steps of a first build are not searched: it is not whole yet
        try:
            return await anyio.to_thread.run_sync(entry.index.search, query, k), None
        except IndexBuildingError as e:
            return None, e
        except MdragError as e:
            if not entry.keeper.busy:
                raise
            # not built yet, or the state left by an earlier run cannot be searched (another model, damaged):
            # the update makes or replaces it
            log.log(
                logging.DEBUG if st.state == "loading" else logging.WARNING,
                "index %s cannot be searched until its update ends: %s",
                entry.index.name,
                e,
                exc_info=log.isEnabledFor(logging.DEBUG),
            )
            return None, None

    @staticmethod
    def _index_state(entry: _DocsetIndex, refreshed: bool) -> dict[str, Any]:
        """The index's size and what its last update in this server did (all zero before one finished);
        ``refreshed``: that update finished while this call waited."""
        st = entry.keeper.state
        s = st.summary
        state: dict[str, Any] = {
            "index": entry.index.name,
            "refreshed": refreshed,
            "chunks_embedded": s.chunks_embedded if s else 0,
            "chunks_reused": s.chunks_reused if s else 0,
            "chunks_deleted": s.chunks_deleted if s else 0,
            "chunks_total": s.chunks_total if s else None,
            "seconds": round(s.seconds, 3) if s else 0.0,
            "age_s": round(time.monotonic() - st.finished_at, 1) if st.finished_at is not None else None,
        }
        progress = entry.progress()
        if progress is not None:
            state["updating"] = progress
        if st.error is not None:
            state["error"] = st.error
        return state

    # -- ranked sections for search_docs -------------------------------------

    async def _hint(self, docset: str, keywords: list[str] | str, deadline: float) -> str:
        """Up to HINT_SECTIONS lines from the docset's open index, or "" when none come by ``deadline``."""
        try:
            ds = self.kb.resolve(docset)
            entry = self._indexes.get(index_name(ds.id, self.kb.config().root.parent))
            if entry is None:
                return ""
            st = entry.keeper.state
            if st.state != "ready" or str(Path(ds.local_path).resolve()) not in st.folders:
                return ""
            query = keywords if isinstance(keywords, str) else ", ".join(keywords)
            key = (entry.index.name, st.updates, query)  # an update makes the index's earlier sections stale
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

    async def aclose(self) -> None:
        """Stop the updates (at their next file: the next run finishes them) and close the docset indexes
        (and so the Milvus Lite file)."""
        entries, self._indexes = list(self._indexes.values()), {}
        for entry in entries:
            try:
                await anyio.to_thread.run_sync(entry.keeper.close)
                await anyio.to_thread.run_sync(entry.index.close)
            except Exception:
                log.warning("closing index %s failed", entry.index.name, exc_info=True)


def _indexing_note(indexing: Mapping[str, Mapping[str, Any]]) -> str:
    parts = [f"{docset} ({_progress_text(p)})" for docset, p in indexing.items()]
    return (
        f"indexing in progress: {', '.join(parts)}. The results come from a docset once its index is built; "
        "meanwhile use search_docs to search its files with your own tools, or call search again later."
    )


def _progress_text(p: Mapping[str, Any]) -> str:
    if p["files_total"] is not None:
        return f"{p['files_done']} of {p['files_total']} files done"
    return "scanning its files" if p["state"] == "scanning" else "waiting for another docset's indexing"


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
    if r.page is not None:  # PDFs: the page the text is on
        d["page"] = r.page
    return d


def build_server(
    kb: KnowledgeBase,
    refresh_interval: float = REFRESH_INTERVAL_S,
    search_wait: float = SEARCH_WAIT_S,
    config: Config | None = None,
) -> Server[Any]:
    """The MCP server for ``kb``, for in-process use (``mcp.Client(server)``) and :func:`run_stdio`.

    ``config``: the settings the docsets' indexes start from (default: the user's)."""
    return KnowledgeTools(kb, refresh_interval, search_wait=search_wait, config=config).server()


# -- stdio: every line answered --------------------------------------------------


class _Unusable:
    """A JSON value this server cannot take: NaN or an infinity, or an integer beyond 64 bits."""

    def __init__(self, what: str) -> None:
        self.what = what


def _parse_int(text: str) -> int | _Unusable:
    digits = len(text.lstrip("-"))
    if digits <= 18:
        return int(text)
    value = int(text) if digits <= 19 else None  # longer ones are not even converted (quadratic)
    if value is not None and -(2**63) <= value < 2**63:
        return value
    return _Unusable(f"an integer of {digits} digits: numbers must fit in 64 bits")


def _parse_constant(text: str) -> _Unusable:
    return _Unusable(f"{text}, which is not a JSON number")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


def _problem(msg: dict[str, Any]) -> tuple[str, str] | None:
    """The first value of ``msg`` this server cannot take, as (where, what), or None."""
    stack: list[tuple[str, Any, int]] = [("", msg, 0)]
    while stack:
        where, value, depth = stack.pop()
        if depth > _MAX_DEPTH:
            return where, f"nested more than {_MAX_DEPTH} levels deep"
        if isinstance(value, _Unusable):
            return where, value.what
        if isinstance(value, str):
            found = _SURROGATE.search(value)
            if found:
                return where, f"text with a lone surrogate ({json.dumps(found.group())}): send valid Unicode"
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                if _SURROGATE.search(key):
                    return where, f"a key with a lone surrogate ({json.dumps(key[:40])}): send valid Unicode"
                name = key if _NAME.fullmatch(key) else json.dumps(key[:40])
                stack.append((f"{where}.{name}" if where else name, item, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item, depth + 1) for i, item in reversed(list(enumerate(value))))
    return None


def _kind(value: Any) -> str:
    """What a JSON value is, for an error message (its text is not repeated)."""
    if isinstance(value, _Unusable):
        return value.what
    if isinstance(value, str):
        return "text with a lone surrogate"
    if isinstance(value, float):
        return f"the number {value!r}"
    return {dict: "an object", list: "an array", bool: "a boolean", int: "an integer", str: "text"}.get(
        type(value), "null"
    )


def _error(id_: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=id_, error=types.ErrorData(code=code, message=message))


def _check_message(line: str) -> tuple[bool, types.JSONRPCError | None]:
    """Whether the SDK may read ``line``, and the error reply the client gets instead (None: no reply).

    The SDK's transport drops a line it cannot parse, takes a request whose
    ``id`` is not a string or an integer for a notification, and fails on a
    lone surrogate or an integer of 4,300 digits: such lines are answered here,
    per JSON-RPC 2.0, with the request's ``id`` when it has a usable one. A
    well-formed notification or a response is never answered, only logged.
    """
    if not line.strip():
        return False, None
    try:
        msg = json.loads(line, parse_int=_parse_int, parse_constant=_parse_constant)
    except RecursionError:
        return False, _error(None, types.PARSE_ERROR, f"Parse error: nested more than {_MAX_DEPTH} levels deep")
    except ValueError as e:
        where = f" ({e.msg}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        return False, _error(None, types.PARSE_ERROR, f"Parse error: the message is not valid JSON{where}")
    if not isinstance(msg, dict):
        what = "a batch (an array) is not supported: send" if isinstance(msg, list) else "send"
        return False, _error(None, types.INVALID_REQUEST, f"Invalid Request: {what} one JSON-RPC 2.0 object per line")
    rid = msg.get("id")
    usable = (isinstance(rid, int) and not isinstance(rid, bool)) or (
        isinstance(rid, str) and not _SURROGATE.search(rid)
    )
    is_response = "method" not in msg and ("result" in msg or "error" in msg)
    problem = _problem(msg)
    if is_response:  # the client's answer to a request of the server's
        if usable and msg.get("jsonrpc") == "2.0" and problem is None and _invalid(line) is None:
            return True, None
        log.warning("malformed response from the client, dropped: %s", line[:200])
        return False, None
    reply_id = rid if usable else None
    if "id" in msg and not usable:
        return False, _error(
            None, types.INVALID_REQUEST, f'Invalid Request: "id" must be a string or an integer, got {_kind(rid)}'
        )
    if msg.get("jsonrpc") != "2.0":
        return False, _error(reply_id, types.INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    method = msg.get("method")
    if method is None:
        return False, _error(
            reply_id, types.INVALID_REQUEST, 'Invalid Request: no "method": a request has "method", "id" and "params"'
        )
    if not isinstance(method, str) or not method:
        return False, _error(
            reply_id, types.INVALID_REQUEST, 'Invalid Request: "method" must be a non-empty string, e.g. "tools/list"'
        )
    # A request or a notification: what is wrong now is in its content.
    message: str | None
    code, message = types.INVALID_PARAMS, None
    params = msg.get("params")
    if problem is not None:
        if not problem[0].startswith("params"):
            code = types.INVALID_REQUEST
        message = f"{problem[0]} is {problem[1]}"
    elif "params" in msg and not isinstance(params, dict):
        message = f'"params" must be an object, got {_kind(params)}'
    elif method == "tools/call" and isinstance(params, dict) and not isinstance(params.get("name"), str):
        message = f'"params.name" must be a tool name: {", ".join(_TOOL_NAMES)}'
    elif method == "tools/call" and isinstance(params, dict) and not isinstance(params.get("arguments", {}), dict):
        message = '"params.arguments" must be an object, e.g. {"query": "..."}'
    else:
        code, message = types.INVALID_REQUEST, _invalid(line)
    if message is None:
        return True, None
    message = ("Invalid params: " if code == types.INVALID_PARAMS else "Invalid Request: ") + message
    if not usable:  # a notification: never answered
        log.warning("malformed notification from the client, dropped: %s", message)
        return False, None
    return False, _error(reply_id, code, message)


def _invalid(line: str) -> str | None:
    """Why the SDK refuses ``line`` as a JSON-RPC message, or None when it takes it."""
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as e:
        first = e.errors()[0] if e.errors() else {"msg": str(e), "loc": ()}
        where = ".".join(str(p) for p in first["loc"][1:]) or "the message"
        return f"{where}: {first['msg']}"
    return None


class _CheckedLines:
    """The client's lines for the SDK's stdio transport, each checked first (:func:`_check_message`).

    A line the SDK should not read is answered on the transport's write stream
    (:meth:`answer_to`), and the next line is read.
    """

    def __init__(self, wire: BinaryIO) -> None:
        self._wire = wire  # the client's pipe
        self._write: Any = None  # the transport's write stream, shared with the server
        self._ready = anyio.Event()  # set by answer_to

    def answer_to(self, write: Any) -> None:
        self._write = write
        self._ready.set()

    def __aiter__(self) -> _CheckedLines:
        return self

    async def __anext__(self) -> str:
        await self._ready.wait()
        while True:
            raw = await anyio.to_thread.run_sync(self._wire.readline, MAX_MESSAGE_BYTES + 1, abandon_on_cancel=True)
            if not raw:
                raise StopAsyncIteration
            if len(raw) > MAX_MESSAGE_BYTES and not raw.endswith(b"\n"):
                await anyio.to_thread.run_sync(self._skip_line, abandon_on_cancel=True)
                mib = MAX_MESSAGE_BYTES // 2**20
                await self._answer(
                    _error(None, types.INVALID_REQUEST, f"Invalid Request: the message is over {mib} MiB")
                )
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:  # JSON-RPC over stdio is UTF-8: guessing would change the request
                await self._answer(
                    _error(
                        None,
                        types.PARSE_ERROR,
                        f"Parse error: not UTF-8 text ({e.reason} at byte {e.start}); JSON-RPC messages are UTF-8 JSON",
                    )
                )
                continue
            if len(line) < _CHECK_INLINE_CHARS:
                forward, reply = _check_message(line)
            else:  # a long one could hold up the other requests for a while
                forward, reply = await anyio.to_thread.run_sync(_check_message, line)
            if reply is not None:
                await self._answer(reply)
            if forward:
                return line

    def _skip_line(self) -> None:
        while True:
            chunk = self._wire.readline(2**20)
            if not chunk or chunk.endswith(b"\n"):
                return

    async def _answer(self, reply: types.JSONRPCError) -> None:
        log.warning("malformed message from the client: %s", reply.error.message)
        try:
            await self._write.send(SessionMessage(reply))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass


def _claim_stdin() -> BinaryIO:
    """The client's pipe, for the transport alone: from now on fd 0 reads the null device, so a
    child process or stray read gets end of file (what the SDK does when it reads stdin itself)."""
    wire = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    return os.fdopen(wire, "rb")


async def _serve_stdio(server: Server[Any]) -> None:
    lines = _CheckedLines(_claim_stdin())
    async with stdio_server(stdin=cast(Any, lines)) as (read, write):
        lines.answer_to(write)
        await server.run(read, write, server.create_initialization_options())


def run_stdio(start: Path | None = None, config: Config | None = None) -> None:
    """Serve the MCP tools on stdin/stdout until stdin closes; logs go to stderr.

    ``start``: where to look for ``.knowledge/config.yaml`` (default: the
    current directory, then its parents). A missing or broken config does not
    stop the server: each tool call reports it, and a config created later is
    picked up by the next call. ``config``: the settings the docsets' indexes
    start from (flags applied; default: the user's).
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="mdrag mcp: %(levelname)s: %(message)s")
    from mdrag.config import load_config

    config = config or load_config()
    server = build_server(KnowledgeBase(start, allowed_outside=config["knowledge.allowed_paths"]), config=config)
    try:
        anyio.run(_serve_stdio, server)
    except KeyboardInterrupt:
        pass
