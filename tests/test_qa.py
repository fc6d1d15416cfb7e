"""`Index.ask()`: the answer policy of mdrag.answering.ask on the real model and examples/docs, extractively and
through the loopback stand-in LLM."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

import mdrag
from mdrag.answering.generate import NO_LLM_NOTE, NO_RELEVANT
from mdrag.config import load_config
from mdrag.embedding.base import Embedder
from mdrag.errors import LLMError
from mdrag.index import Index
from tests.fake_llm import KEY, LLM

pytestmark = pytest.mark.slow  # the real model

DOCS = Path(__file__).resolve().parents[1] / "examples" / "docs"
ANSWERABLE = "How do I set the chunk size and overlap?"
UNANSWERABLE = "What is the capital of France?"


def _index(embedder: Embedder, **overrides: Any) -> Index:
    index = Index(load_config({"index": "qa" + os.urandom(4).hex(), **overrides}), embedder=embedder)
    index.update([DOCS])
    return index


def test_ask_quotes_the_passages_without_an_llm_and_refuses_what_the_docs_do_not_say(minilm: Embedder) -> None:
    with _index(minilm, **{"search.threshold": 0}) as index:  # every result: the answer policy must choose
        pieces: list[str] = []
        answer = index.ask(ANSWERABLE, on_text=pieces.append)
        assert isinstance(answer, mdrag.Answer) and not answer.refused
        assert answer.text == "".join(pieces) and pieces[0] == NO_LLM_NOTE
        assert answer.sources[0].path == str(DOCS / "configuration.md") == answer.results[0].path
        assert [s.number for s in answer.sources] == list(range(1, len(answer.sources) + 1))
        for s in answer.sources:  # the extractive answer quotes each source under its number, in order
            assert f"\n\n[{s.number}] {s.title}\n" in answer.text
        assert "overlap: 150" in answer.text

        refused = index.ask(UNANSWERABLE)
        assert refused.refused and refused.text == NO_RELEVANT and refused.sources == []
        assert refused.results, "the search found something; answer.min_score refused it"


def test_ask_streams_the_llm_answer_from_numbered_sources(minilm: Embedder, llm: LLM) -> None:
    with _index(minilm, **{"llm.base_url": llm.base_url, "llm.api_key": KEY, "llm.model": "m"}) as index:
        pieces: list[str] = []
        answer = index.ask(ANSWERABLE, on_text=pieces.append)
        assert pieces == llm.script.tokens and answer.text == "Hello, world [1]." and not answer.refused
        (request,) = llm.script.requests
        assert request["headers"]["authorization"] == f"Bearer {KEY}" and request["body"]["model"] == "m"
        prompt = request["body"]["messages"][-1]["content"]
        assert prompt.rstrip().endswith(ANSWERABLE)
        for s in answer.sources:  # each source the answer cites is in the prompt under its number
            assert f"[{s.number}] {s.title}\n" in prompt
        assert answer.sources[0].path == str(DOCS / "configuration.md")

        async def from_async_code() -> mdrag.Answer:  # as in a Jupyter cell: an event loop is running
            return index.ask(ANSWERABLE)

        assert asyncio.run(from_async_code()).text == "Hello, world [1]." and len(llm.script.requests) == 2


def test_the_llm_judges_whether_its_passages_answer(minilm: Embedder, llm: LLM) -> None:
    """answer.judge: llm (the default) asks the LLM even when the best score is weak, and its NO_ANSWER
    becomes "no relevant information" with no sources; answer.judge: scores refuses before asking."""
    settings = {"llm.base_url": llm.base_url, "llm.api_key": KEY, "search.threshold": 0}
    with _index(minilm, **settings) as index:
        assert index.search(UNANSWERABLE)[0].score < index.config["answer.min_score"], "scores alone would refuse"
        llm.script.tokens = ["NO", "_ANS", "WER", "\n", "The sources do not say."]
        pieces: list[str] = []
        refused = index.ask(UNANSWERABLE, on_text=pieces.append)
        assert len(llm.script.requests) == 1, "with an LLM configured, it judges"
        prompt = llm.script.requests[0]["body"]["messages"]
        assert "NO_ANSWER" in prompt[0]["content"] and prompt[-1]["content"].rstrip().endswith(UNANSWERABLE)
        assert pieces == [NO_RELEVANT] and refused.text == NO_RELEVANT
        assert refused.refused and refused.sources == [] and refused.results

        llm.script.tokens = ["No", ", the", " chunk size is set in the config [1]."]  # "No" begins an answer
        answered = index.ask(ANSWERABLE)
        assert answered.text == "No, the chunk size is set in the config [1]." and not answered.refused
        assert answered.sources and answered.sources[0].path == str(DOCS / "configuration.md")
        llm.script.tokens = ["NO"]  # the whole answer: what the LLM said, not a refusal
        assert index.ask(ANSWERABLE).text == "NO" and len(llm.script.requests) == 3

    with _index(minilm, **settings, **{"answer.judge": "scores"}) as index:
        refused = index.ask(UNANSWERABLE)
        assert refused.refused and refused.text == NO_RELEVANT and len(llm.script.requests) == 3  # not asked


def test_an_answer_the_llm_did_not_finish_is_an_error_not_an_answer(minilm: Embedder, llm: LLM) -> None:
    """The LLM's stream ends after one piece with no finish_reason, or on its token limit: `ask()` raises
    LLMError ("cut short") after the text that came, instead of returning it as a whole answer."""
    with _index(minilm, **{"llm.base_url": llm.base_url, "llm.api_key": KEY, "search.threshold": 0}) as index:
        llm.script.unfinished = True
        pieces: list[str] = []
        with pytest.raises(LLMError, match="^the answer is cut short: .*no finish_reason"):
            index.ask(ANSWERABLE, on_text=pieces.append)
        assert pieces == ["Hel"]

        llm.script.tokens = ["NO", "_ANSWER"]  # held back until it shows whether the LLM declines: still an error
        with pytest.raises(LLMError, match="cut short"):
            index.ask(ANSWERABLE)

        llm.script.unfinished, llm.script.finish_reason = False, "length"
        llm.script.tokens = ["The chunk size ", "is set in"]
        pieces.clear()
        with pytest.raises(LLMError, match="^the answer is cut short: .*token limit"):
            index.ask(ANSWERABLE, on_text=pieces.append)
        assert "".join(pieces) == "The chunk size is set in"
