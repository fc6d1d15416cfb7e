"""chunk.strategy langchain: md-qa's MarkdownTextSplitter chunks, end to end (the default store, real files)."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

import pytest

from mdrag.chunking import chunk_document
from mdrag.config import load_config
from mdrag.errors import ConfigError
from mdrag.frontends.cli import main
from mdrag.index import Index
from mdrag.ingest.manifest import Manifest
from mdrag.parsers import parse_file
from tests.conftest import HashEmbedder

WORDS = " ".join(f"word{i}" for i in range(90))  # 90 words, 619 characters: over a 50-token window


def _index(embedder: HashEmbedder, **overrides: object) -> Index:
    return Index(load_config({"index": "t" + os.urandom(4).hex(), **overrides}), embedder=embedder)


def _docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "short.md").write_text("# Short\n\nA few words about kittens.\n")
    # Two paragraphs of 619 characters: two chunks of 1000 (they do not fit together), both long.
    (root / "long.md").write_text(f"---\ntitle: Long\ntags: [a]\n---\n# Long\n\n{WORDS}\n\n## Second\n\n{WORDS} end\n")
    return root


def _lc_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "chunk.strategy langchain" in r.getMessage()]


def test_langchain_chunks_are_indexed_searched_and_cited(tmp_path: Path, shared_data: Path) -> None:
    """Real Hugo pages: chunks of at most 1000 characters sharing up to 200, with heading path, lines and ids."""
    src = shared_data / "markdown_hugo_docs" / "content" / "en"
    root = tmp_path / "hugo"
    for rel in ("content-management/front-matter.md", "templates/lookup-order.md", "getting-started/quick-start.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, root / rel)
    idx = _index(HashEmbedder(max_tokens=256), **{"chunk.strategy": "langchain"})
    headings = _index(HashEmbedder(max_tokens=256))
    s = idx.update([root])
    assert s.skipped == 0 and s.chunks_total > 10
    assert s.chunks_total != headings.update([root]).chunks_total

    page = root / "content-management/front-matter.md"
    chunks = chunk_document(parse_file(str(page), page.read_bytes()), str(root), "fm.md", idx.settings)
    lines = page.read_text().splitlines()
    assert all(len(c.text) <= 1000 for c in chunks)
    shared = [a.text[-40:] in b.text for a, b in zip(chunks, chunks[1:])]
    assert sum(shared) >= len(chunks) // 3, "neighbours overlap"
    assert any(c.text.startswith("## ") or "\n## " in c.text for c in chunks), "headings stay in the text"
    for c in chunks:
        assert c.heading_path and 0 <= c.level <= 6
        # The heading lines too: they are in the chunk's text, so they are in its line span.
        own = [ln.strip() for ln in c.text.splitlines() if ln.strip()]
        source = "\n".join(lines[c.line_start - 1 : c.line_end])
        assert own[0] in lines[c.line_start - 1] and own[-1] in lines[c.line_end - 1], c.position
        assert all(b in source for b in own)

    results = idx.search("fall back to the default sequence of dates", k=3, collapse="section")
    assert results and results[0].rel_path.endswith("front-matter.md")
    assert results[0].heading_path and results[0].line_start is not None
    only = idx.search("dates", k=10, threshold=0, filters={"path_prefix": "templates/"})
    assert only and all(r.rel_path.startswith("templates/") for r in only)


def test_a_langchain_chunk_that_starts_with_a_heading_starts_on_its_line(shared_data: Path) -> None:
    # Reported: container-orchestration.md gave 19-22 for the chunk "## How it helps ...", which starts on line 17.
    page = shared_data / "markdown_cncf_glossary" / "content" / "en" / "container-orchestration.md"
    lines = page.read_text(encoding="utf-8").splitlines()
    idx = _index(HashEmbedder(), **{"chunk.strategy": "langchain"})
    chunks = chunk_document(parse_file(page), str(page.parent), page.name, idx.settings)
    [helps] = [c for c in chunks if c.text.startswith("## How it helps")]
    assert (helps.line_start, helps.line_end) == (17, 22) and lines[16] == "## How it helps"
    # With smaller chunks, one ends with the heading "## Problem it addresses": its span ends on that line.
    idx = _index(HashEmbedder(), **{"chunk.strategy": "langchain", "chunk.size": 300, "chunk.overlap": 0})
    chunks = chunk_document(parse_file(page), str(page.parent), page.name, idx.settings)
    [ends] = [c for c in chunks if c.text.endswith("## Problem it addresses")]
    assert lines[ends.line_end - 1] == "## Problem it addresses"


@pytest.mark.parametrize("strategy", ["headings", "langchain"])
def test_search_cites_text_before_the_first_heading_under_the_title(
    tmp_path: Path, shared_data: Path, strategy: str
) -> None:
    """CNCF glossary: the answer to "what is X" is its intro, which search showed with heading ''."""
    src = shared_data / "markdown_cncf_glossary" / "content" / "en"
    root = tmp_path / "glossary"
    root.mkdir()
    for name in ("container-orchestration.md", "serverless.md", "service-mesh.md"):
        shutil.copy(src / name, root / name)
    idx = _index(HashEmbedder(max_tokens=256), **{"chunk.strategy": strategy})
    idx.update([root])
    for mode in ("dense", "bm25", "hybrid"):
        [hit] = idx.search("serverless computing abstracts servers away from the user", k=1, mode=mode)
        assert hit.rel_path == "serverless.md" and hit.line_start == 9, mode
        assert hit.heading_path == ["Serverless"] and hit.to_dict()["heading"] == "Serverless", mode


def test_an_index_chunked_by_the_release_before_is_chunked_again(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Intro headings and overlaps changed what a file's chunks are: old rows are replaced, not mixed in."""
    from mdrag.chunking import build, headings
    from mdrag.ingest import plan

    root = tmp_path / "docs"
    root.mkdir()
    shutil.copy(shared_data / "markdown_hugo_docs" / "content" / "en" / "content-management" / "front-matter.md", root)
    shutil.copy(shared_data / "markdown_cncf_glossary" / "content" / "en" / "container-orchestration.md", root)
    # The release before: no title over the intro, overlap kept whole, and its chunk format.
    with monkeypatch.context() as old:
        old.setattr(build, "_heading_path", lambda doc, section: list(section.heading_path))
        old.setattr(headings, "_trim_overlaps", lambda pieces, texts: pieces)
        old.setattr(plan, "CHUNK_FORMAT", plan.CHUNK_FORMAT - 1)
        idx = _index(HashEmbedder(max_tokens=256))
        idx.update([root])
        assert [] in _headings(idx), "the old chunking: the intros have no heading"
    s = idx.update([root])
    assert s.rebuild == "this release of mdrag parses and chunks files differently"
    emb = HashEmbedder(max_tokens=256)
    now = [
        c
        for p in sorted(root.iterdir())
        for c in chunk_document(parse_file(p), str(root), p.name, idx.settings, emb.count_tokens, 256)
    ]
    assert idx.store.all_ids() == {c.id for c in now}
    assert sorted(_headings(idx)) == sorted(c.heading_path for c in now), "every row is of the new chunking"
    assert ["Container Orchestration"] in _headings(idx) and [] not in _headings(idx)


def _headings(idx: Index) -> list[list[str]]:
    """The heading path of every row of the index."""
    idx.config = idx.config.with_overrides({"search.per_page": 0})  # every row: a file's rows each take a place
    hits = idx.search("front matter", k=1000, threshold=0, mode="dense", collapse="none")
    assert len(hits) == idx.store.count()
    return [h.heading_path for h in hits]


def test_one_warning_per_run_counts_the_chunks_the_model_truncates(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _docs(tmp_path)
    idx = _index(HashEmbedder(max_tokens=50), **{"chunk.strategy": "langchain"})
    with caplog.at_level(logging.WARNING):
        s = idx.update([root])
    assert s.chunks_total == 3  # short.md: 1; long.md: 2, the second starting at "## Second" (overlap)
    assert _lc_warnings(caplog) == [s.warnings[-1]]
    assert "2 of the 3 chunks" in s.warnings[-1] and "(50 tokens)" in s.warnings[-1]

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert not idx.update([root]).warnings  # nothing chunked: nothing to say
    assert not _lc_warnings(caplog)
    (root / "long.md").write_text(f"# Long\n\n{WORDS} more\n")
    with caplog.at_level(logging.WARNING):
        idx.update([root])
    assert len(_lc_warnings(caplog)) == 1 and "1 of the 1 chunks" in _lc_warnings(caplog)[0]

    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the headings strategy fits chunks to the window: no warning
        _index(HashEmbedder(max_tokens=50)).update([root])
    assert not _lc_warnings(caplog)


def test_switching_the_strategy_chunks_again(tmp_path: Path) -> None:
    root = _docs(tmp_path)
    emb = HashEmbedder()
    name = "t" + os.urandom(4).hex()
    headings = Index(load_config({"index": name}), embedder=emb)
    first = headings.update([root])
    first_ids = headings.store.all_ids()
    lc = Index(load_config({"index": name, "chunk.strategy": "langchain"}), embedder=emb)
    s = lc.update([root])
    assert s.rebuild == "chunk settings changed" and s.added == 2
    m = Manifest.load(lc.manifest_path)
    assert m is not None and m.chunking["strategy"] == "langchain"
    assert lc.store.count() == s.chunks_total == 3 and not lc.store.all_ids() & first_ids
    assert lc.update([root]).rebuild is None
    assert Index(load_config({"index": name}), embedder=emb).update([root]).rebuild is None, "unset: the index's"
    back = Index(load_config({"index": name, "chunk.strategy": "headings"}), embedder=emb)
    s = back.update([root])
    assert s.rebuild == "chunk settings changed" and s.chunks_total == first.chunks_total
    assert back.store.all_ids() == first_ids
    m = Manifest.load(back.manifest_path)
    assert m is not None and "strategy" not in m.chunking  # as before the setting: older indexes are kept


def test_tokens_unit_sizes_langchain_chunks_in_model_tokens(tmp_path: Path) -> None:
    root = _docs(tmp_path)
    emb = HashEmbedder(max_tokens=64)
    idx = _index(emb, **{"chunk.strategy": "langchain", "chunk.unit": "tokens", "chunk.size": 60, "chunk.overlap": 10})
    page = root / "long.md"
    chunks = chunk_document(
        parse_file(str(page), page.read_bytes()), str(root), "long.md", idx.settings, emb.count_tokens
    )
    words = [len(c.text.split()) for c in chunks]  # the HashEmbedder counts words (+2 for [CLS] and [SEP])
    assert len(chunks) >= 4 and max(words) == 60, words  # in characters, 60 would hold 8 words
    assert idx.update([root]).chunks_total == len(chunks) + 1


def test_a_bad_strategy_or_a_missing_package_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError, match="chunk.strategy must be one of headings, langchain"):
        load_config({"chunk.strategy": "semantic"})
    monkeypatch.setitem(sys.modules, "langchain_text_splitters", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r"pip install 'mdrag-docs\[langchain\]'"):
        _index(HashEmbedder(), **{"chunk.strategy": "langchain"})
    assert _index(HashEmbedder()).settings.strategy == "headings"  # the default needs no package

    root = _docs(tmp_path)
    (tmp_path / "mdrag-home" / "config.yaml").write_text("chunk:\n  strategy: langchain\n")
    code = main(["index", str(root)])
    err = capsys.readouterr().err
    assert code != 0 and "pip install 'mdrag-docs[langchain]'" in err
    assert not (tmp_path / "mdrag-home" / "cache" / "manifests").exists(), "nothing was written"


@pytest.mark.slow
def test_the_cli_with_minilm_warns_with_the_chunks_it_truncates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Real model, real command: 900 characters of hex ids are far over 256 word pieces; a sentence is not."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "ids.md").write_text("# Ids\n\n" + " ".join(os.urandom(4).hex() for _ in range(100)) + "\n")
    (root / "cats.md").write_text("# Cats\n\nCats sleep most of the day.\n")
    (tmp_path / "mdrag-home" / "config.yaml").write_text("chunk:\n  strategy: langchain\n")
    with caplog.at_level(logging.WARNING):
        assert main(["index", str(root)]) == 0
    [warning] = _lc_warnings(caplog)
    assert "1 of the 2 chunks made in this run are longer than the embedding model reads (256 tokens)" in warning
    assert main(["search", "how long do cats sleep", "--json"]) == 0
    assert '"cats.md"' in capsys.readouterr().out
