"""The MCP malformed-request set, sent to the real `mdrag mcp` stdio server (a subprocess).

Every malformed request gets a JSON-RPC reply, an error saying what to change,
with the request's id when it has a usable one (else ``id: null``);
notifications and responses get none, as JSON-RPC 2.0 requires; after each
line the server still answers a probe (``tools/list``). The counts are printed
at the end of the pytest run and written to benchmarks/out/mcp_malformed.json
(for benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import types

from mdrag.frontends.mcp.schema import tools
from tests.figures import report

TOOL_NAMES = {t.name for t in tools(docsets=True)}  # what a probe (tools/list) must list

ROOT = Path(__file__).resolve().parents[1]
REPLY_TIMEOUT_S = 30.0  # per line; a line whose answer does not come is a hang

NULL = "null"  # the reply's id is null
NONE = "none"  # no reply (a notification or a response)
TOOL = "tool error"  # a tools/call result with isError


def call(id_: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def raw_call(id_: int, name: str, arguments: bytes) -> bytes:
    """A tools/call line with ``arguments`` as written (what json.dumps cannot write)."""
    head = b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "%s", "arguments": '
    return head % (id_, name.encode()) + arguments + b"}}"


def cases() -> list[tuple[str, bytes, str | int, int | str | None, str]]:
    """(label, line, reply id or NULL/NONE, error code or TOOL, a word the message must hold)."""
    out: list[tuple[str, bytes, str | int, int | str | None, str]] = []

    def add(label: str, message: Any, reply: str | int, code: int | str | None, word: str = "") -> None:
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        out.append((label, line, reply, code, word))

    n = iter(range(100, 1000))
    ping = {"jsonrpc": "2.0", "method": "ping"}
    add("not JSON: cut short", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"', NULL, -32700, "JSON")
    add("not UTF-8, not JSON", b"\xff\xfe not even text", NULL, -32700, "JSON")
    add("NaN", b'{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"x": NaN}}', 9, -32602, "NaN")
    add("array nested 1,000 deep", b"[" * 1000 + b"]" * 1000, NULL, -32700, "nested")
    add("batch", [{**ping, "id": 3}], NULL, -32600, "batch")
    add("a string", b'"tools/list"', NULL, -32600, "object")
    add("no JSON-RPC fields", {"hello": "world"}, NULL, -32600, "jsonrpc")
    for label, bad in (("object", {"a": 1}), ("array", [1]), ("fraction", 1.5), ("boolean", True), ("null", None)):
        add(f"id {label}", {**ping, "id": bad}, NULL, -32600, "id")
    add("id of 5,000 digits", b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "ping"}', NULL, -32600, "id")
    add("id with a lone surrogate", b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}', NULL, -32600, "id")
    i = next(n)
    add("no method", {"jsonrpc": "2.0", "id": i}, i, -32600, "method")
    i = next(n)
    add("jsonrpc 1.0", {**ping, "jsonrpc": "1.0", "id": i}, i, -32600, "jsonrpc")
    i = next(n)
    add("method not a string", {**ping, "id": i, "method": 5}, i, -32600, "method")
    i = next(n)
    add("unknown method", {**ping, "id": i, "method": "no/such"}, i, -32601, "")
    i = next(n)
    add("params a number", {**ping, "id": i, "method": "tools/call", "params": 5}, i, -32602, "params")
    i = next(n)
    add("params an array", {**ping, "id": i, "method": "tools/list", "params": []}, i, -32602, "params")
    i = next(n)
    add("tool name a number", call(i, 5, {}), i, -32602, "name")
    i = next(n)
    add("arguments a string", call(i, "search", "x"), i, -32602, "arguments")
    i = next(n)
    add("unknown tool", call(i, "no_such_tool", {}), i, -32601, "no_such_tool")
    i = next(n)
    add("query with a lone surrogate", raw_call(i, "search", b'{"query": "\\ud800"}'), i, -32602, "surrogate")
    i = next(n)
    line = raw_call(i, "search_docs", b'{"docset": "react", "keywords": ["\\udc00"], "generalized_keywords": ["x"]}')
    add("keyword with a lone surrogate", line, i, -32602, "surrogate")
    i = next(n)
    add("k of 5,000 digits", raw_call(i, "search", b'{"query": "q", "k": %s}' % (b"9" * 5000)), i, -32602, "64 bits")
    i = next(n)
    add(
        "arguments nested 100 deep",
        call(i, "search", {"query": "q", "x": json.loads("[" * 100 + "]" * 100)}),
        i,
        -32602,
        "nested",
    )
    i = next(n)
    add("oversized line (17 MiB)", call(i, "search", {"query": "x" * (17 * 2**20)}), NULL, -32600, "MiB")
    for label, args, word in (
        ("query of 5,000 characters", {"query": "q" * 5000}, "too long"),
        ("query of 10 MB", {"query": "q" * 10_000_000}, "too long"),
        ("query empty", {"query": "  "}, "empty"),
        ("query of invisible characters only", {"query": "\u202e\u00ad\u200b"}, "'query' is empty"),
        ("query missing", {"docset": "react"}, "query"),
        ("query a number", {"query": 5}, "query"),
        ("k a string", {"query": "q", "k": "5"}, "'k'"),
        ("k 10**18", {"query": "q", "k": 10**18}, "'k'"),
        ("k a fraction", {"query": "q", "k": 1.5}, "'k'"),
        ("k a boolean", {"query": "q", "k": True}, "'k'"),
        ("k zero", {"query": "q", "k": 0}, "'k'"),
        ("docset a number", {"query": "q", "docset": 5}, "docset"),
        ("docset a path", {"query": "q", "docset": "../../etc/passwd"}, "docset"),
        ("no docset has files", {"query": "q"}, "no docset"),
    ):
        i = next(n)
        add(label, call(i, "search", args), i, TOOL, word)
    good = {"docset": "react", "keywords": ["hooks"], "generalized_keywords": ["state"]}
    for label, args, word in (
        ("keywords an object", {**good, "keywords": {"a": 1}}, "array of strings"),
        ("keywords numbers", {**good, "keywords": [1, 2]}, "array of strings"),
        ("keywords empty", {**good, "keywords": []}, "keywords"),
        ("keyword of 5,000 characters", {**good, "keywords": ["k" * 5000]}, "keywords"),
        ("keywords with a newline", {**good, "keywords": ["a\nb"]}, "control"),
        ("generalized_keywords missing", {"docset": "react", "keywords": ["x"]}, "generalized_keywords"),
        ("docset unknown", {**good, "docset": "vue"}, "vue"),
    ):
        i = next(n)
        add(label, call(i, "search_docs", args), i, TOOL, word)
    i = next(n)
    # a line that is not UTF-8 is refused whole: its id cannot be trusted either
    add("query not UTF-8", raw_call(i, "search", b'{"query": "\xff\xfe"}'), NULL, -32700, "not UTF-8")
    # never answered: notifications and responses
    add(
        "notification, params a number",
        {"jsonrpc": "2.0", "method": "notifications/initialized", "params": 5},
        NONE,
        None,
    )
    add(
        "notification with a lone surrogate",
        b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "\\ud800"}}',
        NONE,
        None,
    )
    add("response to no request", {"jsonrpc": "2.0", "id": 77, "result": {}}, NONE, None)
    add("response with an object id", {"jsonrpc": "2.0", "id": {}, "error": {"code": 1, "message": "x"}}, NONE, None)
    add("empty line", b"", NONE, None)
    return out


class Server:
    """`python -m mdrag mcp` in a project folder, with its stdout read by a thread."""

    def __init__(self, project: Path, home: Path) -> None:
        path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mdrag", "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=project,
            env=env,
        )
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.replies.put(json.loads(line))

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def until(self, ids: set[Any]) -> list[dict[str, Any]] | None:
        """Replies until one for each of ``ids`` (None: id null) came; None if they did not come in time."""
        got: list[dict[str, Any]] = []
        while ids - {r.get("id") for r in got}:
            try:
                got.append(self.replies.get(timeout=REPLY_TIMEOUT_S))
            except queue.Empty:
                return None
        return got

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.proc.kill()


def test_mcp_malformed_requests(tmp_path: Path, mdrag_home: Path, request: pytest.FixtureRequest) -> None:
    project = tmp_path / "project"
    (project / ".knowledge").mkdir(parents=True)
    (project / ".knowledge" / "config.yaml").write_text("docsets:\n  - id: react\n  - id: hugo\n")
    t0 = time.monotonic()
    server = Server(project, mdrag_home)
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": types.LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    answered, hangs, unanswered, probes_answered, wrong = 0, 0, 0, 0, []
    try:
        server.send(json.dumps(init).encode())
        assert server.until({0}) is not None
        server.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        requests = cases()
        for k, (label, line, reply_id, code, word) in enumerate(requests):
            probe = 10_000 + k
            server.send(line)
            server.send(json.dumps({"jsonrpc": "2.0", "id": probe, "method": "tools/list"}).encode())
            expected = {probe} | ({None if reply_id == NULL else reply_id} if reply_id != NONE else set())
            got = server.until(expected)
            if got is None:
                hangs += 1
                wrong.append(f"{label}: no reply")
                continue
            probed = [r for r in got if r.get("id") == probe]
            if {t.get("name") for t in probed[0].get("result", {}).get("tools", [])} == TOOL_NAMES:
                probes_answered += 1
            else:
                wrong.append(f"{label}: the probe got {probed[0]}")
            others = [r for r in got if r.get("id") != probe]
            if reply_id == NONE:
                unanswered += not others
                if others:
                    wrong.append(f"{label}: answered {others}")
                continue
            answered += 1
            reply = others[0] if len(others) == 1 else {"several": others}
            text = json.dumps(reply)
            if code == TOOL:
                result = reply.get("result", {})
                ok = result.get("isError") is True and word in result["content"][0]["text"]
            else:
                ok = reply.get("error", {}).get("code") == code and word in reply["error"]["message"]
            leaks = [s for s in (str(mdrag_home), "Traceback", "set_int_max_str_digits", "internal error") if s in text]
            if not ok or leaks or len(others) != 1:
                wrong.append(f"{label}: {text[:300]}")
        code_at_end = server.close()
    finally:
        server.proc.kill()
    notifications = sum(1 for c in requests if c[2] == NONE)
    figures = {
        "requests": len(requests) - notifications,
        "tool_argument_requests": sum(1 for c in requests if c[3] == TOOL),  # of the requests: a tool error
        "answered": answered,
        "hangs": hangs,
        "notifications": notifications,  # notifications and responses
        "unanswered": unanswered,
        "probes": len(requests),  # a tools/list after every line
        "probes_answered": probes_answered,
        "wrong": len(wrong),  # lines not handled as expected (code, message, a leak, the probe), hangs included
        "exit_code": code_at_end,
        "wall_s": round(time.monotonic() - t0, 1),  # server start to its exit
    }
    report(
        request.config,
        "mcp_malformed",
        figures,
        f"mcp malformed: {figures['requests']} requests, {answered} answered, {hangs} hangs; "
        f"{notifications} notifications and responses, {unanswered} left unanswered as JSON-RPC requires",
    )
    assert wrong == [] and hangs == 0, "\n".join(wrong)
    assert answered == len(requests) - notifications and unanswered == notifications
    assert code_at_end == 0  # and it stops at the end of its input
