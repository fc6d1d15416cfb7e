"""Many MCP sessions at once over HTTP: N clients each open a session of `mdrag mcp --http` (initialize,
then one `search`) at the same moment, each on its own connection.

The server is its own process (`python -m mdrag mcp --http --port 0`) in a project whose docset holds
mdrag's examples/docs, indexed before the clients start. Every session ends one of three ways: answered
(the search's result), refused with a reason (an HTTP error status or a JSON-RPC error, with its message:
a server that is full says "busy, try again" with 503 and Retry-After), or dropped: the connection closed,
reset or timed out with no answer at all. Dropped must be none; the server's log says why it refused.
With `--pause LOW HIGH` each session waits between its initialize and its search, spread from LOW to
HIGH seconds: around 5 s (httpx's keep-alive expiry) a server that closes idle connections at the same
moment loses requests sent meanwhile.

    python benchmarks/mcp_sessions.py [--sessions 200] [--pause 4.8 5.2] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # render and steps, also when imported as benchmarks.*

import httpx  # noqa: E402
from render import command, fint, not_measured, prose, table  # noqa: E402
from steps import MODELS, Benchmark, Data, Section, Step  # noqa: E402

from benchmarks.common import ROOT, seed_model_cache  # noqa: E402 - after the path

DOCS = ROOT / "examples" / "docs"
QUERIES = [
    "how do I index a folder?",
    "what happens when a file changes?",
    "where is the configuration file?",
    "the server does not start",
]
PROTOCOL = "2025-06-18"
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
REQUEST_TIMEOUT_S = 300.0  # a reply slower than this counts as none


@dataclass
class Outcome:
    """How one session ended: "answered", "refused" (with the reason the server gave) or "dropped" (why not)."""

    kind: str
    reason: str = ""
    seconds: float = 0.0


def make_project(tmp: Path) -> Path:
    """A project whose `examples` docset is a copy of examples/docs, inside the project."""
    project = tmp / "project"
    (project / ".knowledge").mkdir(parents=True)
    shutil.copytree(DOCS, project / "docs")
    (project / ".knowledge" / "config.yaml").write_text(
        f"docsets:\n  - id: examples\n    name: Examples\n    local_path: {(project / 'docs').as_posix()}\n",
        encoding="utf-8",
    )
    return project


@contextmanager
def serving(project: Path, home: Path, log: Path, *flags: str) -> Iterator[str]:
    """`mdrag mcp --http --port 0 -v` in ``project`` until the block ends; its URL."""
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mdrag", "mcp", "--http", "-v", "--port", "0", *flags],
            cwd=project,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"MCP server on (http://\S+)", log.read_text(errors="replace"))):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`mdrag mcp --http` did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        yield found.group(1)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _message(response: httpx.Response) -> dict[str, Any] | None:
    """The JSON-RPC message of an answer: its JSON body, or the last `data:` event of its SSE stream."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        messages = [json.loads(e) for e in events if e]
        return messages[-1] if messages else None
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


class Refused(Exception):
    """The server answered a request with an error: its status and message."""


async def _call(client: httpx.AsyncClient, url: str, body: dict[str, Any], session: str | None) -> httpx.Response:
    headers = {**HEADERS, **({"Mcp-Session-Id": session, "Mcp-Protocol-Version": PROTOCOL} if session else {})}
    response = await client.post(url, json=body, headers=headers)
    message = _message(response)
    if response.status_code >= 400 or (message is not None and "error" in message):
        said = (message or {}).get("error", {}).get("message") if message else response.text.strip()[:200]
        retry = response.headers.get("retry-after")
        raise Refused(f"HTTP {response.status_code}{f' (Retry-After {retry})' if retry else ''}: {said}")
    return response


async def one_session(url: str, query: str, start: asyncio.Event, pause: float = 0.0) -> Outcome:
    """initialize, notifications/initialized, tools/call search, then DELETE: how the session ended.

    ``pause``: seconds between the initialize and the search, as a client thinks (or is held up) between them."""
    await start.wait()
    t = time.perf_counter()
    try:
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as client:
            hello = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
            opened = await _call(
                client, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}, None
            )
            session = opened.headers.get("mcp-session-id")
            if not session:
                return Outcome("refused", f"HTTP {opened.status_code}: no session id", time.perf_counter() - t)
            await _call(client, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
            await asyncio.sleep(pause)
            args = {"query": query, "docset": "examples", "k": 3}
            found = await _call(
                client,
                url,
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search", "arguments": args}},
                session,
            )
            message = _message(found)
            seconds = time.perf_counter() - t
            if message is None or "result" not in message:
                return Outcome("dropped", f"HTTP {found.status_code} with no JSON-RPC answer", seconds)
            await client.delete(url, headers={"Mcp-Session-Id": session, "Mcp-Protocol-Version": PROTOCOL})
            return Outcome("answered", "", seconds)
    except Refused as e:
        return Outcome("refused", str(e), time.perf_counter() - t)
    except (httpx.TransportError, OSError) as e:  # closed, reset, timed out: no answer
        return Outcome("dropped", f"{type(e).__name__}: {e}"[:200], time.perf_counter() - t)


async def run_sessions(url: str, sessions: int, pauses: tuple[float, float] = (0.0, 0.0)) -> list[Outcome]:
    """``sessions`` sessions started at once, each pausing between ``pauses`` seconds (evenly spread) between
    its initialize and its search; how each ended."""
    start = asyncio.Event()
    low, high = pauses
    tasks = [
        asyncio.create_task(
            one_session(url, QUERIES[i % len(QUERIES)], start, low + (high - low) * i / max(1, sessions - 1))
        )
        for i in range(sessions)
    ]
    await asyncio.sleep(0)
    start.set()
    return list(await asyncio.gather(*tasks))


async def wait_indexed(url: str, deadline_s: float = 600) -> None:
    """One session searching until the docset's index is built (the first search starts it)."""
    stop = time.monotonic() + deadline_s
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as client:
        hello = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "warm", "version": "0"}}
        opened = await _call(client, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}, None)
        session = opened.headers["mcp-session-id"]
        await _call(client, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        call = {"name": "search", "arguments": {"query": QUERIES[0], "docset": "examples", "k": 3}}
        while time.monotonic() < stop:
            found = _message(
                await _call(client, url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}, session)
            )
            text = json.loads(found["result"]["content"][0]["text"]) if found else {}
            if text.get("results"):
                await client.delete(url, headers={"Mcp-Session-Id": session, "Mcp-Protocol-Version": PROTOCOL})
                return
            await asyncio.sleep(0.5)
    raise RuntimeError("the examples docset was not indexed in time")


def tally(outcomes: list[Outcome]) -> dict[str, Any]:
    """Counts by kind, the reasons given, and the answered sessions' times."""
    times = sorted(o.seconds for o in outcomes if o.kind == "answered")
    return {
        "sessions": len(outcomes),
        "answered": sum(o.kind == "answered" for o in outcomes),
        "refused": sum(o.kind == "refused" for o in outcomes),
        "dropped": sum(o.kind == "dropped" for o in outcomes),
        "refused_reasons": dict(Counter(o.reason for o in outcomes if o.kind == "refused")),
        "dropped_reasons": dict(Counter(o.reason for o in outcomes if o.kind == "dropped")),
        "answered_s": {"p50": times[len(times) // 2], "max": times[-1]} if times else None,
    }


def measure(
    sessions: int, home: Path, cache: Path | None = None, pauses: tuple[float, float] = (0.0, 0.0)
) -> dict[str, Any]:
    """Start a server, index the docset, then run ``sessions`` at once (``pauses``: as :func:`run_sessions`):
    the tally and the server's warnings."""
    with tempfile.TemporaryDirectory(prefix="mcp-sessions-") as tmp:
        seed_model_cache(home, cache)
        project = make_project(Path(tmp))
        log = Path(tmp) / "server.log"
        with serving(project, home, log) as url:
            asyncio.run(wait_indexed(url))
            load_before = os.getloadavg()
            outcomes = asyncio.run(run_sessions(url, sessions, pauses))
            load_after = os.getloadavg()
            text = log.read_text(encoding="utf-8", errors="replace")
    result = tally(outcomes)
    result["server_warnings"] = dict(
        Counter(
            re.sub(r"[0-9a-f]{32}", "<id>", line.split(" ", 3)[-1]) for line in text.splitlines() if "WARNING" in line
        )
    )
    result.update(
        pauses_s=list(pauses),
        load_before=load_before,
        load_after=load_after,
        cpus=os.cpu_count(),
        python=platform.python_version(),
    )
    return result


def section_mcp_sessions(data: Data) -> list[str]:
    got = data.get("mcp_sessions")
    about = __doc__.split("\n\n    python")[0]
    lines = ["## Many MCP sessions at once", "", *prose("mcp_sessions", about), command(data, "mcp_sessions"), ""]
    if not got:
        return [*lines, not_measured("mcp_sessions", data), ""]
    times = got.get("answered_s") or {}
    lines += table(
        ("sessions", "pause (s)", "answered", "refused", "dropped", "answered p50 / max (s)", "load before / after"),
        [
            (
                fint(got["sessions"]),
                "–".join(f"{p:g}" for p in got.get("pauses_s", [0, 0])),
                fint(got["answered"]),
                fint(got["refused"]),
                fint(got["dropped"]),
                f"{times.get('p50', 0):.1f} / {times.get('max', 0):.1f}",
                f"{got['load_before'][0]:.1f} / {got['load_after'][0]:.1f}",
            )
        ],
    )
    for kind in ("refused", "dropped"):
        for reason, count in got[f"{kind}_reasons"].items():
            lines.append(f"- {kind} ({count}): {reason}")
    return [*lines, ""]


BENCHMARK = Benchmark(
    steps=(Step("mcp_sessions", 97, ("--sessions", "200"), ("answered", "dropped"), same_machine=("cpus",)),),
    sections=(Section("Many MCP sessions at once", 75, section_mcp_sessions),),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=200, help="sessions started at once")
    ap.add_argument("--home", type=Path, help="the server's MDRAG_HOME (default: a new one, removed after)")
    ap.add_argument("--model-cache", type=Path, default=MODELS, help="an existing model export to copy in")
    ap.add_argument(
        "--pause",
        type=float,
        nargs=2,
        default=(0.0, 0.0),
        metavar=("LOW", "HIGH"),
        help="seconds each session waits between its initialize and its search, spread from LOW to HIGH",
    )
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mcp-sessions-home-") as tmp:
        result = measure(args.sessions, args.home or Path(tmp), args.model_cache, tuple(args.pause))
    print(
        f"{result['sessions']} sessions: {result['answered']} answered, {result['refused']} refused, "
        f"{result['dropped']} dropped; load {result['load_before'][0]:.1f} -> {result['load_after'][0]:.1f}"
    )
    for kind in ("refused", "dropped"):
        for reason, count in result[f"{kind}_reasons"].items():
            print(f"  {kind} {count:>4}  {reason}")
    for line, count in result["server_warnings"].items():
        print(f"  server warning x{count}: {line[:160]}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
