"""frontends.client and `mdrag ask` (cli.run_ask) against a real websockets server on loopback, scripted per test."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from mdrag.errors import MdragError
from mdrag.frontends import protocol
from mdrag.frontends.cli.serving import run_ask
from mdrag.frontends.client import DEFAULT_SERVER, Client, ServerUnavailableError, sanitize
from tests.conftest import free_port


@dataclass
class FakeServer:
    """What the scripted server saw; ``url`` is where it listens."""

    url: str = ""
    connections: int = 0
    received: list[dict[str, Any]] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)


Handler = Callable[[ServerConnection, FakeServer], Awaitable[None]]
ProcessRequest = Callable[[ServerConnection, Request], Response | None]


@pytest.fixture
def start_server() -> Iterator[Callable[..., FakeServer]]:
    """start_server(handler, process_request=None) runs a server in a background event loop until the test ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[Any] = []

    def start(handler: Handler, process_request: ProcessRequest | None = None) -> FakeServer:
        state = FakeServer()

        async def wrapper(ws: ServerConnection) -> None:
            state.connections += 1
            state.authorization.append(ws.request.headers.get("Authorization") if ws.request else None)
            await handler(ws, state)

        async def open_server() -> int:
            server = await serve(wrapper, "127.0.0.1", 0, process_request=process_request)
            servers.append(server)
            return int(next(iter(server.sockets)).getsockname()[1])

        port = asyncio.run_coroutine_threadsafe(open_server(), loop).result(5)
        state.url = f"ws://127.0.0.1:{port}"
        return state

    yield start

    async def shutdown() -> None:
        for server in servers:
            server.close()
            await server.wait_closed()

    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def ready(files: int = 3, chunks: int = 42) -> dict[str, Any]:
    return protocol.status("ready", "default", files, chunks, "ready")


def stream(*chunks: str, sources: Iterable[str] = ()) -> list[dict[str, Any]]:
    """A streamed answer as the server sends it (sources passed as given, duplicates included)."""
    return [
        protocol.stream_start(),
        *(protocol.stream_chunk(c) for c in chunks),
        {"type": "stream_end", "sources": list(sources)},
    ]


def scripted(reply: Callable[[dict[str, Any], FakeServer], list[dict[str, Any]]], first: Any = None) -> Handler:
    """A server that sends ``first`` (a ready status) on connect, then answers each message with reply(msg)."""

    async def handler(ws: ServerConnection, state: FakeServer) -> None:
        await ws.send(protocol.encode(first if first is not None else ready()))
        async for frame in ws:
            msg = json.loads(frame)
            state.received.append(msg)
            for out in reply(msg, state):
                await ws.send(protocol.encode(out))

    return handler


def ask(url: str, question: str | None = "what?", **kwargs: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_ask(question, url, out, err, **kwargs)
    return code, out.getvalue(), err.getvalue()


def inputs(*lines: str) -> Callable[[str], str]:
    """An input() that returns the lines in turn, then raises EOFError."""
    it = iter(lines)

    def fake_input(prompt: str) -> str:
        assert prompt == "question> "
        try:
            return next(it)
        except StopIteration:
            raise EOFError from None

    return fake_input


# -- sanitize -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("plain text\nwith\ttab", "plain text\nwith\ttab"),
        ("é ü 中文 — emoji 🙂", "é ü 中文 — emoji 🙂"),
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1b[2J\x1b[1;1Hwiped", "wiped"),
        ("a\x1b[?25lb", "ab"),
        ("\x1b]0;pwned title\x07after", "after"),
        ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1bPq#0;2;0;0;0\x1b\\x", "x"),
        ("\x1bcreset", "reset"),
        ("\x1b(Bcharset", "charset"),
        ("\x9b31mc1 csi", "c1 csi"),
        ("carriage\roverwrite", "carriageoverwrite"),
        ("bell\x07 back\x08space del\x7f nul\x00", "bell backspace del nul"),
        ("c1\x85\x90\x9f", "c1"),
        ("dangling \x1b", "dangling "),
        ("unterminated \x1b]0;title", "unterminated "),
    ],
)
def test_sanitize(raw: str, clean: str) -> None:
    assert sanitize(raw) == clean


def test_sanitize_leaves_no_control_characters() -> None:
    text = "".join(chr(i) for i in range(0x00, 0xA0)) + "[31m ok"
    cleaned = sanitize(text)
    assert all(c in "\n\t" or 0x20 <= ord(c) < 0x7F or ord(c) >= 0xA0 for c in cleaned)


# -- one-shot ask ---------------------------------------------------------------------------------


def test_one_shot_prints_chunks_in_order_then_sources(start_server: Callable[..., FakeServer]) -> None:
    answer = stream("Use ", "`hugo new`", " to create a page.", sources=["/d/a.md", "/d/b.md", "/d/a.md"])
    srv = start_server(scripted(lambda msg, st: answer))
    code, out, err = ask(srv.url, "how do I add a page?")
    assert code == 0, err
    assert out == "Use `hugo new` to create a page.\n\nSources:\n  [1] /d/a.md\n  [2] /d/b.md\n"
    assert err == ""
    assert srv.received == [{"type": "query", "question": "how do I add a page?", "id": 1}]


def test_chunks_are_written_and_flushed_as_they_arrive(start_server: Callable[..., FakeServer]) -> None:
    srv = start_server(scripted(lambda msg, st: stream("one ", "two ", "three\n", sources=["/x.md"])))

    class Recorder(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.flushed: list[str] = []

        def flush(self) -> None:
            self.flushed.append(self.getvalue())

    out = Recorder()
    assert run_ask("q", srv.url, out, io.StringIO()) == 0
    assert out.flushed[:3] == ["one ", "one two ", "one two three\n"]
    assert out.getvalue() == "one two three\n\nSources:\n  [1] /x.md\n"


def test_no_sources_and_index_name(start_server: Callable[..., FakeServer]) -> None:
    srv = start_server(scripted(lambda msg, st: stream("No relevant information was found.")))
    code, out, _ = ask(srv.url, "  unrelated?  ", index="notes")
    assert code == 0
    assert out == "No relevant information was found.\n\nSources: none\n"
    assert srv.received == [{"type": "query", "question": "unrelated?", "index": "notes", "id": 1}]


def test_control_characters_from_the_server_are_stripped(start_server: Callable[..., FakeServer]) -> None:
    answer = stream(
        "\x1b[31mred\x1b[0m ",
        "\x1b]0;owned\x07title\r\n",
        sources=["/d/\x1b[2Ja.md", "/d/b\nfake line.md", "/d/\x9b1mc.md"],
    )
    srv = start_server(scripted(lambda msg, st: answer, first=ready()))
    code, out, err = ask(srv.url)
    assert code == 0
    assert "\x1b" not in out and "\r" not in out and "\x9b" not in out
    assert out == "red title\n\nSources:\n  [1] /d/a.md\n  [2] /d/b fake line.md\n  [3] /d/c.md\n"


def test_error_reply_is_one_line_and_exit_1(start_server: Callable[..., FakeServer]) -> None:
    srv = start_server(scripted(lambda msg, st: [protocol.error("unknown index 'nope'\n\x1b[31mtry `mdrag status`")]))
    code, out, err = ask(srv.url, index="nope")
    assert code == 1
    assert out == ""
    assert err == "mdrag: error: unknown index 'nope' try `mdrag status`\n"


def test_error_after_some_chunks_ends_the_answer_line(start_server: Callable[..., FakeServer]) -> None:
    srv = start_server(
        scripted(
            lambda msg, st: [protocol.stream_start(), protocol.stream_chunk("partial"), protocol.error("LLM timed out")]
        )
    )
    code, out, err = ask(srv.url)
    assert (code, out, err) == (1, "partial\n", "mdrag: error: LLM timed out\n")


def test_an_answer_cut_short_still_lists_its_sources(start_server: Callable[..., FakeServer]) -> None:
    """The server's error after stream_start carries the passages the answer was made from: both the one-shot
    question and the prompt print them under the part of the answer that came, and say the error."""
    cut = [protocol.stream_start(), protocol.stream_chunk("partial [1]"), protocol.error("LLM timed out", ["/d/a.md"])]
    srv = start_server(scripted(lambda msg, st: cut))
    code, out, err = ask(srv.url)
    assert (code, out, err) == (1, "partial [1]\n\nSources:\n  [1] /d/a.md\n", "mdrag: error: LLM timed out\n")
    code, out, err = ask(srv.url, None, input_fn=inputs("q", "exit"))
    assert code == 0 and out == "partial [1]\n\nSources:\n  [1] /d/a.md\n"
    assert err.splitlines()[1:] == ["error: LLM timed out"]


def test_loading_then_ready_is_retried(
    start_server: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Client, "retry_delay", 0.05)
    loading = protocol.status("loading", "default", 0, 0, "loading the index")

    def reply(msg: dict[str, Any], st: FakeServer) -> list[dict[str, Any]]:
        return [loading] if len(st.received) < 3 else stream("done", sources=["/a.md"])

    srv = start_server(scripted(reply, first=loading))
    code, out, err = ask(srv.url)
    assert code == 0, err
    assert out == "done\n\nSources:\n  [1] /a.md\n"
    assert "loading" in err
    assert [m["type"] for m in srv.received] == ["query"] * 3
    assert srv.connections == 1


def test_still_loading_after_timeout_gives_up(
    start_server: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Client, "retry_delay", 0.05)
    loading = protocol.status("loading", "default", 0, 0, "loading")
    srv = start_server(scripted(lambda msg, st: [loading], first=loading))
    with Client(srv.url, timeout=0.3) as client, pytest.raises(MdragError, match="still loading"):
        client.ask("q", lambda c: None)
    assert 2 <= len(srv.received) <= 7


def test_empty_server(start_server: Callable[..., FakeServer]) -> None:
    empty = protocol.status("empty", "default", 0, 0, "no folders are indexed")
    srv = start_server(scripted(lambda msg, st: [empty], first=empty))
    code, out, err = ask(srv.url)
    assert code == 1
    assert err.startswith("mdrag: error: no folders are indexed") and "mdrag serve DIR" in err


def test_non_streaming_fallback(start_server: Callable[..., FakeServer]) -> None:
    reply = {"type": "answer", "answer": "All at \x1b[1monce.", "sources": ["/a.md", "/a.md", 7]}
    srv = start_server(scripted(lambda msg, st: [reply]))
    code, out, _ = ask(srv.url)
    assert code == 0
    assert out == "All at once.\n\nSources:\n  [1] /a.md\n"


def test_unknown_and_malformed_messages_are_skipped(start_server: Callable[..., FakeServer]) -> None:
    async def handler(ws: ServerConnection, state: FakeServer) -> None:
        await ws.send(protocol.encode(ready()))
        await ws.recv()
        for frame in ["not json", "[1, 2]", '{"type": "progress", "done": 1}', protocol.encode(ready())]:
            await ws.send(frame)
        for msg in stream("ok", sources=["/a.md"]):
            await ws.send(protocol.encode(msg))
        await ws.wait_closed()

    srv = start_server(handler)
    assert ask(srv.url)[:2] == (0, "ok\n\nSources:\n  [1] /a.md\n")


def test_connection_lost_mid_answer(start_server: Callable[..., FakeServer]) -> None:
    async def handler(ws: ServerConnection, state: FakeServer) -> None:
        await ws.send(protocol.encode(ready()))
        await ws.recv()
        await ws.send(protocol.encode(protocol.stream_start()))
        await ws.send(protocol.encode(protocol.stream_chunk("half an ans")))
        await ws.close(1011, "index reload failed")

    srv = start_server(handler)
    code, out, err = ask(srv.url)
    assert code == 1
    assert out == "half an ans\n"
    assert err.count("\n") == 1
    assert err.startswith("mdrag: error: lost the connection to the mdrag server")
    assert "1011" in err and "index reload failed" in err


def test_silent_server_times_out(start_server: Callable[..., FakeServer]) -> None:
    async def handler(ws: ServerConnection, state: FakeServer) -> None:
        await ws.send(protocol.encode(ready()))
        await ws.wait_closed()

    srv = start_server(handler)
    client = Client(srv.url, timeout=0.2)
    with client, pytest.raises(ServerUnavailableError, match="no reply .* in 0.2 s"):
        client.ask("q", lambda c: None)


def test_question_checked_before_sending(start_server: Callable[..., FakeServer]) -> None:
    srv = start_server(scripted(lambda msg, st: stream("x")))
    with Client(srv.url) as client:
        with pytest.raises(MdragError, match="too long"):
            client.ask("x" * (protocol.MAX_QUESTION_CHARS + 1), lambda c: None)
        with pytest.raises(MdragError, match="empty"):
            client.ask("   ", lambda c: None)
    assert srv.received == []


def test_one_shot_interrupted(start_server: Callable[..., FakeServer]) -> None:
    srv = start_server(scripted(lambda msg, st: stream("never shown")))

    class Interrupted(io.StringIO):
        def write(self, text: str) -> int:
            raise KeyboardInterrupt

    err = io.StringIO()
    assert run_ask("q", srv.url, Interrupted(), err) == 130
    assert err.getvalue() == "mdrag: interrupted\n"


def test_proxy_variables_are_ignored_for_loopback(
    start_server: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for var in ("http_proxy", "https_proxy", "all_proxy", "ws_proxy"):
        monkeypatch.setenv(var, dead_proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    srv = start_server(scripted(lambda msg, st: stream("direct")))
    assert ask(srv.url)[:2] == (0, "direct\n\nSources: none\n")


# -- interactive ----------------------------------------------------------------------------------


def test_interactive_uses_one_connection(start_server: Callable[..., FakeServer]) -> None:
    srv = start_server(
        scripted(lambda msg, st: stream(f"answer to {msg['question']}", sources=[f"/{len(st.received)}.md"]))
    )
    code, out, err = ask(srv.url, None, input_fn=inputs("first?", "", "second?", "quit", "never asked"))
    assert code == 0
    assert out == (
        "answer to first?\n\nSources:\n  [1] /1.md\n"  # first
        "answer to second?\n\nSources:\n  [1] /2.md\n"
    )
    assert err == f"connected to {srv.url} (3 files, 42 chunks)\n"
    assert srv.connections == 1
    assert [m["question"] for m in srv.received] == ["first?", "second?"]


def test_interactive_connected_line_hides_the_user_info(start_server: Callable[..., FakeServer]) -> None:
    srv = start_server(scripted(lambda msg, st: stream("a")))
    url = srv.url.replace("ws://", "ws://alice:s3cret@")
    code, _, err = ask(url, None, input_fn=inputs("quit"))
    assert code == 0
    assert err == f"connected to {srv.url.replace('ws://', 'ws://***@')} (3 files, 42 chunks)\n"


def test_interactive_error_on_one_question_continues(start_server: Callable[..., FakeServer]) -> None:
    def reply(msg: dict[str, Any], st: FakeServer) -> list[dict[str, Any]]:
        if msg["question"] == "bad":
            return [protocol.error("LLM error: rate limited")]
        return stream("fine")

    srv = start_server(scripted(reply))
    code, out, err = ask(srv.url, None, input_fn=inputs("bad", "good", "exit"))
    assert code == 0
    assert out == "fine\n\nSources: none\n"
    assert err.splitlines()[1:] == ["error: LLM error: rate limited"]
    assert srv.connections == 1


def test_interactive_eof_and_interrupt_end_cleanly(start_server: Callable[..., FakeServer]) -> None:
    srv = start_server(scripted(lambda msg, st: stream("a")))
    assert ask(srv.url, None, input_fn=inputs("q"))[0] == 0

    def interrupted(prompt: str) -> str:
        raise KeyboardInterrupt

    assert ask(srv.url, None, input_fn=interrupted)[0] == 0
    assert len(srv.received) == 1


def test_interactive_connection_lost_is_an_error_and_the_prompt_goes_on(
    start_server: Callable[..., FakeServer],
) -> None:
    """A question whose connection is lost before any answer is asked once more on a new connection
    (a restarted server answers it); lost again, it is an error and the prompt goes on."""
    asked: list[str] = []

    async def handler(ws: ServerConnection, state: FakeServer) -> None:
        await ws.send(protocol.encode(ready()))
        asked.append(json.loads(await ws.recv())["question"])
        await ws.close(1001, "server shutting down")

    srv = start_server(handler)
    code, out, err = ask(srv.url, None, input_fn=inputs("q", "q2"))
    assert code == 0, "EOF at the prompt ends it"
    assert asked == ["q", "q", "q2", "q2"]
    lost = [line for line in err.splitlines() if line.startswith("error: lost the connection")]
    assert len(lost) == 2, err


# -- connecting -----------------------------------------------------------------------------------


def test_unreachable_server() -> None:
    url = f"ws://127.0.0.1:{free_port()}"
    code, out, err = ask(url)
    assert code == 1
    assert out == ""
    assert (
        err == f"mdrag: error: cannot reach the mdrag server at {url} (connection refused). "
        "Start it with `mdrag serve DIR`.\n"
    )


def test_unreachable_interactive_and_token_in_url_not_shown() -> None:
    url = f"ws://127.0.0.1:{free_port()}/?token=s3cret"
    code, _, err = ask(url, None, input_fn=inputs("never"))
    assert code == 1
    assert err.count("\n") == 1 and "mdrag serve" in err
    assert "s3cret" not in err and "token=***" in err


def test_handshake_rejected_with_403(start_server: Callable[..., FakeServer]) -> None:
    def forbid(connection: ServerConnection, request: Request) -> Response:
        return connection.respond(HTTPStatus.FORBIDDEN, "origin not allowed\n")

    srv = start_server(scripted(lambda msg, st: []), process_request=forbid)
    code, out, err = ask(srv.url)
    assert code == 1
    assert err.count("\n") == 1
    assert "refused the connection (HTTP 403 Forbidden: origin not allowed)" in err
    assert "token" in err
    assert srv.connections == 0


def test_token_is_sent_as_bearer_header(start_server: Callable[..., FakeServer]) -> None:
    seen: list[Headers] = []

    def check(connection: ServerConnection, request: Request) -> Response | None:
        seen.append(request.headers)
        if request.headers.get("Authorization") != "Bearer t0ken":
            return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or wrong token\n")
        return None

    srv = start_server(scripted(lambda msg, st: stream("ok")), process_request=check)
    assert ask(srv.url, token="t0ken")[0] == 0
    assert srv.authorization == ["Bearer t0ken"]
    code, _, err = ask(srv.url)
    assert code == 1 and "HTTP 401" in err and "--token TOKEN, the environment variable MDRAG_TOKEN" in err
    assert "Authorization" not in seen[1]
    code, _, err = ask(srv.url, token="wr0ng")  # a wrong token is not told to give one
    assert code == 1 and "HTTP 401" in err and "The token given (--token, MDRAG_TOKEN" in err, err
    assert "is not the server's" in err and "Give the server's token" not in err and "wr0ng" not in err


def test_ask_reads_the_token_from_mdrag_token(
    start_server: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mdrag ask --token` put the token on the command line, visible in `ps`: MDRAG_TOKEN, the
    variable of the setting server.token (that `mdrag serve` reads too), gives it."""
    from mdrag.frontends.cli import main

    srv = start_server(scripted(lambda msg, st: stream("ok")))
    monkeypatch.setenv("MDRAG_TOKEN", "env-t0ken")
    assert main(["ask", "what?", "--server", srv.url]) == 0, capsys.readouterr().err
    assert srv.authorization == ["Bearer env-t0ken"] and "env-t0ken" not in capsys.readouterr().err
    assert main(["ask", "what?", "--server", srv.url, "--token", "flag-t0ken"]) == 0  # the flag wins
    assert srv.authorization[-1] == "Bearer flag-t0ken"


def test_error_on_connect_is_a_refusal(start_server: Callable[..., FakeServer]) -> None:
    async def handler(ws: ServerConnection, state: FakeServer) -> None:
        await ws.send(protocol.encode(protocol.error("too many connections")))
        await ws.close()

    srv = start_server(handler)
    code, _, err = ask(srv.url)
    assert code == 1
    assert err == f"mdrag: error: the mdrag server at {srv.url} refused the connection: too many connections\n"


def test_not_a_websocket_server() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer_http() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")

        t = threading.Thread(target=answer_http, daemon=True)
        t.start()
        code, _, err = ask(f"ws://127.0.0.1:{port}")
        t.join(5)
    assert code == 1
    assert "did not accept a WebSocket connection" in err and err.count("\n") == 1


def test_invalid_url() -> None:
    with pytest.raises(ValueError, match="ws://HOST:PORT"):
        Client("ftp://localhost:8765")
    code, _, err = ask("localhost:8765")
    assert code == 2 and err.startswith("mdrag: error: invalid server address")
    assert DEFAULT_SERVER == "ws://localhost:8765"


def test_the_http_address_serve_prints_is_asked_over_ws(start_server: Callable[..., FakeServer]) -> None:
    """`mdrag ask --server http://127.0.0.1:8765` (the address `mdrag serve` prints for a browser) was refused
    with exit 2: it is the WebSocket's address too, asked over ws:// (https://: wss://)."""
    srv = start_server(scripted(lambda msg, st: stream("an answer")))
    http = srv.url.replace("ws://", "http://", 1)
    code, out, err = ask(http + "/")
    assert (code, err) == (0, "") and out.startswith("an answer"), err
    assert Client(http).url == srv.url and Client("HTTPS://example.org/x").url == "wss://example.org/x"


# -- Client API -----------------------------------------------------------------------------------


def test_replies_are_matched_to_their_request_by_id(start_server: Callable[..., FakeServer]) -> None:
    """Each request carries a new id; a reply that repeats another id (a late one, for an earlier request) is
    not taken for this request's, and one with no id (a server that does not repeat ids) still is."""

    def reply(msg: dict[str, Any], st: FakeServer) -> list[dict[str, Any]]:
        stale = [protocol.reply(m, -1) for m in stream("stale ", sources=["/stale.md"])]
        if msg["type"] == "search":
            found = protocol.search_results(msg["query"], [])
            return [protocol.reply(protocol.error("not yours"), -1), protocol.reply(found, msg["id"])]
        if msg["question"] == "old server?":
            return stream("in order", sources=["/old.md"])
        return [*stale, *(protocol.reply(m, msg["id"]) for m in stream("fresh", sources=["/fresh.md"]))]

    srv = start_server(scripted(reply))
    chunks: list[str] = []
    with Client(srv.url) as client:
        assert client.ask("which?", chunks.append) == ["/fresh.md"]
        assert client.request({"type": "search", "query": "a"})["results"] == []
        assert client.ask("old server?", chunks.append) == ["/old.md"]
    assert chunks == ["fresh", "in order"]
    assert [m["id"] for m in srv.received] == [1, 2, 3]


def test_client_connect_request_and_reuse(start_server: Callable[..., FakeServer]) -> None:
    hit = {"text": "t", "path": "/d/a.md", "rel_path": "a.md", "score": 0.8, "heading_path": ["A"], "chunk_id": "c"}

    def reply(msg: dict[str, Any], st: FakeServer) -> list[dict[str, Any]]:
        if msg["type"] == "search":
            return [protocol.search_results(msg["query"], [hit])]
        if msg["type"] == "status":
            return [ready(4, 50)]
        if msg["type"] == "query":
            return stream("hi")
        return [protocol.error(f"unknown message type {msg['type']!r}")]

    srv = start_server(scripted(reply))
    chunks: list[str] = []
    with Client(srv.url) as client:
        assert client.connect() == ready()
        assert client.request({"type": "search", "query": "a", "k": 3}) == protocol.search_results("a", [hit])
        assert client.request({"type": "status"})["chunks"] == 50
        with pytest.raises(MdragError, match="unknown message type 'bogus'"):
            client.request({"type": "bogus"})
        with pytest.raises(ValueError, match="ask"):
            client.request({"type": "query", "question": "q"})
    client.close()  # twice is fine
    assert srv.connections == 1
    assert client.ask("again", chunks.append) == []  # connects again on demand
    client.close()
    assert chunks == ["hi"]
    assert srv.connections == 2


def test_search_while_loading_is_retried(
    start_server: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Client, "retry_delay", 0.05)
    loading = protocol.status("loading", "default", 0, 0, "loading")

    def reply(msg: dict[str, Any], st: FakeServer) -> list[dict[str, Any]]:
        return [loading] if len(st.received) == 1 else [protocol.search_results(msg["query"], [])]

    srv = start_server(scripted(reply))
    with Client(srv.url) as client:
        assert client.request({"type": "search", "query": "x"})["type"] == "search_results"
    assert len(srv.received) == 2


def test_server_without_status_on_connect(start_server: Callable[..., FakeServer]) -> None:
    async def handler(ws: ServerConnection, state: FakeServer) -> None:
        await ws.recv()
        for msg in stream("late hello"):
            await ws.send(protocol.encode(msg))
        await ws.wait_closed()

    srv = start_server(handler)
    with Client(srv.url, open_timeout=0.1) as client:
        assert client.server_status == {}
        parts: list[str] = []
        assert client.ask("q", parts.append) == []
        assert parts == ["late hello"]
