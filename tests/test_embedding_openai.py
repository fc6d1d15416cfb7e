"""OpenAIEmbedder against a real HTTP server on loopback that speaks the OpenAI format."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from mdrag.embedding import openai_compat
from mdrag.embedding.openai_compat import OpenAIEmbedder
from mdrag.errors import EmbeddingError

KEY = "sk-test-SECRET-d3adb33f-7c1e"  # distinctive, so a leak is easy to spot
DIM = 8
SOON = {"Retry-After": "0.01"}  # a server's own wait, honored: keeps retry tests quick

# A scripted reply: (status, headers, body) or a function of the request body.
Reply = tuple[int, dict[str, str], bytes]
Step = Reply | Callable[[dict[str, Any]], Reply]


def fake_vector(text: str) -> list[float]:
    """Deterministic, never-zero, not-normalized vector for a text."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [b / 16.0 + 1.0 for b in digest[:DIM]]


def expected(texts: list[str]) -> np.ndarray:
    v = np.array([fake_vector(t) for t in texts], dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def error_json(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    return status, dict(headers or {}), body.encode()


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeOpenAI:
    """The server's state: what it answers next and what it received."""

    url: str = ""  # base URL, e.g. http://127.0.0.1:PORT/v1
    script: list[Step] = field(default_factory=list)  # replies used first, in order
    requests: list[Recorded] = field(default_factory=list)
    shuffle: bool = False  # return "data" in random order (with correct "index")
    dim: int = DIM
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def always(self, step: Step, times: int = 1000) -> None:
        self.script.extend([step] * times)

    def reply(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            step = self.script.pop(0) if self.script else None
        if step is None:
            return self.ok(body)
        return step(body) if callable(step) else step

    def ok(self, body: dict[str, Any]) -> Reply:
        texts = body["input"]
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": (fake_vector(t) * 2)[: self.dim],
            }
            for i, t in enumerate(texts)
        ]
        if self.shuffle:
            random.Random(len(texts)).shuffle(data)
        doc = {"object": "list", "data": data, "model": body["model"]}
        return 200, {}, json.dumps(doc).encode()


def make_handler(state: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = json.loads(raw)
            with state.lock:
                state.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            status, headers, payload = state.reply(body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                if "Content-Length" not in headers:  # a reply may promise more than it sends
                    self.send_header("Content-Length", str(len(payload)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback requests must not go through a proxy from the environment."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    state = FakeOpenAI()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def embedder(server: FakeOpenAI, **kw: Any) -> OpenAIEmbedder:
    kw.setdefault("api_key", KEY)
    kw.setdefault("model", "test-embed")
    kw.setdefault("max_retries", 3)
    kw.setdefault("timeout", 5.0)
    return OpenAIEmbedder(server.url, **kw)


def assert_no_key(exc: BaseException | None, caplog: pytest.LogCaptureFixture) -> None:
    """The key is in no exception text (chained ones included) and no log record."""
    if exc is not None:
        assert KEY not in str(exc)
        assert KEY not in repr(exc)
        assert KEY not in "".join(traceback.format_exception(exc))
    for record in caplog.records:
        assert KEY not in record.getMessage()
        assert KEY not in (record.exc_text or "")


def raised(fn: Callable[[], object]) -> EmbeddingError:
    with pytest.raises(EmbeddingError) as info:
        fn()
    return info.value


# -- success -------------------------------------------------------------------


def test_batches_and_keeps_order_with_shuffled_indices(server: FakeOpenAI) -> None:
    server.shuffle = True
    texts = [f"text number {i}" for i in range(150)]
    vectors = embedder(server).embed(texts)
    assert vectors.shape == (150, DIM)
    assert vectors.dtype == np.float32
    assert [len(r.body["input"]) for r in server.requests] == [64, 64, 22]
    assert [t for r in server.requests for t in r.body["input"]] == texts
    np.testing.assert_allclose(vectors, expected(texts), rtol=1e-6)


def test_vectors_are_normalized(server: FakeOpenAI) -> None:
    vectors = embedder(server).embed(["a", "b", "c"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    query = embedder(server).embed_query("a")
    assert query.shape == (DIM,)
    assert math.isclose(float(np.linalg.norm(query)), 1.0, rel_tol=1e-6)


def test_embed_batch_returns_raw_float32(server: FakeOpenAI) -> None:
    out = embedder(server).embed_batch(["x"])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0], fake_vector("x"), rtol=1e-6)


def test_request_format_and_headers(server: FakeOpenAI) -> None:
    e = OpenAIEmbedder(server.url + "/", api_key=KEY, model="m-1")
    e.embed(["hello"])
    (req,) = server.requests
    assert req.path == "/v1/embeddings"
    assert req.body == {"model": "m-1", "input": ["hello"], "encoding_format": "float"}
    headers = {k.lower(): v for k, v in req.headers.items()}
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["content-type"] == "application/json"


def test_no_authorization_header_without_key(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_* variables belong to other tools: mdrag sends only the key its settings give, or none."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "Authorization: Bearer sk-custom-header")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-environment")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-environment")
    embedder(server, api_key=None).embed(["hello"])
    embedder(server).embed(["hello"])
    without, with_key = (r.headers for r in server.requests)
    assert "authorization" not in without and with_key["authorization"] == f"Bearer {KEY}"
    assert not {"openai-organization", "openai-project"} & (without.keys() | with_key.keys())


def test_model_id_and_repr(server: FakeOpenAI) -> None:
    e = embedder(server, model="nomic-embed-text", dimension=DIM)
    assert e.model_id == "openai:nomic-embed-text"
    assert e.identity == {"model": "openai:nomic-embed-text", "dimension": DIM}
    assert KEY not in repr(e)
    assert server.requests == []


# -- dimension -------------------------------------------------------------------


def test_dimension_is_learned_lazily_with_one_probe(server: FakeOpenAI) -> None:
    e = embedder(server)
    assert server.requests == []
    assert e.dimension == DIM
    assert [r.body["input"] for r in server.requests] == [["dimension probe"]]
    assert e.dimension == DIM
    assert len(server.requests) == 1


def test_dimension_learned_from_first_embedding_needs_no_probe(
    server: FakeOpenAI,
) -> None:
    e = embedder(server)
    e.embed(["a"])
    assert e.dimension == DIM
    assert len(server.requests) == 1


def test_empty_input_with_known_dimension_sends_nothing(server: FakeOpenAI) -> None:
    e = embedder(server, dimension=DIM)
    assert e.embed([]).shape == (0, DIM)
    assert e.embed_batch([]).shape == (0, DIM)
    assert server.requests == []


def test_empty_input_with_unknown_dimension_probes_once(server: FakeOpenAI) -> None:
    e = embedder(server)
    out = e.embed([])
    assert out.shape == (0, DIM)
    assert out.dtype == np.float32
    assert len(server.requests) == 1
    e.embed([])
    assert len(server.requests) == 1


def test_dimension_mismatch_is_an_error(server: FakeOpenAI) -> None:
    exc = raised(lambda: embedder(server, dimension=16).embed(["a"]))
    assert "dimension 8" in str(exc) and "16" in str(exc)


# -- retries ----------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_retry_then_success(server: FakeOpenAI, status: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.script = [error_json(status, f"busy, key {KEY}", SOON), error_json(status, "busy", SOON)]
    vectors = embedder(server).embed(["a", "b"])
    np.testing.assert_allclose(vectors, expected(["a", "b"]), rtol=1e-6)
    assert len(server.requests) == 3
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == openai_compat.__name__]
    assert len(warnings) == 2
    assert f"HTTP {status}: busy, key ***" in warnings[0].getMessage() and "retry 1 of 3" in warnings[0].getMessage()
    assert_no_key(None, caplog)


def test_retry_after_is_honored_then_waits_grow(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(time, "sleep", waits.append)  # the openai client waits with time.sleep
    server.script = [error_json(429, "x", {"Retry-After": "3"}), error_json(503, "x"), error_json(503, "x")]
    embedder(server, max_retries=3).embed(["a"])
    assert len(server.requests) == 4
    assert waits[0] == 3.0
    assert 0 < waits[1] < waits[2] <= 8.0


def test_a_response_cut_in_the_middle_is_retried(server: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    """The server promises a body and closes the connection halfway: another attempt, then the vectors."""
    caplog.set_level(logging.DEBUG)
    server.script = [lambda body: (200, {"Content-Length": "4000"}, b'{"object": "list", "data": [')]
    vectors = embedder(server).embed(["a", "b"])
    np.testing.assert_allclose(vectors, expected(["a", "b"]), rtol=1e-6)
    assert len(server.requests) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "retry 1 of 3" in warnings[0]
    assert_no_key(None, caplog)


def test_retries_exhausted(server: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.always(error_json(503, f"model is loading (key {KEY})", SOON))
    exc = raised(lambda: embedder(server, max_retries=2).embed(["a"]))
    assert len(server.requests) == 3
    msg = str(exc)
    assert server.url + "/embeddings" in msg
    assert "HTTP 503" in msg and "model is loading (key ***)" in msg
    assert "3 attempts" in msg and "embedding.max_retries" in msg
    assert_no_key(exc, caplog)


def test_a_search_query_retries_once_where_indexing_retries_more(
    server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """A search waits for its query's vector: one retry at most (and at most QUERY_TIMEOUT_S an answer),
    where indexing retries embedding.max_retries times; the settings reach the embedder."""
    from mdrag.config import load_config

    server.always(error_json(503, "overloaded", SOON))
    e = OpenAIEmbedder.from_config(
        load_config(
            {
                "embedding.provider": "openai",
                "embedding.base_url": server.url,
                "embedding.api_key": KEY,
                "embedding.timeout": 0.5,
                "embedding.max_retries": 3,
            }
        )
    )
    assert (e.timeout, e.max_retries) == (0.5, 3)
    msg = str(raised(lambda: e.embed_query("how do I")))
    assert len(server.requests) == 2 and "after 2 attempts" in msg and "a search waits at most 0.5 s" in msg
    assert str(raised(lambda: e.embed(["a"]))).count("raise embedding.max_retries or embedding.timeout") == 1
    assert len(server.requests) == 2 + 4, "indexing: 1 + embedding.max_retries requests"
    retries = [r.getMessage().rsplit("; ", 1)[-1] for r in caplog.records if "; retry " in r.getMessage()]
    assert retries == ["retry 1 of 1", "retry 1 of 3", "retry 2 of 3", "retry 3 of 3"]
    assert_no_key(None, caplog)


def test_zero_retries_means_one_request(server: FakeOpenAI) -> None:
    server.always(error_json(429, "rate limited", SOON))
    raised(lambda: embedder(server, max_retries=0).embed(["a"]))
    assert len(server.requests) == 1


# -- errors that are not retried ------------------------------------------------------


@pytest.mark.parametrize("status", [401, 403])
def test_rejected_key_is_not_retried_and_not_shown(
    server: FakeOpenAI, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # Some servers echo the key they got; we must not pass it on.
    server.always(error_json(status, f"Incorrect API key provided: {KEY}"))
    exc = raised(lambda: embedder(server).embed(["a"]))
    assert len(server.requests) == 1
    msg = str(exc)
    assert f"HTTP {status}" in msg
    assert "embedding.api_key" in msg and "MARKDOWN_QA_API_KEY" in msg
    assert_no_key(exc, caplog)


def test_bad_request_quotes_the_server_message(server: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    server.always(error_json(400, "This model's maximum context length is 8192 tokens"))
    exc = raised(lambda: embedder(server).embed(["a"]))
    assert len(server.requests) == 1
    assert "HTTP 400" in str(exc)
    assert "maximum context length is 8192 tokens" in str(exc)
    assert_no_key(exc, caplog)


def test_server_message_is_truncated_and_redacted(server: FakeOpenAI) -> None:
    server.always(error_json(422, f"key {KEY} " + "x" * 1000))
    exc = raised(lambda: embedder(server).embed(["a"]))
    assert KEY not in str(exc)
    assert "key *** xxx" in str(exc)
    assert "x" * 300 not in str(exc)
    assert "x" * 250 in str(exc)


def test_plain_text_and_fastapi_style_errors(server: FakeOpenAI) -> None:
    server.script = [
        (400, {}, b"<html>nope</html>"),
        (400, {}, json.dumps({"detail": "bad model"}).encode()),
    ]
    assert "<html>nope</html>" in str(raised(lambda: embedder(server).embed(["a"])))
    assert "bad model" in str(raised(lambda: embedder(server).embed(["a"])))


def test_not_found_hints_at_base_url(server: FakeOpenAI) -> None:
    server.always(error_json(404, "Not Found"))
    exc = raised(lambda: embedder(server).embed(["a"]))
    assert "HTTP 404" in str(exc) and "embedding.base_url" in str(exc)
    assert len(server.requests) == 1


def test_redirect_is_refused_and_key_not_forwarded(server: FakeOpenAI) -> None:
    server.always((307, {"Location": server.url + "/elsewhere"}, b""))
    exc = raised(lambda: embedder(server).embed(["a"]))
    assert "HTTP 307" in str(exc) and "embedding.base_url" in str(exc)
    assert [r.path for r in server.requests] == ["/v1/embeddings"]


MALFORMED: dict[str, Callable[[dict[str, Any]], Reply]] = {
    "not JSON": lambda body: (200, {}, b"<html>proxy login</html>"),
    "no 'data' list": lambda body: (200, {}, b'{"embeddings": []}'),
    "1 embeddings for 2 texts": lambda body: (
        200,
        {},
        json.dumps({"data": [{"index": 0, "embedding": [1.0] * DIM}]}).encode(),
    ),
    "index 0 appears twice": lambda body: (
        200,
        {},
        json.dumps({"data": [{"index": 0, "embedding": [1.0] * DIM}] * len(body["input"])}).encode(),
    ),
    "has index 5": lambda body: (
        200,
        {},
        json.dumps({"data": [{"index": i * 5, "embedding": [1.0] * DIM} for i in range(2)]}).encode(),
    ),
    "different lengths": lambda body: (
        200,
        {},
        json.dumps({"data": [{"index": i, "embedding": [1.0] * (DIM + i)} for i in range(2)]}).encode(),
    ),
    "not a list of numbers": lambda body: (
        200,
        {},
        json.dumps({"data": [{"index": i, "embedding": "AAAA"} for i in range(2)]}).encode(),
    ),
    "has no 'embedding'": lambda body: (
        200,
        {},
        json.dumps({"data": [{"index": i} for i in range(2)]}).encode(),
    ),
    "non-finite": lambda body: (
        200,
        {},
        json.dumps({"data": [{"index": i, "embedding": [None] * DIM} for i in range(2)]}).encode(),
    ),
}


@pytest.mark.parametrize("what", list(MALFORMED))
def test_malformed_response_names_the_problem(server: FakeOpenAI, what: str, caplog: pytest.LogCaptureFixture) -> None:
    server.always(MALFORMED[what])
    exc = raised(lambda: embedder(server).embed(["a", "b"]))
    assert "malformed" in str(exc)
    assert what in str(exc)
    assert len(server.requests) == 1  # a bad answer is not retried
    assert_no_key(exc, caplog)


def test_a_key_in_a_malformed_response_is_redacted_before_the_quote_is_cut(server: FakeOpenAI) -> None:
    server.always((200, {}, b"x" * 70 + KEY.encode() + b" not json"))  # the quote's 80 characters end in the key
    exc = raised(lambda: embedder(server).embed(["a"]))
    assert "not JSON: 'xxxxx" in str(exc) and "***" in str(exc)
    assert KEY[:8] not in str(exc)


def test_missing_index_falls_back_to_position(server: FakeOpenAI) -> None:
    server.always(
        lambda body: (
            200,
            {},
            json.dumps({"data": [{"embedding": fake_vector(t)} for t in body["input"]]}).encode(),
        )
    )
    vectors = embedder(server).embed(["a", "b"])
    np.testing.assert_allclose(vectors, expected(["a", "b"]), rtol=1e-6)


# -- network failures -------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused_fails_fast_with_the_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    e = OpenAIEmbedder(url, api_key=KEY, max_retries=1)
    start = time.monotonic()
    exc = raised(lambda: e.embed(["a"]))
    assert time.monotonic() - start < 2.0
    assert url + "/embeddings" in str(exc)
    assert "connection refused" in str(exc)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert_no_key(exc, caplog)


def test_timeout_is_retried_then_reported(server: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    def slow(body: dict[str, Any]) -> Reply:
        server.release.wait(1.0)
        return server.ok(body)

    server.always(slow)
    exc = raised(lambda: embedder(server, timeout=0.1, max_retries=1).embed(["a"]))
    assert "timed out" in str(exc)
    assert len(server.requests) == 2
    assert_no_key(exc, caplog)


# -- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["", "127.0.0.1:8000/v1", "ftp://host/v1", "http://"])
def test_base_url_must_be_http(url: str) -> None:
    exc = raised(lambda: OpenAIEmbedder(url, api_key=KEY))
    assert "embedding.base_url" in str(exc)
    assert KEY not in str(exc)


@pytest.mark.parametrize(
    "kw",
    [
        {"batch_size": 0},
        {"timeout": 0},
        {"max_retries": -1},
        {"dimension": 0},
    ],
)
def test_invalid_settings(kw: dict[str, Any]) -> None:
    exc = raised(lambda: OpenAIEmbedder("http://127.0.0.1:1/v1", **kw))
    assert f"embedding.{next(iter(kw))}" in str(exc)


def test_base_url_trailing_slash_is_tolerated() -> None:
    a = OpenAIEmbedder("https://api.example.com/v1/")
    b = OpenAIEmbedder("https://api.example.com/v1")
    assert a.url == b.url == "https://api.example.com/v1/embeddings"


def test_an_index_built_through_the_api(server: FakeOpenAI, tmp_path, monkeypatch) -> None:
    """Configured by settings alone: provider openai, base URL and key from the environment."""
    from mdrag.config import load_config
    from mdrag.index import Index

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe alpha section talks about rockets.\n")
    (docs / "b.md").write_text("# Beta\n\nThe beta section talks about gardens.\n")
    monkeypatch.setenv("MARKDOWN_QA_API_BASE_URL", server.url)
    monkeypatch.setenv("MARKDOWN_QA_API_KEY", "sk-index-test")
    index = Index(load_config({"embedding.provider": "openai", "embedding.model": "test-embed"}))
    summary = index.update([docs])
    assert summary.chunks_embedded == 2
    assert index.status().model == {"model": "openai:test-embed", "dimension": 8}
    assert server.requests and all(r.headers.get("authorization") == "Bearer sk-index-test" for r in server.requests)
    assert index.search("Alpha rockets", k=1, threshold=0)[0].rel_path == "a.md"
    index.close()
