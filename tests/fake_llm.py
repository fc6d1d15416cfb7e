"""A stand-in for an OpenAI-compatible chat server: a real HTTP server on loopback
speaking the chat completions streaming format (server-sent events)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mdrag.answering.followup import REWRITE_PROMPT
from mdrag.answering.generate import LLMSettings

KEY = "sk-test-SECRET-5f1d-answer-9a7b"  # distinctive, so a leak is easy to spot


@dataclass
class Script:
    """What the fake LLM does with the next requests, and what it saw."""

    tokens: list[str] = field(default_factory=lambda: ["Hel", "lo", ", ", "world", " [1]", "."])
    delay: float = 0.0  # seconds between tokens
    status: int = 200  # anything else: an error response with error_body
    error_body: bytes = b""
    hang: str | None = None  # "before_headers" or "after_first": go silent until the test ends
    malformed: bool = False  # send an event that is not JSON (bad_event) after the first token
    bad_event: bytes = b"{this is not json"
    cut: bool = False  # drop the connection after the first token, in the middle of the stream
    unfinished: bool = False  # after the first token, end the body properly and close: no finish_reason, no [DONE]
    finish_reason: str = "stop"  # of the last event (and of the JSON completion)
    error_event: str | None = None  # send {"error": {"message": error_event}} after the first token
    as_json: bool = False  # answer with one non-streaming JSON completion
    role_first: bool = True  # start with a role-only delta, as OpenAI does
    rewrite: str | None = None  # the reply to a follow-up's rewrite request (REWRITE_PROMPT); None: its question
    requests: list[dict[str, Any]] = field(default_factory=list)  # {"path", "headers" (lower-case names), "body"}
    disconnected: threading.Event = field(default_factory=threading.Event)  # a write failed
    finished: threading.Event = field(default_factory=threading.Event)  # the whole stream was written
    stop: threading.Event = field(default_factory=threading.Event)  # set at teardown: end all waits


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def is_rewrite(body: Any) -> bool:
    """Whether a request body asks to rewrite a follow-up question (mdrag.answering.followup)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    return bool(messages) and messages[0].get("content") == REWRITE_PROMPT


class Handler(BaseHTTPRequestHandler):
    """Speaks the OpenAI chat completions format, as the server's Script says."""

    protocol_version = "HTTP/1.1"
    server: FakeServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        script = self.server.script
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        script.requests.append(
            {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
        )
        tokens = script.tokens
        if is_rewrite(body):  # as a model would: the question unchanged when it already stands alone
            asked = body["messages"][-1]["content"].split("Last question: ")[-1].split("\n\n")[0]
            tokens = [asked if script.rewrite is None else script.rewrite]
        if script.hang == "before_headers":
            script.stop.wait(10)
            return
        if script.status != 200:
            self.send_response(script.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(script.error_body)))
            self.end_headers()
            self.wfile.write(script.error_body)
            return
        if script.as_json:
            payload = json.dumps(
                {
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(tokens)},
                            "finish_reason": script.finish_reason,
                        }
                    ]
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [b": keep-alive comment\n\n"]
        if script.role_first:
            events.append(b"event: message\n" + sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
        for i, token in enumerate(tokens):
            events.append(sse({"choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}]}))
            if i == 0 and script.malformed:
                events.append(b"data: " + script.bad_event + b"\n\n")
            if i == 0 and script.error_event is not None:
                events.append(sse({"error": {"message": script.error_event}}))
        events.append(sse({"choices": [{"index": 0, "delta": {}, "finish_reason": script.finish_reason}]}))
        events.append(b"data: [DONE]\n\n")
        tokens_sent = 0
        for event in events:
            if not self._chunk(event):
                return
            if b'"content"' in event:
                tokens_sent += 1
                if tokens_sent == 1 and script.cut:
                    self.close_connection = True  # no closing chunk: the body ends in the middle
                    return
                if tokens_sent == 1 and script.unfinished:
                    self.close_connection = True  # a well-formed end of the body, but not of the answer
                    self._chunk(b"")
                    return
                if tokens_sent == 1 and script.hang == "after_first":
                    script.stop.wait(10)
                    return
                if script.delay and script.stop.wait(script.delay):
                    return
        if self._chunk(b""):
            script.finished.set()

    def _chunk(self, data: bytes) -> bool:
        """Write one chunk of a chunked body (b"" ends it); False once the client has gone."""
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.server.script.disconnected.set()
            self.close_connection = True
            return False
        return True


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 resets connections under load
    script: Script


@dataclass
class LLM:
    """The fixture's handle: the running server's URL and its script."""

    base_url: str
    script: Script

    def settings(self, **kw: Any) -> LLMSettings:
        kw.setdefault("api_key", KEY)
        kw.setdefault("model", "test-model")
        kw.setdefault("timeout", 5.0)
        return LLMSettings(self.base_url, **kw)


def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests to the stand-in on 127.0.0.1 go straight to it, whatever proxy the environment names."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


@contextmanager
def serving(
    handler: type[BaseHTTPRequestHandler], script: Any, server_class: type[ThreadingHTTPServer] = FakeServer
) -> Iterator[Any]:
    """A real HTTP server on 127.0.0.1 (a free port) in a thread, answering with ``handler`` as
    ``server.script`` says; at the end the script then set (a test may swap it) is told to stop."""
    server: Any = server_class(("127.0.0.1", 0), handler)
    server.script = script
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.script.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[LLM]:
    """A fake OpenAI-compatible chat server on 127.0.0.1 (a free port)."""
    no_proxy(monkeypatch)
    with serving(Handler, Script()) as server:
        yield LLM(f"http://127.0.0.1:{server.server_address[1]}/v1", server.script)
