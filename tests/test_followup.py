"""Follow-up questions: what a follow-up searches for (mdrag.answering.followup), with the
loopback stand-in LLM for the rewrite; then through `Index.ask`, the WebSocket server on real Hugo docs,
and `mdrag ask` at its prompt."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from websockets.sync.client import connect

from mdrag.answering.followup import (
    REWRITE_PROMPT,
    Turn,
    bounded,
    history_chars,
    in_context,
    joined_query,
    rewrite_query,
    search_query,
)
from mdrag.config import Config, load_config
from mdrag.embedding.base import Embedder
from mdrag.errors import LLMError
from mdrag.index import Index
from mdrag.knobs import (
    MAX_HISTORY_ANSWER_CHARS,
    MAX_HISTORY_CHARS,
    MAX_HISTORY_TURNS,
    MAX_QUESTION_CHARS,
    REWRITE_MAX_CHARS,
    REWRITE_MAX_TOKENS,
)
from tests.conftest import SHARED_DATA, listening
from tests.fake_llm import KEY, LLM, FakeServer, Handler, Script, is_rewrite, serving

REPO = Path(__file__).resolve().parents[1]

MENU = "How do I configure the menu?"
NEST = "and how do I nest it?"
NESTED = "How do I nest menu entries?"  # what the stand-in LLM answers to a rewrite request


def _llm_config(llm: LLM, **overrides: Any) -> Config:
    return load_config({"llm.base_url": llm.base_url, "llm.api_key": KEY, "llm.model": "m", **overrides})


# -- the heuristic and the bounds ---------------------------------------------------------------------------


def test_joined_query_searches_the_follow_up_with_the_previous_question_only() -> None:
    assert joined_query(NEST, []) == NEST
    history = [Turn("What is a taxonomy?", "A taxonomy groups content [1]."), Turn(MENU, "Define menus [1].")]
    assert joined_query(f"  {NEST} ", history) == f"{NEST} {MENU}"  # the follow-up first, then the last question
    assert joined_query(NEST, [Turn(MENU), Turn("  ", "an answer to no question")]) == f"{NEST} {MENU}"


def test_a_history_is_cut_to_its_newest_turns_and_its_bounds() -> None:
    many = [Turn(f"question {i}", f"answer {i}") for i in range(MAX_HISTORY_TURNS + 3)]
    kept = bounded(many)
    assert kept == many[-MAX_HISTORY_TURNS:]
    long = bounded([Turn(MENU, "x" * (MAX_HISTORY_ANSWER_CHARS * 3))])
    assert len(long[0].answer) == MAX_HISTORY_ANSWER_CHARS and long[0].answer.endswith("…")
    big = [Turn("q" * 3000, "a" * MAX_HISTORY_ANSWER_CHARS) for _ in range(MAX_HISTORY_TURNS)]
    kept = bounded(big)
    assert kept and history_chars(kept) <= MAX_HISTORY_CHARS and len(kept) < len(big)
    assert kept[-1].question == big[-1].question  # the newest turn is the one kept
    assert bounded([Turn("q" * (MAX_HISTORY_CHARS * 2))])[0].question.startswith("q")


def test_without_an_llm_a_follow_up_searches_the_joined_query(llm: LLM) -> None:
    config = load_config({})
    assert search_query(NEST, [], config) == NEST
    assert search_query(NEST, [Turn(MENU, "Use the menus key [1].")], config) == f"{NEST} {MENU}"
    with pytest.raises(LLMError, match="no LLM is configured"):
        rewrite_query(NEST, [Turn(MENU)], config)
    assert llm.script.requests == []


# -- the rewrite, through the loopback stand-in LLM ---------------------------------------------------------


def test_with_an_llm_a_follow_up_is_rewritten_in_one_short_completion(llm: LLM) -> None:
    llm.script.rewrite = f'Query: "{NESTED}"'  # a label and quotes around it are taken off
    history = [Turn(MENU, "Define entries under menus.main [1].")]
    assert search_query(NEST, history, _llm_config(llm)) == NESTED
    (request,) = llm.script.requests
    body = request["body"]
    assert body["max_tokens"] == REWRITE_MAX_TOKENS and body["model"] == "m"
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    system, user = body["messages"]
    assert system["content"] == REWRITE_PROMPT
    assert f"Question: {MENU}\nAnswer: Define entries under menus.main [1]." in user["content"]
    assert f"Last question: {NEST}" in user["content"]
    assert search_query(NEST, [], _llm_config(llm)) == NEST and len(llm.script.requests) == 1  # alone: no rewrite


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        ({"status": 500, "error_body": b'{"error": {"message": "model crashed"}}'}, "HTTP 500: model crashed"),
        ({"rewrite": "Here is the query:\nHow do I nest menus?"}, "not one line"),
        ({"rewrite": "   "}, "is empty"),
        ({"rewrite": "menu " * REWRITE_MAX_CHARS}, "too long"),
        ({"finish_reason": "length"}, "token limit"),
        ({"hang": "before_headers"}, "did not answer within 1 s"),
    ],
)
def test_a_failed_rewrite_falls_back_to_the_joined_query_with_a_warning(
    llm: LLM, caplog: pytest.LogCaptureFixture, fault: dict[str, Any], why: str
) -> None:
    for name, value in fault.items():
        setattr(llm.script, name, value)
    config = _llm_config(llm, **{"llm.timeout": 1})
    with pytest.raises(LLMError, match=why):
        rewrite_query(NEST, [Turn(MENU)], config)
    with caplog.at_level(logging.WARNING, logger="mdrag.answering.followup"):
        assert search_query(NEST, [Turn(MENU)], config) == f"{NEST} {MENU}"
    (warning,) = [r for r in caplog.records if r.name == "mdrag.answering.followup"]
    assert warning.levelno == logging.WARNING and why.split(":")[0] in warning.getMessage()
    assert KEY not in caplog.text


def test_the_rewrite_has_its_own_time_limit(llm: LLM) -> None:
    llm.script.hang = "before_headers"
    config = _llm_config(llm)  # llm.timeout 60 s: the rewrite's limit is shorter
    with pytest.raises(LLMError, match=r"did not rewrite the follow-up question within 0\.5 s"):
        rewrite_query(NEST, [Turn(MENU)], config, timeout=0.5)


def test_the_rewrite_runs_from_async_code(llm: LLM) -> None:
    """Called with an event loop running (a Jupyter cell), it asks from another thread."""
    llm.script.rewrite = NESTED

    async def from_async_code() -> str:
        return rewrite_query(NEST, [Turn(MENU)], _llm_config(llm))

    assert asyncio.run(from_async_code()) == NESTED


def test_the_answering_llm_is_told_the_earlier_questions_not_their_answers() -> None:
    assert in_context(NEST, []) == NEST
    told = in_context(NEST, [Turn(MENU, "Define entries [1].")])
    assert told.startswith(NEST) and f"- {MENU}" in told and "Define entries" not in told


# -- the query message (mdrag.frontends.protocol: no I/O) ------------------------------------------------------

_GOOD_TURN = {"question": MENU, "answer": "Define entries under menus.main [1]."}


@pytest.mark.parametrize(
    ("history", "error"),
    [
        ("x", '"history" must be a list of at most 6 earlier turns'),
        ([_GOOD_TURN] * (MAX_HISTORY_TURNS + 1), f'"history" has {MAX_HISTORY_TURNS + 1} turns, at most 6'),
        (["a question"], '"history" item 1 must be an object {"question": "...", "answer": "..."}, not "a question"'),
        ([_GOOD_TURN, {"answer": "x"}], '"history" item 2 needs a "question" field'),
        ([{"question": MENU, "answr": "x"}], 'unknown field "answr" in "history" item 1: use question, answer'),
        ([{"question": "  "}], '"question" of "history" item 1 must be a non-empty string'),
        ([{"question": MENU, "answer": 5}], '"answer" of "history" item 1 must be a string of at most 1000'),
        ([{"question": MENU, "answer": "x" * 1001}], '"answer" of "history" item 1 is too long (1001 characters'),
        ([{"question": "q" * 4000, "answer": "a" * 1000}] * 2, '"history" is too long (10000 characters'),
    ],
)
def test_a_query_refuses_a_history_past_its_bounds(history: Any, error: str) -> None:
    from mdrag.errors import ProtocolError
    from mdrag.frontends.protocol import QueryRequest, parse

    with pytest.raises(ProtocolError) as refused:
        parse(json.dumps({"type": "query", "question": NEST, "history": history}))
    assert str(refused.value).startswith(error), str(refused.value)
    request = parse(json.dumps({"type": "query", "question": NEST, "history": [_GOOD_TURN, {"question": "x"}]}))
    assert isinstance(request, QueryRequest) and request.history is not None
    assert [(t.question, t.answer) for t in request.history] == [(MENU, _GOOD_TURN["answer"]), ("x", None)]


def test_the_page_bounds_its_history_as_the_server_does() -> None:
    app = (REPO / "mdrag" / "frontends" / "web" / "static" / "app.js").read_text()
    declared = dict(re.findall(r"^const (MAX_\w+) = (\d+);$", app, re.MULTILINE))
    assert declared["MAX_HISTORY_TURNS"] == str(MAX_HISTORY_TURNS)
    assert declared["MAX_HISTORY_ANSWER_CHARS"] == str(MAX_HISTORY_ANSWER_CHARS)
    assert declared["MAX_HISTORY_CHARS"] == str(MAX_HISTORY_CHARS)
    assert declared["MAX_QUESTION_CHARS"] == str(MAX_QUESTION_CHARS)


# -- Index.ask on the real model ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_index_ask_searches_a_follow_up_with_its_history(minilm: Embedder, llm: LLM) -> None:
    docs = REPO / "examples" / "docs"
    with Index(load_config({"index": "f" + os.urandom(4).hex()}), embedder=minilm) as index:
        index.update([docs])
        first = index.ask("How do I set the chunk size?")
        follow = index.ask("and the overlap?", history=[Turn(first.question, first.text)])
        assert follow.query == "and the overlap? How do I set the chunk size?" and follow.question == "and the overlap?"
        assert follow.sources and follow.sources[0].path == str(docs / "configuration.md")
        assert index.ask("and the overlap?").query == "and the overlap?"
        # a new subject after an unrelated turn: the joined query finds nothing, the question alone does
        nitrogen = [Turn("What is the boiling point of liquid nitrogen in kelvin?")]
        assert index.search(joined_query("How do I change the chunk size?", nitrogen)) == []
        changed = index.ask("How do I change the chunk size?", history=nitrogen)
        assert changed.query == "How do I change the chunk size?" and changed.results and not changed.refused
    config = _llm_config(llm, index="g" + os.urandom(4).hex())
    with Index(config, embedder=minilm) as index:
        index.update([docs])
        llm.script.rewrite = "How do I set the chunk overlap?"
        answer = index.ask("and the overlap?", history=[Turn("How do I set the chunk size?", "Set chunk.size [1].")])
        assert answer.query == "How do I set the chunk overlap?" and answer.text == "Hello, world [1]."
        rewrite, asked = llm.script.requests
        assert rewrite["body"]["messages"][0]["content"] == REWRITE_PROMPT
        told = asked["body"]["messages"][-1]["content"]  # the answer is to the follow-up, told the earlier question
        assert told.endswith("- How do I set the chunk size?)") and "Question: and the overlap?" in told
        assert "Set chunk.size" not in told  # the earlier answer's [1] is another answer's source


# -- through `mdrag serve` and `mdrag ask`, on the Hugo docs -------------------------------------------------------

HUGO = SHARED_DATA / "markdown_hugo_docs" / "content" / "en"
HUGO_FOLDERS = ["configuration", "content-management"]
NESTED_MENU = "configuration/menus.md"  # its "Nested menu" section: found by the follow-up with its history only


@pytest.fixture(scope="module")
def module_llm() -> Iterator[FakeServer]:
    with serving(Handler, Script()) as server:
        yield server


@pytest.fixture
def script(module_llm: FakeServer) -> Iterator[Script]:
    module_llm.script = Script(rewrite=NESTED)
    yield module_llm.script
    module_llm.script.stop.set()


@dataclass
class Served:
    url: str  # ws://127.0.0.1:PORT
    log: Path  # the server's output
    env: list[str]  # `env ...` that runs mdrag as the server does


@pytest.fixture(scope="module")
def hugo(tmp_path_factory: pytest.TempPathFactory, module_llm: FakeServer) -> Iterator[Served]:
    """`mdrag serve` on two folders of the Hugo docs (real model), with the stand-in LLM; ready when yielded."""
    if not all((HUGO / f).is_dir() for f in HUGO_FOLDERS):
        pytest.skip(f"the Hugo docs are not at {HUGO} (shared data of this project)")
    home = tmp_path_factory.mktemp("followup") / "home"
    home.mkdir()
    llm_url = f"http://127.0.0.1:{module_llm.server_address[1]}/v1"
    config = {"llm": {"base_url": llm_url, "api_key": KEY, "model": "m"}}
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    unset = [k for k in os.environ if k.startswith("MARKDOWN_QA_") or k.lower().endswith("_proxy")]
    env = ["env", *(f"-u{k}" for k in unset), f"MDRAG_HOME={home}", "HF_HUB_OFFLINE=1", f"PYTHONPATH={REPO}"]
    folders = [str(HUGO / f) for f in HUGO_FOLDERS]

    def argv(port: int) -> list[str]:
        return [*env, sys.executable, "-m", "mdrag", "serve", *folders, "--port", str(port)]

    def exited(tail: str) -> None:
        pytest.fail(f"mdrag serve exited: {tail}")

    with listening(argv, home / "serve.log", 120, exited) as port:
        url = f"ws://127.0.0.1:{port}"
        deadline = time.monotonic() + 600
        with connect(url) as ws:
            while (st := json.loads(ws.recv(timeout=30))).get("state") != "ready" or st.get("partial"):
                assert time.monotonic() < deadline, "the Hugo docs were not indexed in 10 minutes"
                time.sleep(1)
                ws.send(json.dumps({"type": "status"}))
        yield Served(url, home / "serve.log", env)


def _ask(ws: Any, message: dict[str, Any]) -> tuple[str, list[str]]:
    """Send a query; the answer's text and its sources (an error fails the test)."""
    ws.send(json.dumps(message))
    text = ""
    while True:
        reply = json.loads(ws.recv(timeout=60))
        if reply["type"] == "stream_chunk":
            text += reply["chunk"]
        elif reply["type"] == "stream_end":
            return text, reply["sources"]
        else:
            assert reply["type"] == "stream_start", reply


def _rel(sources: list[str]) -> list[str]:
    hugo = HUGO.resolve()  # sources are recorded with their links resolved (../shared may be a link)
    return [str(Path(s).relative_to(hugo)) for s in sources]


@pytest.mark.slow
def test_over_the_websocket_a_follow_up_finds_what_it_alone_does_not(hugo: Served, script: Script) -> None:
    with connect(hugo.url) as ws:
        json.loads(ws.recv(timeout=30))  # the status on connect
        _, alone = _ask(ws, {"type": "query", "question": NEST})
        assert NESTED_MENU not in _rel(alone) and not any("menu" in s for s in _rel(alone)), alone
        assert len(script.requests) == 1, "a question without history is not rewritten"

        history = [{"question": MENU, "answer": "Define the entries under menus.main [1]."}]
        text, found = _ask(ws, {"type": "query", "question": NEST, "history": history})
        assert NESTED_MENU in _rel(found)[:2] and text == "Hello, world [1]."
        rewrite, answer = script.requests[1:]
        assert rewrite["body"]["messages"][0]["content"] == REWRITE_PROMPT
        assert (
            f"Question: {MENU}\nAnswer: Define the entries under menus.main [1]."
            in rewrite["body"]["messages"][1]["content"]
        )
        prompt = answer["body"]["messages"][-1]["content"]
        assert f"Question: {NEST}" in prompt and f"- {MENU}" in prompt and "Nested menu" in prompt

        script.rewrite = "Sure! Here is a standalone query:\nHow do I nest menu entries?"  # not a query: the heuristic
        _, joined = _ask(ws, {"type": "query", "question": NEST, "history": history})
        assert NESTED_MENU in _rel(joined) and len(script.requests) == 5
    assert "Could not rewrite a follow-up question (the LLM's rewrite of the follow-up question is not one line)" in (
        hugo.log.read_text()
    )


@pytest.mark.slow
def test_a_bad_history_is_an_error_and_the_connection_stays_open(hugo: Served, script: Script) -> None:
    with connect(hugo.url) as ws:
        json.loads(ws.recv(timeout=30))
        ws.send(json.dumps({"type": "query", "question": NEST, "history": [{"question": MENU}] * 7}))
        error = json.loads(ws.recv(timeout=30))
        assert error == {"type": "error", "message": '"history" has 7 turns, at most 6: send the newest ones'}
        ws.send(json.dumps({"type": "query", "question": NEST, "history": [{"question": MENU, "answer": 1}]}))
        assert json.loads(ws.recv(timeout=30))["message"].startswith('"answer" of "history" item 1 must be a string')
        _, found = _ask(ws, {"type": "query", "question": NEST, "history": [{"question": MENU}]})
        assert NESTED_MENU in _rel(found)
        assert [is_rewrite(r["body"]) for r in script.requests] == [True, False]  # the refused ones asked nothing


@pytest.mark.slow
def test_mdrag_ask_keeps_the_conversation_at_its_prompt_until_new(hugo: Served, script: Script) -> None:
    typed = f"{MENU}\n{NEST}\n/new\n{NEST}\n"
    run = subprocess.run(
        [*hugo.env, sys.executable, "-m", "mdrag", "ask", "--server", hugo.url],
        input=typed,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "new conversation: the next question is asked on its own" in run.stderr
    usage = subprocess.run([*hugo.env, sys.executable, "-m", "mdrag", "ask", "--help"], capture_output=True, text=True)
    assert "/new starts a new conversation" in " ".join(usage.stdout.split())
    answers = run.stdout.split("Sources:")[1:]
    assert len(answers) == 3, run.stdout  # three answers: /new is no question
    listed = [[line.split("] ", 1)[1] for line in a.splitlines() if line.strip().startswith("[")] for a in answers]
    assert NESTED_MENU in _rel(listed[1]) and NESTED_MENU not in _rel(listed[2])
    rewrites = [r["body"]["messages"][1]["content"] for r in script.requests if is_rewrite(r["body"])]
    assert len(rewrites) == 1, "the first question has no history, and /new forgets it for the third"
    assert f"Question: {MENU}\nAnswer: Hello, world [1]." in rewrites[0]
