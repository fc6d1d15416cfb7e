"""The MCP tools over the core: :class:`KnowledgeTools` checks their arguments, runs them on a
:class:`~mdrag.knowledge.KnowledgeBase` and its docsets' indexes, and formats their results.

Built on the official MCP Python SDK's low-level :class:`mcp.server.Server`,
which lets this package own the tool schemas (:mod:`mdrag.frontends.mcp.schema`) and the
errors: an :class:`~mdrag.errors.MdragError` is a tool result with ``isError:
true`` whose text says what to do next; an unknown tool name is a JSON-RPC
error ``-32601`` (method not found): the SDK leaves unknown names to the
``tools/call`` handler, which raises :class:`mcp.MCPError`.

Each docset has its own mdrag index (:mod:`mdrag.knowledge.docsets`), kept
current by :class:`~mdrag.knowledge.indexes.DocsetIndexes`: every docset's index
starts updating when the server starts, and again when a ``search`` finds it
older than :data:`~mdrag.knobs.MCP_REFRESH_INTERVAL_S`. A ``search`` waits at
most :data:`~mdrag.knobs.MCP_SEARCH_WAIT_S` for an update (sending progress
notifications when the client asked for them), then answers with what is
ready: an index being refreshed is searched as it was; a docset whose first
index is still being built is reported with its progress (files done / total).

``search_docs`` must answer within 10 ms of its call and never indexes: the ranked
sections are added only when the docset's index is already open in this
process and the lookup finishes within :data:`~mdrag.knobs.MCP_HINT_BUDGET_S`
of the call's start. A lookup embeds the keywords and searches the index (its
time: RESULTS.md, "Figures that were in code comments"), so it often misses the budget: it then
finishes in the background (one at a time) and is kept, and a later call with
the same keywords includes it at once
(:meth:`~mdrag.knowledge.indexes.DocsetIndexes.cached_search`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from mdrag import __version__
from mdrag.errors import DocsetError, MdragError
from mdrag.frontends.mcp.schema import (
    SERVER_INSTRUCTIONS,
    SERVER_NAME,
    TOOL_NAMES,
    TOOLS,
    k_arg,
    links_arg,
    query_arg,
    refs_arg,
    string_arg,
    terms_arg,
)
from mdrag.knobs import (
    MCP_HINT_BUDGET_S,
    MCP_PROGRESS_EVERY_S,
    MCP_REFRESH_INTERVAL_S,
    MCP_SEARCH_WAIT_S,
)
from mdrag.knowledge import KnowledgeBase
from mdrag.knowledge.docsets import docset_folder
from mdrag.knowledge.indexes import (
    DocsetIndex,
    DocsetIndexes,
    DocsetIndexesClosedError,
    DocsetIndexState,
    UpdateProgress,
    files_progress,
)
from mdrag.pageurls import page_url
from mdrag.retrieval.shown import no_results, result_fields

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.knowledge import Docset
    from mdrag.types import SearchResult

__all__ = ["KnowledgeTools", "Report", "build_server"]

log = logging.getLogger(__name__)


def _text_result(text: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


# -- the tools ---------------------------------------------------------------

Report = Callable[[float, float | None, str | None], Awaitable[None]]  # progress, total, message


class KnowledgeTools:
    """The three tools over a :class:`~mdrag.knowledge.KnowledgeBase`; :meth:`server` wraps them in MCP.

    :meth:`call` is the ``tools/call`` handler without the protocol: it returns
    a ``CallToolResult`` (errors included) or raises ``MCPError`` for an unknown
    tool name. Index updates run within :meth:`running` (the server's lifespan).
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        refresh_interval: float = MCP_REFRESH_INTERVAL_S,
        hint_budget: float = MCP_HINT_BUDGET_S,
        search_wait: float = MCP_SEARCH_WAIT_S,
        config: Config | None = None,
    ) -> None:
        self.kb = kb  # docsets, templates, config discovery and reload
        self.hint_budget = hint_budget  # seconds search_docs may spend on ranked sections
        self.search_wait = search_wait  # seconds `search` waits for an index update
        # the docsets' indexes (started from ``config``; None: the user's settings), kept current in the
        # background within running(); `search` refreshes one older than refresh_interval
        self.indexes = DocsetIndexes(kb, config, refresh_interval)

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
        try:
            self.indexes.start()
            yield
        finally:
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
            if name in ("get", "multi_get"):
                return _text_result(json.dumps(await self.get(arguments, name == "multi_get"), ensure_ascii=False))
        except MdragError as e:
            return _text_result(str(e), is_error=True)
        except Exception as e:  # a bug or a library failure: logged, and told to the assistant
            log.exception("tool %s failed", name)
            return _text_result(f"{name} failed: {type(e).__name__}: {e}", is_error=True)
        raise MCPError(
            code=types.METHOD_NOT_FOUND,
            message=f"Unknown tool {name!r}: this server has {', '.join(TOOL_NAMES)}",
            data=name,
        )

    # -- the tools ---------------------------------------------------------

    def list_docsets(self) -> str:
        """``{"docsets": [...]}`` as JSON text: each configured docset's id, name, version, aliases and
        local_path."""
        return json.dumps({"docsets": self.kb.list_docsets()}, ensure_ascii=False)

    async def search_docs(self, args: Mapping[str, Any], start: float | None = None) -> str:
        """The docset's navigation instructions (where to search, with the user's text search tools, for the
        keywords, then the generalized ones), and ranked sections when they come in time."""
        start = time.perf_counter() if start is None else start
        docset = string_arg(args, "docset")
        keywords = terms_arg(args, "keywords")
        text = self.kb.instructions(docset, keywords, terms_arg(args, "generalized_keywords"))
        if self.indexes.opened():
            hint = await self._hint(docset, keywords, start + self.hint_budget)
            if hint:
                text += "\n\nTop sections from mdrag's index:\n" + hint
        return text

    async def search(self, args: Mapping[str, Any], report: Report | None = None) -> dict[str, Any]:
        """Ranked sections from mdrag's index of one docset or all of them, after at most ``search_wait``."""
        deadline = time.monotonic() + self.search_wait
        query = query_arg(args)
        k = k_arg(args)
        name = string_arg(args, "docset") if args.get("docset") is not None else None
        docsets: Sequence[Docset] = [self.kb.resolve(name)] if name is not None else self.kb.config().docsets
        if not docsets:
            return {
                "query": query,
                "note": "no docsets are configured: add one to .knowledge/config.yaml",
                "results": [],
            }
        single = name is not None or len(docsets) == 1
        skipped: dict[str, str] = {}
        targets: list[tuple[Docset, DocsetIndex, int]] = []  # with the updates finished before the wait
        for ds in docsets:
            try:
                entry = self._open(ds, current=True)  # checks its folder again
            except DocsetError as e:
                if single:
                    raise
                skipped[ds.id] = str(e)
                continue
            targets.append((ds, entry, entry.updates))
        await self._wait([e for _, e, _ in targets], deadline, report)

        hits: list[tuple[Docset, SearchResult]] = []
        indexed: dict[str, DocsetIndexState] = {}
        indexing: dict[str, UpdateProgress] = {}
        for ds, entry, updates in targets:
            found = await anyio.to_thread.run_sync(entry.search, query, k)
            if found.results is not None:
                indexed[ds.id] = entry.state(refreshed=entry.updates > updates)
                hits.extend((ds, r) for r in found.results)
                if not found.results and found.progress is not None:  # what the update writes may hold the answer
                    indexing[ds.id] = found.progress
            elif found.progress is not None:
                indexing[ds.id] = found.progress
            elif single:
                raise DocsetError(entry.error or f"docset {ds.id!r} has no index yet: call search again")
            else:
                skipped[ds.id] = entry.error or "no index yet: call search again"
        if skipped and len(skipped) == len(docsets):
            raise DocsetError("no docset can be searched yet:\n" + "\n".join(skipped.values()))
        hits.sort(key=lambda h: -h[1].order_score)  # the docsets' merged by what ordered each
        out: dict[str, Any] = {"query": query}
        if indexing:
            out["note"] = _indexing_note(indexing)
            out["indexing"] = {docset: p.to_dict() for docset, p in indexing.items()}
        out["results"] = [_result_dict(ds, r) for ds, r in hits[:k]]
        if out["results"]:
            out["hint"] = (
                "to read a result's whole document, call get with its docset and ref (ref:LINE_START-LINE_END "
                "for its lines, ref#HEADING for its section)"
            )
        if not hits and not indexing and targets:
            threshold = targets[0][1].index.config["search.threshold"]
            out["note"] = no_results(threshold) + ", or search_docs to search the files yourself"
        out["indexed"] = {docset: state.to_dict() for docset, state in indexed.items()}
        if skipped:
            out["skipped"] = skipped
        return out

    async def get(self, args: Mapping[str, Any], several: bool) -> dict[str, Any]:
        """Documents of a docset (or parts), by the references ``get`` and ``multi_get`` take, read from disk:
        only the files its index holds (:mod:`mdrag.retrieval.documents`)."""
        ds = self.kb.resolve(string_arg(args, "docset"))
        refs = refs_arg(args) if several else string_arg(args, "ref")
        links = links_arg(args)
        entry = self._open(ds)  # checks its folder again
        progress = await anyio.to_thread.run_sync(entry.first_build)
        if progress is not None:
            raise DocsetError(
                f"docset {ds.id!r} is being indexed ({_progress_text(progress)}): get reads the files its "
                f"index holds, so call it again shortly, or read the file under {ds.local_path} yourself"
            )
        stop = threading.Event()  # set when the call is cancelled (its client has gone): the get reads no more
        try:
            fetched = await anyio.to_thread.run_sync(entry.index.get, refs, stop, links, abandon_on_cancel=True)
        finally:
            stop.set()
        out = fetched.to_dict()
        for doc in out["documents"]:  # a page of a website source: where it was fetched from, to cite
            if url := page_url(doc["path"], doc["rel_path"]):
                doc["url"] = url
        return {"docset": ds.id, **out}

    # -- the docsets' indexes ------------------------------------------------

    def _open(self, ds: Docset, current: bool = False) -> DocsetIndex:
        """The docset's index, its folder checked again (``current``: refreshed when due)."""
        try:
            if current:
                return self.indexes.ensure_current(ds)
            docset_folder(ds)
            return self.indexes.open(ds)
        except DocsetIndexesClosedError:
            raise MdragError("the MCP server is stopping: start it again") from None

    async def _wait(self, entries: Sequence[DocsetIndex], deadline: float, report: Report | None) -> None:
        """Until the entries' updates finish or ``deadline``; ``report`` is told the files done as they grow."""
        sent: float | None = None  # the last progress sent: each must be larger (MCP)
        while True:
            pending = [e for e in entries if e.busy]
            if not pending:
                return
            files = files_progress(pending)
            if report is not None and files is not None:
                done, total = files
                if sent is None or done > sent:
                    try:
                        await report(done, total, f"indexing: {done} of {total} files done")
                    except Exception:  # the client went away: its answer cannot be sent either
                        log.debug("progress notification failed", exc_info=True)
                    sent = done
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await anyio.to_thread.run_sync(pending[0].wait, min(left, MCP_PROGRESS_EVERY_S))

    async def _hint(self, docset: str, keywords: list[str] | str, deadline: float) -> str:
        """Up to MCP_HINT_SECTIONS lines from the docset's open index, or "" when none come by ``deadline``."""
        try:
            query = keywords if isinstance(keywords, str) else ", ".join(keywords)
            lookup = self.indexes.cached_search(self.kb.resolve(docset), query)
            if lookup is None:
                return ""
            if lookup.pending:
                with anyio.move_on_after(max(deadline - time.perf_counter(), 0.0)):
                    await anyio.to_thread.run_sync(lookup.run, abandon_on_cancel=True)
            hits = lookup.results()
        except Exception:  # the sections are extra: never fail the instructions for them
            log.warning("ranked sections for search_docs failed", exc_info=True)
            return ""
        return "\n".join(f"- {_where(r)} (score {r.order_score:.2f})" for r in hits or [])

    async def aclose(self) -> None:
        """Stop the updates (at their next file: the next run finishes them) and close the docset indexes
        (and so the Milvus Lite file)."""
        await anyio.to_thread.run_sync(self.indexes.close)


def _indexing_note(indexing: Mapping[str, UpdateProgress]) -> str:
    parts = [f"{docset} ({_progress_text(p)})" for docset, p in indexing.items()]
    return (
        f"indexing in progress: {', '.join(parts)}. The results come from a docset once its index is built; "
        "meanwhile use search_docs to search its files with your own tools, or call search again later."
    )


def _progress_text(p: UpdateProgress) -> str:
    if p.files_total is not None:
        return f"{p.files_done} of {p.files_total} files done"
    return "scanning its files" if p.state == "scanning" else "waiting for another docset's indexing"


def _where(r: SearchResult) -> str:
    return f"{r.rel_path} > {r.heading}" if r.heading else r.rel_path


def _result_dict(ds: Docset, r: SearchResult) -> dict[str, Any]:
    """A result as every front end shows it (a docset's index has one folder: ``ref`` is the relative path),
    its docset first, without the fields an assistant has no use for or that do not apply."""
    shown = result_fields(r)
    return {"docset": ds.id, **{key: shown[key] for key in _FIELDS if shown[key] is not None}}


_FIELDS = (  # of result_fields: the ranks and the metadata (links and backlinks besides) are left out
    "text", "path", "rel_path", "ref", "url", "heading", "heading_path", "page", "line_start", "line_end",
    "score", "cosine", "rerank_score", "chunk_id", "links", "backlinks",
)  # fmt: skip


def build_server(
    kb: KnowledgeBase,
    refresh_interval: float = MCP_REFRESH_INTERVAL_S,
    search_wait: float = MCP_SEARCH_WAIT_S,
    config: Config | None = None,
) -> Server[Any]:
    """The MCP server for ``kb``, for in-process use (``mcp.Client(server)``) and :func:`run_stdio`.

    ``config``: the settings the docsets' indexes start from (default: the user's)."""
    return KnowledgeTools(kb, refresh_interval, search_wait=search_wait, config=config).server()
