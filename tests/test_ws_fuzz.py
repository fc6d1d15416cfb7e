"""A WebSocket fuzz and a load test against a real `mdrag serve`: real MiniLM, the default store (FAISS for this
new index), loopback sockets.

At the same time: 1,200 malformed, oversized, deeply nested and wrongly typed
messages (from a seeded random, so every run sends the same ones) over 4
connections, 50 clients making 20 searches each, and a probe asking for the
server's status. Every bad message must get one error reply, every search its
results, and no connection may close. The counts are printed at the end of the
pytest run and written to benchmarks/out/ws_fuzz.json (for benchmarks/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from mdrag.config import load_config
from mdrag.embedding.base import Embedder
from mdrag.frontends.protocol import MAX_QUESTION_CHARS
from mdrag.frontends.server import QAServer
from mdrag.index import Index
from tests.figures import report

REPO = Path(__file__).resolve().parents[1]
SEED = 13
FUZZ_MESSAGES = 1200
FUZZ_CONNECTIONS = 4
LOAD_CLIENTS, LOAD_QUERIES = 50, 20
MAX_MESSAGE_BYTES = 65536  # the default server.max_message_bytes, which this test runs with

QUERIES = [
    "how do I install mdrag",
    "index a folder of Markdown files",
    "search results score and heading path",
    "incremental indexing only embeds what changed",
    "troubleshooting the server",
    "configuration file settings",
    "release checklist",
    "rotate the API keys",
]

# Values of the wrong type or out of range, per field; none of them is valid there.
NOT_TEXT: list[Any] = [None, 5, 1.5, True, False, [], {}, ["x"], {"text": "x"}, "", "   ", "\t\n"]
WRONG = {
    "question": NOT_TEXT,
    "query": NOT_TEXT,
    "k": [True, False, 0, 101, -1, 0.5, 10.0, "5", "", [], {}, [5], 10**30, -(10**40)],
    "threshold": [True, False, -0.01, 1.01, 2, -1, "0.5", "", [], {}, [0.5], 10**30],
    "index": [5, 1.5, True, "", [], {}, ["default"], "no-such-index", "../../etc", "\x00"],
    "filters": [
        [],
        "tags=a",
        5,
        True,
        {"tags": 5},
        {"tags": [1]},
        {"tags": [["a"]]},
        {"tags": ["a", None]},
        {"tags": {"a": 1}},
        {"tags": [str(i) for i in range(101)]},
        {"path_prefix": 5},
        {"path_prefix": ["a"]},
        {"path_prefix": "a\\b"},
        {"root": []},
        {"root": True},
        {"tags": "a\x00b"},
        {"nope": "x"},
        {"path_prefix": "x", "extra": 1},
        {"root": "/" + "r" * MAX_QUESTION_CHARS},
    ],
    "type": [None, 5, "", "Query", "SEARCH", "dance", "answer", "stream_start", [], {}, True],
}
UNKNOWN_FIELDS = ["treshold", "ids", "question ", "Query", "top_k", "filter", "stream", "__proto__", "ké", ""]
RAW_BAD_FIELDS = [  # JSON text no encoder writes: lone surrogates, NaN, numbers no int can hold
    '"\\ud800"',
    '"a\\udc00b"',
    '"\\ud83d x"',
    "NaN",
    "Infinity",
    "-Infinity",
    "9" * 5000,
    "1e99999",
]


#: A filter only Milvus refuses (its LIKE cannot match a backslash); the FAISS store searches with it.
MILVUS_ONLY_BAD_FILTERS = {"path_prefix": "a\\b"}


def refused_by(backend: str, category: str, frame: str | bytes) -> bool:
    """Whether the server on this store backend refuses the frame: every one does, but for a frame whose
    one fault (the category "wrong type") is a filter only Milvus refuses."""
    if backend == "milvus" or category != "wrong type":
        return True
    msg = json.loads(frame)
    return not (isinstance(msg, dict) and msg.get("filters") == MILVUS_ONLY_BAD_FILTERS)


def valid(rng: random.Random) -> dict[str, Any]:
    """A well-formed request, the base the fuzz breaks."""
    kind = rng.choice(["query", "search", "search", "status"])
    if kind == "status":
        return {"type": "status"}
    if kind == "query":
        return {"type": "query", "question": rng.choice(QUERIES)}
    msg: dict[str, Any] = {"type": "search", "query": rng.choice(QUERIES), "k": rng.randint(1, 100)}
    if rng.random() < 0.5:
        msg["threshold"] = rng.random()
    if rng.random() < 0.5:
        msg["filters"] = {"path_prefix": "guides/", "tags": ["install"]}
    return msg


def nested(rng: random.Random, depth: int) -> str:
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}"), ('[{"a":', "}]")])
    if closer == "]":
        return opener * depth + closer * depth
    return opener * depth + "1" + closer * depth


def fuzz(n: int, seed: int) -> list[tuple[str, str | bytes]]:
    """``n`` (category, frame) pairs, each of which the server must answer with an error."""
    rng = random.Random(seed)
    out: list[tuple[str, str | bytes]] = []
    while len(out) < n:
        r = rng.random()
        base = valid(rng)
        text = json.dumps(base)
        if r < 0.12:  # text that is not JSON
            how = rng.randrange(5)
            if how == 0:
                frame = text[: rng.randrange(len(text))]  # a strict prefix of an object is never JSON
            elif how == 1:
                frame = "}" + "".join(chr(rng.randint(32, 0x2FF)) for _ in range(rng.randint(0, 80)))
            elif how == 2:
                frame = text + rng.choice([" x", "]", "}", ",", " {}"])
            elif how == 3:
                frame = text.replace('"', "'")
            else:
                frame = text[:2] + chr(rng.randint(0, 31)) + text[2:]  # a raw control character in a string
            out.append(("invalid JSON", frame))
        elif r < 0.16:  # binary frames that are not UTF-8
            junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
            out.append(("not UTF-8", text.encode()[:10] + b"\xff" + junk))
        elif r < 0.30:  # nesting past the parser's limit, alone or as a field's value
            depth = rng.randint(201, 9000)
            if rng.random() < 0.4:
                out.append(("nested", nested(rng, depth)))
            else:
                field = rng.choice(["question", "query", "k", "filters", "index", "extra", "type"])
                out.append(("nested", text[:-1] + f', "{field}": ' + nested(rng, depth) + "}"))
        elif r < 0.33:  # over server.max_message_bytes, up to twice websockets' default limit
            size = rng.randint(MAX_MESSAGE_BYTES + 1, 2 << 20)
            frame = json.dumps({**base, "question": "x" * size})
            out.append(("oversized", frame))
        elif r < 0.75:  # one field of the wrong type or out of range
            field = rng.choice([f for f in WRONG if f in base or f in ("type", "index")])
            if base["type"] == "search" and rng.random() < 0.4:
                field = rng.choice(["k", "threshold", "filters"])
            out.append(("wrong type", json.dumps({**base, field: rng.choice(WRONG[field])})))
        elif r < 0.82:  # a field the protocol does not have, or a required one missing
            if rng.random() < 0.5:
                out.append(
                    ("unknown field", json.dumps({**base, rng.choice(UNKNOWN_FIELDS): rng.choice([1, "x", None])}))
                )
            else:
                required = [f for f in base if f != "type" and f in ("question", "query")] or ["type"]
                out.append(("missing field", json.dumps({k: v for k, v in base.items() if k != required[0]})))
        elif r < 0.92:  # JSON text no encoder writes
            field = {"query": "question", "search": rng.choice(["query", "k", "threshold"]), "status": "type"}[
                base["type"]
            ]
            out.append(("raw escapes", text[:-1] + f', "{field}": {rng.choice(RAW_BAD_FIELDS)}' + "}"))
        else:  # not an object
            out.append(("not an object", json.dumps(rng.choice([[base], "status", 5, None, True, [], 1.5]))))
    return out


async def reply(ws: ClientConnection) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(ws.recv(), 120)))


@pytest.mark.slow
def test_fuzz_and_load_with_no_close_and_no_error(
    tmp_path: Path, minilm: Embedder, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "examples" / "docs", docs)
    frames = fuzz(FUZZ_MESSAGES, SEED)
    counts: Counter[str] = Counter()
    categories = Counter(c for c, _ in frames)
    bad_replies: list[tuple[str, Any]] = []  # (frame start, reply) for every reply that is not a clean error
    done = asyncio.Event()
    backends: list[str] = []  # the store backend the server's index is on

    async def fuzzer(server: QAServer, part: list[tuple[str, str | bytes]]) -> None:
        async with connect(server.url) as ws:
            await reply(ws)  # the status on connect
            for category, frame in part:
                try:
                    await ws.send(frame)
                    msg = await reply(ws)
                except ConnectionClosed:
                    counts["fuzz_closes"] += 1
                    return
                assert server.index is not None
                if not refused_by(server.index.backend, category, frame):
                    if msg["type"] == "search_results":
                        counts["fuzz_searched"] += 1  # a valid search on this store
                    else:
                        bad_replies.append((frame[:80], msg))
                    continue
                text = str(msg.get("message", ""))
                if msg["type"] == "error" and not any(
                    w in text for w in ("internal error", "Traceback", str(tmp_path))
                ):
                    counts["fuzz_error_replies"] += 1
                else:
                    bad_replies.append((frame[:80], msg))

    async def client(server: QAServer, i: int) -> None:
        async with connect(server.url) as ws:
            await reply(ws)
            for j in range(LOAD_QUERIES):
                query = QUERIES[(i + j) % len(QUERIES)]
                try:
                    await ws.send(json.dumps({"type": "search", "query": query, "k": 3, "threshold": 0}))
                    msg = await reply(ws)
                except ConnectionClosed:
                    counts["load_closes"] += 1
                    return
                if msg["type"] == "search_results" and msg["results"]:
                    counts["load_answered"] += 1
                else:
                    counts["load_errors"] += 1
                    bad_replies.append((query, msg))

    async def probe(server: QAServer) -> None:
        async with connect(server.url) as ws:
            await reply(ws)
            while not done.is_set():
                counts["probe_sent"] += 1
                await ws.send('{"type": "status"}')
                msg = await reply(ws)
                counts["probe_answered"] += msg["type"] == "status" and msg["state"] == "ready"
                await asyncio.sleep(0.2)

    async def scenario() -> float:
        config = load_config({"index": "fuzz", "server.port": 0})
        index = Index(config, embedder=minilm)
        backends.append(index.backend)
        server = QAServer(config, [docs], overrides={"server.port": 0, "index": "fuzz"}, index=index)
        await server.start()
        try:
            await asyncio.wait_for(server.ready.wait(), 300)
            assert await asyncio.to_thread(server.keeper.wait, None, 300)  # type: ignore[union-attr]  # built whole
            assert server.state == "ready" and server.files >= 4
            t0 = time.monotonic()
            prober = asyncio.ensure_future(probe(server))
            await asyncio.gather(
                *(fuzzer(server, frames[i::FUZZ_CONNECTIONS]) for i in range(FUZZ_CONNECTIONS)),
                *(client(server, i) for i in range(LOAD_CLIENTS)),
            )
            done.set()
            await prober
            return time.monotonic() - t0
        finally:
            await server.stop()

    with caplog.at_level(logging.WARNING):
        wall = asyncio.run(scenario())
    searched = sum(not refused_by(backends[0], c, f) for c, f in frames)  # valid searches on this store
    figures = {
        "store": backends[0],
        "seed": SEED,
        "fuzz_messages": len(frames),
        "fuzz_connections": FUZZ_CONNECTIONS,
        "fuzz_categories": dict(sorted(categories.items())),
        "fuzz_error_replies": counts["fuzz_error_replies"],
        "fuzz_searched": counts["fuzz_searched"],
        "fuzz_closes": counts["fuzz_closes"],
        "load_clients": LOAD_CLIENTS,
        "load_queries_each": LOAD_QUERIES,
        "load_answered": counts["load_answered"],
        "load_errors": counts["load_errors"],
        "load_closes": counts["load_closes"],
        "probe_sent": counts["probe_sent"],
        "probe_answered": counts["probe_answered"],
        "wall_s": round(wall, 1),  # fuzz, load and probe together, the index already built
    }
    report(
        request.config,
        "ws_fuzz",
        figures,
        f"ws fuzz: {len(frames)} messages, {figures['fuzz_error_replies']} error replies, "
        f"{figures['fuzz_searched']} valid searches on the {figures['store']} store, "
        f"{figures['fuzz_closes']} closes; load: {LOAD_CLIENTS}x{LOAD_QUERIES} searches, "
        f"{figures['load_answered']} answered, {figures['load_errors']} errors; "
        f"probe answered {figures['probe_answered']}/{figures['probe_sent']} (seed {SEED}, {wall:.0f} s)",
    )

    assert bad_replies == [], bad_replies[:5]
    assert figures["fuzz_error_replies"] == len(frames) - searched >= 1000 and figures["fuzz_closes"] == 0
    assert figures["fuzz_searched"] == searched
    assert set(categories) >= {"invalid JSON", "not UTF-8", "nested", "oversized", "wrong type", "raw escapes"}
    assert figures["load_answered"] == LOAD_CLIENTS * LOAD_QUERIES and figures["load_closes"] == 0
    assert figures["probe_sent"] >= 1 and figures["probe_answered"] == figures["probe_sent"]
    failures = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert failures == [], [r.getMessage() for r in failures[:5]]
