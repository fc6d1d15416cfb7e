"""Notes vaults at scale: the reading of a note linear in its links and tags, under the run's time limit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from mdrag.chunking import chunk_document
from mdrag.config import load_config
from mdrag.index import Index
from mdrag.parsers import vault
from mdrag.types import Block, Document, Section
from tests.conftest import HashEmbedder

#: The tag filter is checked on every chunk of the notes it finds: a note's chunks each take a place.
_EVERY_CHUNK = {"search.per_page": 0}


def _links_paragraph(links: int) -> str:
    return "\n".join(f"see [[Note {i}]] for the details of part {i}" for i in range(links))


def _reading_work(monkeypatch: pytest.MonkeyPatch, text: str) -> int:
    """How many characters of a block's text the reading of its note goes over: searches (``count``,
    ``find``) and slices of the text count the characters they span (slices stay countable)."""
    work = [0]

    class Text(str):
        def _span(self, start: int | None, end: int | None) -> None:
            work[0] += len(range(*slice(start, end).indices(len(self))))

        def count(self, sub: str, start: Any = None, end: Any = None) -> int:  # type: ignore[override]
            self._span(start, end)
            return str.count(self, sub, start, end)

        def find(self, sub: str, start: Any = None, end: Any = None) -> int:  # type: ignore[override]
            self._span(start, end)
            return str.find(self, sub, start, end)

        def __getitem__(self, key: Any) -> str:  # type: ignore[override]
            if isinstance(key, slice):
                self._span(key.start, key.stop)
                return Text(str.__getitem__(self, key))
            return str.__getitem__(self, key)

    class NoComments:  # the note has none: its text stays a Text, as a comment's removal would make it a str
        def sub(self, repl: str, text: str) -> str:
            return text

    monkeypatch.setattr(vault, "_COMMENT", NoComments())
    doc = Document(path="/v/links.md", sections=[Section(["Links"], 1, [Block(Text(text), line_start=3)], None, 1)])
    read = vault.read_note(doc)
    assert read.links is not None and len(read.links) == text.count("[[")
    return work[0]


def test_reading_work_grows_linearly_with_the_links_of_a_paragraph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each link's line was counted from its paragraph's start: a 5 MB paragraph with a link on each line
    did not finish in 900 s. Twice the links: about twice the work, not four times."""
    small = _reading_work(monkeypatch, _links_paragraph(2000))
    large = _reading_work(monkeypatch, _links_paragraph(4000))
    assert large <= 2.2 * small, (small, large)


def test_link_lines_are_exact_across_inline_code() -> None:
    text = "a [[One]]\n`code\nspan` [[Two]]\n\nb `x` c\n[[Three|3]] and [[Four]]"
    doc = Document(path="/v/n.md", sections=[Section(["N"], 1, [Block(text, line_start=10)])])
    read = vault.read_note(doc)
    assert read.links == [(10, "One"), (12, "Two"), (15, "Three"), (15, "Four")]
    assert read.sections[0].blocks[0].text == "a One\n`code\nspan` Two\n\nb `x` c\n3 and Four"


def _python_lines(doc: Document) -> int:
    """How many lines of Python chunking ``doc`` runs (every ``line`` event of a trace)."""
    lines = [0]

    def trace(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            lines[0] += 1
        return trace

    sys.settrace(trace)
    try:
        chunks = chunk_document(doc, "/v", "links.md")
    finally:
        sys.settrace(None)
    assert sum(len(c.metadata["links"]) for c in chunks) >= len(doc.links or [])
    return lines[0]


def test_chunking_work_grows_linearly_with_the_links_of_a_note() -> None:
    """Each chunk looked through all of its note's links for those on its lines. Twice the links (and
    chunks): about twice the work, not four times; each chunk still holds the links on its lines."""

    def note(links: int) -> Document:
        section = Section(["Links"], 1, [Block(_links_paragraph(links), line_start=3)])
        return vault.read_note(Document(path="/v/links.md", sections=[section]))

    small = note(1000)
    chunks = [c.metadata["links"] for c in chunk_document(small, "/v", "l.md")]
    assert chunks[0][:2] == ["Note 0", "Note 1"] and chunks[-1][-1] == "Note 999"
    assert _python_lines(note(2000)) <= 2.2 * _python_lines(small)


def _c_calls(text: str, frontmatter: list[str]) -> tuple[int, list[str]]:
    """The calls of C functions (``str.lower``, set and list methods) the reading of a note makes, and its tags."""
    calls = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            calls[0] += 1

    doc = Document(path="/v/tags.md", sections=[Section(["Tags"], 1, [Block(text, line_start=3)])])
    doc.metadata = {"tags": frontmatter}
    sys.setprofile(profile)
    try:
        read = vault.read_note(doc)
    finally:
        sys.setprofile(None)
    return calls[0], read.metadata["tags"]


def test_reading_work_grows_linearly_with_the_tags_of_a_note() -> None:
    """The tags seen were lowered again for every new tag: 16,000 inline tags took 29 s. Twice the tags:
    about twice the calls, not four times; a tag differing only in case is still the same tag."""

    def note(n: int) -> str:
        words = [f"#topic-{i:05d}" for i in range(n)]
        return "\n".join(" ".join(words[i : i + 10]) for i in range(0, n, 10)) + "\n#TOPIC-00001 #Topic-00002"

    small, tags = _c_calls(note(1000), ["Topic-00000", "extra"])
    assert tags[:3] == ["Topic-00000", "extra", "topic-00001"] and len(tags) == 1001
    large, tags = _c_calls(note(2000), [])
    assert len(tags) == 2000
    assert large <= 2.2 * small, (small, large)


def test_a_vault_note_whose_reading_passes_the_time_limit_is_skipped_and_the_others_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reading of a vault note ran before the run's time limit was set, outside index.parse_timeout.
    It has the same limit as chunking; here the clock is counted in checks: each look moves it a second on."""
    from mdrag.chunking import deadline

    ticks = iter(range(10**9))
    monkeypatch.setattr(deadline, "_clock", lambda: float(next(ticks)))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "big.md").write_text("# Big\n\n" + "".join(f"Part {i} links [[Note {i}]].\n\n" for i in range(400)))
    (docs / "fine.md").write_text("# Fine\n\nThis note links [[Big]] and reads in time.\n")
    config = load_config({"index": "vault_limit", "index.parse_timeout": 60})
    with Index(config, embedder=HashEmbedder()) as idx:
        summary = idx.update([docs])
        assert (summary.added, summary.skipped) == (1, 1), summary
        assert dict(summary.skipped_files) == {
            str(docs / "big.md"): "reading the note took longer than 60 s (setting index.parse_timeout): skipped"
        }
        assert idx.search("reads in time", threshold=0.0)[0].rel_path == "fine.md"


# -- a note's tags in the store ----------------------------------------------------------------------------


def _tagged_folder(tmp_path: Path) -> Path:
    """A vault note of 2,000 distinct inline tags cut into many chunks, a note with frontmatter tags (one of
    them also inline in the big note), one with an inline tag, and one with none."""
    docs = tmp_path / "notes"
    docs.mkdir()
    lines = [f"Entry {i} is about the subject of #tag-{i:05d} and a few words more." for i in range(2000)]
    paragraphs = ["\n".join(lines[i : i + 10]) for i in range(0, 2000, 10)]
    (docs / "big.md").write_text("# Big\n\nIt links [[plain]].\n\n" + "\n\n".join(paragraphs) + "\n")
    (docs / "plain.md").write_text("---\ntags: [tag-00007, shared]\n---\n# Plain\n\nTagged in its frontmatter.\n")
    (docs / "other.md").write_text("# Other\n\nA note with an inline #shared tag, linking [[big]].\n")
    (docs / "untagged.md").write_text("# Untagged\n\nA note with no tags at all, see [[big]].\n")
    return docs


def _tag_filter_finds_exactly_the_notes_chunks(idx: Index) -> None:
    """``--tag`` finds every chunk of the notes with that tag (frontmatter or inline), and no other."""
    idx.search("entry", k=1)  # opens the store
    by_file: dict[str, set[str]] = {}
    for cid, path in idx.store.id_paths().items():
        by_file.setdefault(Path(path).name, set()).add(cid)
    assert len(by_file["big.md"]) > 20
    for tag, files in [
        ("tag-00007", {"big.md", "plain.md"}),
        ("tag-01999", {"big.md"}),
        ("shared", {"plain.md", "other.md"}),
        ("tag-02000", set()),
        ("Tag-00007", set()),  # exact, as before: no case folding
    ]:
        hits = idx.search("subject of the entry", k=1000, threshold=0.0, filters={"tags": [tag]}, collapse="none")
        assert {h.chunk_id for h in hits} == set().union(*(by_file[f] for f in files)), tag
        assert all(tag in h.metadata["tags"] for h in hits)
    [hit] = idx.search("frontmatter", k=1, threshold=0.0, filters={"tags": ["shared", "tag-00007"]}, mode="bm25")
    assert hit.rel_path == "plain.md" and hit.metadata["tags"] == ["tag-00007", "shared"]
    big = idx.search("Entry 1234", k=1, threshold=0.0, filters={"path_prefix": "big.md"}, mode="bm25")[0]
    assert len(big.metadata["tags"]) == 2000 and big.metadata["tags"][:2] == ["tag-00000", "tag-00001"]


def test_a_notes_tags_are_stored_once_and_the_tag_filter_stays_exact(tmp_path: Path) -> None:
    """Every chunk stored all of its note's tags: a note of 2,000 inline tags in 144 chunks made 288,000 tag
    rows and a 12.1 MB store (0.7 MB without them). Each set of tags is stored once: O(tags), not
    O(tags x chunks), and a tag filter still finds exactly the chunks of the notes with that tag."""
    import sqlite3

    docs = _tagged_folder(tmp_path)
    with Index(
        load_config({"index": "tagged", "store.backend": "faiss", **_EVERY_CHUNK}), embedder=HashEmbedder()
    ) as idx:
        idx.update([docs])
        with sqlite3.connect(idx.config.cache_dir / "faiss" / "tagged.sqlite") as db:
            assert db.execute("SELECT count(*) FROM tags").fetchone()[0] == 2000 + 2 + 1  # big, plain, other
            assert db.execute("SELECT count(*) FROM tagsets").fetchone()[0] == 3
            metadata = db.execute("SELECT sum(length(metadata)) FROM chunks").fetchone()[0]
        assert metadata < 200 * idx.store.count(), metadata  # the tags are not in each chunk's metadata
        _tag_filter_finds_exactly_the_notes_chunks(idx)
        (docs / "big.md").write_text("# Big\n\nNow only #tag-00007 is left, linking [[plain]].\n")
        (docs / "plain.md").unlink()
        idx.update([docs])
        with sqlite3.connect(idx.config.cache_dir / "faiss" / "tagged.sqlite") as db:
            assert db.execute("SELECT count(*) FROM tags").fetchone()[0] == 2  # the sets no chunk holds are gone
        hits = idx.search("left", k=100, threshold=0.0, filters={"tags": ["tag-00007"]}, collapse="none")
        assert {h.rel_path for h in hits} == {"big.md"}
        assert not idx.search("subject", k=100, threshold=0.0, filters={"tags": ["tag-01999"]})


def test_milvus_lite_stores_a_notes_tags_once_and_the_tag_filter_stays_exact(tmp_path: Path) -> None:
    """In Milvus every chunk row held all of its note's tags in its metadata: a note of 20,000 tags took
    264 s to index, 1.6 GB of memory and 18 s for one tag-filtered search."""
    import json

    from mdrag.store.milvus import tagsets

    docs = _tagged_folder(tmp_path)
    config = load_config(
        {"index": "tagged", "store.backend": "milvus", "milvus_uri": str(tmp_path / "m.db"), **_EVERY_CHUNK}
    )
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([docs])
        store: Any = idx.store
        _tag_filter_finds_exactly_the_notes_chunks(idx)

        def stored() -> tuple[int, list[int]]:  # the bytes of the chunk rows' metadata, the sets' sizes
            rows = store.call("query", store.collection, filter='id != ""', output_fields=["metadata"])
            sets = store.call("query", tagsets.name(store.collection), filter='digest != ""', output_fields=["tags"])
            return sum(len(json.dumps(r["metadata"])) for r in rows), sorted(len(s["tags"]["tags"]) for s in sets)

        metadata, sets = stored()
        assert metadata < 200 * store.count() and sets == [1, 2, 2000], (metadata, sets)
        # A row an older release wrote, its tags in its metadata, is found and read as it was.
        [old] = store.call("query", store.collection, filter='rel_path == "other.md"', output_fields=["*"])
        old.pop("sparse", None)
        store.call("upsert", store.collection, [{**old, "metadata": {"title": "Other", "tags": ["shared", "old"]}}])
        [hit] = idx.search("inline", k=5, threshold=0.0, filters={"tags": ["old"]}, mode="bm25")
        assert hit.rel_path == "other.md" and hit.metadata["tags"] == ["shared", "old"]
        assert {h.rel_path for h in idx.search("note", k=50, threshold=0.0, filters={"tags": ["shared"]})} == {
            "plain.md",
            "other.md",
        }
        (docs / "big.md").write_text("# Big\n\nNow only #tag-00007 is left, linking [[plain]].\n")
        idx.update([docs])
        assert 2000 not in stored()[1]  # the big note's old set is gone with its rows
        hits = idx.search("left", k=9, threshold=0.0, filters={"tags": ["tag-00007"]})
        assert {h.rel_path for h in hits} == {"big.md", "plain.md"}


def _as_an_older_release_wrote_it(path: Path) -> int:
    """The FAISS store at ``path`` put back in the form an older release wrote: each chunk's tags in its
    metadata and a tag row for each of them, no sets; what that release's run recorded. Its tag rows."""
    import json
    import sqlite3

    from mdrag.store.faiss import rows

    with sqlite3.connect(path) as db:
        sets = {n: json.loads(v) for n, v in db.execute("SELECT n, tags FROM tagsets")}
        db.execute("DELETE FROM tags")
        for n, metadata, tagset in db.execute("SELECT n, metadata, tagset FROM chunks").fetchall():
            if tagset:
                meta = {**json.loads(metadata), "tags": sets[tagset]}
                db.execute("UPDATE chunks SET metadata = ? WHERE n = ?", (json.dumps(meta), n))
                db.executemany("INSERT INTO tags (tag, n) VALUES (?, ?)", [(t, n) for t in set(sets[tagset])])
        db.execute("DROP INDEX chunks_tagset")
        db.execute("ALTER TABLE chunks DROP COLUMN tagset")
        db.execute("DROP TABLE tagsets")
        rows.record_run(db)
        return int(db.execute("SELECT count(*) FROM tags").fetchone()[0])


def test_an_index_of_an_older_release_is_searched_as_it_is_then_upgraded_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import sqlite3

    docs = _tagged_folder(tmp_path)
    config = load_config({"index": "tagged", "store.backend": "faiss", **_EVERY_CHUNK})
    path = config.cache_dir / "faiss" / "tagged.sqlite"
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([docs])
    assert _as_an_older_release_wrote_it(path) > 40_000  # 2,000 tags on each chunk of the big note
    with Index(config, embedder=HashEmbedder()) as idx:
        _tag_filter_finds_exactly_the_notes_chunks(idx)  # read as it is
        assert idx.store.check(thorough=True) == []
        caplog.set_level("WARNING")
        summary = idx.update([docs])  # no file changed: the run upgrades the store
        assert summary.unchanged == 4 and not summary.added
        assert any("upgraded the FAISS store of an older release" in r.getMessage() for r in caplog.records)
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT count(*) FROM tags").fetchone()[0] == 2003
        assert idx.store.check(thorough=True) == []
        _tag_filter_finds_exactly_the_notes_chunks(idx)
    caplog.clear()
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([docs])
        _tag_filter_finds_exactly_the_notes_chunks(idx)
    assert not any("upgraded" in r.getMessage() for r in caplog.records)  # once
