"""The MCP tools over the core: :class:`KnowledgeTools` runs them on a
:class:`~mdrag.knowledge.KnowledgeBase` and keeps the docsets' indexes current.

Built on the official MCP Python SDK's low-level :class:`mcp.server.Server`,
which lets this package own the tool schemas (:mod:`mdrag.frontends.mcp.schema`) and the
errors: an :class:`~mdrag.errors.MdragError` is a tool result with ``isError:
true`` whose text says what to do next; an unknown tool name is a JSON-RPC
error ``-32601`` (method not found): the SDK leaves unknown names to the
``tools/call`` handler, which raises :class:`mcp.MCPError`.

Each docset has its own mdrag index (:mod:`mdrag.knowledge.docsets`), built or
updated by :func:`~mdrag.knowledge.docsets.update_docset_index`: by ``mdrag
knowledge init/refresh``, and by this server through one
:class:`~mdrag.ingest.keeper.IndexKeeper` per docset (the WebSocket server's index
upkeep; a gate shared by the keepers lets one docset's update run at a time),
which starts updating every docset's index when the server starts and again
when a ``search`` finds it older than
:data:`~mdrag.knobs.MCP_REFRESH_INTERVAL_S`. A ``search`` waits at most
:data:`~mdrag.knobs.MCP_SEARCH_WAIT_S` for an update (sending progress
notifications when the client asked for them), then answers with what is
ready: an index being refreshed is searched as it was; a docset whose first
index is still being built is reported with its progress (files done / total).

``search_docs`` must answer within 10 ms (REQ-9) and never indexes: the ranked
sections are added only when the docset's index is already open in this
process and the lookup finishes within :data:`~mdrag.knobs.MCP_HINT_BUDGET_S`
of the call's start. A lookup embeds the keywords and searches the index
(~15 ms on two CPU cores, measured), so it often misses the budget: it then
finishes in the background (one at a time) and is kept, and a later call with
the same keywords includes it at once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from mdrag import __version__
from mdrag.errors import DocsetError, IndexBuildingError, MdragError
from mdrag.frontends.mcp.schema import (
    SERVER_INSTRUCTIONS,
    SERVER_NAME,
    TOOL_NAMES,
    TOOLS,
    k_arg,
    query_arg,
    refs_arg,
    string_arg,
    terms_arg,
)
from mdrag.knobs import (
    MCP_HINT_BUDGET_S,
    MCP_HINT_CACHE_SIZE,
    MCP_HINT_SECTIONS,
    MCP_PROGRESS_EVERY_S,
    MCP_REFRESH_INTERVAL_S,
    MCP_SEARCH_WAIT_S,
)
from mdrag.knowledge import KnowledgeBase
from mdrag.knowledge.docsets import docset_folder, docset_index, index_name, update_docset_index

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.index import Index
    from mdrag.index.keeper import IndexKeeper
    from mdrag.ingest.summary import IndexSummary
    from mdrag.knowledge import Docset
    from mdrag.types import SearchResult

__all__ = ["KnowledgeTools", "Report", "build_server"]

log = logging.getLogger(__name__)


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
        refresh_interval: float = MCP_REFRESH_INTERVAL_S,
        hint_budget: float = MCP_HINT_BUDGET_S,
        search_wait: float = MCP_SEARCH_WAIT_S,
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
        """``{"docsets": [...]}`` as JSON text (REQ-2)."""
        return json.dumps({"docsets": self.kb.list_docsets()}, ensure_ascii=False)

    async def search_docs(self, args: Mapping[str, Any], start: float | None = None) -> str:
        """The docset's navigation instructions (REQ-1), and ranked sections when they come in time."""
        start = time.perf_counter() if start is None else start
        docset = string_arg(args, "docset")
        keywords = terms_arg(args, "keywords")
        text = self.kb.instructions(docset, keywords, terms_arg(args, "generalized_keywords"))
        if self._indexes:
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
        if out["results"]:
            out["hint"] = (
                "to read a result's whole document, call get with its docset and ref (ref:LINE_START-LINE_END "
                "for its lines, ref#HEADING for its section)"
            )
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

    async def get(self, args: Mapping[str, Any], several: bool) -> dict[str, Any]:
        """Documents of a docset (or parts), by the references ``get`` and ``multi_get`` take, read from disk:
        only the files its index holds (:mod:`mdrag.retrieval.documents`)."""
        ds = self.kb.resolve(string_arg(args, "docset"))
        refs = refs_arg(args) if several else string_arg(args, "ref")
        docset_folder(ds)  # checks its folder again
        entry = self._entry(ds)
        if not await anyio.to_thread.run_sync(lambda: entry.index.files):
            progress = entry.progress()
            if progress is not None:
                raise DocsetError(
                    f"docset {ds.id!r} is being indexed ({_progress_text(progress)}): get reads the files its "
                    f"index holds, so call it again shortly, or read the file under {ds.local_path} yourself"
                )
        stop = threading.Event()  # set when the call is cancelled (its client has gone): the get reads no more
        try:
            fetched = await anyio.to_thread.run_sync(entry.index.get, refs, stop, abandon_on_cancel=True)
        finally:
            stop.set()
        return {"docset": ds.id, **fetched.to_dict()}

    # -- indexes -----------------------------------------------------------

    def _entry(self, ds: Docset) -> _DocsetIndex:
        """The docset's index and keeper, made (and its first update started) on first use."""
        project = self.kb.config().root.parent
        name = index_name(ds.id, project)
        entry = self._indexes.get(name)
        if entry is None:
            if not self._serving:
                raise MdragError("the MCP server is stopping: start it again")
            from mdrag.index.keeper import IndexKeeper

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
            await anyio.to_thread.run_sync(pending[0].keeper.wait, None, min(left, MCP_PROGRESS_EVERY_S))

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
        """Up to MCP_HINT_SECTIONS lines from the docset's open index, or "" when none come by ``deadline``."""
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
                        found = index.search(query, MCP_HINT_SECTIONS)
                        with self._hints_lock:
                            self._hints[key] = found
                            while len(self._hints) > MCP_HINT_CACHE_SIZE:
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
        "ref": r.rel_path,  # what `get` takes: a docset's index has one folder, so its relative path names the file
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
    refresh_interval: float = MCP_REFRESH_INTERVAL_S,
    search_wait: float = MCP_SEARCH_WAIT_S,
    config: Config | None = None,
) -> Server[Any]:
    """The MCP server for ``kb``, for in-process use (``mcp.Client(server)``) and :func:`run_stdio`.

    ``config``: the settings the docsets' indexes start from (default: the user's)."""
    return KnowledgeTools(kb, refresh_interval, search_wait=search_wait, config=config).server()
