"""`mdrag serve`: a WebSocket server around protocol + search + answer + reload.

The server owns its index for the whole run: it loads it (or builds it) in
the background while already accepting connections, answers queries from
the open index, and has its :class:`~mdrag.index.keeper.IndexKeeper` keep it
current: it watches the folders, rescans them every ``server.reload_interval``
seconds, runs the updates in its worker thread, commits a long one in steps,
and lets a watched change go ahead. Searches read only committed chunks, so an
update switches atomically; an index that holds a committed state is served
while its startup update runs. Stopping asks a running update to stop at its
next safe point and waits for it before the index is closed. A change to
the config file (seen by a :class:`~mdrag.index.watching.ConfigWatcher`)
applies the settings in :func:`live_settings` at once; any other change is
reported as needing a restart, and the server keeps the value it started with.

Each connection's messages are answered one at a time, in order (answers
stream over several frames); every reply repeats the ``id`` its request
carried, so that a client can tell which request an early error ("too many
requests waiting") refuses. At most ``server.max_pending`` wait. A client that disconnects cancels its work,
including the LLM request. The server keeps no conversation: a follow-up query
carries its earlier turns (``history``, see mdrag.answering.followup).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

from mdrag.answering import ask as qa
from mdrag.answering.followup import Turn
from mdrag.config import Config, load_config
from mdrag.errors import ConfigError, LLMError, MdragError, ProtocolError
from mdrag.frontends import protocol, web
from mdrag.frontends.access import (
    TOKEN_REFUSALS,
    cannot_listen,
    check_bind,
    origin_allowed,
    repeated_header,
    repeated_refusal,
    token_problem,
)
from mdrag.frontends.protocol import is_loopback
from mdrag.frontends.web import source
from mdrag.index import Index
from mdrag.index.keeper import IndexKeeper, KeeperState
from mdrag.index.watching import ConfigWatcher
from mdrag.knobs import MESSAGE_CEILING_BYTES
from mdrag.retrieval.search import build_filter
from mdrag.retrieval.shown import no_results, result_fields
from mdrag.settings import DEFAULTS, LIVE
from mdrag.types import SearchResult

__all__ = ["LIVE_SETTINGS", "QAServer", "live_settings"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Settings a running server applies as soon as the config file changes: those declared ``live`` in
#: mdrag.settings. Any other setting needs a restart: the server reports the change and keeps the value it
#: started with.
LIVE_SETTINGS = LIVE


def live_settings(config: Config) -> frozenset[str]:
    """The settings a server started with ``config`` applies live: LIVE_SETTINGS, less the
    shared ``api.*`` settings when its embedder uses them too (it keeps what it started with)."""
    live = set(LIVE_SETTINGS)
    if config["embedding.provider"] == "openai":
        live -= {k for k in ("api.base_url", "api.api_key") if not config["embedding." + k.split(".")[1]]}
    return frozenset(live)


class QAServer:
    """The Q&A server: ``await start()``, then ``await wait_closed()`` or ``await stop()``."""

    def __init__(
        self,
        config: Config,
        folders: Sequence[str | Path] = (),
        overrides: dict[str, Any] | None = None,
        index: Index | None = None,
    ) -> None:
        self.config = config  # current settings; replaced when the config file changes
        self.started_with = config  # the settings that need a restart keep these values
        self.restart_needed: list[str] = []  # settings the config file changed that need a restart
        self.overrides = dict(overrides or {})  # command-line settings, kept across config reloads
        # Folders to add at start; then the index's folders as its last run recorded them (`mdrag index DIR`
        # and `mdrag remove DIR` from another process change them), which the keeper watches and rescans.
        self.folders = [str(Path(f).expanduser().resolve()) for f in folders]
        self.index = index  # the open index (created in _load when None)
        self.keeper: IndexKeeper | None = None  # keeps the index current: watches and rescans (made in _load)
        self._config_watcher: ConfigWatcher | None = None  # applies config file changes (made in start)
        self.host = ""  # bound address, known after start()
        self.port = 0  # bound port, known after start() (useful with port 0)
        self._loaded = asyncio.Event()  # the keeper's state left "loading"
        self._threads: set[asyncio.Future[Any]] = set()  # index work in threads: stop() waits for it
        self._server: Any = None  # websockets Server
        self._tasks: set[asyncio.Task[Any]] = set()  # background tasks, cancelled on stop
        self._http: Any = None  # httpx2.AsyncClient shared by LLM requests (keep-alive connections)
        self._page = web.load_static()  # the browser page, answered to plain HTTP requests on the same port
        # The model's first inference runs alone: a second one beside it can hang both for good (OpenVINO's
        # do). Held by the warm-up, and by each search until one has gone through the model.
        self._first = asyncio.Lock()
        self._warm = False  # a warm-up or a search has gone through the model: searches no longer queue
        self.ready = asyncio.Event()  # set once the index is loaded (or known to be empty), or loading failed
        self.failed: str | None = None  # why loading the index failed; the server must then stop

    # -- lifecycle ---------------------------------------------------------
    async def start(self) -> None:
        import httpx2
        from websockets.asyncio.server import serve

        host, port = self.config["server.host"], self.config["server.port"]
        check_bind(host, self.config["server.token"])
        try:
            self._server = await serve(
                self._handle,
                host,
                port,
                process_request=self._check_request,
                max_size=MESSAGE_CEILING_BYTES,
                ping_interval=20,
                server_header=None,
            )
        except OSError as e:  # the port is taken, the address is not this machine's, ...
            raise cannot_listen(e, host, port, "mdrag serve", "server.port") from None
        self._http = httpx2.AsyncClient(follow_redirects=False, limits=httpx2.Limits(max_connections=64))
        sock = self._server.sockets[0].getsockname()
        self.host, self.port = sock[0], sock[1]
        self._spawn(self._load())
        loop = asyncio.get_running_loop()
        # reload_config changes the server's state: it runs in the event loop, not in the watcher's thread
        self._config_watcher = ConfigWatcher(self.config.home, lambda: loop.call_soon_threadsafe(self.reload_config))
        self._config_watcher.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"

    async def wait_closed(self) -> None:
        await self._server.wait_closed()

    async def stop(self) -> None:
        """Stop serving; a running reload stops at its next safe point, and the index is closed after it."""
        if self._config_watcher is not None:
            await asyncio.to_thread(self._config_watcher.close)
        self._loaded.set()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._http is not None:
            await self._http.aclose()
        if self.keeper is not None:
            await asyncio.to_thread(self.keeper.close)  # its watch ends; a running update stops at its next file
        # A cancelled task stopped waiting for its thread, not the thread: wait for it here.
        await asyncio.gather(*self._threads, return_exceptions=True)
        if self.index is not None:
            await asyncio.to_thread(self.index.close)  # waits for searches still running in threads

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _in_thread(self, fn: Callable[[], T]) -> T:
        """``fn()`` in a worker thread. A caller that is cancelled stops waiting, but the
        thread runs on until ``fn`` returns: stop() waits for it before closing the index."""
        work = asyncio.ensure_future(asyncio.to_thread(fn))
        self._threads.add(work)
        work.add_done_callback(self._threads.discard)
        return await asyncio.shield(work)

    # -- the index's state, kept by the keeper --------------------------------
    @property
    def state(self) -> str:
        """loading | ready | empty | failed"""
        return self.keeper.state.state if self.keeper is not None else "loading"

    @property
    def files(self) -> int:
        """Indexed files, as last committed."""
        return self.keeper.state.files if self.keeper is not None else 0

    @property
    def chunks(self) -> int:
        """Indexed chunks, as last committed."""
        return self.keeper.state.chunks if self.keeper is not None else 0

    @property
    def reloads(self) -> int:
        """Updates finished, for tests and logs."""
        return self.keeper.state.updates if self.keeper is not None else 0

    # -- loading and reloading --------------------------------------------
    async def _load(self) -> None:
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            if self.index is None:
                self.index = Index(self.config)
            self.keeper = IndexKeeper(
                self.index,
                self.folders,
                on_change=lambda st: loop.call_soon_threadsafe(self._changed, st),
                watch=True,  # from the moment the index is loaded
                rescan_interval=self.config["server.reload_interval"],
            )
            self.keeper.start()
        except Exception as e:  # never left "loading" for good: clients would wait forever
            self._fail(e)
            return
        await self._loaded.wait()
        st = self.keeper.state
        if st.state == "failed":
            self.failed = st.error
            log.error("could not load index %r: %s", self.config["index"], st.error)
            self.ready.set()
            return
        log.info(
            "index %r %s: %d files, %d chunks (%.1f s)%s; serving on %s",
            self.config["index"],
            "ready" if st.state == "ready" else "has no indexed content",
            st.files,
            st.chunks,
            time.monotonic() - t0,
            "; updating it in the background" if st.indexing is not None or st.updates == 0 else "",
            self.url,
        )
        self.ready.set()
        if st.state == "ready":
            self._spawn(self._warm_up())
            await asyncio.sleep(0)  # the warm-up takes the model's first inference before any query

    def _fail(self, e: Exception) -> None:
        if isinstance(e, MdragError):
            self.failed = str(e)
            log.error("could not load index %r: %s", self.config["index"], e)
        else:
            self.failed = f"unexpected error ({type(e).__name__}: {e}); see the server log"
            log.exception("could not load index %r", self.config["index"])
        self.ready.set()

    def _changed(self, st: KeeperState) -> None:
        """The keeper's new state (in the event loop): leave loading; note the folders it names."""
        if st.state != "loading":
            self._loaded.set()
        if st.folders and st.folders != self.folders:
            self.folders = list(st.folders)

    async def _warm_up(self) -> None:
        """Load the model and the store's search structures before the first question needs them; the
        questions that come meanwhile wait for it (:meth:`_searching`)."""
        assert self.index is not None
        async with self._first:
            if self._warm:
                return
            t = time.monotonic()
            try:
                await self._in_thread(self.index.warm_up)
            except Exception as e:  # the first question will meet the same error and report it
                log.warning("could not prepare the index for searches: %s", e, exc_info=not isinstance(e, MdragError))
                return
            self._warm = True
        log.info("ready for searches: model and search structures loaded in %.1f s", time.monotonic() - t)

    async def _searching(self, fn: Callable[[], T]) -> T:
        """``fn()`` (a search) in a worker thread. Until a warm-up or a search has gone through the model,
        one at a time and after a running warm-up, so that no first inference runs beside another (two
        first OpenVINO inferences at once hung for good); a caller cancelled meanwhile lets the next one
        go once its thread is done. Then no wait at all."""
        if self._warm:
            return await asyncio.to_thread(fn)
        async with self._first:
            work = asyncio.ensure_future(asyncio.to_thread(fn))
            try:
                result = await asyncio.shield(work)
            except asyncio.CancelledError:
                await asyncio.wait([work])  # the model stays this thread's until it is done
                raise
            self._warm = True  # went through the model (a refused query raised before this line)
            return result

    def _reload(self, why: str, paths: list[str] | None = None) -> None:
        """Ask the keeper for an update (of ``paths`` only, ahead of any other, when given)."""
        if self.keeper is not None:
            self.keeper.request(why, paths)

    def reload_config(self) -> bool:
        """Re-read the config file, keeping command-line overrides; a bad file changes nothing.

        The settings in :func:`live_settings` apply at once. Every other setting keeps the
        value the server started with; those the file changes are logged and listed in
        :attr:`restart_needed` (and in status messages) until a restart or until the file
        has them back.
        """
        try:
            new = load_config(self.overrides, home=self.config.home)
        except ConfigError as e:
            log.error("config file change ignored: %s (the previous settings stay)", e)
            return False
        start = self.started_with
        live = live_settings(start)
        keep = {k: (new if k in live else start) for k in DEFAULTS}
        applied = Config(
            {k: c[k] for k, c in keep.items()}, new.home, {k: c.sources[k] for k, c in keep.items()}, new.file
        )
        if not is_loopback(start["server.host"]) and not applied["server.token"]:
            log.error(
                "config file change ignored: it leaves no server.token while the server listens on %s, which "
                "would open it to the network; set a token, or restart the server bound to 127.0.0.1",
                start["server.host"],
            )
            return False
        restart = [k for k in DEFAULTS if k not in live and new[k] != start[k]]
        if restart:
            log.warning(
                "config file %s changes settings that need a restart to apply: %s (until then the server keeps "
                "the values it started with)",
                new.file,
                ", ".join(restart),
            )
        rescan = any(applied[k] != self.config[k] for k in live if k.startswith("index."))
        self.config, self.restart_needed = applied, restart
        if self.index is not None:
            self.index.config = applied  # read by each search and update
        if self.keeper is not None:
            self.keeper.rescan_interval = applied["server.reload_interval"]
        log.info("configuration reloaded from %s", new.file)
        if rescan and self.folders and self.state != "loading":
            self._reload("file selection settings changed")
        return True

    # -- connections --------------------------------------------------------
    async def _check_request(self, connection: Any, request: Any) -> Any:
        """Answer plain HTTP requests with the page, or a source it opens (mdrag.frontends.web.source);
        refuse WebSocket handshakes from browser pages of other origins, and from clients without the token;
        refuse any request that sends its Origin, Host or token twice."""
        repeated = repeated_header(name for name, _ in request.headers.raw_items())
        if repeated is not None:
            status, message = repeated_refusal(repeated)
            log.warning("refused a request with several %s headers", repeated)
            return connection.respond(status, message + "\n")
        if not web.is_handshake(request):
            if source.asks_for(request):  # a document of the index: checks origin and token itself
                return await source.respond(
                    request, self.index, self.config["server.token"], self.config["server.allowed_origins"]
                )
            return web.respond(self._page, request)  # static files, no data: no token needed
        origin = request.headers.get("Origin")
        if origin is not None and not origin_allowed(origin, self.config["server.allowed_origins"]):
            log.warning("refused a connection from origin %s", origin[:200])
            return connection.respond(HTTPStatus.FORBIDDEN, "Origin not allowed: mdrag serves local pages only.\n")
        token = self.config["server.token"]
        problem = token_problem(request.headers.get("Authorization"), request.path, token) if token else None
        if problem is not None:
            return connection.respond(HTTPStatus.UNAUTHORIZED, TOKEN_REFUSALS[problem] + "\n")
        return None

    def _status(self) -> dict[str, Any]:
        st = self.keeper.state if self.keeper is not None else KeeperState()
        status = protocol.status(st.state, self.config["index"], st.files, st.chunks, st.message())
        if st.indexing is not None:  # an update runs: how far it is
            status["indexing"] = {"files_done": st.indexing[0], "files_total": st.indexing[1]}
        if st.partial is not None and st.state == "ready":  # answers come from part of the files
            status["partial"] = {"files_done": st.partial[0], "files_total": st.partial[1]}
        running = self.index.running() if self.index is not None else None
        if running is not None and running.pid != os.getpid():  # another process (`mdrag index`) builds it
            status["other_process"] = dataclasses.asdict(running)
            status["message"] = f"{running.message()}; {status['message']}"
        status["restart_needed"] = list(self.restart_needed)  # settings changed in the file that need a restart
        return status

    async def _handle(self, ws: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=self.config["server.max_pending"])
        worker = asyncio.ensure_future(self._work(ws, queue))
        try:
            await ws.send(protocol.encode(self._status()))
            async for frame in ws:
                limit = self.config["server.max_message_bytes"]
                size = len(frame.encode() if isinstance(frame, str) else frame)
                rid: str | int | None = None  # the request's id, repeated by every reply to it
                try:
                    if size > limit:  # not read: no id either
                        raise ProtocolError(f"message too large ({size} bytes, at most {limit})")
                    item: Any = protocol.parse(frame)
                    rid = item.id
                except ProtocolError as e:
                    item = e
                    rid = protocol.request_id(frame) if size <= limit else None
                try:
                    queue.put_nowait((rid, item))
                except asyncio.QueueFull:
                    refused = protocol.error(
                        f"too many requests waiting on this connection (at most {queue.maxsize}); wait for the answers"
                    )
                    await ws.send(protocol.encode(protocol.reply(refused, rid)))
        except ConnectionClosed:
            pass
        finally:
            worker.cancel()  # a disconnect cancels the running answer and its LLM request
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await worker

    async def _work(self, ws: Any, queue: asyncio.Queue[Any]) -> None:
        while True:
            await self._respond(ws, *await queue.get())

    async def _respond(self, ws: Any, rid: str | int | None, item: Any) -> None:
        async def send(msg: dict[str, Any]) -> None:
            await ws.send(protocol.encode(protocol.reply(msg, rid)))

        if isinstance(item, ProtocolError):
            await send(protocol.error(str(item)))
            return
        if isinstance(item, protocol.StatusRequest):
            await send(self._status())
            return
        if getattr(item, "index", None) not in (None, self.config["index"]):
            await send(protocol.error(f"unknown index {item.index!r}: this server serves {self.config['index']!r}"))
            return
        if self.state == "loading":
            await send(self._status())  # "not ready": the client retries
            return
        try:
            if isinstance(item, protocol.SearchRequest):
                await self._search(item, send)
            else:
                await self._query(item, send)
        except (ProtocolError, LLMError) as e:  # about the request or the LLM settings: said to the client
            await send(protocol.error(str(e)))
        except MdragError as e:  # the store or the embedder: its text names server paths, so it stays in the log
            log.error("could not answer a %s request: %s", item.type, e, exc_info=log.isEnabledFor(logging.DEBUG))
            await send(protocol.error("the server could not search its index; see the server log"))
        except Exception:
            log.exception("unexpected error while answering")
            await send(protocol.error("internal error while answering; see the server log"))

    async def _search(self, req: protocol.SearchRequest, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        assert self.index is not None
        filters = req.filters.model_dump(exclude_none=True) if req.filters else None
        search = functools.partial(self.index.search, mode=req.mode, collapse=req.collapse)
        try:
            build_filter(filters)
            results = await self._searching(functools.partial(search, req.query, req.k, req.threshold, filters))
        except ConfigError as e:  # a filter the search refuses (a backslash in a path prefix, on Milvus)
            raise ProtocolError(str(e)) from None
        shared = self.index.shared_names[1]  # relative paths that two folders share: refs by absolute path
        threshold = self.index.config["search.threshold"] if req.threshold is None else req.threshold
        shown = [result_fields(r, shared) for r in results]
        await send(await self._partial(protocol.search_results(req.query, shown, no_results(threshold, bool(filters)))))

    async def _query(self, req: protocol.QueryRequest, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        assert self.index is not None
        found: list[SearchResult] | None = [] if self.state == "empty" else None  # empty: not searched
        history = [Turn(t.question, t.answer or "") for t in req.history or ()]  # the client keeps the conversation
        try:
            planning = functools.partial(qa.plan, self.index, req.question, found, history)
            # an empty index is not searched: no model either
            plan = await (asyncio.to_thread(planning) if found is not None else self._searching(planning))
        except ConfigError as e:  # what the search refuses of the request (an empty query), as for a search
            raise ProtocolError(str(e)) from None
        await send(protocol.stream_start())
        try:
            async with contextlib.aclosing(plan.stream(self._http)) as stream:
                async for piece in stream:
                    await send(protocol.stream_chunk(piece))
        except LLMError as e:  # the answer is cut short: the client still learns the passages it was made from
            await send(protocol.error(str(e), *self._sources(plan)))
            return
        await send(await self._partial(protocol.stream_end(*self._sources(plan))))  # the answer's [n] is sources[n-1]

    async def _partial(self, msg: dict[str, Any]) -> dict[str, Any]:
        """``msg``, with ``partial`` when it was made from part of the files (a first build goes on, or was
        stopped): how many, and a line that says so."""
        part = await asyncio.to_thread(self.index.partial) if self.index is not None else None
        return {**msg, "partial": part.to_dict()} if part is not None else msg

    def _sources(self, plan: qa.AnswerPlan) -> tuple[list[str], list[dict[str, Any]]]:
        """The paths of an answer's numbered sources (none once the LLM found no answer in them) and where to
        open each."""
        shared = self.index.shared_names[1] if self.index is not None else frozenset()
        return [s.path for s in plan.sources], [protocol.source_location(s, shared) for s in plan.sources]
