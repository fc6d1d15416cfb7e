"""The search settings as one value (mdrag.search.SearchOptions), as an Index reads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.search import SearchOptions
from tests.conftest import HashEmbedder


def test_options_come_from_the_settings() -> None:
    config = load_config(
        {
            "search.k": 7,
            "search.threshold": 0.25,
            "search.mode": "hybrid",
            "search.fusion": "weighted",
            "search.dense_weight": 0.8,
            "search.collapse": "file",
        }
    )
    assert SearchOptions.from_config(config) == SearchOptions(7, 0.25, "hybrid", "weighted", 0.8, "file")


def test_an_index_searches_with_the_settings_of_its_current_config(tmp_path: Path) -> None:
    """Options are built once per config: a server that replaces the config (a live change) is obeyed."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(6):
        (root / f"page{i}.md").write_text(f"# Page {i}\n\nTopic {i} words here.\n")
    config = load_config({"index": "t" + os.urandom(4).hex(), "search.k": 2, "search.threshold": 0})
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([root])
        assert len(idx.search("Topic words")) == 2
        assert idx.search_options is idx.search_options  # built once for a config
        idx.config = config.with_overrides({"search.k": 4})
        assert idx.search_options.k == 4
        assert len(idx.search("Topic words")) == 4
        assert len(idx.search("Topic words", k=1)) == 1  # a call's own value wins


@pytest.mark.parametrize("query", ["", "  \n\t", "\u200b", "\ufeff \u200b\u2060"])
def test_a_blank_query_is_refused_before_any_search(query: str) -> None:
    """Invisible characters alone (a zero-width space, a BOM) are no words: "Ouch." was found at 0.38."""
    from typing import Any, cast

    from mdrag.errors import ConfigError
    from mdrag.search import search

    nothing = cast(Any, None)  # neither the store nor the embedder is reached
    with pytest.raises(ConfigError, match="the search query is empty"):
        search(nothing, nothing, query)


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
@pytest.mark.parametrize("stemming", [False, True])
def test_a_result_that_holds_every_word_asked_is_kept_below_the_threshold(
    tmp_path: Path, mode: str, stemming: bool
) -> None:
    """A setting's name in one row of a long table scores a low cosine (the model embeds the whole chunk):
    the threshold dropped it, though it holds every word of a keyword query (issue 27)."""
    root = tmp_path / "docs"
    root.mkdir()
    filler = " ".join(f"w{i}" for i in range(300))  # a long chunk: its cosine to a short query is low
    (root / "table.md").write_text(f"# Settings\n\n| name | default |\n|---|---|\n| zebra_stripes | 7 |\n\n{filler}\n")
    (root / "other.md").write_text("# Other\n\nA page about something else entirely.\n")
    config = load_config({"index": "t" + os.urandom(4).hex(), "search.threshold": 0.6, "search.stemming": stemming})
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([root])
        assert all(r.score < 0.6 for r in idx.search("zebra_stripes default", mode=mode, threshold=0))
        hits = idx.search("zebra_stripes default", mode=mode)
        assert [h.rel_path for h in hits] == ["table.md"], hits  # every word is in it: kept
        assert idx.search("Settings zebra_stripes", mode=mode)  # a word of its heading trail counts
        assert not idx.search("zebra_stripes default absentword", mode=mode)  # one word it lacks: dropped


def test_the_module_function_ranks_as_the_index_does_by_default(tmp_path: Path) -> None:
    """`mdrag.search.search` with no options is `mdrag search`: the settings' defaults (issue 28 point 2),
    where it ranked dense, without threshold or collapse, and fused by RRF."""
    from mdrag.search import search

    assert SearchOptions() == SearchOptions.from_config(load_config())
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(8):
        page = f"# Page {i}\n\n## Part\n\nTopic {i} words here and there.\n\n## More\n\nTopic.\n"
        (root / f"page{i}.md").write_text(page)
    with Index(load_config({"index": "t" + os.urandom(4).hex()}), embedder=HashEmbedder()) as idx:
        idx.update([root])
        expected = [(r.chunk_id, r.score, r.rank_score) for r in idx.search("topic words")]
        got = [(r.chunk_id, r.score, r.rank_score) for r in search(idx.store, idx.embedder, "topic words")]
        assert got == expected and got
