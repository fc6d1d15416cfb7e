"""`mdrag serve` and `mdrag ask`: the Q&A server and its client at a prompt."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mdrag.errors import MdragError
from mdrag.frontends.cli.parser import common_flags, overrides, setting_flag
from mdrag.frontends.cli.reading import server_url

if TYPE_CHECKING:
    from mdrag.answering.followup import Turn
    from mdrag.frontends.cli.parser import Commands
    from mdrag.frontends.client import Client
    from mdrag.frontends.server import QAServer

__all__ = ["register", "run_ask"]


# Shown to a person at the prompt (stderr is a terminal); also in `mdrag ask --help`.
_PROMPT_HELP = "follow-up questions refer to the earlier ones; /new starts a new conversation; Ctrl+D quits"
_SLOW_S = 1.0  # `serve` says it is loading when loading takes longer than this
_PROGRESS_S = 5.0  # then how often it says how far the build is


def register(commands: Commands) -> None:
    """Declare `mdrag serve` and `mdrag ask`."""
    p = commands.add_parser(
        "serve",
        help="run the WebSocket Q&A server",
        epilog='example: mdrag serve ./docs --port 8765   (then, elsewhere: mdrag ask "how do I ...?")',
    )
    p.add_argument(
        "folders",
        nargs="*",
        metavar="DIR",
        help="folders to add to the index; all of the index's folders are indexed and watched (default: "
        "the index's folders; for a new index, setting folders)",
    )
    for key in ("server.host", "server.port", "server.reload_interval", "server.token", "server.allowed_origins"):
        setting_flag(p, key)
    common_flags(p)
    p.set_defaults(run=_serve)

    p = commands.add_parser(
        "ask",
        help="ask the server a question",
        epilog='example: mdrag ask "How do I create a custom shortcode?"   (no question: an interactive prompt, one '
        "conversation: follow-up questions are asked with the earlier ones; /new starts a new conversation)",
    )
    p.add_argument("question", nargs="?", help="the question; none: interactive prompt")
    p.add_argument(
        "--server",
        metavar="URL",
        help="server address: ws://HOST:PORT, or the http:// address `mdrag serve` prints (default "
        "ws://localhost:PORT from server.port)",
    )
    setting_flag(p, "server.token")
    common_flags(p)
    p.set_defaults(run=_ask)


async def _report_loading(server: QAServer) -> None:
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


def _serve(args: argparse.Namespace) -> int:
    from mdrag.config import load_config

    config = load_config(overrides(args))
    import asyncio

    from mdrag.frontends.server import QAServer
    from mdrag.ingest.scan import not_a_folder

    missing = [f for f in args.folders if not Path(f).expanduser().exists()]
    if missing:  # refused before it starts: a server must not run on without a folder it was told to serve
        raise MdragError(f"not found: {', '.join(missing)}. Check the path; nothing was started.")
    wrong = [why for f in args.folders if (why := not_a_folder(f))]
    if wrong:
        raise MdragError(f"{'; '.join(wrong)}. Nothing was started.")

    async def run() -> None:
        server = QAServer(config, args.folders, overrides=overrides(args))
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


def _ask(args: argparse.Namespace) -> int:
    from mdrag.config import load_config

    config = load_config(overrides(args))
    url = args.server or server_url(config)
    return run_ask(args.question, url, sys.stdout, sys.stderr, token=config["server.token"], index=args.index)


def _ask_again_if_lost(
    client: Client, question: str, printer: _Printer, index: str | None, history: Sequence[Turn] = ()
) -> tuple[list[str], str]:
    """``client.ask``, asked once more on a new connection when the last one was lost before any answer
    came (a server restarted between two questions at the prompt); returns the sources and the answer."""
    from mdrag.frontends.client import ServerUnavailableError

    pieces: list[str] = []

    def chunk(text: str) -> None:
        pieces.append(text)
        printer.chunk(text)

    try:
        return client.ask(question, chunk, index=index, history=history), "".join(pieces)
    except ServerUnavailableError:
        if pieces:
            raise
        return client.ask(question, chunk, index=index, history=history), "".join(pieces)  # connects again


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
    another) and Ctrl+C or Ctrl+D at the prompt ends it. The prompt is one
    conversation: each question is sent with the turns answered before it (a
    follow-up such as "and how do I nest it?" is searched with them), and
    ``/new`` starts a new one.
    """
    from mdrag.answering.followup import Turn
    from mdrag.frontends.client import AnswerCutShortError, Client, ServerUnavailableError
    from mdrag.knobs import MAX_HISTORY_TURNS

    def fail(message: str, code: int = 1) -> int:
        err.write(f"mdrag: error: {message}\n")
        err.flush()
        return code

    def progress(line: str) -> None:  # while the server builds its index: how far it is
        err.write(f"mdrag: the server is loading the index: {line}\n")
        err.flush()

    try:
        client = Client(url, token=token, progress=progress)
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
                    if isinstance(e, AnswerCutShortError):  # what the part of an answer was made from
                        printer.sources(e.sources)
                    return fail(str(e))
                printer.sources(sources)
                return 0

            err.write(_describe(url, status) + "\n" + (_PROMPT_HELP + "\n" if err.isatty() else ""))
            err.flush()
            turns: list[Turn] = []  # this conversation's answered turns, oldest first
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
                if line.lower() == "/new":
                    turns.clear()
                    err.write("new conversation: the next question is asked on its own\n")
                    err.flush()
                    continue
                try:
                    sources, text = _ask_again_if_lost(client, line, printer, index, turns)
                except MdragError as e:  # the server gone too: the next question connects again
                    printer.end_line()
                    if isinstance(e, AnswerCutShortError):
                        printer.sources(e.sources)
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
                turns[:] = [*turns, Turn(line, text)][-MAX_HISTORY_TURNS:]
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
    from mdrag.redact import redact_url

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
        from mdrag.frontends.terminal import sanitize

        self.end_line()
        if sources:  # numbered as the answer cites them: [n] is the n-th, each on one line
            listed = "".join(f"  [{n}] {' '.join(sanitize(s).split())}\n" for n, s in enumerate(sources, 1))
            self.out.write("\nSources:\n" + listed)
        else:
            self.out.write("\nSources: none\n")
        self.out.flush()
