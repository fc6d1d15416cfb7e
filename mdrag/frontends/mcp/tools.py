"""The MCP tools over the core: :class:`KnowledgeTools` checks their arguments, runs them on a project's
docsets (a :class:`~mdrag.knowledge.KnowledgeBase` and its docsets' indexes), on the user's own indexes
(:class:`~mdrag.index.served.ServedIndexes`: those `mdrag index` made, `mdrag mcp --index NAME`), or on
both, and formats their results. The documents of both are resources too (:mod:`.resources`).

Built on the official MCP Python SDK's low-level :class:`mcp.server.Server`,
which lets this package own the tool schemas (:mod:`mdrag.frontends.mcp.schema`) and the
errors: an :class:`~mdrag.errors.MdragError` is a tool result with ``isError:
true`` whose text says what to do next; an unknown tool name is a JSON-RPC
error ``-32601`` (method not found): the SDK leaves unknown names to the
``tools/call`` handler, which raises :class:`mcp.MCPError`.

A named index is kept current by its keeper while the server runs: its folders are watched, and a file
that changes is indexed and found by the next ``search`` (which waits for a running update as below).
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
time: RESULTS.md, "Figures that were in code comments"), so it often misses the budget: it
runs in a thread of its own (one at a time), whatever becomes of the call, and is kept, and a later
call with the same keywords includes it at once
(:meth:`~mdrag.knowledge.indexes.DocsetIndexes.cached_search`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from mdrag import __version__
from mdrag.errors import DocsetError, MdragError, NoProjectError, ProtocolError
from mdrag.frontends.mcp.resources import Resources, Target
from mdrag.frontends.mcp.schema import (
    SERVER_NAME,
    filters_arg,
    instructions,
    k_arg,
    links_arg,
    mode_arg,
    query_arg,
    refs_arg,
    string_arg,
    terms_arg,
    tools,
)
from mdrag.index.served import (
    ServedIndex,
    ServedIndexes,
    ServedIndexesClosedError,
    ServedIndexState,
    UpdateProgress,
    files_progress,
)
from mdrag.knobs import (
    MCP_HINT_BUDGET_S,
    MCP_PROGRESS_EVERY_S,
    MCP_REFRESH_INTERVAL_S,
    MCP_SEARCH_WAIT_S,
)
from mdrag.knowledge import KnowledgeBase
from mdrag.knowledge.docsets import docset_folder
from mdrag.knowledge.indexes import DocsetIndexes, DocsetIndexesClosedError
from mdrag.pageurls import page_url
from mdrag.retrieval.shown import no_results, result_fields

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.knowledge import Docset
    from mdrag.types import SearchResult

__all__ = ["KnowledgeTools", "Report", "Target", "build_server", "no_project_hint", "serving"]

log = logging.getLogger(__name__)


def _text_result(text: str, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


def no_project_hint(e: NoProjectError) -> str:
    """``e`` with the other ways to serve something: a project named where it is, or the user's own indexes."""
    return (
        f"{e}. Or start the server with `mdrag mcp --project DIR` (or MDRAG_PROJECT=DIR) for a project "
        "elsewhere, or with `mdrag mcp --index NAME` to serve an index made by `mdrag index`."
    )


# -- the tools ---------------------------------------------------------------

Report = Callable[[float, float | None, str | None], Awaitable[None]]  # progress, total, message


class KnowledgeTools:
    """The tools over a project's docsets (``kb``), the user's own ``indexes``, or both;
    :meth:`server` wraps them in MCP.

    :meth:`call` is the ``tools/call`` handler without the protocol: it returns
    a ``CallToolResult`` (errors included) or raises ``MCPError`` for an unknown
    tool name. Index updates run within :meth:`running` (the server's lifespan).
    """

    def __init__(
        self,
        kb: KnowledgeBase | None,
        refresh_interval: float = MCP_REFRESH_INTERVAL_S,
        hint_budget: float = MCP_HINT_BUDGET_S,
        search_wait: float = MCP_SEARCH_WAIT_S,
        config: Config | None = None,
        indexes: ServedIndexes | None = None,
    ) -> None:
        self.kb = kb  # docsets, templates, config discovery and reload; None: no docsets are served
        self.served = indexes  # the user's own indexes; None: none are served
        self.hint_budget = hint_budget  # seconds search_docs may spend on ranked sections
        self.search_wait = search_wait  # seconds `search` waits for an index update
        # the docsets' indexes (started from ``config``; None: the user's settings), kept current in the
        # background within running(); `search` refreshes one older than refresh_interval
        self.indexes = DocsetIndexes(kb, config, refresh_interval) if kb is not None else None
        self.tools = tools(kb is not None, indexes.names if indexes is not None else ())

    @property
    def index_names(self) -> list[str]:
        """The names of the indexes served ([] when none)."""
        return self.served.names if self.served is not None else []

    @property
    def has_docsets(self) -> bool:
        """A project's docsets are served."""
        return self.kb is not None

    # -- MCP ---------------------------------------------------------------

    def server(self) -> Server[Any]:
        """An MCP server (the SDK's low-level ``Server``) serving these tools and the documents as resources."""
        resources = Resources(self)

        async def list_tools(
            ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return types.ListToolsResult(tools=list(self.tools))

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
            instructions=instructions(self.kb is not None, self.served.names if self.served is not None else ()),
            lifespan=lifespan,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resources=resources.list_resources,
            on_list_resource_templates=resources.list_templates,
            on_read_resource=resources.read_resource,
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve: every index starts updating (and watching its folders) in the background; at the end the
        updates stop (at their next file: the next run finishes them) and the indexes close."""
        try:
            if self.indexes is not None:
                self.indexes.start()
            if self.served is not None:
                await anyio.to_thread.run_sync(self.served.start)
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
        if name not in {t.name for t in self.tools}:
            raise MCPError(
                code=types.METHOD_NOT_FOUND,
                message=f"Unknown tool {name!r}: this server has {', '.join(t.name for t in self.tools)}",
                data=name,
            )
        try:
            if name == "search_docs":
                return _text_result(await self.search_docs(arguments, start))
            if name == "list_docsets":
                return _text_result(self.list_docsets())
            if name == "search":
                return _text_result(json.dumps(await self.search(arguments, report), ensure_ascii=False))
            if name in ("get", "multi_get"):
                return _text_result(json.dumps(await self.get(arguments, name == "multi_get"), ensure_ascii=False))
            return _text_result(json.dumps(await self.status(arguments), ensure_ascii=False))
        except NoProjectError as e:
            return _text_result(no_project_hint(e), is_error=True)
        except MdragError as e:
            return _text_result(str(e), is_error=True)
        except Exception as e:  # a bug or a library failure: logged, and told to the assistant
            log.exception("tool %s failed", name)
            return _text_result(f"{name} failed: {type(e).__name__}: {e}", is_error=True)

    # -- the tools ---------------------------------------------------------

    def list_docsets(self) -> str:
        """``{"docsets": [...]}`` as JSON text: each configured docset's id, name, version, aliases and
        local_path."""
        assert self.kb is not None  # the tool is listed only with docsets
        return json.dumps({"docsets": self.kb.list_docsets()}, ensure_ascii=False)

    async def search_docs(self, args: Mapping[str, Any], start: float | None = None) -> str:
        """The docset's navigation instructions (where to search, with the user's text search tools, for the
        keywords, then the generalized ones), and ranked sections when they come in time."""
        assert self.kb is not None and self.indexes is not None  # the tool is listed only with docsets
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
        """Ranked sections from the served indexes and docsets (or the one named), after at most
        ``search_wait`` for their updates."""
        deadline = time.monotonic() + self.search_wait
        query = query_arg(args)
        k = k_arg(args)
        mode = mode_arg(args)
        filters = filters_arg(args) or None
        targets, skipped, single = self._search_targets(args)
        if not targets and not skipped:
            return {
                "query": query,
                "note": "no docsets are configured: add one to .knowledge/config.yaml",
                "results": [],
            }
        updates = {t: t.entry.updates for t in targets}  # with the updates finished before the wait
        await self._wait([t.entry for t in targets], deadline, report)

        hits: list[tuple[Target, SearchResult]] = []
        shared: dict[Target, frozenset[str]] = {}
        indexed: dict[str, ServedIndexState] = {}
        indexing: dict[str, UpdateProgress] = {}
        partial: dict[str, dict[str, Any]] = {}  # the indexes whose first build holds part of their files
        for t in targets:
            found = await anyio.to_thread.run_sync(t.entry.search, query, k, filters, mode)
            if found.results is not None:
                part = await anyio.to_thread.run_sync(t.entry.index.partial)
                if part is not None:
                    partial[t.id] = part.to_dict()
                indexed[t.id] = t.entry.state(refreshed=t.entry.updates > updates[t])
                hits.extend((t, r) for r in found.results)
                shared[t] = t.entry.index.shared_names[1]
                if not found.results and found.progress is not None:  # what the update writes may hold the answer
                    indexing[t.id] = found.progress
            elif found.progress is not None:
                indexing[t.id] = found.progress
            elif single:
                raise DocsetError(t.entry.error or f"{t.kind} {t.id!r} has no index yet: call search again")
            else:
                skipped[t.id] = t.entry.error or "no index yet: call search again"
        if skipped and not indexed and not indexing:
            raise DocsetError("no docset can be searched yet:\n" + "\n".join(skipped.values()))
        hits.sort(key=lambda h: -h[1].order_score)  # the docsets' merged by what ordered each
        out: dict[str, Any] = {"query": query}
        if indexing:
            out["note"] = _indexing_note(indexing)
            out["indexing"] = {name: p.to_dict() for name, p in indexing.items()}
        out["results"] = [_result_dict(t, r, shared[t]) for t, r in hits[:k]]
        if out["results"]:
            out["hint"] = (
                "to read a result's whole document, call get with its docset or index and its ref "
                "(ref:LINE_START-LINE_END for its lines, ref#HEADING for its section)"
            )
        if not hits and not indexing and targets:
            threshold = targets[0].entry.index.config["search.threshold"]
            out["note"] = no_results(threshold, bool(filters)) + (
                ", or search_docs to search the files yourself" if self.kb is not None else ""
            )
        if partial:  # answered from the files a growing first build has committed so far
            out["partial"] = partial
            said = "; ".join(f"{name}: {p['message']}" for name, p in partial.items())
            out["note"] = f"{out['note']} {said}" if "note" in out else said
        out["indexed"] = {name: state.to_dict() for name, state in indexed.items()}
        if skipped:
            out["skipped"] = skipped
        return out

    async def get(self, args: Mapping[str, Any], several: bool) -> dict[str, Any]:
        """Documents of an index or docset (or parts), by the references ``get`` and ``multi_get`` take, read
        from disk: only the files its index holds (:mod:`mdrag.retrieval.documents`)."""
        refs = refs_arg(args) if several else string_arg(args, "ref")
        return await self.read(self._one_target(args), refs, links_arg(args))

    async def read(self, t: Target, refs: str | list[str], links: bool = False) -> dict[str, Any]:
        """What ``get`` answers for ``refs`` of ``t``'s index (also a resource's text)."""
        progress = await anyio.to_thread.run_sync(t.entry.first_build)
        if progress is not None:
            folders = [self.kb.resolve(t.id).local_path] if t.kind == "docset" and self.kb else t.entry.index.folders
            where = f"the file under {folders[0]}" if folders else "the file"
            raise DocsetError(
                f"{t.kind} {t.id!r} is being indexed ({_progress_text(progress)}): get reads the files its "
                f"index holds, so call it again shortly, or read {where} yourself"
            )
        stop = threading.Event()  # set when the call is cancelled (its client has gone): the get reads no more
        try:
            fetched = await anyio.to_thread.run_sync(t.entry.index.get, refs, stop, links, abandon_on_cancel=True)
        finally:
            stop.set()
        out = fetched.to_dict()
        for doc in out["documents"]:  # a page of a website source: where it was fetched from, to cite
            if url := page_url(doc["path"], doc["rel_path"]):
                doc["url"] = url
        return {t.kind: t.id, **out}

    async def status(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """What each served index (or the one named) holds: state, files, chunks, last indexed, folders."""
        named = args.get("index") is not None or args.get("docset") is not None
        targets = [self._one_target(args)] if named else self.targets()
        return {"indexes": [await anyio.to_thread.run_sync(_status, t) for t in targets]}

    # -- the indexes ---------------------------------------------------------

    def targets(self) -> list[Target]:
        """Every served index and every docset whose folder exists (their indexes opened)."""
        out = [Target("index", e.index.name, e) for e in (self.served.opened() if self.served else [])]
        if self.kb is not None:
            for ds in self.kb.config().docsets:
                try:
                    out.append(Target("docset", ds.id, self._open(ds)))
                except DocsetError as e:
                    log.debug("docset %s left out: %s", ds.id, e)
        return out

    def target(self, kind: str, name: str, current: bool = False) -> Target:
        """The index ``name`` (``kind`` "index") or the docset ``name`` (an id or alias; its folder checked
        again, and refreshed when due with ``current``)."""
        if kind == "index":
            if self.served is None:
                raise ProtocolError("this server serves no indexes of its own (start it with --index NAME)")
            try:
                return Target("index", name, self.served.get(name))
            except ServedIndexesClosedError:
                raise MdragError("the MCP server is stopping: start it again") from None
        if self.kb is None:
            raise ProtocolError("this server serves no docsets (start it with --project DIR, or in a project)")
        ds = self.kb.resolve(name)
        return Target("docset", ds.id, self._open(ds, current))

    def _one_target(self, args: Mapping[str, Any]) -> Target:
        """The index or docset a get or status call names; the only served index when it names none."""
        index = string_arg(args, "index") if args.get("index") is not None else None
        docset = string_arg(args, "docset") if args.get("docset") is not None else None
        if index is not None and docset is not None:
            raise ProtocolError("give either 'index' or 'docset', not both")
        if docset is not None or (index is None and self.served is None):
            return self.target("docset", docset if docset is not None else string_arg(args, "docset"))
        if index is None:
            assert self.served is not None
            if len(self.served.names) > 1 or self.kb is not None:
                choices = ", ".join(self.served.names)
                raise ProtocolError(
                    f"missing argument 'index': name one of {choices}" + (" (or a docset)" if self.kb else "")
                )
            index = self.served.names[0]
        return self.target("index", index)

    def _search_targets(self, args: Mapping[str, Any]) -> tuple[list[Target], dict[str, str], bool]:
        """The targets of a search, those left out with why, and whether one was named."""
        index = string_arg(args, "index") if args.get("index") is not None else None
        docset = string_arg(args, "docset") if args.get("docset") is not None else None
        if index is not None and docset is not None:
            raise ProtocolError("give either 'index' or 'docset', not both")
        if index is not None:
            return [self.target("index", index)], {}, True
        if docset is not None:
            return [self.target("docset", docset, current=True)], {}, True
        targets = [Target("index", e.index.name, e) for e in (self.served.opened() if self.served else [])]
        skipped: dict[str, str] = {}
        docsets = self.kb.config().docsets if self.kb is not None else []
        for ds in docsets:
            try:
                targets.append(self.target("docset", ds.id, current=True))
            except DocsetError as e:
                if len(docsets) == 1 and not targets:
                    raise
                skipped[ds.id] = str(e)
        return targets, skipped, len(targets) + len(skipped) == 1

    def _open(self, ds: Docset, current: bool = False) -> ServedIndex:
        """The docset's index, its folder checked again (``current``: refreshed when due)."""
        assert self.indexes is not None
        try:
            if current:
                return self.indexes.ensure_current(ds)
            docset_folder(ds)
            return self.indexes.open(ds)
        except DocsetIndexesClosedError:
            raise MdragError("the MCP server is stopping: start it again") from None

    async def _wait(self, entries: Sequence[ServedIndex], deadline: float, report: Report | None) -> None:
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
        """Up to MCP_HINT_SECTIONS lines from the docset's open index, or "" when none come by ``deadline``.
        The lookup runs in its own thread whatever becomes of this call, so a call that comes too late to
        wait for it leaves it to finish for the next one."""
        assert self.kb is not None and self.indexes is not None
        try:
            query = keywords if isinstance(keywords, str) else ", ".join(keywords)
            lookup = self.indexes.cached_search(self.kb.resolve(docset), query)
            if lookup is None:
                return ""
            left = deadline - time.perf_counter()
            if left > 0 and not lookup.finished.is_set():
                with anyio.move_on_after(left):
                    await anyio.to_thread.run_sync(lookup.finished.wait, left, abandon_on_cancel=True)
            hits = lookup.results()
        except Exception:  # the sections are extra: never fail the instructions for them
            log.warning("ranked sections for search_docs failed", exc_info=True)
            return ""
        return "\n".join(f"- {_where(r)} (score {r.order_score:.2f})" for r in hits or [])

    async def aclose(self) -> None:
        """Stop the updates (at their next file: the next run finishes them) and close the indexes (and so
        the Milvus Lite file)."""
        if self.indexes is not None:
            await anyio.to_thread.run_sync(self.indexes.close)
        if self.served is not None:
            await anyio.to_thread.run_sync(self.served.close)


def _status(t: Target) -> dict[str, Any]:
    """The status tool's entry for one target (blocks: it reads the index's manifest and store)."""
    ks = t.entry.keeper.state
    progress = t.entry.progress()
    state = "indexing" if progress is not None and ks.state == "loading" else ks.state
    d: dict[str, Any] = {"index": t.entry.index.name}
    if t.kind == "docset":
        d["docset"] = t.id
    try:
        st = t.entry.index.status()
    except MdragError as e:
        return {**d, "state": "failed" if ks.state == "failed" else state, "error": str(e)}
    last = st.last_indexed
    d |= {
        "state": state,
        "files": st.files,
        "chunks": st.chunks,
        "last_indexed": datetime.fromtimestamp(last, timezone.utc).isoformat(timespec="seconds") if last else None,
        "folders": st.folders,
        "backend": st.backend,
        "model": st.model.get("model"),
    }
    if progress is not None:
        d["indexing"] = progress.to_dict()
    if ks.error:
        d["error"] = ks.error
    return d


def _indexing_note(indexing: Mapping[str, UpdateProgress]) -> str:
    parts = [f"{name} ({_progress_text(p)})" for name, p in indexing.items()]
    return (
        f"indexing in progress: {', '.join(parts)}. The results come from an index once it is built; "
        "meanwhile use search_docs to search a docset's files with your own tools, or call search again later."
    )


def _progress_text(p: UpdateProgress) -> str:
    if p.files_total is not None:
        return f"{p.files_done} of {p.files_total} files done"
    return "scanning its files" if p.state == "scanning" else "waiting for another index's indexing"


def _where(r: SearchResult) -> str:
    return f"{r.rel_path} > {r.heading}" if r.heading else r.rel_path


def _result_dict(t: Target, r: SearchResult, shared: frozenset[str]) -> dict[str, Any]:
    """A result as every front end shows it (:func:`~mdrag.retrieval.shown.result_fields`), its docset or index
    first, without the fields an assistant has no use for or that do not apply."""
    shown = result_fields(r, shared)
    for key in ("copies", "also"):
        shown[key] = [{k: v for k, v in c.items() if k in ("ref", "url") and v} for c in shown[key]] or None
    return {t.kind: t.id, **{key: shown[key] for key in _FIELDS if shown[key] is not None}}


_FIELDS = (  # of result_fields: the ranks and the metadata (links and backlinks besides) are left out
    "text", "path", "rel_path", "ref", "url", "heading", "heading_path", "page", "line_start", "line_end",
    "score", "cosine", "rerank_score", "chunk_id", "links", "backlinks", "copies", "also",
)  # fmt: skip


def build_server(
    kb: KnowledgeBase | None,
    refresh_interval: float = MCP_REFRESH_INTERVAL_S,
    search_wait: float = MCP_SEARCH_WAIT_S,
    config: Config | None = None,
    indexes: ServedIndexes | None = None,
) -> Server[Any]:
    """The MCP server for ``kb``'s docsets and the named ``indexes``, for in-process use
    (``mcp.Client(server)``) and :func:`run_stdio`.

    ``config``: the settings the docsets' indexes start from (default: the user's)."""
    return KnowledgeTools(kb, refresh_interval, search_wait=search_wait, config=config, indexes=indexes).server()


def serving(
    config: Config, indexes: Sequence[str] = (), project: Path | None = None, start: Path | None = None
) -> Server[Any]:
    """The MCP server `mdrag mcp` runs: the named ``indexes`` (made by `mdrag index`) and the docsets of
    ``project`` (a folder holding .knowledge/config.yaml, or under one: NoProjectError when there is none);
    with neither, the docsets of the project found from ``start`` (default: the current folder) upward,
    looked for again at each call (a missing project is said at start and by each call)."""
    from mdrag.knowledge.config import find_config

    allowed = config["knowledge.allowed_paths"]
    if project is not None:
        find_config(project)  # an explicit project must be one
        kb: KnowledgeBase | None = KnowledgeBase(project, allowed_outside=allowed)
    elif indexes:
        kb = None
    else:
        kb = KnowledgeBase(start, allowed_outside=allowed)
        try:
            find_config(start)
        except NoProjectError as e:
            log.warning("%s", no_project_hint(e))
    served = ServedIndexes(indexes, config, rescan_interval=config["server.reload_interval"]) if indexes else None
    return build_server(kb, config=config, indexes=served)
