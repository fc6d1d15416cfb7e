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
