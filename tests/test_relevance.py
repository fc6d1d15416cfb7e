"""The "no relevant information" rule (mdrag.relevance) and the index's term statistics."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.relevance import TermStats, refuse, unknown_share
from mdrag.stemming import stemmer
from mdrag.types import SearchResult
from tests.conftest import HashEmbedder

CHUNKS = [
    "configur the collector pipelin with receiv and export",
    "the collector export trace to jaeger",
    "sampl trace in the collector",
]


def _result(score: float) -> SearchResult:
    return SearchResult(text="t", path="/d/a.md", rel_path="a.md", score=score, heading_path=[], chunk_id="x")


def test_words_no_chunk_holds_carry_the_unknown_share() -> None:
    stats = TermStats(CHUNKS, stemmer())
    assert unknown_share("configure the collector pipeline", stats) == 0.0
    # "Nagios" is in no chunk: most of the question's weight; "the" and "collector" (in every chunk) weigh little
    share = unknown_share("the collector and Nagios", stats)
    assert share > 0.5
    assert unknown_share("the collector and Nagios", stats) > unknown_share("the collector, jaeger and Nagios", stats)
    assert unknown_share("?!", stats) == 1.0


def test_refuse_on_a_weak_best_score_or_on_unknown_words() -> None:
    stats = TermStats(CHUNKS, stemmer())
    strong = [_result(0.3), _result(0.7)]  # the best score counts, not the first result's
    assert not refuse("export traces to jaeger", strong, stats, min_score=0.45, max_unknown=0.2)
    assert refuse("export traces to jaeger", [_result(0.4)], stats, min_score=0.45, max_unknown=0.2)
    assert refuse("export traces to Zabbix", strong, stats, min_score=0.45, max_unknown=0.2)
    assert not refuse("export traces to Zabbix", strong, stats, min_score=0.45, max_unknown=1.0)
    assert refuse("export traces to jaeger", [], stats, min_score=0, max_unknown=1.0)


def test_term_stats_follow_the_index_after_an_update(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Collector\n\nThe collector exports traces.\n")
    with Index(load_config({"index": "r" + os.urandom(4).hex()}), embedder=HashEmbedder()) as index:
        index.update([docs])
        stats = index.term_stats()
        assert stats.n == 1 and stats.df[stats.prepare("traces")] == 1 and not stats.df.get("zanzibarquux")
        assert index.term_stats() is stats  # counted once per committed state
        (docs / "b.md").write_text("# Later\n\nThe zanzibarquux setting lives here.\n")
        index.update([docs])
        after = index.term_stats()
        assert after.n == 2 and after.df["zanzibarquux"] == 1


def test_max_unknown_must_be_a_share() -> None:
    from mdrag.errors import ConfigError

    with pytest.raises(ConfigError, match="answer.max_unknown must be between 0 and 1"):
        load_config({"answer.max_unknown": 1.5})
