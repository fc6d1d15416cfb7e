"""The incremental indexer on the default store (FAISS for a new index), with a
small deterministic embedder that counts what it embeds; the incremental and
repair tests on a Milvus Lite file and a Milvus server too, and Milvus's own
mechanics (segments, flushes, a collection shared by homes) on Milvus."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.ingest.manifest import Manifest
from tests.conftest import HashEmbedder

DOC = """---
title: Install guide
tags: [setup, linux]
---
# Install

Download the archive and unpack it.

## Linux

Use the package manager: `apt install tool`.

## Windows

Run the installer and follow the steps.
"""


def _index(embedder: HashEmbedder, uri: str | None = None, **overrides) -> Index:
    o = {"index": "t" + os.urandom(4).hex(), **overrides}
    if uri:
        o["milvus_uri"] = uri
    return Index(load_config(o), embedder=embedder)


def _corpus(tmp_path: Path, n: int = 5) -> Path:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "install.md").write_text(DOC)
    for i in range(n):
        (root / "sub" / f"page{i}.md").write_text(f"# Page {i}\n\nTopic {i} words here.\n\n## Details\n\nMore {i}.\n")
    return root


#: The incremental and repair tests run on both store backends.
both_backends = pytest.mark.parametrize("backend", ["milvus", "faiss"])
#: Tests of Milvus's own mechanics (segments, flushes, its client, one collection shared by homes).
MILVUS = {"store.backend": "milvus"}


@pytest.fixture(params=["lite", "server", "faiss"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Settings for a Milvus Lite file, a Milvus server, or the FAISS store."""
    if request.param == "faiss":
        return {"store.backend": "faiss"}
    if request.param == "lite":
        return {"store.backend": "milvus", "milvus_uri": str(tmp_path / "store" / "milvus.db")}
    return {"milvus_uri": str(request.getfixturevalue("milvus_server"))}


def _consistent(idx: Index) -> None:
    """No orphan and no missing chunk: store ids == manifest ids."""

    m = Manifest.load(idx.manifest_path)
    assert m is not None and not m.dirty
    assert idx.store.all_ids() == m.chunk_ids()
    assert idx.store.count() == m.chunk_count


@pytest.mark.slow
def test_incremental_runs_embed_only_what_changed(tmp_path: Path, engine: dict[str, str]) -> None:
    root = _corpus(tmp_path)
    emb = HashEmbedder()
    idx = _index(emb, **engine)
    s = idx.update([root])
    assert (s.added, s.modified, s.deleted, s.skipped) == (6, 0, 0, 0)
    assert s.chunks_embedded == s.chunks_total > 6
    _consistent(idx)

    s = idx.update([root])  # nothing changed
    assert (s.added, s.modified, s.unchanged, s.chunks_embedded) == (0, 0, 6, 0)

    f = root / "install.md"
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 10**9))  # touched, same content
    s = idx.update([root])
    assert s.chunks_embedded == 0 and s.unchanged == 6 and s.touched == 1 and s.modified == 0

    f.write_text(DOC.replace("Run the installer and follow the steps.", "Double-click setup.exe."))
    n_before = len(emb.embedded)
    s = idx.update([root])
    assert s.modified == 1 and s.chunks_embedded == 1, "only the edited section is embedded"
    assert "setup.exe" in emb.embedded[n_before]
    assert idx.search("setup.exe double-click", k=1, threshold=0)[0].heading_path == ["Install", "Windows"]
    _consistent(idx)

    (root / "sub" / "page3.md").unlink()
    s = idx.update([root])
    assert s.deleted == 1 and s.chunks_embedded == 0
    assert not [r for r in idx.search("Topic 3 words", k=50, threshold=0) if r.rel_path == "sub/page3.md"]
    _consistent(idx)
    idx.close()


@pytest.mark.slow
@both_backends
def test_moved_file_reuses_its_vectors(tmp_path: Path, backend: str) -> None:
    root = _corpus(tmp_path)
    emb = HashEmbedder()
    idx = _index(emb, **{"store.backend": backend})
    idx.update([root])
    (root / "sub" / "page1.md").rename(root / "page1-moved.md")
    s = idx.update([root])
    assert (s.added, s.deleted, s.chunks_embedded) == (1, 1, 0)
    assert s.chunks_reused > 0
    _consistent(idx)


def test_a_build_from_empty_looks_up_only_the_texts_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty store has nothing to reuse: no lookups but for texts repeated across batches."""
    import mdrag.ingest.pipeline

    root = _corpus(tmp_path)
    # the same texts in another file (not the same bytes: a copy of a file is not chunked, mdrag.ingest.copies)
    (root / "copy.md").write_text((root / "install.md").read_text() + "\n")
    monkeypatch.setattr(mdrag.ingest.pipeline, "_BATCH_CHUNKS", 1)  # a batch per file: the copy comes later
    with _index(HashEmbedder()) as idx:
        looked_up: list[list[str]] = []
        real = idx.store.vectors_by_hash
        idx.store.vectors_by_hash = lambda hashes: (looked_up.append(list(hashes)), real(hashes))[1]  # type: ignore[method-assign]
        s = idx.update([root])
        assert s.rebuild == "new index"
        install = s.chunks_total - s.chunks_embedded  # the second copy's chunks: vectors from the store
        assert install > 0 and s.chunks_reused == install
        asked = [h for hashes in looked_up for h in hashes]
        assert len(asked) == install, "only the copied texts, which the run had written, were looked up"
        _consistent(idx)
        # a later run on the same (now full) store looks every new text up, as before
        (root / "new.md").write_text("# New\n\nFresh words.\n")
        looked_up.clear()
        assert idx.update([root]).chunks_embedded == 1 and sum(map(len, looked_up)) == 1


def test_several_folders_one_index_and_bad_folders_warn(tmp_path: Path) -> None:
    a = _corpus(tmp_path / "a", 2)
    b = _corpus(tmp_path / "b", 3)
    (tmp_path / "empty").mkdir()
    idx = _index(HashEmbedder())
    s = idx.update([a, b, tmp_path / "missing", tmp_path / "empty"])
    assert s.added == 3 + 4
    assert any("missing" in w and "does not exist" in w for w in s.warnings)
    assert any("empty" in w and "no supported files" in w for w in s.warnings)
    roots = {r.path.split("/docs/")[0] for r in idx.search("Topic words", k=50, threshold=0)}
    assert roots == {str(tmp_path / "a"), str(tmp_path / "b")}
    _consistent(idx)


def test_unparsable_files_are_skipped_and_the_run_goes_on(tmp_path: Path, caplog) -> None:
    root = _corpus(tmp_path, 2)
    (root / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    (root / "broken.docx").write_bytes(b"not a zip file")
    idx = _index(HashEmbedder())
    s = idx.update([root])
    assert s.added == 3 and s.skipped == 2
    assert {Path(p).name for p, _ in s.skipped_files} == {"broken.pdf", "broken.docx"}
    assert all(reason for _, reason in s.skipped_files)
    assert "broken.pdf" in caplog.text
    # still skipped, not lost, on the next run; fixed files are picked up
    s = idx.update([root])
    assert s.skipped == 2 and s.chunks_embedded == 0
    _consistent(idx)


@both_backends
def test_corrupt_manifest_falls_back_to_a_rebuild_without_duplicates(tmp_path: Path, backend: str) -> None:
    root = _corpus(tmp_path)
    emb = HashEmbedder()
    idx = _index(emb, **{"store.backend": backend})
    first = idx.update([root])
    idx.manifest_path.write_text("{ not json")
    s = idx.update([root])
    assert s.rebuild == "manifest unreadable"
    assert s.chunks_embedded == 0 and s.chunks_reused == first.chunks_total, "vectors come from the store"
    assert s.chunks_total == first.chunks_total
    _consistent(idx)
    idx.manifest_path.unlink()
    s = idx.update([root])
    assert s.rebuild == "no manifest" and s.chunks_total == first.chunks_total
    _consistent(idx)


def test_chunk_settings_change_rechunks_everything(tmp_path: Path) -> None:
    root = _corpus(tmp_path)
    emb = HashEmbedder()
    idx = _index(emb)
    idx.update([root])
    idx2 = Index(idx.config.with_overrides({"chunk.size": 60, "chunk.overlap": 10}), embedder=emb)
    s = idx2.update([root])
    assert s.rebuild == "chunk settings changed" and s.added == 6 and s.chunks_embedded == 0
    _consistent(idx2)


def test_an_index_chunked_by_an_older_release_is_chunked_again(tmp_path: Path) -> None:
    root = _corpus(tmp_path)
    emb = HashEmbedder()
    idx = _index(emb)
    first = idx.update([root])
    m = Manifest.load(idx.manifest_path)
    assert m is not None
    del m.chunking["format"]  # as a release before the format was recorded wrote it
    m.save(idx.manifest_path)
    s = idx.update([root])
    assert s.rebuild == "this release of mdrag parses and chunks files differently"
    assert s.added == 6 and s.chunks_embedded == 0 and s.chunks_total == first.chunks_total
    assert idx.update([root]).rebuild is None  # recorded: the next run has nothing to do
    _consistent(idx)


def test_model_change_rebuilds_and_search_with_the_old_model_is_refused(tmp_path: Path) -> None:
    from mdrag.errors import ModelMismatchError

    root = _corpus(tmp_path)
    idx = _index(HashEmbedder())
    idx.update([root])
    idx.close()
    other = HashEmbedder(dim=32)
    other.model_id = "test:hash-32"
    idx2 = Index(idx.config, embedder=other)
    s = idx2.update([root])
    assert s.rebuild and "model changed" in s.rebuild
    assert s.chunks_embedded == s.chunks_total
    idx2.close()
    with pytest.raises(ModelMismatchError, match="mdrag index --rebuild"):
        Index(idx.config, embedder=HashEmbedder()).search("install")


@both_backends
def test_store_emptied_behind_the_manifest_is_repaired(tmp_path: Path, backend: str) -> None:
    root = _corpus(tmp_path)
    idx = _index(HashEmbedder(), **{"store.backend": backend})
    first = idx.update([root])
    idx.store.delete_ids(list(idx.store.all_ids())[:3])
    s = idx.update([root])
    assert s.repaired and s.chunks_total == first.chunks_total
    _consistent(idx)


def test_a_run_with_nothing_to_do_does_not_open_the_store_unless_it_changed(tmp_path: Path) -> None:
    root = _corpus(tmp_path)
    emb = HashEmbedder()
    with _index(emb, **MILVUS) as idx:
        first = idx.update([root])
        config = idx.config
    with Index(config, embedder=emb) as idx:  # nothing changed: answered from the manifest
        s = idx.update([root])
        assert (s.unchanged, s.chunks_total, s.chunks_embedded) == (6, first.chunks_total, 0)
        assert idx.store._client is None, "the store was not opened"
    (root / "sub" / "page1.md").write_text("# Page 1\n\nNew words.\n")
    with Index(config, embedder=emb) as idx:
        counts = []
        real = idx.store.count
        idx.store.count = lambda roots=None: (counts.append(roots), real(roots))[1]  # type: ignore[method-assign]
        s = idx.update([root])
        assert s.modified == 1 and idx.store._client is not None
        assert counts == [], "the store's files are as the last run left them: its rows are not counted"
        total = s.chunks_total
    # Another program deletes chunks behind mdrag's back: the store's files change,
    # so the next run opens it, sees the gap and repairs it.
    with Index(config, embedder=emb) as idx:
        idx.store.open(create=False)
        idx.store.delete_ids(sorted(idx.store.all_ids())[:3])
    with Index(config, embedder=emb) as idx:
        s = idx.update([root])
        assert s.repaired and s.chunks_total == total
        _consistent(idx)


def test_indexers_of_different_folders_can_share_one_index(tmp_path: Path) -> None:
    """Parallel indexers, one per folder, write one collection: none repairs away the others' chunks."""

    a, b = _corpus(tmp_path / "a"), _corpus(tmp_path / "b", n=2)
    emb = HashEmbedder()
    with _index(emb, **MILVUS) as first:  # one Milvus collection; a FAISS store is its home's own
        config = first.config
        sa = first.update([a])
    home_b = tmp_path / "home_b"  # the second indexer keeps its own manifest
    config_b = config.with_overrides({"milvus_uri": config.effective("milvus_uri")})
    config_b.home = home_b
    with Index(config_b, embedder=emb) as second:
        sb = second.update([b])
        assert not sb.repaired, "the first indexer's chunks are not a disagreement"
        # the second indexer is interrupted: its next run repairs its own folder only
        m = Manifest.load(second.manifest_path)
        assert m is not None
        m.dirty = True
        m.save(second.manifest_path)
        s = second.update([b])
        assert s.repaired and s.chunks_total == sb.chunks_total
        assert second.store.count() == sa.chunks_total + sb.chunks_total
        paths = {r.path for r in second.search("Topic words", k=50, threshold=0)}
        assert any(p.startswith(str(a)) for p in paths) and any(p.startswith(str(b)) for p in paths)
    with Index(config, embedder=emb) as first:
        assert not first.update([a]).repaired
        first._open(create=False)  # a run that finds nothing to do need not have opened it
        m = Manifest.load(first.manifest_path)
        assert m is not None and first.store.all_ids(roots=[str(a)]) == m.chunk_ids()


def test_shared_corpus_formats_parse_or_skip(tmp_path: Path, shared_data: Path) -> None:
    """Every PDF, DOCX and HTML file under shared data is indexed or skipped with a reason."""
    root = tmp_path / "mixed"
    root.mkdir()
    picks = [
        *sorted((shared_data / "pdf_py-pdf_sample-files").rglob("*.pdf"))[:12],
        *sorted((shared_data / "docx_mammoth").rglob("*.docx"))[:8],
        *sorted((shared_data / "html_readability_pages").rglob("source.html"))[:8],
    ]
    for i, p in enumerate(picks):
        shutil.copy(p, root / f"{i:02d}-{p.parent.name}-{p.name}")
    idx = _index(HashEmbedder())
    s = idx.update([root])
    assert s.added + s.skipped == len(picks)
    assert all(reason for _, reason in s.skipped_files)
    pages = [r.page for r in idx.search("the", k=100, threshold=0) if r.path.endswith(".pdf")]
    assert pages and all(isinstance(p, int) and p >= 1 for p in pages)
    _consistent(idx)


def test_summary_is_json_serializable(tmp_path: Path) -> None:
    idx = _index(HashEmbedder())
    s = idx.update([_corpus(tmp_path, 1)])
    assert json.loads(json.dumps(s.to_dict()))["added"] == 2


@both_backends
def test_searches_during_an_update_see_the_old_or_the_new_state_never_a_mix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    import threading

    import mdrag.ingest.pipeline

    root = tmp_path / "docs"
    root.mkdir()
    for i in range(30):
        (root / f"f{i}.md").write_text(f"# File {i}\n\nversion one of marker text number {i}\n")

    class Slow(HashEmbedder):
        def embed_batch(self, texts):
            time.sleep(0.05)
            return super().embed_batch(texts)

    idx = _index(Slow(), **{"store.backend": backend})
    idx.update([root])
    for i in range(30):
        (root / f"f{i}.md").write_text(f"# File {i}\n\nversion two of marker text number {i}\n")
    monkeypatch.setattr(mdrag.ingest.pipeline, "_BATCH_CHUNKS", 3)  # many small writes
    done = threading.Event()
    seen: list[tuple[int, int]] = []

    def search_loop() -> None:
        while not done.is_set():
            hits = idx.search("marker text number version", k=100, threshold=0)
            seen.append((sum("version one" in h.text for h in hits), sum("version two" in h.text for h in hits)))

    t = threading.Thread(target=search_loop)
    t.start()
    try:
        s = idx.update([root])
    finally:
        done.set()
        t.join()
    assert s.modified == 30
    assert len(seen) >= 3
    assert set(seen) <= {(30, 0), (0, 30)}, f"mixed states seen: {sorted(set(seen))}"
    assert idx.search("marker text number version", k=100, threshold=0)[0].text.startswith("version two")
    _consistent(idx)


def test_collapse_keeps_the_best_chunk_per_section_or_file(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    long = "\n\n".join(f"Paragraph {i} about widgets and gadgets, part {i}." * 8 for i in range(12))
    (root / "big.md").write_text(f"# Big\n\n## Widgets\n\n{long}\n\n## Gadgets\n\nGadgets and widgets together.\n")
    (root / "small.md").write_text("# Small\n\nA short note on widgets and gadgets.\n")
    idx = _index(HashEmbedder(), **{"search.per_page": 0})  # the sections of one file, each a place
    idx.update([root])
    q = "widgets and gadgets"
    plain = idx.search(q, k=10, threshold=0, collapse="none")
    assert sum(r.heading_path == ["Big", "Widgets"] for r in plain) > 2, "one long section fills the list"
    sections = idx.search(q, k=10, threshold=0, collapse="section")
    keys = [(r.path, tuple(r.heading_path)) for r in sections]
    assert len(keys) == len(set(keys)) == 3
    files = idx.search(q, k=10, threshold=0, collapse="file")
    assert sorted(r.rel_path for r in files) == ["big.md", "small.md"]
    # passage: more than one passage of the long section, none sharing or touching another's lines
    passages = idx.search(q, k=10, threshold=0, collapse="passage")
    widgets = sorted((r.line_start, r.line_end) for r in passages if r.heading_path == ["Big", "Widgets"])
    assert len(widgets) > 1, "the other passages of a long section are kept"
    assert all(b[0] > a[1] + 1 for a, b in zip(widgets, widgets[1:])), widgets
    every = sorted((r.line_start, r.line_end) for r in plain if r.heading_path == ["Big", "Widgets"])
    assert any(b[0] <= a[1] + 1 for a, b in zip(every, every[1:])), "neighbours that touch, left out by passage"
    # auto (the default): passages for a query of a few words, one result per section for a longer question
    assert idx.config["search.collapse"] == "auto"
    assert [r.chunk_id for r in idx.search(q, k=10, threshold=0)] == [r.chunk_id for r in passages]
    question = "which widgets and gadgets does the big page describe in its long section"
    by_section = idx.search(question, k=10, threshold=0, collapse="section")
    assert [r.chunk_id for r in idx.search(question, k=10, threshold=0)] == [r.chunk_id for r in by_section]
    assert len(by_section) < len(idx.search(question, k=10, threshold=0, collapse="passage"))


def test_passage_collapse_of_an_html_page_goes_by_the_lines_of_its_text(tmp_path: Path) -> None:
    """HTML chunks carry the lines of the text mdrag reads from the page (mdrag.parsers.written): collapse
    passage leaves out a kept chunk's neighbours (lines that overlap or touch) and keeps the rest of a long
    section, as it does for Markdown."""
    root = tmp_path / "site"
    root.mkdir()
    paras = "".join(
        f"<p>Paragraph {i} about widgets and gadgets, part {i}. {'More words here. ' * 12}</p>" for i in range(14)
    )
    (root / "page.html").write_text(f"<html><body><main><h1>Page</h1><h2>Widgets</h2>{paras}</main></body></html>")
    idx = _index(HashEmbedder(), **{"search.per_page": 0})  # the sections of one file, each a place
    idx.update([root])
    q = "widgets and gadgets"
    plain = idx.search(q, k=20, threshold=0, collapse="none")
    passages = idx.search(q, k=20, threshold=0, collapse="passage")
    assert all(r.line_start and r.line_end for r in plain) and len(plain) > 4
    assert 1 < len(passages) < len(plain) < 20, "every chunk of the page is in plain"
    spans = sorted((r.line_start or 0, r.line_end or 0) for r in passages)
    assert all(b[0] > a[1] + 1 for a, b in zip(spans, spans[1:])), spans


def test_a_pdf_gives_a_result_per_outline_section_and_page(shared_data: Path, hash_embedder: HashEmbedder) -> None:
    """PDF pages had no headings, so the default collapse kept one result per PDF.

    Now outline entries are sections and a page outside them is one; the page
    of every hit is the page its text is on.
    """
    from pypdf import PdfReader

    root = shared_data / "pdf_py-pdf_sample-files/009-pdflatex-geotopo"
    idx = _index(hash_embedder, **{"search.per_page": 0})  # one PDF: its sections, each a place
    idx.update([root])
    hits = idx.search("Fundamentalgruppe", k=10, threshold=0, collapse="section")
    keys = [tuple(h.heading_path) or h.page for h in hits]
    assert len(hits) >= 4 and len(set(keys)) == len(hits), keys  # before: 1, the whole PDF was one section
    assert ("3 Fundamentalgruppe und Überlagerungen", "3.2 Fundamentalgruppe") in keys
    assert 4 in keys, "the contents page (before the first outline entry) is a section of its own"
    pages = PdfReader(root / "GeoTopo-komprimiert.pdf").pages
    for h in hits:  # the words of a hit are on its page (a chunk cut inside a formula may split one: in a
        # short chunk, two formula pieces the page's text spaces otherwise are more than 5%)
        assert h.page is not None
        words = h.text.split()
        on_page = set(pages[h.page - 1].extract_text().split())
        assert sum(w in on_page for w in words) >= min(0.95 * len(words), len(words) - 2), h.page
    idx.close()


def test_one_flush_per_run(tmp_path: Path, hash_embedder: HashEmbedder) -> None:
    """Every flush seals a segment: a run of many batches flushes once."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(60):  # well over one batch of chunks
        body = "\n\n".join(f"## Part {j}\n\nFile {i} part {j} " + "text " * 150 for j in range(12))
        (root / f"f{i}.md").write_text(f"# File {i}\n\n{body}\n")
    with _index(hash_embedder, **MILVUS) as idx:
        flushes = []
        real = idx.store.flush
        idx.store.flush = lambda: (flushes.append(1), real())[1]  # type: ignore[method-assign]
        s = idx.update([root])
        assert s.chunks_embedded > 512 and len(flushes) == 1
        _consistent(idx)


def test_lite_small_updates_get_the_bm25_scores_of_a_fresh_build(tmp_path: Path, hash_embedder: HashEmbedder) -> None:
    """Milvus Lite keeps BM25 statistics per segment: a small update's segment is
    padded with a sample of the index, and once small updates add up to a tenth
    of the index it is written again whole; either way scores match a clean build."""

    def bm25(idx: Index) -> dict[str, float | None]:
        return {r.rel_path: r.rank_score for r in idx.search("quokka mode", k=30, threshold=0)}

    def fresh() -> dict[str, float | None]:
        with _index(hash_embedder, **MILVUS, **{"search.mode": "bm25"}) as f:
            f.update([root])
            return bm25(f)

    root = _corpus(tmp_path, n=20)
    with _index(hash_embedder, **MILVUS, **{"search.mode": "bm25"}) as idx:
        idx.update([root])
        assert idx.store.per_segment_bm25
        total = idx.store.count()
        for i in range(20):
            (root / f"new{i}.md").write_text(f"# New {i}\n\nThe zanzibar{i} option sets quokka mode.\n")
            idx.update([root])
            if i == 0:  # one small update: padded, not rewritten
                assert idx.store.rows_since_rewrite() == 1
                assert bm25(idx) == pytest.approx(fresh(), rel=1e-4)
            if idx.store.rows_since_rewrite() == 0:
                break
        else:
            pytest.fail("small updates never triggered a rewrite")
        assert i + 1 >= 0.1 * total  # not before a tenth of the index was written by small updates
        _consistent(idx)
        got = bm25(idx)
    want = fresh()
    assert got.keys() == want.keys() and len(got) == i + 1
    assert got == pytest.approx(want, rel=1e-4)


def test_parse_ahead_keeps_order_raises_errors_and_stops_early() -> None:
    import threading

    from mdrag.ingest.background import ahead

    seen: list[int] = []
    out = list(ahead(list(range(200)), lambda i: (seen.append(i), i * i)[1], depth=4))
    assert out == [(i, i * i) for i in range(200)]

    def boom(i: int) -> int:
        if i == 7:
            raise ValueError("bad file 7")
        return i

    got = []
    with pytest.raises(ValueError, match="bad file 7"):
        for item, _ in ahead(list(range(20)), boom, depth=2):
            got.append(item)
    assert got == list(range(7))

    calls: list[int] = []
    gen = ahead(list(range(1000)), lambda i: calls.append(i) or i, depth=3)
    assert next(gen) == (0, 0)
    gen.close()  # the consumer stops: the thread stops too, without parsing the rest
    assert len(calls) < 10
    assert not any(t.name == "mdrag-parse" for t in threading.enumerate())


def test_the_model_loads_while_files_are_parsed_and_never_for_a_run_with_nothing_to_do(tmp_path: Path) -> None:
    class Loading(HashEmbedder):
        def __init__(self, fail: bool) -> None:
            super().__init__()
            self.fail, self.loads, self.loaded_before_embedding = fail, 0, []

        def warm_up(self) -> None:
            self.loads += 1
            if self.fail:
                raise RuntimeError("the model cannot be loaded ahead")

        def embed_batch(self, texts):
            self.loaded_before_embedding.append(self.loads > 0)
            return super().embed_batch(texts)

    root = _corpus(tmp_path)
    emb = Loading(fail=False)
    idx = _index(emb)
    idx.update([root])
    assert emb.loads == 1 and emb.loaded_before_embedding and all(emb.loaded_before_embedding)
    assert idx.update([root]).chunks_embedded == 0
    assert emb.loads == 1  # nothing to parse: no model loaded
    (root / "install.md").write_text(DOC + "\n## Mac\n\nDrag the app to Applications.\n")
    idx.update([root])
    assert emb.loads == 2
    idx.close()

    failing = Loading(fail=True)  # a failed warm-up is not the run's failure: the first batch embeds as usual
    idx = _index(failing)
    s = idx.update([_corpus(tmp_path / "other")])
    assert failing.loads == 1 and s.chunks_embedded > 0 and s.skipped == 0
    assert idx.search("package manager apt", k=1, threshold=0)[0].rel_path == "install.md"
    idx.close()


def test_progress_is_told_as_files_are_read_and_as_each_embedding_batch_returns(tmp_path: Path) -> None:
    """Progress moves through a run, not once per write round: every file read, every batch of the embedder
    (here 3 texts, in rounds of 512 chunks). The counts only grow and end at the run's totals; a file that
    is skipped is done too; a run that reuses every vector still ends at its totals."""
    from mdrag.ingest.progress import IndexProgress

    root = _corpus(tmp_path, n=40)
    (root / "broken.pdf").write_bytes(b"not a pdf")
    emb = HashEmbedder()
    emb.batch_size = 3
    events: list[IndexProgress] = []
    idx = _index(emb)
    s = idx.update([root], progress=events.append)
    assert s.chunks_embedded == s.chunks_total > 3 * emb.batch_size and s.skipped == 1

    embedding = [e.chunks_done for e in events if e.stage == "embedding"]
    assert len(set(embedding)) >= s.chunks_embedded / emb.batch_size, "told as each batch of the embedder returns"
    files = s.added + s.skipped
    assert {e.files_read for e in events} == set(range(files + 1)), "told as each file is read"
    for before, after in zip(events, events[1:]):
        for count in ("files_done", "files_read", "chunks_done", "chunks_known"):
            assert getattr(after, count) >= getattr(before, count), (count, before, after)
        assert after.chunks_done <= after.chunks_known and after.files_done <= after.files_read
    first, last = events[0], events[-1]
    assert (first.stage, first.files_done, first.chunks_done) == ("reading", 0, 0)
    assert last.stage == "saving" and last.files_done == last.files_read == last.files_total == files
    assert last.chunks_done == last.chunks_known == s.chunks_total
    assert first.chunks_expected == 0 and last.chunks_expected == s.chunks_total  # no estimate, then the count
    assert all(e.chunks_expected >= e.chunks_known for e in events)

    (root / "install.md").write_text(DOC.replace("Download", "Fetch"))
    events.clear()
    s = idx.update([root], progress=events.append)
    m = Manifest.load(idx.manifest_path)
    assert m is not None and s.modified == 1 and s.chunks_embedded == 1
    last = events[-1]
    assert last.files_done == last.files_total == s.modified + s.skipped  # the skipped file: reported again
    assert last.chunks_done == last.chunks_known == len(m.files[str((root / "install.md").resolve())].chunks) > 1
    idx.close()


def test_the_bar_shows_the_estimate_until_every_file_is_read() -> None:
    from mdrag.frontends.cli.indexing import _chunks_in_all
    from mdrag.ingest.progress import IndexProgress

    assert _chunks_in_all(IndexProgress("reading", 0, 100, 0, 0, 0, 0)) == (0, True)  # nothing to go by yet
    assert _chunks_in_all(IndexProgress("embedding", 0, 100, 20, 30, 150, 750)) == (750, True)  # the estimate
    assert _chunks_in_all(IndexProgress("embedding", 90, 100, 100, 700, 731, 731)) == (731, False)
    assert _chunks_in_all(IndexProgress("saving", 40, 100, 40, 300, 300, 750)) == (750, True)  # a step paused
    assert _chunks_in_all(IndexProgress("saving", 100, 100, 100, 731, 731, 731)) == (731, False)
