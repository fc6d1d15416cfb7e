"""The `mdrag` command line: the only package that knows about argv and exit codes.

Exit codes: 0 ok, 1 error, 2 usage or configuration error, 130 interrupted,
141 stdout's reader went away (as for any Unix tool killed by SIGPIPE).
Progress and logs go to stderr, data to stdout.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from mdrag.errors import ConfigError, MdragError
from mdrag.frontends.cli.output import _safe, _setup_logging
from mdrag.frontends.cli.parser import _overrides, _parser

if TYPE_CHECKING:
    from mdrag.index import Index

# Each command's module is imported by the command alone: `mdrag search` loads nothing `ask`, `serve`, `mcp`
# or `index` needs (asyncio, the WebSocket client, the parsers).

__all__ = ["agentic_knowledge_main", "agentic_knowledge_mcp_main", "main"]

_EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away


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
        if args.command in ("mcp", "knowledge"):
            from mdrag.frontends.cli.knowledge import _cmd_knowledge, _cmd_mcp

            return _cmd_mcp(args) if args.command == "mcp" else _cmd_knowledge(args)
        from mdrag.frontends.cli.reading import _cmd_config, _cmd_eval, _cmd_get, _cmd_search, _cmd_status

        if args.command == "config":
            return _cmd_config(args)
        config = load_config(_overrides(args))
        if args.command in ("serve", "ask"):
            from mdrag.frontends.cli.serving import _cmd_ask, _cmd_serve

            return _cmd_serve(args, config) if args.command == "serve" else _cmd_ask(args, config)
        reads = {"search": _cmd_search, "status": _cmd_status}
        if args.command in reads and args.server:  # that server, never the local index
            return reads[args.command](args, config, None)
        from mdrag.index import Index

        index = Index(config)
        loading = _model_loading(index, args.query) if args.command == "search" else None
        # `index` and `remove` hold the index's writers' lock until its store is closed: a run waiting for
        # this one in another process then finds the store free (Milvus Lite lets one process open its file).
        writing = index.writing() if args.command in ("index", "remove") else contextlib.nullcontext()
        with writing, index, _joined(loading):
            if args.command in reads:
                return reads[args.command](args, config, index)
            from mdrag.frontends.cli.indexing import _cmd_index, _cmd_remove

            commands = {"index": _cmd_index, "remove": _cmd_remove, "eval": _cmd_eval, "get": _cmd_get}
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


@contextlib.contextmanager
def _joined(thread: threading.Thread | None) -> Iterator[None]:
    """Wait for ``thread`` at the end of the block: a model runtime still at work in a thread when the
    interpreter exits may abort the process (OpenVINO's does: "terminate called without an active exception")."""
    try:
        yield
    finally:
        if thread is not None:
            thread.join()


def _model_loading(index: Index, query: str) -> threading.Thread | None:
    """For a one-shot `mdrag search`: the thread that loads the index's model from now on, while the rest of
    the search is imported and its store opened (the model's load is most of a search's time); None when the
    index has no manifest (most likely it does not exist: the model is not prepared for an error).

    The thread embeds the query itself, so that it loads just what a query runs (OpenVINO embeds queries
    with a model of its own); the search embeds it again, in a few milliseconds, with the model loaded.
    """
    if not query.strip() or not index.manifest_path.exists():
        return None
    embedder = index.embedder

    def load() -> None:
        try:
            embedder.embed_query(query)
        except Exception:  # noqa: BLE001  # the search's own embedding raises it again, and reports it
            pass

    thread = threading.Thread(target=load, name="mdrag-model", daemon=True)
    thread.start()
    return thread
