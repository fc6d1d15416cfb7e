"""The MCP server over HTTP (`mdrag mcp --http`), driven by the MCP SDK's streamable HTTP client.

Each server is a real `python -m mdrag mcp --http --port 0 -v` process in a project folder holding
``.knowledge/config.yaml``; its URL is read from the line it prints on stderr. The checks of the
requests (Origin, token, a malformed body) are made with plain httpx.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.test_mcp import make_project, ok, server_env

TOKEN = "s3cret-t0ken"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": types.LATEST_PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
POST_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@dataclass
class Served:
    """A running `mdrag mcp --http`: its process, URL and log (stderr)."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def react_project(root: Path) -> Path:
    """A project whose react docset's folder holds two pages."""
    project = make_project(root)
    local = project / ".knowledge" / "docs" / "react-18.2"
    local.mkdir(parents=True)
    (local / "hooks.md").write_text("# Hooks\n\nuseEffect runs after render.\n\n## Cleanup\n\nReturn a function.\n")
    (local / "state.md").write_text("# State\n\nuseState keeps a value between renders.\n")
    return project


def mcp_command(*flags: str) -> list[str]:
    return [sys.executable, "-m", "mdrag", "mcp", "--http", "-v", *flags]


@contextmanager
def serving(project: Path, home: Path, log: Path, *flags: str) -> Iterator[Served]:
    """`mdrag mcp --http --port 0` in ``project`` until the block ends (then killed if still running)."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            mcp_command("--port", "0", *flags),
            cwd=project,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, **server_env(home)},
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"MCP server on (http://\S+)", log.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"`mdrag mcp --http` did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        yield Served(proc, found.group(1), log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mdrag home for the module's servers: the model's export is made once."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, home: Path) -> Iterator[Served]:
    """One server over the react project for the tests that only talk to it; stopped with Ctrl+C at the end."""
    root = tmp_path_factory.mktemp("served")
    with serving(react_project(root), home, root / "server.log") as served:
        yield served
        served.proc.send_signal(signal.SIGINT)
        assert served.proc.wait(120) == 0, served.text()[-2000:]


@asynccontextmanager
async def connect(url: str, token: str | None = None) -> AsyncIterator[ClientSession]:
    """An initialized MCP session over the SDK's streamable HTTP client."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def search_when_indexed(session: ClientSession, args: dict[str, Any]) -> dict[str, Any]:
    """Call `search` until the docset's index is built; its answer."""
    while True:
        found: dict[str, Any] = json.loads(ok(await session.call_tool("search", args)))
        if "indexing" not in found and "partial" not in found:  # built whole
            return found
        await anyio.sleep(0.5)


QUESTION = {"query": "how do I clean up an effect?", "docset": "react", "k": 3}


@pytest.mark.anyio
async def test_tools_listed_and_search_answers(server: Served) -> None:
    with anyio.fail_after(300):
        async with connect(server.url) as s:
            assert s.server_info is not None and s.server_info.name == "agentic-knowledge"
            names = {t.name for t in (await s.list_tools()).tools}
            found = await search_when_indexed(s, QUESTION)
    assert {"search_docs", "list_docsets", "search"} <= names
    assert found["results"], found
    assert found["results"][0]["rel_path"] == "hooks.md"
    assert found["results"][0]["heading_path"] == ["Hooks", "Cleanup"]
    assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/mcp")


@pytest.mark.anyio
async def test_two_clients_at_once_share_one_index_keeper(server: Served) -> None:
    answers: dict[str, dict[str, Any]] = {}

    async def client(name: str, query: str) -> None:
        async with connect(server.url) as s:
            answers[name] = await search_when_indexed(s, {**QUESTION, "query": query})

    with anyio.fail_after(300):
        async with anyio.create_task_group() as tg:
            tg.start_soon(client, "a", "cleanup function returned by an effect")
            tg.start_soon(client, "b", "keep a value between renders")
    assert answers["a"]["results"][0]["rel_path"] == "hooks.md"
    assert answers["b"]["results"][0]["rel_path"] == "state.md"
    assert answers["a"]["indexed"]["react"]["index"] == answers["b"]["indexed"]["react"]["index"]
    # Every session, this test's and the others', used the keeper the server made at its start: one
    # startup update of the docset's index ran, whatever the number of clients.
    startups = re.findall(r"indexing index '(docset_react_\w+)' \(startup\): (\d+) of \2 files", server.text())
    assert len(startups) == 1, server.text()[-3000:]


def test_a_page_of_another_origin_is_refused(server: Served) -> None:
    evil = httpx.post(server.url, json=INITIALIZE, headers={**POST_HEADERS, "Origin": "http://evil.example"})
    assert evil.status_code == 403
    assert "Origin not allowed" in evil.text
    assert "refused a request from origin http://evil.example" in server.text()
    # exactly one origin: a list that starts with a loopback one is refused too
    for listed in ("http://127.0.0.1:1 https://evil.example", "http://localhost:5173, https://evil.example"):
        two = httpx.post(server.url, json=INITIALIZE, headers={**POST_HEADERS, "Origin": listed})
        assert two.status_code == 403 and "Origin not allowed" in two.text, listed
    # a page of this machine is served (the session it opened is left to expire)
    local = httpx.post(server.url, json=INITIALIZE, headers={**POST_HEADERS, "Origin": "http://localhost:5173"})
    assert local.status_code == 200, local.text
    assert "agentic-knowledge" in local.text


def raw_post(url: str, headers: list[tuple[str, str]], body: bytes) -> tuple[int, bytes]:
    """POST ``body`` to ``url`` over a plain socket with exactly these header lines (repeats kept); the
    status and the rest of the answer."""
    parts = httpx.URL(url)
    lines = [f"POST {parts.raw_path.decode()} HTTP/1.1", *(f"{k}: {v}" for k, v in headers)]
    lines += ["Content-Type: application/json", "Accept: application/json, text/event-stream"]
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    with socket.create_connection((parts.host, parts.port), timeout=60) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data


def test_a_header_sent_twice_is_refused_whatever_its_order(server: Served) -> None:
    parts = httpx.URL(server.url)
    here = f"127.0.0.1:{parts.port}"
    body = json.dumps(INITIALIZE).encode()
    local, evil = f"http://{here}", "https://evil.example"
    for origins in ((local, evil), (evil, local), (local, local)):
        status, answer = raw_post(server.url, [("Host", here), *(("Origin", o) for o in origins)], body)
        assert status == 403, (origins, answer)
        assert b"several Origin headers" in answer and b"agentic-knowledge" not in answer
    status, answer = raw_post(server.url, [("Host", here), ("Authorization", "Bearer a"), ("Authorization", "b")], body)
    assert status == 400 and b"several Authorization headers" in answer, answer
    assert server.text().count("refused a request with several origin headers") == 3, server.text()[-2000:]
    assert "refused a request with several authorization headers" in server.text()
    # one Origin of this machine is served as before
    status, answer = raw_post(server.url, [("Host", here), ("Origin", local)], body)
    assert status == 200 and b"agentic-knowledge" in answer, answer


@pytest.mark.anyio
async def test_a_malformed_body_gets_a_json_rpc_error_and_the_server_goes_on(server: Served) -> None:
    def post(body: bytes) -> httpx.Response:
        return httpx.post(server.url, content=body, headers=POST_HEADERS)

    cut = post(b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list"')
    assert cut.status_code == 400 and cut.headers["content-type"] == "application/json"
    assert cut.json()["id"] is None and cut.json()["error"]["code"] == types.PARSE_ERROR
    assert "not valid JSON" in cut.json()["error"]["message"]
    not_text = post(b"\xff\xfe not even text")
    assert not_text.json()["error"]["code"] == types.PARSE_ERROR and "not UTF-8" in not_text.json()["error"]["message"]
    batch = post(b"[1, 2]")
    assert batch.json()["error"]["code"] == types.INVALID_REQUEST
    for nothing in (b"", b" \r\n"):  # no message at all is as malformed as a broken one (it was 202)
        empty = post(nothing)
        assert empty.status_code == 400 and empty.headers["content-type"] == "application/json"
        assert empty.json()["id"] is None and empty.json()["error"]["code"] == types.PARSE_ERROR
        assert "no body" in empty.json()["error"]["message"]
    bad_params = post(
        b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "search", "arguments": [1]}}'
    )
    assert bad_params.status_code == 400
    assert bad_params.json()["id"] == 9 and bad_params.json()["error"]["code"] == types.INVALID_PARAMS
    assert "malformed message from a client" in server.text()
    with anyio.fail_after(120):
        async with connect(server.url) as s:  # the server goes on serving
            assert {"search", "list_docsets"} <= {t.name for t in (await s.list_tools()).tools}


def test_binding_beyond_loopback_needs_a_token(tmp_path: Path, mdrag_home: Path) -> None:
    project = make_project(tmp_path)
    run = subprocess.run(
        mcp_command("--host", "0.0.0.0", "--port", "0"),
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **server_env(mdrag_home)},
    )
    assert run.returncode == 2, run.stderr
    assert "binding to 0.0.0.0 exposes your documents" in run.stderr and "--token" in run.stderr
    assert "MCP server on" not in run.stderr


def test_http_flags_without_http_are_refused(tmp_path: Path, mdrag_home: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mdrag", "mcp", "--port", "9999", "--token", "x"],
        cwd=make_project(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **server_env(mdrag_home)},
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 2
    assert "--port, --token only apply to the MCP server over HTTP: add --http" in run.stderr


@pytest.mark.anyio
async def test_a_token_is_required_when_set_and_sigterm_stops_cleanly(tmp_path: Path, home: Path) -> None:
    with serving(react_project(tmp_path), home, tmp_path / "server.log", "--token", TOKEN) as served:
        missing = httpx.post(served.url, json=INITIALIZE, headers=POST_HEADERS)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert "none was sent" in missing.text  # a missing token and a wrong one told apart
        wrong = httpx.post(served.url, json=INITIALIZE, headers={**POST_HEADERS, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and "The token sent is wrong" in wrong.text
        assert wrong.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        with anyio.fail_after(120):
            async with connect(served.url, token=TOKEN) as s:
                listed = json.loads(ok(await s.call_tool("list_docsets", {})))
        assert [d["id"] for d in listed["docsets"]] == ["react", "hugo"]
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(180) == 0, served.text()[-2000:]
        log = served.text()
    assert "the docsets' indexes are closed" in log and "mdrag: MCP server stopped" in log
    assert TOKEN not in log
