"""mdrag.answering.generate: prompts, extractive answers, and streaming from a real OpenAI-style server on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import traceback

import pytest

from mdrag.answering.generate import (
    DECLINE,
    NO_RELEVANT,
    SYSTEM_PROMPT,
    LLMSettings,
    answer_stream,
    build_messages,
    declined,
    numbered_sources,
)
from mdrag.errors import LLMError
from mdrag.types import SearchResult
from tests.fake_llm import KEY, LLM

QUESTION = "How do I rotate the signing keys?"


def result(n: int, text: str | None = None, path: str | None = None) -> SearchResult:
    """The n-th ranked search result, with a distinct path, heading and text."""
    return SearchResult(
        text=text if text is not None else f"Passage number {n} says: run `keys rotate --id {n}`.",
        path=path or f"/docs/guide/file{n}.md",
        rel_path=(path or f"/docs/guide/file{n}.md").removeprefix("/docs/"),
        score=1.0 - n / 100,
        heading_path=["Guide", f"Section {n}"],
        chunk_id=f"chunk-{n}",
    )


RESULTS = [result(1), result(2), result(3)]


# -- the fake LLM server ------------------------------------------------------------


def collect(question: str, results: list[SearchResult], settings: LLMSettings | None) -> list[str]:
    """Every piece of the answer, in order."""

    async def run() -> list[str]:
        return [piece async for piece in answer_stream(question, numbered_sources(results, settings), settings)]

    return asyncio.run(run())


def failure(settings: LLMSettings, results: list[SearchResult] | None = None) -> tuple[LLMError, list[str]]:
    """The LLMError that streaming raises, and the pieces that arrived before it."""
    got: list[str] = []

    async def run() -> None:
        cited = numbered_sources(RESULTS if results is None else results, settings)
        async for piece in answer_stream(QUESTION, cited, settings):
            got.append(piece)

    with pytest.raises(LLMError) as info:
        asyncio.run(run())
    return info.value, got


def assert_no_key(exc: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    """The key is in no message, repr, traceback or log record."""
    assert KEY not in str(exc)
    assert KEY not in repr(exc)
    assert KEY not in "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert KEY not in caplog.text
    assert KEY not in "".join(repr(r.args) + r.getMessage() for r in caplog.records)


# -- prompt and sources, no I/O -------------------------------------------------------


LLM_SET = LLMSettings("http://127.0.0.1:9/v1")  # configured, never called: for the prompt's sources


def test_build_messages_numbers_sources_and_asks_the_question() -> None:
    messages = build_messages(QUESTION, numbered_sources(RESULTS, LLM_SET))
    assert [m["role"] for m in messages] == ["system", "user"]
    system = messages[0]["content"]
    assert "ONLY" in system and "[1]" in system and "do not" in system.lower()
    user = messages[1]["content"]
    for n, r in enumerate(RESULTS, start=1):
        assert f"[{n}] {r.rel_path}\n— {r.heading}\n{r.text}" in user
    assert user.index("[1]") < user.index("[2]") < user.index("[3]") < user.index(QUESTION)
    assert user.rstrip().endswith(QUESTION)


def test_a_page_s_attached_sections_reach_the_answer_after_every_page_s_best() -> None:
    """search.per_page gives a page one place and attaches its other sections: the answer still gets them, under
    the page's number, after the best passage of every page (with an LLM, as the prompt's room allows)."""
    from dataclasses import replace

    page = replace(result(1), sections=[result(5, path="/docs/guide/file1.md")])
    cited = numbered_sources([page, result(2)], LLM_SET)
    assert [(s.number, [r.chunk_id for r in s.passages]) for s in cited] == [
        (1, ["chunk-1", "chunk-5"]),
        (2, ["chunk-2"]),
    ]
    # no room for more than the two results: the attached section is the one left out
    short = numbered_sources(
        [page, result(2)], LLM_SET, max_chars=len("Passage number 1 says: run `keys rotate --id 1`.") * 2 + 80
    )
    assert [r.chunk_id for s in short for r in s.passages] == ["chunk-1", "chunk-2"]


def test_sources_are_numbered_by_file_and_hold_each_file_s_passages() -> None:
    """Several passages of one file go under one number, each with its heading; files in rank order."""
    ranked = [result(2), result(1), result(3, path="/docs/guide/file2.md"), result(1), result(4)]
    cited = numbered_sources(ranked, LLM_SET)
    assert [(s.number, s.path) for s in cited] == [
        (1, "/docs/guide/file2.md"),
        (2, "/docs/guide/file1.md"),
        (3, "/docs/guide/file4.md"),
    ]
    assert [r.chunk_id for r in cited[0].passages] == ["chunk-2", "chunk-3"]
    user = build_messages(QUESTION, cited)[1]["content"]
    assert user.count("[1] guide/file2.md\n") == 1 and "[4]" not in user
    assert "[1] guide/file2.md\n— Guide > Section 2\nPassage number 2" in user
    assert "\n\n— Guide > Section 3\nPassage number 3" in user  # the second passage, under [1]
    assert numbered_sources([], LLM_SET) == [] and numbered_sources([], None) == []


def test_extractive_sources_are_the_quoted_passages_files() -> None:
    """The extractive answer quotes five passages: its sources are their files, not those of later results."""
    ranked = [result(1), result(2), result(1), result(1), result(2), result(3), result(4)]
    cited = numbered_sources(ranked, None)
    assert [s.path for s in cited] == ["/docs/guide/file1.md", "/docs/guide/file2.md"]
    assert sum(len(s.passages) for s in cited) == 5
    assert len(numbered_sources(ranked, LLM_SET)) == 4  # the prompt has room for all of them


def test_build_messages_caps_sources_by_dropping_the_lowest_ranked_whole() -> None:
    big = [result(n, text=f"text{n} " + "x" * 5000 + f" end{n}") for n in range(1, 6)]
    cited = numbered_sources(big, LLM_SET)
    user = build_messages(QUESTION, cited)[1]["content"]
    # 12,000 characters hold two 5,000-character sources; both are whole, the rest are gone.
    assert "end1" in user and "end2" in user
    assert "text3" not in user and "[3]" not in user and "[5]" not in user
    assert [s.path for s in cited] == [r.path for r in big[:2]]  # the sources are what the prompt holds
    small_cap = build_messages(QUESTION, numbered_sources(big, LLM_SET, max_chars=100))[1]["content"]
    assert "end1" in small_cap and "[2]" not in small_cap  # the best source is kept whole even if too long
    assert len(build_messages(QUESTION, numbered_sources(RESULTS, LLM_SET, max_chars=10**6))[1]["content"]) < 2000


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("NO_ANSWER", True),
        ("  **No answer.**", True),
        ("`no_answer`\nThe sources do not say.", True),
        ('"NO ANSWER"', True),
        ("", None),
        ("  ", None),
        ("NO", None),
        ("No an", None),
        ("No, run `hugo server` [1].", False),
        ("Nothing in the sources", False),
        ("Run the installer [1].", False),
        ("<think>", False),
    ],
)
def test_declined_tells_the_decline_word_from_an_answer_as_early_as_it_can(text: str, verdict: bool | None) -> None:
    assert declined(text) is verdict
    assert DECLINE in SYSTEM_PROMPT and declined(DECLINE) is True  # the word the prompt asks for is recognised


def test_settings_repr_hides_the_key() -> None:
    s = LLMSettings("http://user:pw@127.0.0.1:9/v1/", api_key=KEY)
    assert KEY not in repr(s) and "pw" not in repr(s) and "api_key=set" in repr(s)
    assert s.configured and s.url == "http://user:pw@127.0.0.1:9/v1/chat/completions"
    assert not LLMSettings(None).configured and not LLMSettings("  ").configured
    assert LLMSettings("http://h/v1/chat/completions").url == "http://h/v1/chat/completions"


# -- answers without an LLM -------------------------------------------------------------


def test_no_results_answers_no_relevant_without_asking(llm: LLM) -> None:
    assert collect(QUESTION, [], llm.settings()) == [NO_RELEVANT]
    assert collect(QUESTION, [], None) == [NO_RELEVANT]
    assert llm.script.requests == []


def test_extractive_answer_without_llm(llm: LLM) -> None:
    many = [result(n) for n in range(1, 8)]
    for settings in (None, LLMSettings(None), LLMSettings("", api_key=KEY)):
        pieces = collect(QUESTION, many, settings)
        assert len(pieces) == 6  # the note, then five passages
        assert "no llm" in pieces[0].lower()
        assert "llm.base_url" in pieces[0] and "MARKDOWN_QA_API_BASE_URL" in pieces[0]
        for n, (piece, r) in enumerate(zip(pieces[1:], many), start=1):
            assert piece == f"\n\n[{n}] {r.rel_path}\n\n— Guide > Section {n}\n\n{r.text}"
        assert "Section 6" not in "".join(pieces)
        assert collect(QUESTION, many, settings) == pieces  # deterministic
    assert llm.script.requests == []


def test_an_extractive_answer_sets_headings_apart_and_shows_no_html_comment(llm: LLM) -> None:
    """Each passage's heading is a paragraph of its own (rendered as Markdown, it no longer runs into the text),
    and the documents' HTML comments are left out, except in code; the index's text is not changed."""
    commented = (
        "<!-- TODO: explain the overlap -->\nSet `chunk.size` <!-- inline --> in the config file.\n\n"
        "<!--\na comment\nover lines\n-->\n\n```html\n<!-- code keeps it -->\n```\n\nSee `<!-- span -->` too."
    )
    results = [
        result(1, commented),
        result(2, "<!-- only a comment -->", path="/docs/guide/file1.md"),
        result(3, "Cut inside <!-- a comment", path="/docs/guide/other.md"),
    ]
    before = [r.text for r in results]
    _, first, second = collect(QUESTION, results, None)
    assert first == (
        "\n\n[1] guide/file1.md\n\n— Guide > Section 1\n\nSet `chunk.size`  in the config file.\n\n"
        "```html\n<!-- code keeps it -->\n```\n\nSee `<!-- span -->` too.\n\n— Guide > Section 2"
    )
    assert second == "\n\n[2] guide/other.md\n\n— Guide > Section 3\n\nCut inside"
    assert [r.text for r in results] == before
    # the LLM is given the passages as they are
    user = build_messages(QUESTION, numbered_sources(results, llm.settings()))[1]["content"]
    assert "— Guide > Section 1\n<!-- TODO: explain the overlap -->" in user


# -- answers from the LLM ----------------------------------------------------------------


def test_streams_tokens_in_order_and_sends_the_request(llm: LLM, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    pieces = collect(QUESTION, RESULTS, llm.settings(max_tokens=200))
    assert pieces == llm.script.tokens
    assert "".join(pieces) == "Hello, world [1]."
    assert llm.script.finished.is_set()
    [req] = llm.script.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["authorization"] == f"Bearer {KEY}"
    body = req["body"]
    assert body["model"] == "test-model" and body["stream"] is True and body["max_tokens"] == 200
    assert body["messages"] == build_messages(QUESTION, numbered_sources(RESULTS, llm.settings()))
    user = body["messages"][-1]["content"]
    assert "[1] guide/file1.md\n— Guide > Section 1" in user and "[3]" in user and QUESTION in user
    assert KEY not in caplog.text


def test_trailing_slash_no_key_no_max_tokens(llm: LLM) -> None:
    settings = LLMSettings(llm.base_url + "/", model="m", timeout=5.0)
    llm.script.role_first = False
    assert collect(QUESTION, RESULTS, settings) == llm.script.tokens
    [req] = llm.script.requests
    assert req["path"] == "/v1/chat/completions"
    assert "authorization" not in req["headers"] and "max_tokens" not in req["body"]


def test_non_streaming_json_answer_is_one_piece(llm: LLM) -> None:
    llm.script.as_json = True
    assert collect(QUESTION, RESULTS, llm.settings()) == ["Hello, world [1]."]


def test_rejected_key(llm: LLM, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    llm.script.status = 401
    llm.script.error_body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode()
    exc, got = failure(llm.settings())
    assert got == []
    assert "rejected the API key (HTTP 401)" in str(exc)
    assert "llm.api_key" in str(exc) and "MARKDOWN_QA_API_KEY" in str(exc)
    assert "Incorrect API key provided: ***" in str(exc)  # the echoed key is redacted
    assert_no_key(exc, caplog)


def test_server_error_quotes_the_message(llm: LLM, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    llm.script.status = 500
    llm.script.error_body = json.dumps({"error": {"message": "model crashed " + "z" * 1000}}).encode()
    exc, _ = failure(llm.settings())
    assert "HTTP 500" in str(exc) and "model crashed" in str(exc)
    assert llm.base_url in str(exc)
    assert len(str(exc)) < 500  # the server's text is cut to 300 characters
    assert_no_key(exc, caplog)


@pytest.mark.parametrize(
    ("status", "says"),
    [(404, "check llm.base_url (it usually ends in /v1) and llm.model"), (429, "rate limiting requests (HTTP 429)")],
)
def test_not_found_and_rate_limited_say_what_to_do(
    llm: LLM, status: int, says: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    llm.script.status = status
    llm.script.error_body = json.dumps({"error": {"message": f"no luck for {KEY}"}}).encode()
    exc, got = failure(llm.settings())
    assert got == [] and f"HTTP {status}" in str(exc) and says in str(exc)
    assert "no luck for ***" in str(exc)
    assert len(llm.script.requests) == 1  # an answer is not retried: the user asks again
    assert_no_key(exc, caplog)


def test_stream_cut_in_the_middle_is_an_error(llm: LLM, caplog: pytest.LogCaptureFixture) -> None:
    """The connection drops after the first token: the answer so far, then an error, not a quiet end."""
    caplog.set_level(logging.DEBUG)
    llm.script.cut = True
    exc, got = failure(llm.settings())
    assert got == ["Hel"]
    assert f"the connection to the LLM at {llm.base_url}/chat/completions failed" in str(exc)
    assert_no_key(exc, caplog)


def test_a_stream_that_ends_before_the_answer_is_finished_is_an_error(
    llm: LLM, caplog: pytest.LogCaptureFixture
) -> None:
    """One piece, then a well-formed end of the body and a closed socket, with no finish_reason and no
    [DONE]: the server stopped early. The piece, then an error that says the answer is cut short."""
    caplog.set_level(logging.DEBUG)
    llm.script.unfinished = True
    exc, got = failure(llm.settings())
    assert got == ["Hel"]
    assert str(exc).startswith(f"the answer is cut short: the LLM at {llm.base_url}/chat/completions closed its")
    assert "no finish_reason" in str(exc) and "ask again" in str(exc)
    assert_no_key(exc, caplog)


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    ("reason", "says"),
    [("length", "token limit"), ("content_filter", "content filter")],
)
def test_an_answer_stopped_by_the_token_limit_or_a_filter_is_an_error_after_its_text(
    llm: LLM, reason: str, says: str, as_json: bool
) -> None:
    """finish_reason "length" (or "content_filter"): the text came, whole as far as it goes, then an error."""
    llm.script.finish_reason, llm.script.as_json = reason, as_json
    exc, got = failure(llm.settings())
    assert "".join(got) == "Hello, world [1]."
    assert str(exc).startswith("the answer is cut short: ") and says in str(exc)
    assert f'finish_reason "{reason}"' in str(exc)


def test_other_finish_reasons_end_the_answer(llm: LLM) -> None:
    """Servers name a finished answer differently ("eos" and the like): only a known truncation is an error."""
    llm.script.finish_reason = "eos"
    assert collect(QUESTION, RESULTS, llm.settings()) == llm.script.tokens


def test_error_event_in_the_stream(llm: LLM, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    llm.script.error_event = f"model overloaded (key {KEY})"
    exc, got = failure(llm.settings())
    assert got == ["Hel"]
    assert "reported an error: model overloaded (key ***)" in str(exc)
    assert_no_key(exc, caplog)


def test_openai_environment_is_not_used(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENAI_* variables belong to other tools: mdrag sends only the key its settings give, or none."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "Authorization: Bearer sk-custom-header")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-environment")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-environment")
    assert collect(QUESTION, RESULTS, LLMSettings(llm.base_url, model="m", timeout=5.0)) == llm.script.tokens
    assert collect(QUESTION, RESULTS, llm.settings()) == llm.script.tokens
    without, with_key = (r["headers"] for r in llm.script.requests)
    assert "authorization" not in without and with_key["authorization"] == f"Bearer {KEY}"
    assert not {"openai-organization", "openai-project"} & (without.keys() | with_key.keys())


def test_connection_refused(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    exc, _ = failure(LLMSettings(url, api_key=KEY, timeout=2.0))
    assert str(exc).startswith(f"cannot reach the LLM at {url}/chat/completions: ")
    assert_no_key(exc, caplog)


@pytest.mark.parametrize("hang", ["before_headers", "after_first"])
def test_timeout_when_the_server_goes_silent(llm: LLM, hang: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    llm.script.hang = hang
    started = time.monotonic()
    exc, got = failure(llm.settings(timeout=0.5))
    assert time.monotonic() - started < 2.0
    assert "did not answer within 0.5 s" in str(exc) and "llm.timeout" in str(exc)
    assert got == ([] if hang == "before_headers" else ["Hel"])
    assert_no_key(exc, caplog)


def test_malformed_event_raises(llm: LLM, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    llm.script.malformed = True
    exc, got = failure(llm.settings())
    assert got == ["Hel"]
    assert "malformed" in str(exc) and "not JSON" in str(exc)
    assert_no_key(exc, caplog)


def test_a_key_in_a_malformed_event_is_redacted_before_the_quote_is_cut(
    llm: LLM, caplog: pytest.LogCaptureFixture
) -> None:
    llm.script.malformed = True
    llm.script.bad_event = b"x" * 70 + KEY.encode() + b" not json"  # the quote's 80 characters end inside the key
    exc, _ = failure(llm.settings())
    assert "an event is not JSON: 'xxxxx" in str(exc) and "***" in str(exc)
    assert KEY[:8] not in str(exc)
    assert_no_key(exc, caplog)


def test_invalid_base_url(caplog: pytest.LogCaptureFixture) -> None:
    exc, _ = failure(LLMSettings("ftp://example.invalid/v1", api_key=KEY))
    assert "llm.base_url" in str(exc)
    assert_no_key(exc, caplog)


# -- a client that goes away -------------------------------------------------------------


def test_cancelling_the_consumer_closes_the_request(llm: LLM) -> None:
    llm.script.tokens = [f"t{i} " for i in range(50)]
    llm.script.delay = 0.2

    async def run() -> list[str]:
        got: list[str] = []
        first = asyncio.Event()

        async def consume() -> None:
            async for piece in answer_stream(QUESTION, numbered_sources(RESULTS, llm.settings()), llm.settings()):
                got.append(piece)
                first.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(first.wait(), 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Checked while the loop still runs: asyncio.run()'s final clean-up must not be what closes it.
        assert await asyncio.to_thread(llm.script.disconnected.wait, 2), "the server kept streaming"
        return got

    assert asyncio.run(run()) == ["t0 "]
    assert not llm.script.finished.is_set()


def test_aclose_closes_the_request(llm: LLM) -> None:
    llm.script.tokens = [f"t{i} " for i in range(50)]
    llm.script.delay = 0.2

    async def run() -> str:
        gen = answer_stream(QUESTION, numbered_sources(RESULTS, llm.settings()), llm.settings())
        first = await gen.__anext__()
        await gen.aclose()
        assert await asyncio.to_thread(llm.script.disconnected.wait, 2), "the server kept streaming"
        return first

    assert asyncio.run(run()) == "t0 "
    assert not llm.script.finished.is_set()
