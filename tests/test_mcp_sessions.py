"""Many clients of `mdrag mcp --http` at once: each request is answered or refused with a reason, never
dropped without a reply (benchmarks/mcp_sessions.py measures it at 200 sessions)."""

from __future__ import annotations

import asyncio
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.mcp_sessions import make_project, run_sessions, serving, tally, wait_indexed
from mdrag.config import load_config
from mdrag.frontends.mcp.http import MCPHTTPServer
from tests.test_mcp import make_project as empty_project
from tests.test_mcp_http import INITIALIZE, POST_HEADERS

BODY = json.dumps(INITIALIZE).encode()


def post_head(url: str, length: int) -> bytes:
    parts = httpx.URL(url)
    return (
        f"POST {parts.raw_path.decode()} HTTP/1.1\r\nHost: {parts.host}:{parts.port}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def read_answer(s: socket.socket) -> bytes:
    """One whole HTTP answer on a kept-alive connection (an SSE one ends with its last chunk); b"" if closed."""
    data = b""
    while not (b"\r\n\r\n" in data and (data.endswith(b"\r\n0\r\n\r\n") or b"content-length" in data.lower())):
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk
    return data


@pytest.fixture
def in_process(tmp_path: Path, mdrag_home: Path) -> Iterator[MCPHTTPServer]:
    """`mdrag mcp --http` in this process, serving one request at once; another waits at most 0.5 s."""
    config = load_config({"mcp.port": 0})
    server = MCPHTTPServer(empty_project(tmp_path), config=config, max_requests=1, queue_s=0.5)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while True:  # listening from the start; answering once the lifespan has run
            try:
                if httpx.post(server.url, content=BODY, headers=POST_HEADERS, timeout=30).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not answer"
            time.sleep(0.1)
        yield server
    finally:
        server.stop()
        thread.join(60)


def test_a_request_that_waits_too_long_for_its_turn_is_refused_busy(
    in_process: MCPHTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mdrag")
    with socket.create_connection((httpx.URL(in_process.url).host, httpx.URL(in_process.url).port), 30) as slow:
        slow.sendall(post_head(in_process.url, len(BODY)) + BODY[:10])  # its turn, held while its body comes
        deadline = time.monotonic() + 60
        while (busy := httpx.post(in_process.url, content=BODY, headers=POST_HEADERS, timeout=30)).status_code == 200:
            assert time.monotonic() < deadline, "the slow request never took its turn"
            time.sleep(0.05)
        assert busy.status_code == 503, busy.text
        assert busy.headers["retry-after"] == "2" and busy.headers["content-type"] == "application/json"
        error = busy.json()
        assert error["jsonrpc"] == "2.0" and error["id"] is None
        assert error["error"]["message"].startswith("busy, try again in 2 s"), error
        assert any("busy: refused a request that waited 0.5 s" in r.getMessage() for r in caplog.records)
        slow.sendall(BODY[10:])  # the slow one is answered, and its turn passes on
        assert b"agentic-knowledge" in read_answer(slow)
    assert httpx.post(in_process.url, content=BODY, headers=POST_HEADERS, timeout=30).status_code == 200


def test_an_idle_connection_is_kept_longer_than_a_client_keeps_its_own(in_process: MCPHTTPServer) -> None:
    # A client closes a connection idle for its keep-alive expiry (httpx: 5 s); a server that closes it at
    # the same moment loses the request the client sends meanwhile, without a reply.
    expiry = httpx.Limits().keepalive_expiry
    assert expiry is not None
    url = httpx.URL(in_process.url)
    with socket.create_connection((url.host, url.port), 30) as s:
        s.sendall(post_head(in_process.url, len(BODY)) + BODY)
        assert b"agentic-knowledge" in read_answer(s)
        closed, _, _ = select.select([s], [], [], 2 * expiry)  # readable: the server closed it
        assert not closed, f"the server closed a connection idle for less than {2 * expiry} s"
        s.sendall(post_head(in_process.url, len(BODY)) + BODY)
        assert b"agentic-knowledge" in read_answer(s)


def test_many_sessions_at_once_are_each_answered_or_refused_none_dropped(tmp_path: Path, mdrag_home: Path) -> None:
    # 60 sessions, each pausing 4.5-5.5 s between its initialize and its search: around httpx's keep-alive
    # expiry, where a server that closes idle connections at the same time drops requests unanswered.
    log = tmp_path / "server.log"
    with serving(make_project(tmp_path), mdrag_home, log) as url:
        asyncio.run(wait_indexed(url))
        got = tally(asyncio.run(run_sessions(url, 60, (4.5, 5.5))))
    assert got["dropped"] == 0, (got, log.read_text()[-3000:])
    assert got["answered"] + got["refused"] == 60 and got["answered"] > 0, got
    for reason in got["refused_reasons"]:
        assert "HTTP 503 (Retry-After 2): busy, try again" in reason, got
    assert log.read_text().count("busy: refused") == got["refused"]
