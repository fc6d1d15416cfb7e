"""`mdrag serve` over real sockets on 127.0.0.1, with a real loopback LLM stand-in."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from mdrag.answering.generate import NO_RELEVANT
from mdrag.config import Config, load_config
from mdrag.embedding.base import Embedder
from mdrag.errors import ConfigError, EmbeddingError
from mdrag.frontends.protocol import is_loopback
from mdrag.frontends.server import QAServer
from mdrag.index import Index
from mdrag.knobs import MESSAGE_CEILING_BYTES
from tests.conftest import HashEmbedder
from tests.fake_llm import LLM

REPO = Path(__file__).resolve().parents[1]


def _config(**overrides: Any) -> Config:
    return load_config({"index": "s" + os.urandom(4).hex(), "server.port": 0, **overrides})


def _docs(tmp_path: Path, n: int = 6) -> Path:
    root = tmp_path / "docs"
    root.mkdir(exist_ok=True)
    (root / "install.md").write_text("# Install\n\nRun the installer, then restart the service.\n")
    for i in range(n):
        (root / f"topic{i}.md").write_text(f"# Topic {i}\n\nTopic {i} explains feature{i} and its options.\n")
    return root


@contextlib.asynccontextmanager
async def serving(
    config: Config, folders: list[Path], embedder: Embedder | None = None, wait: bool = True
) -> AsyncIterator[QAServer]:
    index = Index(config, embedder=embedder or HashEmbedder())
    server = QAServer(config, folders, overrides={"server.port": 0, "index": config["index"]}, index=index)
    await server.start()
    try:
        if wait:  # until the index is built whole (a first build is served from its first step on)
            await asyncio.wait_for(server.ready.wait(), 300)
            if server.keeper is not None:
                assert await asyncio.to_thread(server.keeper.wait, None, 300)
        yield server
    finally:
        await server.stop()


async def recv(ws: ClientConnection, timeout: float = 30) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(ws.recv(), timeout)))


async def ask(ws: ClientConnection, question: str, **extra: Any) -> tuple[str, list[str], list[dict[str, Any]]]:
    """Send a query; return the streamed text, the sources and every message received."""
    await ws.send(json.dumps({"type": "query", "question": question, **extra}))
    messages = []
    while True:
        msg = await recv(ws)
        messages.append(msg)
        if msg["type"] in ("stream_end", "error") or (msg["type"] == "status" and len(messages) == 1):
            break
    text = "".join(m["chunk"] for m in messages if m["type"] == "stream_chunk")
    return text, messages[-1].get("sources", []), messages


async def opened(server: QAServer, **kw: Any) -> ClientConnection:
    ws = await connect(server.url, **kw)
    hello = await recv(ws)
    assert hello["type"] == "status"
    return ws


@pytest.mark.slow
def test_answers_stream_from_the_llm_with_sources_or_extractively(
    tmp_path: Path, shared_data: Path, minilm: Embedder, llm: LLM
) -> None:
    """The real model on real Hugo pages; the stand-in LLM's tokens are the answer."""
    src = shared_data / "markdown_hugo_docs" / "content" / "en"
    root = tmp_path / "hugo"
    for rel in (
        "templates/shortcode.md",
        "content-management/shortcodes.md",
        "templates/partial-decorators.md",
        "configuration/output-formats.md",
        "getting-started/quick-start.md",
        "functions/strings/Replace.md",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, root / rel)
    llm.script.tokens = ["Create ", "a file in ", "layouts/_shortcodes ", "[1]."]

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "llm.api_key": "sk-x"})
        async with serving(config, [root], minilm) as server:
            ws = await opened(server)
            text, sources, messages = await ask(ws, "How do I create a custom shortcode?")
            assert messages[0] == {"type": "stream_start"}
            assert [m["chunk"] for m in messages if m["type"] == "stream_chunk"] == llm.script.tokens
            assert text == "Create a file in layouts/_shortcodes [1]."
            assert any(s.endswith("templates/shortcode.md") for s in sources)
            assert len(sources) == len(set(sources))
            # where to open each source: its path, the ref `get` takes, and its best passage's lines
            locations = messages[-1]["locations"]
            assert [loc["path"] for loc in locations] == sources
            shortcode = next(loc for loc in locations if loc["path"].endswith("templates/shortcode.md"))
            assert shortcode["ref"] == "templates/shortcode.md"
            assert 1 <= shortcode["line_start"] <= shortcode["line_end"]
            prompt = llm.script.requests[0]["body"]["messages"][-1]["content"]
            assert "[1]" in prompt and "How do I create a custom shortcode?" in prompt
            assert llm.script.requests[0]["body"]["stream"] is True
            await ws.close()

        config = _config()  # no LLM configured: an extractive answer that says so
        async with serving(config, [root], minilm) as server:
            ws = await opened(server)
            text, sources, _ = await ask(ws, "How do I create a custom shortcode?")
            assert "No LLM is configured" in text
            assert any(s.endswith("templates/shortcode.md") for s in sources)
            await ws.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("backend", ["milvus", "faiss"])
def test_bad_messages_get_errors_and_the_connection_stays_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, backend: str
) -> None:
    root = _docs(tmp_path)

    async def scenario() -> None:
        async with serving(_config(**{"store.backend": backend}), [root]) as server:
            ws = await opened(server)
            bad: list[tuple[str | bytes, str]] = [
                ("{not json", "invalid JSON"),
                (json.dumps({"type": "dance"}), "unknown message type"),
                (json.dumps({"question": "no type"}), '"type"'),
                (json.dumps({"type": "query"}), '"question"'),
                (json.dumps({"type": "query", "question": 5}), "non-empty string"),
                (json.dumps({"type": "query", "question": "x", "index": "nope"}), "unknown index 'nope'"),
                (json.dumps({"type": "search", "query": "x", "k": 0}), '"k"'),
                (json.dumps([1, 2]), "JSON object"),
                (json.dumps({"type": "query", "question": "x" * 70_000}), "too large"),
                ("[" * 1000 + "]" * 1000, "invalid JSON: recursion limit exceeded"),
                ('{"type": "search", "query": "x", "filters": ' + '{"a": ' * 3000 + "}" * 3001, "invalid JSON"),
                (
                    json.dumps({"type": "search", "query": "x", "filters": {"tags": 5}}),
                    '"tags" must be a tag or a list',
                ),
                ('{"type": "query", "question": "\\udc00 x"}', "valid Unicode"),
                ('{"type": "search", "query": "x", "k": ' + "7" * 5000 + "}", "number out of range"),
                (json.dumps({"type": "search", "query": "x", "treshold": 0.5}), 'unknown field "treshold"'),
                (b"\xff\xfe not UTF-8", "UTF-8"),
                # Over server.max_message_bytes and over websockets' default 1 MiB: still an answer.
                (json.dumps({"type": "query", "question": "x" * (2 << 20)}), "too large"),
            ]
            for frame, expected in bad:
                await ws.send(frame)
                reply = await recv(ws)
                assert reply["type"] == "error" and expected in reply["message"], (frame[:40], reply)
            await ws.send(json.dumps({"type": "search", "query": "x", "filters": {"path_prefix": "a\\b"}}))
            reply = await recv(ws)
            if backend == "milvus":  # Milvus's LIKE cannot match a backslash: refused, not guessed
                assert reply["type"] == "error" and "backslash" in reply["message"], reply
            else:  # the FAISS store matches it literally: no file here has one
                assert (reply["type"], reply["query"], reply["results"]) == ("search_results", "x", []), reply
                assert reply["note"].startswith("no results: no passage of the files the filters let through")
            text, sources, _ = await ask(ws, "Topic 3 feature3 options")
            assert any(s.endswith("topic3.md") for s in sources) and "No LLM is configured" in text

            await ws.send(json.dumps({"type": "search", "query": "feature2 options", "k": 3, "threshold": 0}))
            reply = await recv(ws)
            assert reply["type"] == "search_results" and len(reply["results"]) == 3
            assert all(r["ref"] == r["rel_path"] for r in reply["results"])  # what `get` takes
            top = reply["results"][0]
            assert top["rel_path"] == "topic2.md" and top["heading_path"] == ["Topic 2"] and 0 <= top["score"] <= 1
            # The documented limit: a message the server cannot hold closes that connection only.
            big = await opened(server)
            await big.send("x" * (MESSAGE_CEILING_BYTES + 1))
            with pytest.raises(ConnectionClosed) as e:
                await recv(big)
            assert e.value.rcvd is not None and e.value.rcvd.code == 1009
            await ws.send(json.dumps({"type": "status"}))
            st = await recv(ws)
            assert st["type"] == "status" and st["state"] == "ready" and st["files"] == 7 and st["chunks"] == 7
            assert st["message"] == "ready: 7 files, 7 chunks", "as docs/protocol.md shows it"
            await ws.close()

    with caplog.at_level(logging.WARNING, logger="mdrag"):
        asyncio.run(scenario())
    assert not [r for r in caplog.records if r.exc_info], "a bad message logs no traceback"


def test_filter_values_with_line_breaks_match_and_store_errors_stay_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A folder name with a line break is a valid filter; a failing store is reported without its paths."""
    root = _docs(tmp_path, 2)
    odd = root / "notes\nfrom\rthe\tteam"
    odd.mkdir()
    (odd / "minutes.md").write_text("# Minutes\n\nThe zorblax decision was taken on Monday.\n")

    async def search(ws: ClientConnection, **filters: Any) -> dict[str, Any]:
        await ws.send(json.dumps({"type": "search", "query": "zorblax decision", "threshold": 0, "filters": filters}))
        return await recv(ws)

    async def scenario() -> None:
        # Milvus: its client drops the collection under the server, and its error names the store.
        async with serving(_config(**{"store.backend": "milvus"}), [root]) as server:
            ws = await opened(server)
            for filters in ({"path_prefix": "notes\nfrom\rthe\tteam/"}, {"path_prefix": str(odd)}, {"root": str(root)}):
                reply = await search(ws, **filters)
                assert reply["type"] == "search_results", reply
                assert reply["results"][0]["rel_path"] == "notes\nfrom\rthe\tteam/minutes.md"
            reply = await search(ws, path_prefix="notes\nfrom\r")
            assert reply["type"] == "search_results" and reply["results"], reply
            reply = await search(ws, path_prefix='x"\n or rel_path != "')
            assert reply == {**reply, "type": "search_results", "results": []}

            assert server.index is not None
            store = server.index.store
            store.client.drop_collection(store.collection)  # the store fails under the server
            reply = await search(ws, path_prefix="notes\n")
            assert reply["type"] == "error" and "see the server log" in reply["message"], reply
            for secret in (str(tmp_path), store.uri, store.collection, "Milvus"):
                assert secret not in reply["message"]
            await ws.send(json.dumps({"type": "status"}))
            assert (await recv(ws))["type"] == "status", "the connection stays open"
            await ws.close()

    with caplog.at_level(logging.ERROR, logger="mdrag.frontends.server"):
        asyncio.run(scenario())
    logged = [r.getMessage() for r in caplog.records]
    assert any("could not answer a search request: Milvus" in m and "does not exist" in m for m in logged), logged


def test_not_ready_while_loading_then_answers(tmp_path: Path) -> None:
    root = _docs(tmp_path, 20)

    class Slow(HashEmbedder):
        def embed_batch(self, texts):  # type: ignore[no-untyped-def]
            time.sleep(1.5)
            return super().embed_batch(texts)

    async def scenario() -> None:
        async with serving(_config(), [root], Slow(), wait=False) as server:
            ws = await connect(server.url)
            hello = await recv(ws)
            assert hello["state"] == "loading" and "not ready" in hello["message"]
            _, _, messages = await ask(ws, "Topic 1")
            assert messages == [{**messages[0], "type": "status", "state": "loading"}]
            await asyncio.wait_for(server.ready.wait(), 60)
            text, sources, _ = await ask(ws, "Topic 1 feature1")
            assert sources
            await ws.close()

    asyncio.run(scenario())


def test_no_relevant_information_does_not_call_the_llm(tmp_path: Path, llm: LLM) -> None:
    root = _docs(tmp_path)

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "search.threshold": 0.99})
        async with serving(config, [root]) as server:
            ws = await opened(server)
            text, sources, _ = await ask(ws, "completely unrelated words about volcanoes")
            assert text == NO_RELEVANT and sources == []
            assert llm.script.requests == []
            await ws.close()

    asyncio.run(scenario())


def test_a_weak_best_match_is_refused_without_calling_the_llm(tmp_path: Path, llm: LLM) -> None:
    root = _docs(tmp_path)

    async def scenario() -> None:
        config = _config(
            **{"llm.base_url": llm.base_url, "search.threshold": 0, "answer.min_score": 0.99, "answer.judge": "scores"}
        )
        async with serving(config, [root]) as server:
            ws = await opened(server)
            # a passage holding every word of the question is an exact match, answered whatever its
            # score: "deployment" is in none
            text, sources, _ = await ask(ws, "Topic 1 feature1 deployment")
            assert text == NO_RELEVANT and sources == [] and llm.script.requests == []
            await ws.send(json.dumps({"type": "search", "query": "Topic 1 feature1 deployment"}))
            assert (await recv(ws))["results"], "search still lists results"
            await ws.close()

    asyncio.run(scenario())


def test_an_llm_that_finds_no_answer_in_its_sources_is_no_relevant_information(tmp_path: Path, llm: LLM) -> None:
    """answer.judge: llm (the default): the LLM is asked, and its NO_ANSWER reaches the client as "no relevant
    information" with no sources; the server stops the LLM at once (the rest of its answer is never read)."""
    root = _docs(tmp_path)
    llm.script.tokens = ["**NO", "_ANSWER**", " The sources are about topics, not volcanoes."] + ["more "] * 50
    llm.script.delay = 0.05

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "search.threshold": 0})
        async with serving(config, [root]) as server:
            ws = await opened(server)
            text, sources, messages = await ask(ws, "Which volcano erupted in 1815?")
            assert [m["type"] for m in messages] == ["stream_start", "stream_chunk", "stream_end"]
            assert text == NO_RELEVANT and sources == [] and len(llm.script.requests) == 1
            assert await asyncio.to_thread(llm.script.disconnected.wait, 30), "the LLM's stream was not closed"
            assert not llm.script.finished.is_set()
            llm.script.tokens, llm.script.delay = ["Topic 1 has feature1 [1]."], 0
            text, sources, _ = await ask(ws, "Topic 1 feature1")  # the next answer is the LLM's own
            assert text == "Topic 1 has feature1 [1]." and sources
            await ws.close()

    asyncio.run(scenario())


def test_a_question_about_what_real_docs_never_name_is_refused(shared_data: Path, minilm: Embedder, llm: LLM) -> None:
    """On the OpenTelemetry docs a question about Istio's Envoy access logs scores above answer.min_score
    (near their subject: logs, sidecars) though they never name Istio or Envoy: with answer.judge scores,
    "no relevant information" before the LLM is asked."""
    docs = shared_data / "markdown_otel_docs" / "content" / "en" / "docs" / "concepts"  # ~280 chunks: words count
    unanswerable = "How do I make Istio's Envoy sidecars write access logs in JSON format?"

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "answer.judge": "scores"})
        async with serving(config, [docs], minilm) as server:
            ws = await opened(server)
            await ws.send(json.dumps({"type": "search", "query": unanswerable}))
            results = (await recv(ws))["results"]
            assert max(r["cosine"] for r in results) >= config["answer.min_score"], "the best score alone would answer"
            text, sources, _ = await ask(ws, unanswerable)
            assert text == NO_RELEVANT and sources == [] and llm.script.requests == []
            text, sources, _ = await ask(ws, "What is baggage in OpenTelemetry?")
            assert text != NO_RELEVANT and any(s.endswith("baggage.md") for s in sources)
            assert len(llm.script.requests) == 1
            await ws.close()

    asyncio.run(scenario())


def test_llm_errors_become_error_messages_and_the_connection_goes_on(tmp_path: Path, llm: LLM) -> None:
    root = _docs(tmp_path)

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "llm.api_key": "sk-LEAKCHECK", "search.threshold": 0})
        async with serving(config, [root]) as server:
            ws = await opened(server)
            llm.script.status, llm.script.error_body = 500, b'{"error": {"message": "model overloaded"}}'
            _, _, messages = await ask(ws, "Topic 2")
            assert messages[-1]["type"] == "error" and "overloaded" in messages[-1]["message"]
            assert "sk-LEAKCHECK" not in json.dumps(messages)
            llm.script.status = 200
            text, sources, _ = await ask(ws, "Topic 2")
            assert text == "".join(llm.script.tokens) and sources
            await ws.close()

    asyncio.run(scenario())


def test_an_answer_the_llm_did_not_finish_ends_in_an_error_here_and_in_mdrag_ask(tmp_path: Path, llm: LLM) -> None:
    """The LLM sends one piece and closes its stream with no finish_reason and no [DONE]: the WebSocket
    gets stream_start, the piece, then an error (no stream_end); `mdrag ask` prints the piece, says on
    stderr that the answer is cut short, lists no sources and exits 1."""
    root = _docs(tmp_path)
    llm.script.unfinished = True

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "search.threshold": 0})
        async with serving(config, [root]) as server:
            ws = await opened(server)
            text, _, messages = await ask(ws, "Topic 2")
            assert [m["type"] for m in messages] == ["stream_start", "stream_chunk", "error"]
            assert text == "Hel" and messages[-1]["message"].startswith("the answer is cut short: ")
            llm.script.unfinished = False  # the connection goes on
            text, sources, _ = await ask(ws, "Topic 2")
            assert text == "".join(llm.script.tokens) and sources
            await ws.close()

            llm.script.unfinished = True
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mdrag", "ask", "Topic 2", "--server", server.url,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
            )  # fmt: skip
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 1
        # the piece that came, then the passages it was made from (its [n] point there), then the error
        assert out.decode().startswith("Hel\n\nSources:\n  [1] /"), out
        assert err.decode().startswith("mdrag: error: the answer is cut short: ") and "ask again" in err.decode()

    asyncio.run(scenario())


def test_a_client_that_disconnects_mid_answer_cancels_the_llm_request(tmp_path: Path, llm: LLM) -> None:
    root = _docs(tmp_path)
    llm.script.tokens = [f"t{i} " for i in range(60)]
    llm.script.delay = 0.1

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "search.threshold": 0})
        async with serving(config, [root]) as server:
            ws = await opened(server)
            await ws.send(json.dumps({"type": "query", "question": "Topic 1"}))
            assert (await recv(ws))["type"] == "stream_start"
            assert (await recv(ws))["type"] == "stream_chunk"
            await ws.close()
            deadline = time.monotonic() + 5
            while not llm.script.disconnected.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert llm.script.disconnected.is_set(), "the LLM request was not cancelled"
            assert not llm.script.finished.is_set()
            ws2 = await opened(server)  # the server goes on
            text, _, _ = await ask(ws2, "Topic 2")
            assert text.startswith("t0 ")
            await ws2.close()

    asyncio.run(scenario())


def test_a_question_of_invisible_characters_only_is_an_empty_query(tmp_path: Path) -> None:
    """U+202E, U+00AD, U+200B alone: "the search query is empty", in a query as in a search."""
    root = _docs(tmp_path, 1)

    async def scenario() -> None:
        async with serving(_config(), [root]) as server:
            ws = await opened(server)
            for blank in ("\u202e", "\u00ad", "\u00ad\u200b \u202e", "\ufeff"):
                for msg in ({"type": "query", "question": blank}, {"type": "search", "query": blank}):
                    await ws.send(json.dumps(msg))
                    reply = await recv(ws)
                    assert reply["type"] == "error" and "the search query is empty" in reply["message"], (msg, reply)
            await ws.send(json.dumps({"type": "query", "question": "install", "history": [{"question": "\u202e"}]}))
            reply = await recv(ws)
            assert reply["type"] == "error" and '"question" of "history" item 1 is empty' in reply["message"], reply
            text, sources, _ = await ask(ws, "\u202einstall the service")  # visible words with one: a question
            assert any(s.endswith("install.md") for s in sources), text
            await ws.close()

    asyncio.run(scenario())


def test_origin_token_and_bind_checks(tmp_path: Path) -> None:
    root = _docs(tmp_path, 1)

    async def scenario() -> None:
        async with serving(_config(), [root]) as server:
            with pytest.raises(InvalidStatus) as e:
                await connect(server.url, origin="http://evil.example")  # type: ignore[arg-type]
            assert e.value.response.status_code == 403
            with pytest.raises(InvalidStatus) as e:  # one origin only, even when the first is loopback
                await connect(server.url, origin="http://127.0.0.1:1 https://evil.example")  # type: ignore[arg-type]
            assert e.value.response.status_code == 403
            for ok in ("http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]"):
                ws = await opened(server, origin=ok)
                await ws.close()
        config = _config(**{"server.token": "tok-123", "server.allowed_origins": ["https://docs.example"]})
        async with serving(config, [root]) as server:
            with pytest.raises(InvalidStatus) as e:
                await connect(server.url)
            assert e.value.response.status_code == 401
            assert b"none was sent" in e.value.response.body  # a missing token and a wrong one told apart
            with pytest.raises(InvalidStatus) as e:
                await connect(server.url, additional_headers={"Authorization": "Bearer wrong"})
            assert e.value.response.status_code == 401 and b"The token sent is wrong" in e.value.response.body
            with pytest.raises(InvalidStatus) as e:
                await connect(server.url + "/?token=wrong")
            assert b"The token sent is wrong" in e.value.response.body
            ws = await opened(server, additional_headers={"Authorization": "Bearer tok-123"})
            await ws.close()
            ws = await connect(server.url + "/?token=tok-123")
            await ws.close()
            ws = await connect(server.url + "/?token=tok-123", origin="https://docs.example")  # type: ignore[arg-type]
            await ws.close()
        with pytest.raises(ConfigError, match="token"):
            await QAServer(_config(**{"server.host": "0.0.0.0"}), [root], index=Index(_config())).start()

    asyncio.run(scenario())
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com") and not is_loopback("10.0.0.1")


def test_too_many_waiting_requests_are_refused(tmp_path: Path, llm: LLM) -> None:
    root = _docs(tmp_path, 2)
    llm.script.tokens = ["slow ", "answer"]
    llm.script.delay = 0.3

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "search.threshold": 0, "server.max_pending": 2})
        async with serving(config, [root]) as server:
            ws = await opened(server)
            for i in range(8):
                await ws.send(json.dumps({"type": "query", "question": f"Topic {i}"}))
            replies = []
            while sum(m["type"] in ("stream_end", "error") for m in replies) < 8:
                replies.append(await recv(ws))
            errors = [m for m in replies if m["type"] == "error"]
            assert errors and all("too many requests waiting" in m["message"] for m in errors)
            assert sum(m["type"] == "stream_end" for m in replies) >= 2
            await ws.close()

    asyncio.run(scenario())


def test_every_reply_repeats_its_request_id_even_an_early_refusal(tmp_path: Path, llm: LLM) -> None:
    """Requests with ids, more than may wait: the "too many requests waiting" errors come before the answers
    to earlier requests, and each says which request it refuses; every message of a stream, a search's results,
    a status and the error for a malformed request repeat their request's id. The status sent on connect,
    and the error for a request whose id is not valid, have none."""
    root = _docs(tmp_path, 2)
    llm.script.tokens = ["slow ", "answer [1]"]
    llm.script.delay = 0.3

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "search.threshold": 0, "server.max_pending": 2})
        async with serving(config, [root]) as server:
            ws = await connect(server.url)
            assert "id" not in await recv(ws)  # the status on connect answers no request
            for i in range(6):
                await ws.send(json.dumps({"type": "query", "question": f"Topic {i}", "id": f"q{i}"}))
            await ws.send(json.dumps({"type": "search", "query": "Topic 1", "id": 41}))
            await ws.send(json.dumps({"type": "status", "id": 42}))
            replies: list[dict[str, Any]] = []
            while sum(m["type"] in ("stream_end", "error", "search_results", "status") for m in replies) < 8:
                replies.append(await recv(ws))
            ends = {m["id"]: m for m in replies if m["type"] in ("stream_end", "error", "search_results", "status")}
            assert set(ends) == {"q0", "q1", "q2", "q3", "q4", "q5", 41, 42}
            refused = [rid for rid, m in ends.items() if m["type"] == "error"]
            assert refused and all("too many requests waiting" in ends[rid]["message"] for rid in refused)
            answered = [rid for rid, m in ends.items() if m["type"] == "stream_end"]
            assert "q0" in answered and "q0" not in refused
            first_refusal = next(i for i, m in enumerate(replies) if m["type"] == "error")
            assert first_refusal < replies.index(ends["q0"])  # a refusal comes before q0's answer ends
            for rid in answered:  # every message of an answer repeats its id
                stream = [m["type"] for m in replies if m.get("id") == rid]
                assert stream[0] == "stream_start" and stream[-1] == "stream_end" and "stream_chunk" in stream
            assert all("id" in m for m in replies)
            # a malformed request's error repeats its id; an id that is not valid cannot be repeated
            await ws.send(json.dumps({"type": "search", "query": "x", "treshold": 0.5, "id": "s9"}))
            bad = await recv(ws)
            assert bad["type"] == "error" and bad["id"] == "s9" and 'unknown field "treshold"' in bad["message"]
            await ws.send(json.dumps({"type": "status", "id": [1]}))
            bad = await recv(ws)
            assert bad["type"] == "error" and "id" not in bad and '"id" must be' in bad["message"]
            await ws.close()

    asyncio.run(scenario())


def test_an_answer_cut_short_by_the_llm_still_says_which_sources_it_was_made_from(tmp_path: Path, llm: LLM) -> None:
    root = _docs(tmp_path, 2)

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "search.threshold": 0})
        async with serving(config, [root]) as server:
            ws = await opened(server)
            llm.script.error_event = "the model crashed"
            text, _, messages = await ask(ws, "Topic 1", id=5)
            failed = messages[-1]
            assert [m["type"] for m in messages] == ["stream_start", "stream_chunk", "error"] and text == "Hel"
            assert "the model crashed" in failed["message"] and failed["id"] == 5
            llm.script.error_event = None
            _, sources, messages = await ask(ws, "Topic 1")
            assert failed["sources"] == sources and failed["locations"] == messages[-1]["locations"]
            assert sources and all(loc["path"] in sources for loc in failed["locations"])
            await ws.close()

    asyncio.run(scenario())


def test_the_server_loads_its_search_structures_before_the_first_question(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once the index is ready the server builds what the first search would (here the FAISS store's BM25
    index, built lazily): the first question does not wait for it."""
    root = _docs(tmp_path)

    def built() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("built the BM25 index")]

    async def scenario() -> None:
        async with serving(_config(**{"search.threshold": 0}), [root]) as server:
            assert server.index is not None and server.index.backend == "faiss"
            deadline = time.monotonic() + 60
            while not any("ready for searches" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the server never said it was ready for searches"
                await asyncio.sleep(0.05)
            assert len(built()) == 1 and built()[0].startswith("built the BM25 index of 7 chunks"), built()
            ws = await opened(server)
            await ws.send(json.dumps({"type": "search", "query": "Topic 1 feature1", "mode": "hybrid"}))
            assert (await recv(ws))["results"][0]["rel_path"] == "topic1.md"
            assert len(built()) == 1, "the first search found the BM25 index built"
            await ws.close()

    with caplog.at_level(logging.INFO, logger="mdrag"):
        asyncio.run(scenario())


class ColdModel(HashEmbedder):
    """A model whose first inference must run alone, as OpenVINO's: a second inference
    begun before the first has ended fails, where the real one hung for good. The first waits until the
    test has sent its question, then a second for another inference to begin beside it."""

    def __init__(self) -> None:
        super().__init__()
        self.cold = True  # no inference has ended yet (a new process)
        self.running = 0  # inferences under way
        self.overlapped = False  # two inferences ran at once while cold: the model is stuck
        self.asked = threading.Event()  # set by the test once its question is sent
        self._beside = threading.Event()  # set when an inference begins beside the first
        self._lock = threading.Lock()  # guards the fields above

    def embed_batch(self, texts):  # type: ignore[no-untyped-def]
        with self._lock:
            cold, first = self.cold, self.running == 0
            self.running += 1
            if cold and not first:
                self.overlapped = True
                self._beside.set()
        try:
            if cold and first:
                self.asked.wait(30)
                self._beside.wait(1)
            if self.overlapped:
                raise EmbeddingError("two first inferences at once: the model is stuck")
            return super().embed_batch(texts)
        finally:
            with self._lock:
                self.running -= 1
                self.cold = self.cold and self.overlapped


def test_questions_sent_during_the_warm_up_are_answered_after_it(tmp_path: Path) -> None:
    """Ten server starts, a search or a question sent while the warm-up makes the model's first inference:
    none runs beside it, and each is answered (the timeouts only catch a hang)."""
    root = _docs(tmp_path)
    config = _config()
    model = ColdModel()
    with Index(config, embedder=model) as index:
        index.update([root])

    async def scenario(run: int) -> None:
        model.cold, model.overlapped = True, False  # a new process: the model is cold again
        model.asked.clear()
        async with serving(config, [root], model) as server:
            ws = await opened(server)
            if run % 2:
                await ws.send(json.dumps({"type": "search", "query": "feature3 options", "threshold": 0}))
                model.asked.set()
                reply = await recv(ws, 120)
                assert reply["type"] == "search_results" and reply["results"], reply
            else:
                await ws.send(json.dumps({"type": "query", "question": "Topic 3 feature3 options"}))
                model.asked.set()
                messages = [await recv(ws, 120)]
                while messages[-1]["type"] not in ("stream_end", "error"):
                    messages.append(await recv(ws, 120))
                assert messages[-1]["type"] == "stream_end" and messages[-1]["sources"], messages
            await ws.close()
        assert not model.overlapped and not model.cold, run

    for run in range(10):
        asyncio.run(asyncio.wait_for(scenario(run), 300))


def test_reloads_while_queries_run_and_a_saved_file_is_found(tmp_path: Path) -> None:
    root = _docs(tmp_path, 10)

    async def client_loop(server: QAServer, stop: asyncio.Event, errors: list[Any], done: list[int]) -> None:
        ws = await opened(server)
        while not stop.is_set():
            _, _, messages = await ask(ws, "Topic feature options")
            if messages[-1]["type"] != "stream_end":
                errors.append(messages[-1])
            done.append(1)
        await ws.close()

    async def scenario() -> None:
        async with serving(_config(**{"search.threshold": 0}), [root]) as server:
            stop, errors, done = asyncio.Event(), [], []
            clients = [asyncio.ensure_future(client_loop(server, stop, errors, done)) for _ in range(4)]
            before = server.reloads
            for i in range(4):  # edits while the clients query: each triggers a reload
                (root / f"topic{i}.md").write_text(f"# Topic {i}\n\nEdited topic {i}, round two.\n")
                await asyncio.sleep(0.8)
            (root / "saved.md").write_text("# Saved later\n\nThe zanzibarquux setting lives here.\n")
            ws = await opened(server)
            found = False
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not found:
                await ws.send(json.dumps({"type": "search", "query": "zanzibarquux setting", "k": 1, "threshold": 0}))
                reply = await recv(ws)
                found = bool(reply["results"]) and reply["results"][0]["rel_path"] == "saved.md"
                await asyncio.sleep(0.3)
            stop.set()
            await asyncio.gather(*clients)
            await ws.close()
            assert found, "a saved file is searchable within 30 s"
            assert server.reloads > before
            assert errors == [] and len(done) > 8

    asyncio.run(scenario())


def test_periodic_rescan_and_config_file_changes(
    tmp_path: Path, mdrag_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _docs(tmp_path, 1)

    def ignored() -> int:
        return sum("config file change ignored" in r.getMessage() for r in caplog.records)

    async def scenario() -> None:
        config = _config(**{"server.reload_interval": 1})
        async with serving(config, [root]) as server:
            server.overrides["llm.model"] = "from-the-command-line"
            before = server.reloads
            deadline = time.monotonic() + 60  # a rescan a second: the bound only stops a hang
            while server.reloads < before + 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert server.reloads >= before + 1, "the periodic rescan runs"

            (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.9\nllm:\n  model: from-file\n")
            deadline = time.monotonic() + 10
            while server.config["search.threshold"] != 0.9 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert server.config["search.threshold"] == 0.9
            assert server.index is not None and server.index.config["search.threshold"] == 0.9
            assert server.config["llm.model"] == "from-the-command-line", "command-line overrides stay"

            (mdrag_home / "config.yaml").write_text("search:\n  threshold: [broken\n")
            deadline = time.monotonic() + 30  # until the server has read the broken file and said so
            while not ignored() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert ignored(), "the server logs that it ignores an invalid config file"
            assert server.config["search.threshold"] == 0.9, "an invalid file keeps the old settings"

    with caplog.at_level(logging.ERROR, logger="mdrag.frontends.server"):
        asyncio.run(scenario())


def test_a_new_reload_interval_in_the_config_file_applies_at_once(tmp_path: Path, mdrag_home: Path) -> None:
    """The server started with rescans an hour apart; the config file asks for one every second: the next
    rescan comes within seconds, not after the hour."""
    root = _docs(tmp_path, 1)

    async def scenario() -> None:
        async with serving(_config(**{"server.reload_interval": 3600}), [root]) as server:
            assert server.keeper is not None and server.keeper.rescan_interval == 3600
            before = server.reloads
            (mdrag_home / "config.yaml").write_text("server:\n  reload_interval: 1\n")
            deadline = time.monotonic() + 60  # only stops a hang
            while server.reloads < before + 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            assert server.config["server.reload_interval"] == 1 and server.keeper.rescan_interval == 1
            assert server.reloads >= before + 2, "the periodic rescans run at the new interval"

    asyncio.run(scenario())


def _nested(values: dict[str, Any]) -> dict[str, Any]:
    """Dotted settings as the nested sections of a config file (the index name as ``index: {name: ...}``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        *sections, name = ("index.name" if key == "index" else key).split(".")
        node = out
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return out


def test_config_changes_apply_live_or_are_reported_as_needing_a_restart(
    tmp_path: Path, mdrag_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import yaml

    from mdrag.frontends.server import LIVE_SETTINGS
    from mdrag.settings import DEFAULTS

    assert LIVE_SETTINGS <= DEFAULTS.keys()
    root = _docs(tmp_path, 1)
    base = {"index": "served", "search.threshold": 0}
    config_file = mdrag_home / "config.yaml"
    # One change per kind of setting: True when it applies live.
    changes: list[tuple[str, Any, bool]] = [
        ("index", "other", False),
        ("folders", ["/elsewhere"], False),
        ("milvus_uri", str(tmp_path / "elsewhere.db"), False),
        ("milvus_token", "user:password", False),
        ("embedding.model", "another-model", False),
        ("embedding.batch_size", 7, False),
        ("chunk.size", 400, False),
        ("chunk.overlap", 50, False),
        ("chunk.context", "none", False),
        ("search.stemming", False, False),
        ("server.host", "127.0.0.2", False),
        ("search.k", 3, True),
        ("llm.model", "another-chat-model", True),
        ("answer.min_score", 0.2, True),
        ("server.max_pending", 3, True),
        ("index.max_file_mb", 5, True),
    ]

    async def scenario() -> None:
        config_file.write_text(yaml.safe_dump(_nested(base)))
        config = load_config({"server.port": 0})
        index = Index(config, embedder=HashEmbedder())
        server = QAServer(config, [root], overrides={"server.port": 0}, index=index)
        await server.start()
        try:
            await asyncio.wait_for(server.ready.wait(), 300)
            for key, value, live in changes:
                config_file.write_text(yaml.safe_dump(_nested({**base, key: value})))
                caplog.clear()
                with caplog.at_level(logging.WARNING, logger="mdrag.frontends.server"):
                    assert server.reload_config()
                warned = [r.getMessage() for r in caplog.records if "restart to apply" in r.getMessage()]
                if live:
                    assert not warned, key
                    assert server.config[key] == value and server.restart_needed == [], key
                else:
                    assert len(warned) == 1 and key in warned[0], (key, warned)
                    assert server.restart_needed == [key]
                    assert server.config[key] == config[key], f"{key} keeps the value the server started with"

            # A changed index name: the server goes on serving the index it has open, and says why.
            config_file.write_text(yaml.safe_dump(_nested({**base, "index": "other"})))
            assert server.reload_config()
            ws = await opened(server)
            await ws.send(json.dumps({"type": "search", "query": "Topic 0 feature0", "index": "served"}))
            reply = await recv(ws)
            assert reply["type"] == "search_results" and reply["results"][0]["rel_path"] == "topic0.md", reply
            await ws.send(json.dumps({"type": "status"}))
            status = await recv(ws)
            assert status["index"] == "served" and status["restart_needed"] == ["index"]

            # Back as it started: nothing is pending. A file selection change rescans at once. (Waiting for
            # the next reload is not enough: the index.max_file_mb changes above queued rescans of their own,
            # and one of those may be the next to end.)
            before = server.reloads
            config_file.write_text(yaml.safe_dump(_nested({**base, "index.exclude": ["topic0.md"]})))
            assert server.reload_config() and server.restart_needed == []
            deadline = time.monotonic() + 60
            while True:
                await ws.send(json.dumps({"type": "search", "query": "Topic 0 feature0"}))
                found = [r["rel_path"] for r in (await recv(ws))["results"]]
                if found == ["install.md"] or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert found == ["install.md"], "topic0.md is excluded now"
            assert server.reloads > before
            await ws.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_shared_api_settings_need_a_restart_when_the_embedder_uses_them() -> None:
    from mdrag.frontends.server import live_settings

    assert {"api.base_url", "api.api_key"} <= live_settings(load_config())  # the LLM's alone: live
    openai = load_config({"embedding.provider": "openai"})
    assert not {"api.base_url", "api.api_key"} & live_settings(openai)
    own = load_config({"embedding.provider": "openai", "embedding.base_url": "http://127.0.0.1:9/v1"})
    assert "api.base_url" in live_settings(own) and "api.api_key" not in live_settings(own)


def test_a_config_change_cannot_drop_the_token_of_a_server_open_to_the_network(mdrag_home: Path) -> None:
    config_file = mdrag_home / "config.yaml"
    config_file.write_text("server:\n  host: 0.0.0.0\n  token: s3cret\n")
    server = QAServer(load_config(), [])  # not started: the check needs no socket
    config_file.write_text("server:\n  host: 0.0.0.0\n")
    assert not server.reload_config()
    assert server.config["server.token"] == "s3cret"
    config_file.write_text("server:\n  host: 0.0.0.0\n  token: n3w\n")
    assert server.reload_config() and server.config["server.token"] == "n3w"


def test_interactive_ask_through_its_prompt(tmp_path: Path) -> None:
    root = _docs(tmp_path, 3)

    async def scenario() -> None:
        async with serving(_config(**{"search.threshold": 0}), [root]) as server:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "mdrag",
                "ask",
                "--server",
                server.url,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=REPO,
            )
            out, err = await asyncio.wait_for(proc.communicate(b"Topic 1 feature1\n\nTopic 2 feature2\nquit\n"), 60)
            assert proc.returncode == 0, err.decode()
            text = out.decode()
            assert text.count("question> ") >= 3
            assert text.count("Sources:") == 2 and "topic1.md" in text and "topic2.md" in text
            assert "connected to" in err.decode()

            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mdrag", "ask", "Topic 2", "--server", server.url,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0 and "topic2.md" in out.decode()

    asyncio.run(scenario())


def test_ctrl_c_during_an_answer_at_the_prompt_stops_that_answer_and_the_prompt_goes_on(
    tmp_path: Path, llm: LLM
) -> None:
    """`mdrag ask` at its prompt, a real process: SIGINT while an answer streams stops that answer (its LLM
    request is cancelled) and the prompt answers the next question; end of input then exits 0."""
    import signal

    root = _docs(tmp_path, 3)
    llm.script.tokens = [f"slow{i} " for i in range(100)]
    llm.script.delay = 0.2
    # `python -m mdrag`, with Python's own Ctrl+C handler even if this process was started ignoring SIGINT
    entry = "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    entry += "runpy.run_module('mdrag', run_name='__main__', alter_sys=True)"

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "search.threshold": 0})
        async with serving(config, [root]) as server:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", entry, "ask", "--server", server.url,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                cwd=REPO,
            )  # fmt: skip
            assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            out = b""

            async def read_until(text: bytes) -> None:
                nonlocal out
                while text not in out:
                    piece = await asyncio.wait_for(proc.stdout.read(4096), 60)
                    assert piece, f"mdrag ask ended before {text!r}: {out.decode()!r}"
                    out += piece

            try:
                proc.stdin.write(b"Topic 1 feature1\n")
                await proc.stdin.drain()
                await read_until(b"slow1 ")  # mid-answer
                proc.send_signal(signal.SIGINT)
                assert await asyncio.to_thread(llm.script.disconnected.wait, 30), "the answer was not stopped"
                llm.script.tokens, llm.script.delay = ["The second ", "answer [1]."], 0.0
                proc.stdin.write(b"Topic 2 feature2\n")
                await proc.stdin.drain()
                await read_until(b"Sources:")
                proc.stdin.close()
                await asyncio.wait_for(proc.wait(), 60)
                rest, err = await proc.stdout.read(), (await proc.stderr.read()).decode()
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        text = (out + rest).decode()
        assert proc.returncode == 0, err
        assert "answer stopped" in err and "Traceback" not in err
        assert "slow99" not in text and text.count("Sources:") == 1
        assert "The second answer [1].\n\nSources:\n  [1] " in text and "topic2.md" in text.split("Sources:")[1]

    asyncio.run(scenario())


def test_ask_with_no_server_is_one_line_and_exit_1() -> None:
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.run(
        [sys.executable, "-m", "mdrag", "ask", "hello?", "--server", f"ws://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert p.returncode == 1 and "mdrag serve" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_failing_load_is_reported_and_stops_the_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An index whose store is damaged cannot be served: `mdrag serve` says so and exits 1."""
    from mdrag.frontends.cli import main

    root = _docs(tmp_path, 1)
    config = _config(**{"store.backend": "milvus"})  # damaged as Milvus Lite's files can be
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([root])
        schema = Path(idx.store.uri) / "collections" / idx.store.collection / "schema.json"
    schema.write_text("garbage{")
    code = main(["serve", "--index", config["index"], "--port", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "could not load the index" in err and "damaged" in err and "mdrag index --rebuild" in err


def test_an_unexpected_error_at_load_stops_the_server_instead_of_loading_for_ever(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug (not an MdragError) while the index loads: `mdrag serve` says so and exits 1; it used to stay
    "loading" for good, and `mdrag ask` waited on it."""
    from mdrag.frontends.cli import main

    root = _docs(tmp_path, 1)
    config = _config()
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([root])

    def broken(self: Index, *args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the indexer")

    monkeypatch.setattr(Index, "update", broken)
    done: dict[str, int] = {}
    args = ["serve", "--index", config["index"], "--port", "0"]
    serve = threading.Thread(target=lambda: done.update(code=main(args)), daemon=True)
    serve.start()
    serve.join(120)  # a guard against the old hang, not a timing check: the answer comes at once
    assert "code" in done, "mdrag serve is still loading after an unexpected error"
    err = capsys.readouterr().err
    assert done["code"] == 1 and "could not load the index" in err and "RuntimeError: a bug in the indexer" in err


def test_the_server_follows_folders_that_another_process_adds_or_removes(tmp_path: Path) -> None:
    """`mdrag remove B` and `mdrag index C` from another process while the server runs: the server's next
    reload neither adds B back nor forgets C, and its file watcher follows C. The served folders sit
    under a hidden folder (~/.notes), which hides nothing below them."""
    a, b, c = (tmp_path / ".notes" / name for name in ("a", "b", "c"))
    for folder, word in ((a, "alpha"), (b, "bravo"), (c, "charlie")):
        folder.mkdir(parents=True)
        (folder / f"{word}.md").write_text(f"# {word.title()}\n\nThe {word} page.\n")

    async def found(server: QAServer, word: str) -> set[str]:
        assert server.index is not None
        results = await asyncio.to_thread(server.index.search, word, 5, threshold=0)
        return {r.rel_path for r in results if word in r.text}

    async def eventually(server: QAServer, word: str, rel_path: str) -> bool:
        deadline = time.monotonic() + 120  # only stops a hang: a loaded machine is slow
        while time.monotonic() < deadline:
            if rel_path in await found(server, word):
                return True
            await asyncio.sleep(0.3)
        return False

    async def scenario() -> None:
        config = _config(**{"search.threshold": 0})  # the periodic rescan is minutes away: the watcher reloads
        async with serving(config, [a, b]) as server:
            other = Index(config, embedder=HashEmbedder())  # as `mdrag remove` / `mdrag index` would
            try:
                await asyncio.to_thread(other.remove, [b])
                await asyncio.to_thread(other.update, [c])
            finally:
                other.close()
            (a / "saved.md").write_text("# Saved\n\nThe xylophonic page.\n")
            assert await eventually(server, "xylophonic", "saved.md"), "a save below a hidden folder is seen"
            deadline = time.monotonic() + 60  # the keeper tells the server of its update just after the commit
            while server.folders != [str(a), str(c)] and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert server.folders == [str(a), str(c)]
            assert await found(server, "bravo") == set(), "the removed folder stays out"
            (c / "charlie.md").write_text("# Charlie\n\nThe quintessential page.\n")
            assert await eventually(server, "quintessential", "charlie.md"), "the added folder is watched"

    asyncio.run(scenario())


def test_a_file_saved_in_an_added_folder_before_its_watcher_starts_is_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that another process adds is watched once the server's next update names it; a file saved
    there before the new watcher was in place (a loaded machine: it failed in the full suite) was missed
    until the periodic rescan, minutes later. The watcher reads the added folders once it watches."""
    import watchfiles

    real = watchfiles.watch

    def slow_watch(*args: Any, **kwargs: Any) -> Iterator[Any]:
        time.sleep(1.5)  # the watcher comes up late (in the keeper's watch thread)
        yield from real(*args, **kwargs)

    monkeypatch.setattr(watchfiles, "watch", slow_watch)
    a, c = tmp_path / "a", tmp_path / "c"
    for folder, word in ((a, "alpha"), (c, "charlie")):
        folder.mkdir()
        (folder / f"{word}.md").write_text(f"# {word.title()}\n\nThe {word} page.\n")

    async def found(server: QAServer, word: str) -> bool:
        assert server.index is not None
        results = await asyncio.to_thread(server.index.search, word, 5, threshold=0)
        return any(word in r.text for r in results)

    async def until(what: Any, why: str) -> None:
        deadline = time.monotonic() + 120  # only stops a hang
        while not await what():
            assert time.monotonic() < deadline, why
            await asyncio.sleep(0.2)

    async def scenario() -> None:
        config = _config(**{"search.threshold": 0})  # the periodic rescan is minutes away
        async with serving(config, [a]) as server:
            assert server.keeper is not None
            assert await asyncio.to_thread(server.keeper.wait_watching, [a], 120), "the first watcher is up"
            other = Index(config, embedder=HashEmbedder())  # as `mdrag index C` from another shell
            try:
                await asyncio.to_thread(other.update, [c])
            finally:
                other.close()
            (a / "saved.md").write_text("# Saved\n\nThe xylophonic page.\n")  # its update takes C in

            async def names_c() -> bool:
                return server.folders == [str(a), str(c)]

            await until(names_c, "the server takes the added folder in")
            (c / "charlie.md").write_text("# Charlie\n\nThe quintessential page.\n")  # before C is watched
            await until(lambda: found(server, "quintessential"), "the file saved before the watcher started")

    asyncio.run(scenario())


def test_a_port_in_use_is_one_clear_error(tmp_path: Path) -> None:
    from mdrag.errors import MdragError

    async def scenario() -> None:
        async with serving(_config(), [_docs(tmp_path, 1)]) as first:
            second = QAServer(_config(**{"server.port": first.port}), [])
            with pytest.raises(MdragError, match=rf"cannot listen on 127.0.0.1:{first.port} .*pick another port"):
                await second.start()
            await second.stop()  # nothing was started: stopping is harmless

    asyncio.run(scenario())


def test_a_config_file_written_after_a_first_start_applies(tmp_path: Path, mdrag_home: Path) -> None:
    """On a first start MDRAG_HOME does not exist yet (the server makes it): a config file written there
    afterwards (a token, a threshold) still applies, as it would after a restart."""
    shutil.rmtree(mdrag_home)

    async def scenario() -> None:
        async with serving(_config(), [_docs(tmp_path, 1)]) as server:
            assert mdrag_home.is_dir(), "loading the index made it"
            await asyncio.sleep(1)  # the watcher has seen the folder appear
            (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.9\n")
            deadline = time.monotonic() + 20
            while server.config["search.threshold"] != 0.9 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert server.config["search.threshold"] == 0.9

    asyncio.run(scenario())


def test_a_folder_renamed_or_moved_in_is_seen_by_the_watcher(tmp_path: Path) -> None:
    """Renaming a subfolder, or moving one in, changes no document's name the watcher saw: the folder's
    own event must start the reload (the periodic rescan is minutes away)."""
    root = _docs(tmp_path, 1)
    (root / "dA").mkdir()
    (root / "dA" / "f.md").write_text("# F\n\nThe wanderlust page.\n")
    outside = tmp_path / "outside" / "dC"
    outside.mkdir(parents=True)
    (outside / "g.md").write_text("# G\n\nThe homecoming page.\n")

    async def paths(server: QAServer, word: str) -> set[str]:
        assert server.index is not None
        return {
            r.rel_path for r in await asyncio.to_thread(server.index.search, word, 5, threshold=0) if word in r.text
        }

    async def until(server: QAServer, word: str, want: set[str]) -> set[str]:
        deadline, got = time.monotonic() + 30, set()
        while time.monotonic() < deadline:
            got = await paths(server, word)
            if got == want:
                break
            await asyncio.sleep(0.3)
        return got

    async def scenario() -> None:
        async with serving(_config(), [root]) as server:
            assert await paths(server, "wanderlust") == {"dA/f.md"}
            (root / "dA").rename(root / "dB")
            assert await until(server, "wanderlust", {"dB/f.md"}) == {"dB/f.md"}, "the old path is gone too"
            outside.rename(root / "dC")
            assert await until(server, "homecoming", {"dC/g.md"}) == {"dC/g.md"}

    asyncio.run(scenario())


def test_the_prompt_asks_again_on_a_new_connection_after_a_server_restart(tmp_path: Path) -> None:
    """`mdrag ask` at its prompt: the server restarted between two questions; the next question is
    answered on a new connection instead of ending the prompt with "lost the connection"."""
    import io
    import queue
    import threading

    from mdrag.frontends.cli.serving import run_ask

    root = _docs(tmp_path, 3)
    questions: queue.Queue[str] = queue.Queue()
    out, err, codes = io.StringIO(), io.StringIO(), []

    async def answered(n: int) -> bool:
        deadline = time.monotonic() + 60
        while out.getvalue().count("Sources:") < n and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return out.getvalue().count("Sources:") >= n

    async def scenario() -> None:
        async with serving(_config(**{"search.threshold": 0}), [root]) as first:
            port, url = first.port, first.url
            prompt = threading.Thread(
                target=lambda: codes.append(run_ask(None, url, out, err, input_fn=lambda _: questions.get(timeout=60)))
            )
            prompt.start()
            questions.put("Topic 1 feature1")
            assert await answered(1), err.getvalue()
        async with serving(_config(**{"search.threshold": 0, "server.port": port}), [root]):
            questions.put("Topic 2 feature2")
            assert await answered(2), err.getvalue()
            questions.put("quit")
            await asyncio.to_thread(prompt.join, 60)
        assert codes == [0] and "topic2.md" in out.getvalue().split("Sources:")[-1]

    asyncio.run(scenario())


def test_search_and_status_through_a_server_with_a_token(tmp_path: Path) -> None:
    """`--token` on `search --server` and `status --server`, as on `ask` (only the setting had it)."""
    root = _docs(tmp_path, 2)

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mdrag", *argv], capture_output=True, text=True, cwd=REPO)

    async def scenario() -> None:
        async with serving(_config(**{"search.threshold": 0, "server.token": "s3cret"}), [root]) as server:
            found = await asyncio.to_thread(
                cli, "search", "Topic 1", "--server", server.url, "--token", "s3cret", "--json"
            )
            status = await asyncio.to_thread(cli, "status", "--server", server.url, "--token", "s3cret", "--json")
            refused = await asyncio.to_thread(cli, "search", "Topic 1", "--server", server.url)
        assert found.returncode == 0 and json.loads(found.stdout)[0]["rel_path"].startswith("topic1"), found.stderr
        assert status.returncode == 0 and json.loads(status.stdout)["chunks"] == 3, status.stderr
        assert refused.returncode == 1 and "token" in refused.stderr and "s3cret" not in refused.stderr

    asyncio.run(scenario())


def test_serve_says_how_far_the_first_build_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mdrag serve` on a new folder: until the index is ready, its terminal says how far the build is."""
    from mdrag.frontends.cli import serving as serve_command

    release = threading.Event()

    class Held(HashEmbedder):  # the build stays at its first file until the test releases it
        def embed_batch(self, texts: Any) -> Any:
            release.wait(60)
            return super().embed_batch(texts)

    monkeypatch.setattr(serve_command, "_PROGRESS_S", 0.05)
    root = _docs(tmp_path)
    said = ""

    async def scenario() -> None:
        nonlocal said
        async with serving(_config(), [root], Held(), wait=False) as server:
            report = asyncio.ensure_future(serve_command._report_loading(server))
            for _ in range(1200):
                said += capsys.readouterr().err
                if " of 7 files" in said:
                    break
                await asyncio.sleep(0.05)
            release.set()
            await asyncio.wait_for(report, 60)

    try:
        asyncio.run(scenario())
    finally:
        release.set()
    assert "mdrag: indexing: 0 of 7 files" in said, said


def test_results_and_sources_of_files_that_two_folders_share_by_name_carry_refs_that_name_one_file(
    tmp_path: Path, llm: LLM
) -> None:
    """Two indexed folders both hold x.md: a bare `x.md` names neither, so the server's search results and an
    answer's locations give the absolute path as `ref`, which `get` (and the page's open button) takes; a name
    only one folder holds keeps its relative ref."""
    folders = []
    for name in ("a", "b"):
        root = tmp_path / name
        root.mkdir()
        (root / "x.md").write_text(f"# X\n\nThe zebra parade of folder {name} starts at noon.\n")
        (root / f"only_{name}.md").write_text(f"# Only {name}\n\nThe zebra parade of {name} alone.\n")
        folders.append(root)
    llm.script.tokens = ["At noon [1]."]

    async def scenario() -> None:
        config = _config(**{"llm.base_url": llm.base_url, "llm.api_key": "sk-x"})
        async with serving(config, folders) as server:
            ws = await opened(server)
            await ws.send(json.dumps({"type": "search", "query": "zebra parade", "k": 10, "threshold": 0}))
            results = (await recv(ws))["results"]
            assert {r["rel_path"] for r in results} >= {"x.md", "only_a.md", "only_b.md"}
            for r in results:
                assert r["ref"] == (r["path"] if r["rel_path"] == "x.md" else r["rel_path"]), r
            assert len({r["ref"] for r in results if r["rel_path"] == "x.md"}) == 2
            _, sources, messages = await ask(ws, "When does the zebra parade start?")
            locations = messages[-1]["locations"]
            assert locations and [loc["path"] for loc in locations] == sources
            for loc in locations:
                shared = Path(loc["path"]).name == "x.md"
                assert loc["ref"] == (loc["path"] if shared else Path(loc["path"]).name), loc
            await ws.close()

    asyncio.run(scenario())
