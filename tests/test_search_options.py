"""The search settings as one value (mdrag.retrieval.search.SearchOptions), as an Index reads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.retrieval.search import SearchOptions
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
    from mdrag.retrieval.search import search

    nothing = cast(Any, None)  # neither the store nor the embedder is reached
    with pytest.raises(ConfigError, match="the search query is empty"):
        search(nothing, nothing, query)


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
@pytest.mark.parametrize("stemming", [False, True])
def test_a_result_that_holds_every_word_asked_is_kept_below_the_threshold(
    tmp_path: Path, mode: str, stemming: bool
) -> None:
    """A setting's name in one row of a long table scores a low cosine (the model embeds the whole chunk):
    the threshold dropped it, though it holds every word of a keyword query."""
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
    """`mdrag.retrieval.search.search` with no options is `mdrag search`: the settings' defaults,
    where it ranked dense, without threshold or collapse, and fused by RRF."""
    from mdrag.retrieval.search import search

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


def test_collapse_still_returns_k_results_when_one_file_fills_the_first_places(tmp_path: Path) -> None:
    """Results must not depend on k: one long file's chunks took every row fetched
    (4k), collapse kept one of them, and the next file, found with a larger k, was not returned."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "long.md").write_text("".join(f"## Part {i}\n\nalpha beta gamma {i}\n\n" for i in range(40)))
    (root / "other.md").write_text("# Other\n\nalpha beta delta\n")
    config = load_config({"index": "t" + os.urandom(4).hex(), "search.threshold": 0, "search.collapse": "file"})
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([root])
        for mode in ("dense", "bm25", "hybrid"):
            wide = [r.rel_path for r in idx.search("alpha beta gamma", k=10, mode=mode)]
            assert wide[:2] == ["long.md", "other.md"], (mode, wide)
            assert [r.rel_path for r in idx.search("alpha beta gamma", k=2, mode=mode)] == wide[:2], mode


@pytest.mark.slow
def test_the_first_results_do_not_depend_on_k_on_the_cncf_glossary(shared_data: Path, minilm: object) -> None:
    """The case reported: `search "how does a service mesh handle traffic" --tag security -k 4` gave
    nothing, and -k 20 mutual-transport-layer-security.md at 0.35 (the threshold ran after the cut)."""
    config = load_config({"index": "t" + os.urandom(4).hex(), "search.threshold": 0.3})  # 0.35: at the edge
    with Index(config, embedder=minilm) as idx:  # type: ignore[arg-type]
        idx.update([shared_data / "markdown_cncf_glossary"])
        for filters in ({"tags": ["security"]}, None):
            wide = idx.search("how does a service mesh handle traffic", k=20, filters=filters)
            assert wide
            for k in (1, 2, 4):
                got = idx.search("how does a service mesh handle traffic", k=k, filters=filters)
                assert [r.chunk_id for r in got] == [r.chunk_id for r in wide[:k]], (filters, k)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["faiss", "milvus"])
def test_the_first_results_do_not_depend_on_k_on_the_hugo_docs(backend: str, shared_data: Path, minilm: object) -> None:
    """Hybrid's first five results differed between k 5 and k 20 for most Hugo questions: each list was
    fetched 3 x 4k deep and min-max normalised over all of it, so k moved every fused score. The whole count
    (300 files, 90 questions): benchmarks/k_stable.py."""
    import json
    import shutil

    hugo = shared_data / "markdown_hugo_docs"
    qa = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "hugo_qa.jsonl"
    asked = [json.loads(line) for line in qa.read_text().splitlines()[:12]]
    # the pages that answer the questions, and more: some 600 chunks, so that each list is longer than the pool
    first = sorted(hugo.rglob("*.md"))[:50]
    picked = {p for q in asked for p in q["gold"]} | {p.relative_to(hugo).as_posix() for p in first}
    root = Path(os.environ["MDRAG_HOME"]).parent / "hugo"
    for rel in picked:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(hugo / rel, root / rel)
    config = load_config({"index": "t" + os.urandom(4).hex(), "store.backend": backend})
    with Index(config, embedder=minilm) as idx:  # type: ignore[arg-type]
        idx.update([root])
        full = 0  # hybrid lists of more than five results: the cut falls inside the fused list
        for mode in ("dense", "bm25", "hybrid"):
            for q in asked:
                wide = [r.chunk_id for r in idx.search(q["question"], k=20, mode=mode)]
                full += mode == "hybrid" and len(wide) > 5
                narrow = [r.chunk_id for r in idx.search(q["question"], k=5, mode=mode)]
                assert narrow == wide[:5], (backend, mode, q["id"])
        assert full >= 6, full


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_a_page_takes_at_most_its_places_and_carries_its_other_sections(
    tmp_path: Path, minilm: object, mode: str
) -> None:
    """search.per_page: one long page whose every section matches took most of the list; with 1 place each,
    its best section stands for it, its other matching sections ride with it, and other pages get the room."""
    from mdrag.retrieval.shown import result_fields

    root = tmp_path / "docs"
    root.mkdir()
    each = "## Gear ratio {0}\n\nThe gear ratio of stage {0} sets the bicycle's speed."
    sections = "\n\n".join(each.format(i) for i in range(5))
    (root / "gears.md").write_text(f"# Gears\n\n{sections}\n")
    (root / "chain.md").write_text("# Chain\n\nA worn chain slips on the gear teeth of a bicycle.\n")
    (root / "brakes.md").write_text("# Brakes\n\nBicycle brakes slow the wheel; the gear ratio does not matter.\n")
    overrides = {"index": "t" + os.urandom(4).hex(), "search.threshold": 0, "search.collapse": "section"}
    config = load_config({**overrides, "search.per_page": 0})
    with Index(config, embedder=minilm) as idx:  # type: ignore[arg-type]
        idx.update([root])
        query = "bicycle gear ratio"
        plain = idx.search(query, k=4, mode=mode)
        assert [r.rel_path for r in plain].count("gears.md") >= 3  # the long page fills the list
        assert all(not r.sections for r in plain)
        every = [r.chunk_id for r in idx.search(query, k=10, mode=mode) if r.rel_path == "gears.md"]
        assert len(every) == 5
        for places in (1, 2):
            idx.config = config.with_overrides({"search.per_page": places})
            got = idx.search(query, k=10, mode=mode)
            paths = [r.rel_path for r in got]
            assert paths.count("gears.md") == places and {"chain.md", "brakes.md"} <= set(paths), paths
            # the page's best sections take its places, in the order they had; the rest ride with its best one
            assert [r.chunk_id for r in got if r.rel_path == "gears.md"] == every[:places]
            best = next(r for r in got if r.rel_path == "gears.md")
            assert [s.chunk_id for s in best.sections] == every[places:]
            fields = result_fields(best)["sections"]
            assert [f["chunk_id"] for f in fields] == every[places:]
            assert fields[0]["heading_path"] and fields[0]["text"]
            narrow = idx.search(query, k=2, mode=mode)  # the first results do not depend on k
            assert [r.chunk_id for r in narrow] == [r.chunk_id for r in got[:2]]


def test_by_default_a_page_takes_one_place_and_the_command_line_names_its_other_sections(
    tmp_path: Path, mdrag_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default is one place per page: `mdrag search` lists each page once, and under a page's best section
    the other sections it matched ("more of this page: line N [heading]")."""
    from mdrag.frontends.cli import main

    monkeypatch.setattr("mdrag.index.Index.__init__.__defaults__", (None, HashEmbedder()))
    root = tmp_path / "docs"
    root.mkdir()
    each = "## Gear ratio {0}\n\nThe gear ratio of stage {0} sets the bicycle's speed."
    (root / "gears.md").write_text("# Gears\n\n" + "\n\n".join(each.format(i) for i in range(5)) + "\n")
    (root / "chain.md").write_text("# Chain\n\nA worn chain slips on the gear teeth of a bicycle.\n")
    assert load_config()["search.per_page"] == 1
    assert main(["index", str(root), "-q"]) == 0
    capsys.readouterr()
    assert main(["search", "gear ratio bicycle", "--threshold", "0", "--collapse", "section"]) == 0
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line[:3].strip().rstrip(".").isdigit()]
    assert sum("gears.md" in line for line in listed) == 1 and any("chain.md" in line for line in listed), out
    more = next(line for line in out.splitlines() if line.startswith("    more of this page: "))
    assert more.count("[Gears > Gear ratio") >= 2 and "line " in more, out
