"""The MCP server on stdin/stdout (`mdrag mcp`): the SDK's stdio transport, with every line the client
sends checked first by :mod:`mdrag.frontends.mcp.wire`.

This module only moves data: it reads the client's lines, hands each to
:func:`~mdrag.frontends.mcp.wire.check_message`, and forwards it to the SDK or sends the
answer that function gives.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, cast

import anyio
import anyio.to_thread
from mcp import types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from mdrag.config import Config, load_config
from mdrag.frontends.mcp.tools import serving
from mdrag.frontends.mcp.wire import check_message, not_utf8_reply, oversized_reply
from mdrag.knobs import MCP_CHECK_INLINE_CHARS, MCP_MAX_MESSAGE_BYTES

__all__ = ["run_stdio"]

log = logging.getLogger(__name__)


class _CheckedLines:
    """The client's lines for the SDK's stdio transport, each checked first (:func:`~.wire.check_message`).

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
            raw = await anyio.to_thread.run_sync(self._wire.readline, MCP_MAX_MESSAGE_BYTES + 1, abandon_on_cancel=True)
            if not raw:
                raise StopAsyncIteration
            if len(raw) > MCP_MAX_MESSAGE_BYTES and not raw.endswith(b"\n"):
                await anyio.to_thread.run_sync(self._skip_line, abandon_on_cancel=True)
                await self._answer(oversized_reply(MCP_MAX_MESSAGE_BYTES))
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                await self._answer(not_utf8_reply(e))
                continue
            if len(line) < MCP_CHECK_INLINE_CHARS:
                forward, reply = check_message(line)
            else:  # a long one could hold up the other requests for a while
                forward, reply = await anyio.to_thread.run_sync(check_message, line)
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


def run_stdio(
    start: Path | None = None,
    config: Config | None = None,
    indexes: Sequence[str] = (),
    project: Path | None = None,
) -> None:
    """Serve the MCP tools on stdin/stdout until stdin closes; logs go to stderr.

    ``indexes``: names of indexes made by `mdrag index` to serve (kept current while the server runs);
    ``project``: a project folder whose docsets to serve. With neither, the docsets of the project found
    from ``start`` (default: the current directory, then its parents): a missing or broken config does
    not stop the server then: each tool call reports it, and a config created later is picked up by the
    next call. ``config``: the settings the indexes start from (flags applied; default: the user's).
    """
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="mdrag mcp: %(levelname)s: %(message)s")
    config = config or load_config()
    server = serving(config, indexes, project, start)
    try:
        anyio.run(_serve_stdio, server)
    except KeyboardInterrupt:
        pass
