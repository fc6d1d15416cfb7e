"""The `mdrag` command line: the only module that knows about argv and exit codes.

Exit codes: 0 ok, 1 error, 2 usage or configuration error, 130 interrupted,
141 stdout's reader went away (as for any Unix tool killed by SIGPIPE).
Progress and logs go to stderr, data to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mdrag import __version__
from mdrag.errors import ConfigError, MdragError
from mdrag.redact import redact_url

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.indexer import IndexProgress

__all__ = ["main", "run_ask"]

_SLOW_S = 1.0  # `serve` says it is loading when loading takes longer than this
_PROGRESS_S = 5.0  # then how often it says how far the build is
_EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away

log = logging.getLogger("mdrag")

_SERVER_HELP = (
    "ask this `mdrag serve` (ws://HOST:PORT) instead of opening the local index; without it, the server on "
    "server.port is asked only while it owns the local index"
)

EXAMPLES = {
    "index": "example: mdrag index ./docs ./notes   (later, plain `mdrag index` updates both; only changes are "
    "re-embedded)",
    "remove": "example: mdrag remove ./notes   (its chunks leave the index; the files stay on disk)",
    "search": 'example: mdrag search "how do I define a custom output format" -k 5 --json',
    "status": "example: mdrag status --json",
    "serve": 'example: mdrag serve ./docs --port 8765   (then, elsewhere: mdrag ask "how do I ...?")',
    "ask": 'example: mdrag ask "How do I create a custom shortcode?"   (no question: interactive)',
    "mcp": "example: register `mdrag mcp` (or `agentic-knowledge-mcp`) as a stdio server in your MCP client",
    "knowledge": "example: mdrag knowledge init react   |   mdrag knowledge refresh   |   mdrag knowledge status",
    "config": "example: mdrag config --json   (each setting's value and where it came from)",
    "eval": "example: mdrag eval benchmarks/data/hugo_qa.jsonl --index hugo   "
    "(BEIR: mdrag eval --queries queries.tsv --qrels qrels/test.tsv --doc-id stem)",
}


#: The flags that set a setting, by that setting, with their metavar: their type, choices, default and help
#: come from the setting's declaration (mdrag/settings.py), and the value lands in ``args`` under its key.
_SETTING_FLAGS: dict[str, tuple[str, str | None]] = {
    "index": ("--index", "NAME"),
    "milvus_uri": ("--milvus-uri", "URI"),
    "store.backend": ("--store", None),
    "chunk.size": ("--chunk-size", "N"),
    "chunk.overlap": ("--chunk-overlap", "N"),
    "search.k": ("-k", "N"),
    "search.threshold": ("--threshold", "S"),
    "search.mode": ("--mode", None),
    "search.collapse": ("--collapse", None),
    "server.host": ("--host", None),
    "server.port": ("--port", None),
    "server.reload_interval": ("--reload-interval", "S"),
    "server.token": ("--token", None),
    "server.allowed_origins": ("--allow-origin", "ORIGIN"),
}


def _setting_flag(p: argparse.ArgumentParser, key: str) -> None:
    """Add the flag of setting ``key`` (:data:`_SETTING_FLAGS`), made from the setting's declaration."""
    from mdrag.settings import FIELDS, choices, shown_default

    flag, metavar = _SETTING_FLAGS[key]
    field = FIELDS[key]
    values = choices(key)
    metavar = metavar or (None if values else flag.lstrip("-").upper())  # choices show themselves
    options: dict[str, Any] = {"dest": key, "metavar": metavar, "choices": values}
    text = re.sub(r'see "([^"]+)"( below)?', lambda m: f'see the README\'s "{m[1]}"', field.description or "")
    if field.annotation is int:
        options["type"] = int
    elif field.annotation == int | float:
        options["type"] = float
    elif field.annotation == list[str]:
        options["action"] = "append"
        text += " (repeatable)"
    text = f"{text} (default: {shown_default(key)}; setting: {key})"
    p.add_argument(flag, help=text.replace("`", "").replace("%", "%%"), **options)


def _common(p: argparse.ArgumentParser) -> None:
    _setting_flag(p, "index")
    _setting_flag(p, "milvus_uri")
    _setting_flag(p, "store.backend")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mdrag",
        description="Local-first retrieval over Markdown, PDF, DOCX and HTML documentation.",
        epilog="Settings: $MDRAG_HOME/config.yaml (default ~/.md-qa), MARKDOWN_QA_* variables, flags.",
    )
    parser.add_argument("--version", action="version", version=f"mdrag {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("index", help="add or update folders in the index (incrementally)", epilog=EXAMPLES["index"])
    p.add_argument(
        "folders",
        nargs="*",
        metavar="DIR",
        help="folders to add or update; the index's other folders are kept (default: all of the index's "
        "folders; for a new index, setting folders, ./markdown)",
    )
    p.add_argument("--rebuild", action="store_true", help="drop the index and build it again")
    _setting_flag(p, "chunk.size")
    _setting_flag(p, "chunk.overlap")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _common(p)

    p = sub.add_parser("remove", help="take folders out of the index", epilog=EXAMPLES["remove"])
    p.add_argument("folders", nargs="+", metavar="DIR", help="folders of the index to remove (they need not exist)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _common(p)

    p = sub.add_parser("search", help="search the index", epilog=EXAMPLES["search"])
    p.add_argument("query", help="what to look for, in plain words")
    _setting_flag(p, "search.k")
    _setting_flag(p, "search.threshold")
    p.add_argument(
        "--path",
        metavar="PREFIX",
        help="only files whose path starts with PREFIX: relative to the indexed folder (as results show "
        "it) or absolute; end it with / for a folder (docs/api also matches docs/api-old)",
    )
    p.add_argument("--tag", action="append", metavar="TAG", help="only files with this frontmatter tag (repeatable)")
    _setting_flag(p, "search.mode")
    _setting_flag(p, "search.collapse")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.add_argument("--server", metavar="URL", help=_SERVER_HELP)
    _setting_flag(p, "server.token")
    _common(p)

    p = sub.add_parser("status", help="show what the index holds", epilog=EXAMPLES["status"])
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument(
        "--verify",
        action="store_true",
        help="check every row of the store against what its last run recorded, not only what is cheap to check",
    )
    p.add_argument("--server", metavar="URL", help=_SERVER_HELP)
    _setting_flag(p, "server.token")
    _common(p)

    p = sub.add_parser("serve", help="run the WebSocket Q&A server", epilog=EXAMPLES["serve"])
    p.add_argument(
        "folders",
        nargs="*",
        metavar="DIR",
        help="folders to add to the index; all of the index's folders are indexed and watched (default: "
        "the index's folders; for a new index, setting folders)",
    )
    for key in ("server.host", "server.port", "server.reload_interval", "server.token", "server.allowed_origins"):
        _setting_flag(p, key)
    _common(p)

    p = sub.add_parser("ask", help="ask the server a question", epilog=EXAMPLES["ask"])
    p.add_argument("question", nargs="?", help="the question; none: interactive prompt")
    p.add_argument("--server", metavar="URL", help="server address (default ws://localhost:PORT from server.port)")
    _setting_flag(p, "server.token")
    _common(p)

    p = sub.add_parser("eval", help="measure retrieval quality on known questions", epilog=EXAMPLES["eval"])
    p.add_argument("questions", nargs="?", help="JSON Lines: question, gold (list of paths)")
    p.add_argument("--queries", help="BEIR queries (JSON Lines or TSV), with --qrels")
    p.add_argument("--qrels", help="BEIR qrels TSV (query-id, corpus-id, score)")
    p.add_argument("--doc-id", choices=["path", "stem"], default="path", help="match gold by path or by file stem")
    p.add_argument("--mode", choices=["dense", "bm25", "hybrid", "all"], default="all", help="ranking mode(s)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    _common(p)

    p = sub.add_parser("config", help="show the settings in effect and where each came from", epilog=EXAMPLES["config"])
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument("--markdown", action="store_true", help="print every setting's default and help as a Markdown table")
    _common(p)

    p = sub.add_parser("mcp", help="run the MCP server for AI assistants (stdio)", epilog=EXAMPLES["mcp"])
    _setting_flag(p, "store.backend")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")

    p = sub.add_parser("knowledge", help="manage docsets (.knowledge/config.yaml)", epilog=EXAMPLES["knowledge"])
    ks = p.add_subparsers(dest="action", metavar="ACTION")
    ks.required = True
    for name, text in (
        ("init", "download a docset's web sources and build its index"),
        ("refresh", "update web sources and indexes (all docsets, or one)"),
        ("status", "show when each web source was last updated"),
    ):
        kp = ks.add_parser(name, help=text, epilog=EXAMPLES["knowledge"])
        if name == "init":
            kp.add_argument("docset", help="the docset id from .knowledge/config.yaml")
        elif name == "refresh":
            kp.add_argument("docset", nargs="?", help="only this docset")
        kp.add_argument("--json", action="store_true", help="print the result as JSON")
        kp.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
        kp.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
        _setting_flag(kp, "store.backend")
    return parser


def _safe(text: str) -> str:
    """``text`` without what could drive the terminal: file names and texts from documents are printed."""
    from mdrag.client import sanitize

    return sanitize(text)


def _name(text: str) -> str:
    """A file name or heading for a line of output: :func:`_safe`, with line breaks shown as ``\\n`` and
    ``\\r`` (a name with a newline would start what looks like a line of its own)."""
    return _safe(text).replace("\r", "\\r").replace("\n", "\\n")


class _TerminalSafe(logging.Formatter):
    """Log lines as :func:`_safe` makes them."""

    def format(self, record: logging.LogRecord) -> str:
        return _safe(super().format(record))


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.ERROR if args.quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TerminalSafe("mdrag: %(levelname)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    # pymilvus logs every failed RPC with a traceback; mdrag reports the error itself.
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL if args.verbose < 2 else logging.DEBUG)
    for noisy in ("sentence_transformers", "transformers", "httpx2", "openai", "pypdf"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING) if args.verbose < 2 else logging.DEBUG)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings that the command line's flags set (:data:`_SETTING_FLAGS`)."""
    return {key: v for key in _SETTING_FLAGS if (v := getattr(args, key, None)) is not None}


class _IndexBar:
    """The progress bar of an indexing run on stderr (tqdm), drawn from the run's
    :class:`~mdrag.indexer.IndexProgress`: chunks written out of the chunks the run
    will write, with the files read and the stage it is in.

    The total is known once every file is read; until then it is estimated from the
    files read so far (their chunks per file, times the files to read), shown with
    a ``~``. It appears once a run has taken a second: quick runs print nothing. A
    thread draws it again every second, so that its clock moves while the run waits
    (for the model to load, for a slow file, for the store to save).
    """

    _TICK_S = 1.0

    def __init__(self, shown: bool = True) -> None:
        self._shown = shown
        self._bar: Any = None  # tqdm, made at the first event
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> _IndexBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.close()

    def __call__(self, p: IndexProgress) -> None:
        if not self._shown:
            return
        if self._bar is None:
            self._bar = _make_bar()
            self._ticker = threading.Thread(target=self._tick, name="mdrag-progress", daemon=True)
            self._ticker.start()
        bar = self._bar
        bar.total, bar.estimated = _chunks_in_all(p)
        bar.set_description_str(p.stage, refresh=False)
        bar.set_postfix_str(f"files {p.files_read}/{p.files_total} read", refresh=False)
        bar.update(p.chunks_done - bar.n)  # draws, at most every 0.2 s

    def _tick(self) -> None:
        while not self._stop.wait(self._TICK_S):
            if time.time() - self._bar.start_t >= self._bar.delay:
                self._bar.refresh()


def _chunks_in_all(p: IndexProgress) -> tuple[int, bool]:
    """The chunks the run will write, and whether that is an estimate: the files left to read are
    taken to have as many chunks each as the files read so far."""
    left = p.files_total - p.files_read
    if left <= 0 or p.stage == "saving":
        return p.chunks_known, False
    if not p.files_read:
        return 0, True
    return p.chunks_known + round(left * p.chunks_known / p.files_read), True


def _make_bar() -> Any:
    from tqdm import tqdm

    class Bar(tqdm):  # type: ignore[type-arg]
        estimated = False  # the total is an estimate: shown with a ~ (? while no file is read)

        @property
        def format_dict(self) -> dict[str, Any]:
            shown = str(self.total) if not self.estimated else f"~{self.total}" if self.total else "?"
            return {**super().format_dict, "shown_total": shown}

    return Bar(
        total=0,
        unit="chunk",
        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{shown_total} chunks "
        "[{elapsed}<{remaining}, {rate_fmt}{postfix}]",
        leave=False,
        delay=1.0,
        mininterval=0.2,
        miniters=0,  # every event may draw (at most every mininterval), whatever its step
        smoothing=0.1,  # the rate over the last ~10 draws: each round of the embedder starts with its short texts
        file=sys.stderr,
    )


def _cmd_index(args: argparse.Namespace, index: Any) -> int:
    with _IndexBar(shown=not args.quiet) as bar:
        summary = index.update(args.folders or None, rebuild=args.rebuild, progress=bar)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
    else:
        s = summary
        if s.rebuild:
            print(f"full re-index: {s.rebuild}")
        if s.waited_s:
            print(f"waited {s.waited_s:.1f} s for another mdrag run on this index: what it indexed is not done again")
        if s.repaired:
            print("repaired the index: an interrupted run, or damage that its store or `status --verify` found")
        print(
            f"files: {s.added} added, {s.modified} modified, {s.deleted} deleted, "
            f"{s.unchanged} unchanged"
            + (f" ({s.touched} touched, already embedded)" if s.touched else "")
            + f", {s.skipped} skipped"
            + (f" ({s.parser_errors} by a parser error: -vv logs the traceback)" if s.parser_errors else "")
            + (f", {s.kept} kept (folder missing or unreadable)" if s.kept else "")
            + (f", {s.excluded} excluded" if s.excluded else "")
        )
        if s.unsupported:
            n = sum(s.unsupported.values())
            kinds = ", ".join(f"{ext} {count}" for ext, count in s.unsupported.items())
            print(f"not indexed: {n} files with no parser ({kinds}; -v lists them)")
        for path, encoding in s.decoded.items():
            print(f"decoded {_name(path)} as {_name(encoding)}")
        _print_chunks(s)
        for path, reason in s.skipped_files:
            print(f"skipped {_name(path)}: {_safe(reason)}")
        print(f"folders: {', '.join(s.folders) or '-'}")
        print(f"done in {s.seconds:.2f} s")
    return _missing_given(args.folders, summary.missing_folders)


def _missing_given(given: list[str] | None, missing: list[str]) -> int:
    """1, with an error, when a folder named on the command line was not found or is a file (the rest is
    indexed)."""
    from mdrag.scan import not_a_folder

    named = [f for f in given or () if str(Path(f).expanduser().resolve()) in missing]
    if not named:
        return 0
    files = [f for f in named if Path(f).expanduser().is_file()]
    gone = [f for f in named if f not in files]
    if gone:
        print(
            _safe(
                f"mdrag: error: not found, so not indexed: {', '.join(gone)}. "
                "Check the path; the index is unchanged for it."
            ),
            file=sys.stderr,
        )
    for f in files:
        print(_safe(f"mdrag: error: not indexed: {not_a_folder(f)}. The index is unchanged for it."), file=sys.stderr)
    return 1


def _print_chunks(s: Any) -> None:
    print(
        f"chunks: {s.chunks_embedded} embedded, {s.chunks_reused} already embedded, "
        f"{s.chunks_deleted} deleted, {s.chunks_total} in the index"
    )


def _cmd_remove(args: argparse.Namespace, index: Any) -> int:
    summary = index.remove(args.folders)
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2))
        return 0
    print(f"removed {', '.join(summary.removed_folders)}: {summary.deleted} files")
    _print_chunks(summary)
    print(f"folders: {', '.join(summary.folders) or '-'}")
    return 0


def _server_url(config: Any) -> str:
    host = config["server.host"]
    host = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::", "") else host
    return f"ws://{host}:{config['server.port']}"


def _through_server(config: Any, message: dict[str, Any], why: Exception | None, url: str | None) -> dict[str, Any]:
    """Ask `mdrag serve`: the one at ``url``, or, while it owns the local index (``why``), the configured one."""
    from mdrag.client import Client, ServerUnavailableError

    url = url or _server_url(config)
    try:
        with Client(url, token=config["server.token"]) as client:
            return client.request(message)
    except ServerUnavailableError:
        if why is None:
            raise
        raise MdragError(f"{why} No mdrag server answers at {url} either.") from why


def _search_message(args: argparse.Namespace) -> dict[str, Any]:
    """The `search` message for the server: the query, and the options the command line sets (the
    server's settings apply to the others)."""
    msg: dict[str, Any] = {"type": "search", "query": args.query}
    options = {key: getattr(args, f"search.{key}") for key in ("k", "threshold", "mode", "collapse")}
    msg.update((key, value) for key, value in options.items() if value is not None)
    filters = _filters(args)
    if filters:
        msg["filters"] = filters
    if args.index is not None:
        msg["index"] = args.index
    return msg


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    if args.path:
        filters["path_prefix"] = args.path
    if args.tag:
        filters["tags"] = args.tag
    return filters


def _cmd_search(args: argparse.Namespace, config: Any, index: Any | None) -> int:
    """`mdrag search`: from the local index, or through the server (``index`` None: --server was given)."""
    from mdrag.errors import StoreInUseError

    if index is None:
        results = _through_server(config, _search_message(args), None, args.server)["results"]
    else:
        try:
            results = [r.to_dict() for r in index.search(args.query, filters=_filters(args) or None)]
        except StoreInUseError as e:
            results = _through_server(config, _search_message(args), e, args.server)["results"]
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
        return 0
    if not results:
        print(
            "no results: no chunk of the files the filters let through is above the threshold "
            "(try other words, or --threshold 0; check --path and --tag)"
            if _filters(args)
            else "no results above the threshold (try --threshold 0, or other words)"
        )
    for i, r in enumerate(results, 1):
        where = _name(r["rel_path"]) + (f" p.{r['page']}" if r["page"] else "")
        where += f":{r['line_start']}" if r["line_start"] else ""
        print(f"{i:2}. {r['score']:.3f}  {where}" + (f"  [{_name(r['heading'])}]" if r["heading"] else ""))
        snippet = " ".join(_safe(r["text"]).split())
        print(f"    {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
    return 0


def _cmd_status(args: argparse.Namespace, config: Any, index: Any | None) -> int:
    """`mdrag status`: of the local index, or of the server's (``index`` None: --server was given)."""
    from mdrag.errors import StoreInUseError

    if index is None:
        return _served_status(args, config, None)
    try:
        st = index.status(verify=args.verify)
    except StoreInUseError as e:
        return _served_status(args, config, e)
    if args.json:
        print(json.dumps(st, indent=2))
        return 1 if st["damaged"] else 0
    last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st["last_indexed"])) if st["last_indexed"] else "never"
    print(f"index:        {st['index']}")
    empty = "" if st["exists"] or st["damaged"] else "  (empty: run `mdrag index DIR`)"
    print(f"store:        {st['backend']}, {st['store_uri']}{empty}")
    print(f"model:        {st['model'].get('model')} ({st['model'].get('dimension')}-d)")
    print(f"folders:      {', '.join(st['folders']) or '-'}")
    print(f"files:        {st['files']}")
    print(f"chunks:       {st['chunks']}" + ("  (as its manifest lists them)" if st["model_mismatch"] else ""))
    print(f"last indexed: {last}" + ("  (interrupted: the next `mdrag index` repairs it)" if st["interrupted"] else ""))
    if st["model_mismatch"]:
        checked = "; --verify checked nothing: the store opens only with that embedder" if args.verify else ""
        print(f"note:         {st['model_mismatch']}{checked}")
    if st["damaged"]:
        print(f"damaged:      {st['damaged']}: run `mdrag index` to repair it")
        return 1
    return 0


def _served_status(args: argparse.Namespace, config: Any, why: Exception | None) -> int:
    reply = _through_server(config, {"type": "status"}, why, args.server)
    st = {"served_by": args.server or _server_url(config), **reply}
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print(
            f"index {st['index']} is served by {st['served_by']}: {st['state']}, "
            f"{st['files']} files, {st['chunks']} chunks"
        )
    return 0


async def _report_loading(server: Any) -> None:
    """Until ``server`` is ready, say every ``_PROGRESS_S`` how far the index's build is, when it changed."""
    import asyncio

    said = ""
    while not server.ready.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(server.ready.wait()), _PROGRESS_S)
        doing = server.keeper.state.doing() if server.keeper is not None else ""
        if doing and doing != said and not server.ready.is_set():
            print(f"mdrag: {doing}", file=sys.stderr, flush=True)
            said = doing


def _cmd_serve(args: argparse.Namespace, config: Any) -> int:
    import asyncio

    from mdrag.scan import not_a_folder
    from mdrag.server import QAServer

    missing = [f for f in args.folders if not Path(f).expanduser().exists()]
    if missing:  # refused before it starts: a server must not run on without a folder it was told to serve
        raise MdragError(f"not found: {', '.join(missing)}. Check the path; nothing was started.")
    wrong = [why for f in args.folders if (why := not_a_folder(f))]
    if wrong:
        raise MdragError(f"{'; '.join(wrong)}. Nothing was started.")

    async def run() -> None:
        server = QAServer(config, args.folders, overrides=_overrides(args))
        await server.start()
        try:
            try:  # say that it is loading only when loading is slow
                await asyncio.wait_for(asyncio.shield(server.ready.wait()), _SLOW_S)
            except asyncio.TimeoutError:
                print(f"mdrag: loading index {config['index']!r}...", file=sys.stderr, flush=True)
                await _report_loading(server)
            if server.failed:
                raise MdragError(f"could not load the index: {server.failed}")
            print(
                f"mdrag: listening on {server.url}: {server.files} files, {server.chunks} chunks"
                + ("" if server.chunks else " (no indexed content: give folders to index)")
                + f"; in a browser: {server.url.replace('ws://', 'http://', 1)}/",
                file=sys.stderr,
                flush=True,
            )
            await server.wait_closed()
        finally:
            await server.stop()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        print("mdrag: server stopped", file=sys.stderr)
    return 0


def _cmd_ask(args: argparse.Namespace, config: Any) -> int:
    url = args.server or _server_url(config)
    return run_ask(args.question, url, sys.stdout, sys.stderr, token=config["server.token"], index=args.index)


def _ask_again_if_lost(client: Any, question: str, printer: _Printer, index: str | None) -> list[str]:
    """``client.ask``, asked once more on a new connection when the last one was lost before any answer
    came (a server restarted between two questions at the prompt)."""
    from mdrag.client import ServerUnavailableError

    answered = False

    def chunk(text: str) -> None:
        nonlocal answered
        answered = True
        printer.chunk(text)

    try:
        return client.ask(question, chunk, index=index)
    except ServerUnavailableError:
        if answered:
            raise
        return client.ask(question, printer.chunk, index=index)  # the client connects again


def run_ask(
    question: str | None,
    url: str,
    out: TextIO,
    err: TextIO,
    token: str | None = None,
    input_fn: Callable[[str], str] = input,
    index: str | None = None,
) -> int:
    """`mdrag ask`: one question (exit after the answer) or, with ``question`` None, a prompt loop.

    Returns the exit code: 0 done, 1 error (server unreachable, connection lost,
    an error for a one-shot question, an answer cut short), 2 an invalid server
    address, 130 interrupted during a one-shot question. At the prompt, an error
    is printed and the prompt goes on; a lost connection is opened again; Ctrl+C
    during an answer stops it (the connection is closed, the next question opens
    another) and Ctrl+C or Ctrl+D at the prompt ends it.
    """
    from mdrag.client import Client, ServerUnavailableError

    def fail(message: str, code: int = 1) -> int:
        err.write(f"mdrag: error: {message}\n")
        err.flush()
        return code

    try:
        client = Client(url, token=token)
    except ValueError as e:
        return fail(str(e), 2)
    printer = _Printer(out)
    try:
        with client:
            status = client.server_status
            if question is not None:
                if status.get("state") == "loading":
                    err.write("mdrag: the server is still loading the index; waiting\n")
                    err.flush()
                try:
                    sources = client.ask(question, printer.chunk, index=index)
                except MdragError as e:
                    printer.end_line()
                    return fail(str(e))
                printer.sources(sources)
                return 0

            err.write(_describe(url, status) + "\n")
            err.flush()
            while True:
                try:
                    line = input_fn("question> ").strip()
                except EOFError:
                    printer.end_line()
                    return 0
                if not line:
                    continue
                if line.lower() in ("quit", "exit"):
                    return 0
                try:
                    sources = _ask_again_if_lost(client, line, printer, index)
                except MdragError as e:  # the server gone too: the next question connects again
                    printer.end_line()
                    err.write(f"error: {e}\n")
                    err.flush()
                    continue
                except KeyboardInterrupt:  # Ctrl+C stops this answer, not the prompt
                    client.close()  # the protocol's way to stop an answer: the server cancels it and its LLM request
                    printer.end_line()
                    err.write("answer stopped (Ctrl+C at the prompt, or Ctrl+D, quits)\n")
                    err.flush()
                    continue
                printer.sources(sources)
    except ServerUnavailableError as e:
        printer.end_line()
        return fail(str(e))
    except KeyboardInterrupt:
        printer.end_line()
        if question is None:
            return 0
        err.write("mdrag: interrupted\n")
        err.flush()
        return 130


def _describe(url: str, status: dict[str, Any]) -> str:
    """The one line `mdrag ask` shows when it is connected."""
    shown = redact_url(url)
    state = status.get("state")
    files, chunks = status.get("files"), status.get("chunks")
    if state == "loading":
        return f"connected to {shown} (the server is still loading the index)"
    if state == "empty" or (files == 0 and chunks == 0):
        return f"connected to {shown} (no documents indexed)"
    if isinstance(files, int) and isinstance(chunks, int):
        return f"connected to {shown} ({files} files, {chunks} chunks)"
    return f"connected to {shown}"


class _Printer:
    """Writes an answer as it streams, then its sources; knows whether the last line is open."""

    def __init__(self, out: TextIO) -> None:
        self.out = out  # where answers go (stdout)
        self.line_open = False  # something was written since the last newline

    def chunk(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
        self.line_open = not text.endswith("\n")

    def end_line(self) -> None:
        if self.line_open:
            self.out.write("\n")
            self.out.flush()
            self.line_open = False

    def sources(self, sources: list[str]) -> None:
        from mdrag.client import sanitize

        self.end_line()
        if sources:  # numbered as the answer cites them: [n] is the n-th, each on one line
            listed = "".join(f"  [{n}] {' '.join(sanitize(s).split())}\n" for n, s in enumerate(sources, 1))
            self.out.write("\nSources:\n" + listed)
        else:
            self.out.write("\nSources: none\n")
        self.out.flush()


def _cmd_eval(args: argparse.Namespace, index: Any) -> int:
    from pathlib import Path

    from mdrag import evaluate as ev

    if args.qrels or args.queries:
        if not (args.qrels and args.queries):
            raise ConfigError("BEIR evaluation needs both --queries and --qrels")
        questions = ev.load_beir(Path(args.queries), Path(args.qrels))
    elif args.questions:
        questions = ev.load_questions(Path(args.questions))
    else:
        raise ConfigError("give a questions file, or --queries and --qrels")
    modes = ev.MODES if args.mode == "all" else (args.mode,)
    result = ev.evaluate(index.search, questions, modes, doc_key=args.doc_id)
    result["search"] = {key: index.config[f"search.{key}"] for key in ("mode", "k", "threshold", "collapse")}
    result["unknown_gold"] = ev.unknown_gold(questions, index.files, doc_key=args.doc_id)
    if result["unknown_gold"]:
        unknown = result["unknown_gold"]
        log.warning(
            "%d gold document%s name%s no indexed file, so every question citing %s counts as a miss "
            "(a typo, or a file outside the index?): %s",
            len(unknown),
            "" if len(unknown) == 1 else "s",
            "s" if len(unknown) == 1 else "",
            "it" if len(unknown) == 1 else "them",
            ", ".join(unknown[:10]) + (", ..." if len(unknown) > 10 else ""),
        )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['questions']} questions ({result['without_gold']} without gold left out)")
    print("each one search as `mdrag search` runs it: " + ", ".join(f"{k} {v}" for k, v in result["search"].items()))
    print(f"{'mode':<8}{'nDCG@10':>9}{'R@10':>8}{'MRR':>8}{'Hit@5':>8}")
    for mode in modes:
        m = result[mode]
        print(f"{mode:<8}{m['ndcg@10']:>9.4f}{m['recall@10']:>8.4f}{m['mrr']:>8.4f}{m['hit@5']:>8.4f}")
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    from mdrag.config import load_config
    from mdrag.knowledge.config import keys_table
    from mdrag.settings import settings_table

    if args.markdown:  # README's two generated tables, each between the comments that mark it there
        for what, source, table in (
            ("settings table", "mdrag/settings.py", settings_table()),
            (".knowledge/config.yaml keys", "mdrag/knowledge/config.py", keys_table()),
        ):
            print(f"<!-- {what}: made by `mdrag config --markdown` from {source}; edit it there -->")
            print(f"{table}<!-- end of {what} -->\n")
        return 0
    config = load_config(_overrides(args))
    rows = config.explain()
    if args.json:
        print(
            json.dumps({"home": str(config.home), "file": config.file and str(config.file), "settings": rows}, indent=2)
        )
        return 0
    print(f"# config file: {config.file or f'none ({config.home}/config.yaml or config.toml)'}")
    width = max(map(len, rows))
    for key, row in rows.items():
        print(f"{key:<{width}}  {json.dumps(row['value'])}  # {_origin(row, rows, config)}")
    return 0


def _origin(row: dict[str, Any], rows: dict[str, dict[str, Any]], config: Config) -> str:
    """Where a setting's value in effect came from, as `mdrag config` prints it after its value."""
    if row["source"] == "inherited":
        parent = rows[row["from"]]
        return f"from {row['from']}" + ("" if parent["source"] == "default" else f" ({_origin(parent, rows, config)})")
    if "depends_on" in row:
        return f"default for {row['depends_on']} {config[row['depends_on']]}"
    return str(row.get("variable") or row["source"])


def _cmd_mcp(args: argparse.Namespace) -> int:
    from mdrag.config import load_config
    from mdrag.mcp import run_stdio

    run_stdio(config=load_config(_overrides(args)))
    return 0


def _cmd_knowledge(args: argparse.Namespace) -> int:
    from mdrag import knowledge as k
    from mdrag.config import load_config

    config = load_config(_overrides(args))
    kb = k.KnowledgeBase(allowed_outside=config["knowledge.allowed_paths"])

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"mdrag: {message}", file=sys.stderr, flush=True)

    if args.action == "status":
        rows = k.status(kb)
        if args.json:
            print(json.dumps(rows, indent=2))
        elif not rows:
            print("no docset has web sources")
        for row in [] if args.json else rows:
            print(_status_lines(row))
        return 0
    named = args.docset is not None  # `init` always names one
    chosen = [kb.resolve(args.docset)] if named else list(kb.config().docsets)
    loaded = {d.id: k.init_docset(kb, d.id, progress) for d in chosen if d.web_sources}
    failed = 0
    out: dict[str, Any] = {}
    for d in chosen:
        sources = loaded.get(d.id, [])  # none: the docset's folder is filled by hand
        for s in sources:
            if not s.ok:
                failed += 1
            if not args.json:
                if s.ok:
                    print(
                        f"{d.id}: {s.url}: {len(s.files)} files ({len(s.added)} added, "
                        f"{len(s.changed)} changed, {len(s.removed)} removed)"
                    )
                else:
                    print(f"{d.id}: {s.url}: failed: {s.error}")
                if s.warning:
                    print(f"{d.id}: {s.url}: warning: {s.warning}")
        if sources and not any(s.ok for s in sources) and not Path(d.local_path).is_dir():
            again = f"mdrag knowledge {args.action} {d.id if named else ''}".strip()
            indexed: dict[str, Any] = {
                "note": f"no source loaded, so its folder {d.local_path} does not exist yet: fix what the error "
                f"above says, then run `{again}` again"
            }
        else:
            quiet = args.quiet or args.json
            indexed = _index_docset(d, kb.config().root.parent, config, progress=not quiet, named=named)
        failed += "error" in indexed
        out[d.id] = {"sources": [s.__dict__ for s in sources], **indexed}
        if not args.json:
            if "index" in indexed:
                print(f"{d.id}: {_index_line(indexed['index'])}")
            else:
                print(f"{d.id}: index not updated: {indexed.get('error') or indexed['note']}")
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    return 1 if failed else 0


def _status_lines(row: dict[str, Any]) -> str:
    """What `mdrag knowledge status` says about one web source: when it loaded, its files (and those no
    parser reads), and why its last load failed, if it did."""
    docset = row.get("id")
    failed = row.get("last_error")
    last = row.get("last_fetched") or ("never" if failed else f"never (run `mdrag knowledge init {docset}`)")
    files = f"files: {row.get('files', 0)}"
    kinds = row.get("unsearchable") or {}
    if kinds:
        listed = ", ".join(f"{ext} {n}" for ext, n in kinds.items())
        files += f" ({sum(kinds.values())} with no parser, which the `search` tool cannot find: {listed})"
    text = f"{docset}: {row.get('url')}\n    last updated: {last}; {files}"
    if failed:
        action = "refresh" if row.get("last_fetched") else "init"
        text += (
            f"\n    the last load failed ({row.get('failed_at')}): {failed}\n"
            f"    fix that, then run `mdrag knowledge {action} {docset}`"
        )
    return _safe(text)


def _index_docset(d: Any, project: Path, config: Config, progress: bool, named: bool) -> dict[str, Any]:
    """Build or update the project's docset's index, the one `mdrag mcp` searches.

    Returns {"index": its summary}, {"error": why not} (a failure), or {"note": why
    not}: a docset with no folder yet that the command did not name.
    """
    from mdrag.errors import StoreInUseError
    from mdrag.mcp import docset_folder, docset_index, update_docset_index

    try:
        docset_folder(d)
    except MdragError as e:
        return {"error" if named else "note": str(e)}
    try:
        with docset_index(d.id, project, config) as index, _IndexBar(shown=progress) as bar:
            summary = update_docset_index(index, d, progress=bar)
    except StoreInUseError as e:
        return {"error": f"{e} If `mdrag mcp` is running, it updates the docset's index itself."}
    except MdragError as e:
        return {"error": str(e)}
    return {"index": {"name": index.name, **summary.to_dict()}}


def _index_line(s: dict[str, Any]) -> str:
    return (
        f"index {s['name']}: files {s['added']} added, {s['modified']} changed, {s['deleted']} removed; "
        f"{s['chunks_total']} chunks ({s['chunks_embedded']} embedded) in {s['seconds']:.1f} s"
    )


def agentic_knowledge_main() -> int:
    """`agentic-knowledge init | refresh | status`: the spec's command names."""
    return main(["knowledge", *sys.argv[1:]])


def agentic_knowledge_mcp_main() -> int:
    """`agentic-knowledge-mcp`: the spec's MCP server command."""
    return main(["mcp", *sys.argv[1:]])


def main(argv: Sequence[str] | None = None) -> int:
    """The `mdrag` command; ``argv`` None means this process's own arguments (it exits next)."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe is found here, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (`mdrag search ... | head`): stop quietly, as Unix tools do,
        # with the status of a process killed by SIGPIPE. Python's own flush at exit
        # would fail again: stdout now points at /dev/null.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a file (tests capture it)
            pass
        return _EXIT_BROKEN_PIPE
    finally:
        if argv is None:
            # Everything was closed explicitly: spare the exit its full garbage collection
            # over every module loaded (pymilvus, pandas, pyarrow), ~0.2 s of each command.
            gc.freeze()


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    _setup_logging(args)
    from mdrag.config import load_config

    try:
        if args.command == "mcp":
            return _cmd_mcp(args)
        if args.command == "knowledge":
            return _cmd_knowledge(args)
        if args.command == "config":
            return _cmd_config(args)
        config = load_config(_overrides(args))
        if args.command == "serve":
            return _cmd_serve(args, config)
        if args.command == "ask":
            return _cmd_ask(args, config)
        reads = {"search": _cmd_search, "status": _cmd_status}
        if args.command in reads and args.server:  # that server, never the local index
            return reads[args.command](args, config, None)
        from mdrag.index import Index

        index = Index(config)
        # `index` and `remove` hold the index's writers' lock until its store is closed: a run waiting for
        # this one in another process then finds the store free (Milvus Lite lets one process open its file).
        writing = index.writing() if args.command in ("index", "remove") else contextlib.nullcontext()
        with writing, index:
            if args.command in reads:
                return reads[args.command](args, config, index)
            commands = {"index": _cmd_index, "remove": _cmd_remove, "eval": _cmd_eval}
            return commands[args.command](args, index)
    except ConfigError as e:
        print(_safe(f"mdrag: configuration error: {e}"), file=sys.stderr)
        return 2
    except MdragError as e:
        print(_safe(f"mdrag: error: {e}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mdrag: interrupted (the next `mdrag index` repairs the index)", file=sys.stderr)
        return 130
