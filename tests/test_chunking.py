"""The chunker is pure: these tests need no model, no store and no files but shared data."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from mdrag.chunking import ChunkLimits, ChunkSettings, chunk_document, split_text
from mdrag.errors import ConfigError
from mdrag.types import Block, Chunk, Document, Section


def _doc(*sections: Section, title: str | None = "Guide", metadata: dict | None = None) -> Document:
    return Document(path="/docs/guide.md", sections=list(sections), metadata=metadata or {}, title=title)


def _para(n: int, word: str = "lorem") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


def test_split_text_respects_limit_and_overlaps() -> None:
    text = ". ".join(_para(12, f"s{j}w") for j in range(30))
    pieces = split_text(text, 300, 60)
    assert len(pieces) > 3
    assert all(len(p) <= 300 for p in pieces)
    for a, b in zip(pieces, pieces[1:]):
        # the next piece starts with text from the end of the previous one
        assert b.split()[0] in a


def test_split_text_hard_cuts_a_word_longer_than_the_limit() -> None:
    pieces = split_text("x" * 1000, 300)
    assert [len(p) for p in pieces] == [300, 300, 300, 100]


def test_sections_become_chunks_with_heading_paths_and_metadata() -> None:
    doc = _doc(
        Section([], 0, [Block("Intro text.", line_start=3, line_end=3)]),
        Section(["Install"], 1, [Block("Run the installer.", line_start=5, line_end=5)]),
        Section(["Install", "Linux"], 2, [Block("Use apt.", line_start=9, line_end=9)]),
        metadata={"title": "Guide", "tags": ["setup", " "], "keywords": "a, b", "other": 1},
    )
    chunks = chunk_document(doc, "/docs", "guide.md")
    assert [c.heading_path for c in chunks] == [["Guide"], ["Install"], ["Install", "Linux"]]  # intro: the title
    assert [c.level for c in chunks] == [0, 1, 2]
    assert [c.line_start for c in chunks] == [3, 5, 9]
    # the frontmatter topics go with the file's first chunk only
    assert chunks[0].context == "Guide\ntags: setup. keywords: a, b"
    assert chunks[2].context == "Guide > Install > Linux"
    assert chunks[2].embed_text == "Guide > Install > Linux\n\nUse apt."
    assert chunks[0].metadata == {"title": "Guide", "tags": ["setup"], "keywords": ["a", "b"]}
    assert [c.position for c in chunks] == [0, 1, 2]
    assert chunks[0].rel_path == "guide.md" and chunks[0].root == "/docs"


def test_context_setting_chooses_what_is_embedded_with_the_text() -> None:
    doc = _doc(
        Section(["Install"], 1, [Block("Run the installer.")]),
        metadata={"title": "Guide", "description": "How to set it up.", "llm_hints": ["prefer apt"], "other": 1},
    )

    def first(context: str) -> Chunk:
        return chunk_document(doc, "/docs", "g.md", ChunkSettings(context=context))[0]  # type: ignore[arg-type]

    assert first("frontmatter").context == "Guide > Install\nHow to set it up. llm hints: prefer apt"
    assert first("headings").context == "Guide > Install"
    none = first("none")
    assert none.context == "" and none.embed_text == "Run the installer."
    # what is embedded decides the content hash, hence the id
    assert len({first(c).id for c in ("none", "headings", "frontmatter")}) == 3
    with pytest.raises(ConfigError):
        ChunkSettings(context="all")  # type: ignore[arg-type]


def test_title_is_not_repeated_when_it_is_the_first_heading() -> None:
    doc = _doc(Section(["Guide", "Usage"], 2, [Block("text")]))
    assert chunk_document(doc, "/r", "g.md")[0].context == "Guide > Usage"


def test_ids_are_stable_and_distinct() -> None:
    doc = _doc(Section(["A"], 1, [Block(_para(400))]))
    a = chunk_document(doc, "/docs", "guide.md")
    b = chunk_document(doc, "/docs", "guide.md")
    assert [c.id for c in a] == [c.id for c in b]
    assert len({c.id for c in a}) == len(a) > 1
    other_root = chunk_document(doc, "/other", "guide.md")
    other_path = chunk_document(doc, "/docs", "guide2.md")
    assert not {c.id for c in a} & {c.id for c in other_root}
    assert not {c.id for c in a} & {c.id for c in other_path}
    assert [c.content_hash for c in a] == [c.content_hash for c in other_root]


def test_size_limit_and_overlap_between_chunks_of_a_long_section() -> None:
    paras = [Block(_para(40, f"p{i}w")) for i in range(20)]
    chunks = chunk_document(_doc(Section(["Long"], 1, paras)), "/r", "l.md", ChunkSettings(size=1000, overlap=200))
    assert len(chunks) > 4
    assert all(len(c.text) <= 1000 for c in chunks)
    for a, b in zip(chunks, chunks[1:]):
        assert b.text.split()[0] in a.text.split(), "consecutive chunks share text"


def test_code_block_that_fits_is_never_cut() -> None:
    code = "```python\n" + "\n".join(f"print({i})  # line {i}" for i in range(30)) + "\n```"
    assert 600 < len(code) < 1000
    blocks = [Block(_para(80, "before")), Block(code, kind="code", language="python"), Block(_para(30, "after"))]
    chunks = chunk_document(_doc(Section(["Code"], 1, blocks)), "/r", "c.md")
    holders = [c for c in chunks if "print(0)" in c.text]
    assert len(holders) == 1 and code in holders[0].text


def test_code_block_larger_than_a_chunk_is_split_on_lines() -> None:
    code = "```\n" + "\n".join(f"line {i} " + "x" * 40 for i in range(100)) + "\n```"
    chunks = chunk_document(_doc(Section(["Code"], 1, [Block(code, kind="code")])), "/r", "c.md")
    assert len(chunks) > 4
    assert all(len(c.text) <= 1000 for c in chunks)
    assert all(line in "\n".join(c.text for c in chunks) for line in code.splitlines()[1:-1])


def test_no_empty_chunks_and_no_frontmatter_only_chunks() -> None:
    doc = _doc(Section(["Empty"], 1, [Block("   "), Block("\n\n")]), metadata={"title": "Only frontmatter"})
    assert chunk_document(doc, "/r", "e.md") == []
    assert chunk_document(_doc(), "/r", "e.md") == []


def test_window_splits_chunks_too_long_for_the_model() -> None:
    # "Words" are tokens here: a 1000-character chunk of 1-char words is ~500 tokens.
    def count(texts):
        return [len(t.split()) + 2 for t in texts]

    text = " ".join("a" for _ in range(499))
    doc = _doc(Section(["H"], 1, [Block(text)]))
    chunks = chunk_document(doc, "/r", "w.md", count_tokens=count, max_tokens=64)
    assert len(chunks) >= 8
    assert all(count([c.embed_text])[0] <= 64 for c in chunks)
    assert sum(len(c.text.split()) for c in chunks) == 499, "nothing is lost"


def test_a_long_run_without_spaces_is_cut_with_few_tokenizer_calls() -> None:
    # A base64 image: no separator, so an over-long piece is cut into characters.
    # Counting each character alone made a large file take minutes.
    calls: list[int] = []

    def count(texts):
        calls.append(len(texts))
        return [-(-len(t) // 3) + 2 for t in texts]  # three characters a token, a lone one too

    text = "".join(f"{i:x}" for i in range(5000))  # 18,000 characters, no spaces
    chunks = chunk_document(_doc(Section([], 0, [Block(text)])), "/r", "b.md", count_tokens=count, max_tokens=64)
    assert all(count([c.embed_text])[0] <= 64 for c in chunks)
    assert text.startswith(chunks[0].text) and text.endswith(chunks[-1].text)
    calls.clear()
    chunk_document(_doc(Section([], 0, [Block(text)])), "/r", "b.md", count_tokens=count, max_tokens=64)
    # Remainders joined to their neighbours cost a call or two each; a call per character would be ~18,000.
    assert len(calls) < 3 * len(chunks), "a few calls per piece, not one per character"


def test_token_counts_go_to_the_tokenizer_in_bounded_batches() -> None:
    # A tokenizer holds every encoding of one call: all the chunks of a large file at once took gigabytes.
    calls: list[int] = []

    def count(texts):
        calls.append(len(texts))
        return [len(t.split()) + 2 for t in texts]

    doc = _doc(*(Section([f"H{i}"], 1, [Block(_para(30, f"s{i}w"))]) for i in range(1000)))
    settings = ChunkSettings(size=100, overlap=20, unit="tokens")
    chunks = chunk_document(doc, "/r", "many.md", settings, count_tokens=count, max_tokens=256)
    assert len(chunks) >= 1000
    assert sum(calls) >= len(chunks) and max(calls) <= 256


def test_token_unit_counts_sizes_in_tokens() -> None:
    def count(texts):
        return [len(t.split()) + 2 for t in texts]

    doc = _doc(Section(["H"], 1, [Block(_para(20, f"b{i}w")) for i in range(10)]))
    chunks = chunk_document(doc, "/r", "t.md", ChunkSettings(size=60, overlap=10, unit="tokens"), count_tokens=count)
    assert len(chunks) >= 4
    assert all(count([c.text])[0] <= 60 for c in chunks)


def test_invalid_settings_are_reported_with_their_key() -> None:
    with pytest.raises(ConfigError, match="chunk.overlap"):
        ChunkSettings(size=1000, overlap=900)
    with pytest.raises(ConfigError, match="chunk.size"):
        ChunkSettings(size=10, overlap=0)
    with pytest.raises(ConfigError, match="chunk.unit"):
        ChunkSettings(size=1000, overlap=200, unit="lines")  # type: ignore[arg-type]


def test_real_docs_never_exceed_the_minilm_window(shared_data) -> None:
    """65% of 1000-character chunks of real docs are longer than MiniLM's 256 word pieces."""
    from mdrag.embedding.local import LocalEmbedder
    from mdrag.parsers import parse_file

    emb = LocalEmbedder()  # the tokenizer only: no model is loaded
    files = sorted((shared_data / "markdown_hugo_docs").rglob("*.md"))[:150]
    over_before = total = 0
    for path in files:
        doc = parse_file(path)
        plain = chunk_document(doc, str(shared_data), path.name)
        counts = emb.count_tokens([c.embed_text for c in plain])
        over_before += sum(n > 256 for n in counts)
        chunks = chunk_document(doc, str(shared_data), path.name, count_tokens=emb.count_tokens, max_tokens=256)
        total += len(chunks)
        assert all(n <= 256 for n in emb.count_tokens([c.embed_text for c in chunks])), path
        assert all(c.text.strip() for c in chunks)
    assert total > 300
    assert over_before > 50, "the corpus really has chunks over the window"


def _otel_chunks(shared_data, rel: str) -> tuple[list[Chunk], list[str]]:
    """A real otel docs file chunked as the indexer does it (MiniLM's tokenizer and window), and its lines."""
    from mdrag.embedding.local import LocalEmbedder
    from mdrag.parsers import parse_file

    emb = LocalEmbedder()  # the tokenizer only: no model is loaded
    path = shared_data / "markdown_otel_docs" / rel
    chunks = chunk_document(parse_file(path), str(path.parent), rel, count_tokens=emb.count_tokens, max_tokens=256)
    return chunks, path.read_text(encoding="utf-8").split("\n")


def _norm(line: str) -> str:
    """A line with its runs of spaces, and of dashes (a table's delimiter row, written compactly), shortened."""
    return re.sub(r"-{3,}", "---", " ".join(line.split()))


def _own_text(chunk: Chunk, lines: list[str]) -> str:
    """The chunk's text less the table header written before rows it holds: its first lines (at most two),
    table rows that are not in its lines line_start..line_end but above them."""
    assert chunk.line_start is not None and chunk.line_end is not None
    span = {_norm(x) for x in lines[chunk.line_start - 1 : chunk.line_end]}
    above = {_norm(x) for x in lines[: chunk.line_start - 1]}
    text = chunk.text
    for _ in range(2):
        first, _, rest = text.partition("\n")
        if not rest or "|" not in first or _norm(first) in span or _norm(first) not in above:
            break
        text = rest
    return text


def _span_holds(chunk: Chunk, lines: list[str]) -> bool:
    """Every line of the chunk is found, in order, in its lines line_start..line_end; its ends are on them."""
    assert chunk.line_start is not None and chunk.line_end is not None
    span = [_norm(x) for x in lines[chunk.line_start - 1 : chunk.line_end]]
    flat, pos = " ".join(span), 0
    own = [x for x in (_norm(t) for t in _own_text(chunk, lines).split("\n")) if x]
    for line in own:
        pos = flat.find(line, pos)
        if pos < 0:
            return False
        pos += len(line)
    return own[0] in span[0] and own[-1] in span[-1]


def test_a_small_fence_is_kept_whole_with_its_own_line_span(shared_data) -> None:
    # A 68-token YAML block was cut at its blank line, and its piece claimed the lines of the whole chunk (113).
    chunks, lines = _otel_chunks(shared_data, "content/en/blog/2023/jmx-metric-insight/index.md")
    fence = "\n".join(lines[126:137])
    assert fence.startswith("```yaml") and fence.endswith("```")
    holders = [c for c in chunks if "scrape_interval: 10s" in c.text]
    assert len(holders) == 1 and fence in holders[0].text
    assert holders[0].line_start == 127, "the chunk starts with the fence, on line 127"
    assert holders[0].line_end >= 137


def test_line_spans_hold_after_the_window_splits_a_chunk(shared_data) -> None:
    # Chunks re-split for the model's window all reported the span of the chunk they came from.
    rels = [
        "content/en/blog/2023/jmx-metric-insight/index.md",
        "content/en/_includes/page-drifted-msg.md",
        "content/en/docs/collector/internal-telemetry.md",
    ]
    checked = 0
    for rel in rels:
        chunks, lines = _otel_chunks(shared_data, rel)
        for c in chunks:
            assert _span_holds(c, lines), (rel, c.line_start, c.line_end, c.text[:80])
            checked += 1
    assert checked > 40


def test_no_fragment_or_overlap_only_chunk_on_real_files(shared_data) -> None:
    # 'the average.' was the tail of the chunk before it; a long table left a chunk '|'.
    rels = ["content/en/blog/2022/exponential-histograms/index.md", "content/en/docs/collector/internal-telemetry.md"]
    for rel in rels:
        chunks, _ = _otel_chunks(shared_data, rel)
        assert len(chunks) > 10
        for prev, c in zip(chunks, chunks[1:]):
            assert len(c.text) >= 30, (rel, c.line_start, c.text)
            if prev.heading_path == c.heading_path:
                assert c.text not in prev.text, "a chunk that is only overlap"
        text = "\n".join(c.text for c in chunks)
        assert "the average." in text or "|" in text, "nothing is lost"


def test_path_words_lead_the_header_when_asked() -> None:
    from mdrag.chunking import ChunkSettings, chunk_document
    from mdrag.parsers.markdown import parse

    text = "---\ntitle: Suppressing specific instrumentation\n---\n\n## Enable manual instrumentation only\n\nUse it.\n"
    doc = parse(text.encode(), "/d/disable.md")
    rel = "content/en/docs/zero-code/java/agent/disable.md"
    on = chunk_document(doc, "/d", rel, ChunkSettings(path_words=True))[0]
    assert on.context.startswith("zero code java agent disable > Suppressing specific instrumentation > Enable")
    assert "zero code" not in chunk_document(doc, "/d", rel, ChunkSettings())[0].context
    assert chunk_document(doc, "/d", "content/en/_index.md", ChunkSettings(path_words=True))[0].context.startswith(
        "Suppressing"
    ), "site folders and index names say nothing"


_WORD = re.compile(r"\w+")


def _in_line(own: str, source: str) -> bool:
    """A line of a chunk is in a source line: as written (whitespace aside), or its words are (a heading the
    langchain strategy writes back as ``## Title`` from ``Title {#id}`` or a setext heading)."""
    if _norm(own) in _norm(source):
        return True
    words = _WORD.findall(own)
    return bool(words) and " ".join(words) in " ".join(_WORD.findall(source))


def _lines_hold(chunk: Chunk, lines: list[str]) -> bool:
    """The chunk's words are, in order, in its lines line_start..line_end; its first and last lines are on those."""
    if chunk.line_start is None or chunk.line_end is None:
        return False
    span = lines[chunk.line_start - 1 : chunk.line_end]
    source, pos = _WORD.findall("\n".join(span)), 0
    text = _own_text(chunk, lines)
    for word in _WORD.findall(text):
        if word not in source[pos:]:
            return False
        pos = source.index(word, pos) + 1
    own = [x for x in text.split("\n") if x.strip()]
    return _in_line(own[0], span[0]) and _in_line(own[-1], span[-1])


@functools.cache
def _real_chunks(folder: Path, strategy: str = "headings") -> list[tuple[str, list[str], list[Chunk]]]:
    """Every Markdown file under ``folder`` chunked as the indexer does it (MiniLM's tokenizer and window):
    (relative path, the file's lines, its chunks)."""
    from mdrag.embedding.local import LocalEmbedder
    from mdrag.parsers import parse_file

    emb = LocalEmbedder()  # the tokenizer only: no model is loaded
    settings = ChunkSettings(strategy=strategy)  # type: ignore[arg-type]
    out = []
    for path in sorted(folder.rglob("*.md")):
        rel = path.relative_to(folder).as_posix()
        doc = parse_file(path)
        chunks = chunk_document(doc, str(folder), rel, settings, count_tokens=emb.count_tokens, max_tokens=256)
        out.append((rel, path.read_text(encoding="utf-8").split("\n"), chunks))
    return out


@pytest.mark.parametrize("strategy", ["headings", "langchain"])
def test_line_spans_are_the_lines_each_chunk_comes_from(shared_data: Path, strategy: str) -> None:
    # langchain: 8 of 10 CNCF results left out their heading lines (container-orchestration.md reported 19-22
    # for a chunk that starts with "## How it helps", on line 17).
    checked = 0
    for corpus in ("markdown_cncf_glossary", "markdown_hugo_docs"):
        for rel, lines, chunks in _real_chunks(shared_data / corpus / "content", strategy):
            for c in chunks:
                assert _lines_hold(c, lines), (rel, c.position, c.line_start, c.line_end, c.text[:80])
                checked += 1
    assert checked > 2000


def _shared(before: str, after: str) -> int:
    """The characters of the longest run of words that ends ``before`` and starts ``after``: their overlap."""
    a, b = before.split(), after.split()
    return next((len(" ".join(b[:k])) for k in range(min(len(a), len(b)), 0, -1) if a[-k:] == b[:k]), 0)


def test_neighbouring_chunks_share_at_most_a_third_of_either(shared_data: Path) -> None:
    # Hugo front-matter.md: a chunk that was the 230-character 'cascade' entry alone, then one that restarted with
    # 200 of its characters; otel kubeletstats: a list item that was all the overlap became two equal chunks.
    files = [
        *_real_chunks(shared_data / "markdown_hugo_docs" / "content"),
        *_real_chunks(shared_data / "markdown_cncf_glossary" / "content"),
        *[
            f
            for f in _real_chunks(shared_data / "markdown_otel_docs" / "content" / "en" / "blog" / "2025")
            if f[0] == "kubeletstats-receiver-metrics-deprecation.md"
        ],
    ]
    overlaps = 0
    for rel, lines, chunks in files:
        for prev, c in zip(chunks, chunks[1:]):
            assert prev.line_end is not None and c.line_start is not None
            if prev.heading_path != c.heading_path or c.line_start > prev.line_end:
                continue  # the same words in another place are not overlap
            shared = _shared(prev.text, c.text)
            overlaps += shared > 0
            assert 3 * shared <= min(len(prev.text), len(c.text)), (rel, prev.position, shared, c.text[:80])
        kept = set(_WORD.findall("\n".join(lines)))
        assert set(_WORD.findall("\n".join(c.text for c in chunks))) <= kept
    # 251 before the pieces of a cut table stopped carrying a tail of their last row over (84 of them did)
    assert overlaps > 150, "chunks still overlap"


@pytest.mark.parametrize("strategy", ["headings", "langchain"])
def test_text_before_the_first_heading_is_under_the_title(shared_data: Path, strategy: str) -> None:
    # CNCF glossary: the intro chunk of most terms had heading '', though each has a frontmatter title.
    intros = 0
    for rel, _, chunks in _real_chunks(shared_data / "markdown_cncf_glossary" / "content", strategy):
        for c in chunks:
            assert c.heading_path and all(h.strip() for h in c.heading_path), (rel, c.position)
            if c.level == 0:
                intros += 1
                title = c.metadata["title"]  # from the frontmatter (two spell it "Title")
                assert c.heading_path == [title], rel
                assert c.context.split("\n")[0] == title, "the header names the title once, as before"
    assert intros > 60


def test_a_pdf_page_outside_the_outline_keeps_its_page_as_its_place() -> None:
    doc = _doc(Section([], 0, [Block("Cover page text.")], page=1), Section(["Intro"], 1, [Block("Hi.")], page=2))
    assert [c.heading_path for c in chunk_document(doc, "/docs", "guide.pdf")] == [[], ["Intro"]]


# --- big files: linear work, and a time limit ----------------------------------------------

_LOREM = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt."


def _big_file(folder: Path, shape: str, size: int) -> Path:
    """The shapes of big file that once chunked slowly: one paragraph of lines (.txt), one line (.md),
    paragraphs of one line (.txt)."""
    line, name = {
        "one-paragraph": (_LOREM + "\n", "big.txt"),
        "one-line": (_LOREM + " ", "big.md"),
        "blank-line-paragraphs": (_LOREM + "\n\n", "big.txt"),
    }[shape]
    path = folder / f"{shape}-{size}" / name
    path.parent.mkdir()
    path.write_text((line * (size // len(line) + 1))[:size].rstrip() + "\n", encoding="utf-8")
    return path


def _chunking_work(monkeypatch: pytest.MonkeyPatch, path: Path, window: bool) -> int:
    """How many characters of its sections' texts and how many of their units chunking ``path`` goes over.

    Searches (``find`` up to its match, ``count``) and slices of a section's text
    count the characters they span; each unit visited in its list of spans counts one.
    """
    from mdrag.chunking import units
    from mdrag.parsers import parse_file

    work = [0]

    class Text(str):
        def _span(self, start: int | None, end: int | None) -> None:
            work[0] += len(range(*slice(start, end).indices(len(self))))

        def count(self, sub: str, start: int | None = None, end: int | None = None) -> int:  # type: ignore[override]
            self._span(start, end)
            return str.count(self, sub, start, end)

        def find(self, sub: str, start: int | None = None, end: int | None = None) -> int:  # type: ignore[override]
            found = str.find(self, sub, start, end)  # it reads up to the first match
            self._span(start, end if found < 0 else found + len(sub))
            return found

        def __getitem__(self, key: slice | int) -> str:  # type: ignore[override]
            if isinstance(key, slice):
                self._span(key.start, key.stop)
            return str.__getitem__(self, key)

    class Spans(list):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            for item in list.__iter__(self):
                work[0] += 1
                yield item

    init = units.SectionText.__init__

    def counted(self: units.SectionText, us: list[units.Unit]) -> None:
        init(self, us)
        self.text, self.spans = Text(self.text), Spans(self.spans)

    monkeypatch.setattr(units.SectionText, "__init__", counted)
    doc = parse_file(path)
    kwargs: dict = {"count_tokens": lambda ts: [len(t.split()) + 2 for t in ts], "max_tokens": 256} if window else {}
    chunks = chunk_document(doc, str(path.parent), path.name, **kwargs)
    assert len(chunks) > 100 and chunks[-1].line_end is not None
    return work[0]


@pytest.mark.parametrize("window", [False, True], ids=["chars", "window"])
@pytest.mark.parametrize("shape", ["one-paragraph", "one-line", "blank-line-paragraphs"])
def test_chunking_work_grows_linearly_with_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str, window: bool
) -> None:
    """Each chunk's line was counted from the start of its unit (and the units' starts listed
    afresh), so chunking a 20 MB text file ran for hours. Twice the file: about twice the work, not four times."""
    small = _chunking_work(monkeypatch, _big_file(tmp_path, shape, 256 * 1024), window)
    large = _chunking_work(monkeypatch, _big_file(tmp_path, shape, 512 * 1024), window)
    assert large <= 2.2 * small, (small, large)


def test_line_numbers_of_a_big_file_are_exact(tmp_path: Path) -> None:
    from mdrag.parsers import parse_file

    path = _big_file(tmp_path, "blank-line-paragraphs", 300 * 1024)
    lines = path.read_text(encoding="utf-8").split("\n")
    chunks = chunk_document(parse_file(path), str(tmp_path), path.name)
    for c in chunks:
        assert c.line_start is not None and c.line_end is not None
        span = "\n".join(lines[c.line_start - 1 : c.line_end])
        assert c.text.startswith(lines[c.line_start - 1].strip()[:20]) and span.rstrip().endswith(c.text[-20:])


def test_chunking_past_its_deadline_stops_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is counted in checks here, not seconds: each look at the clock moves it one second on."""
    from mdrag.chunking import ChunkingTimeoutError, Deadline, deadline

    ticks = iter(range(10**9))
    monkeypatch.setattr(deadline, "_clock", lambda: float(next(ticks)))
    small = _doc(Section(["Intro"], 1, [Block(_para(30))]))
    assert chunk_document(small, "/docs", "guide.md", limits=ChunkLimits(deadline=Deadline(20)))
    big = _doc(Section(["Intro"], 1, [Block(f"{_para(40)}\n\n" * 2000)]))
    with pytest.raises(ChunkingTimeoutError) as info:
        chunk_document(big, "/docs", "guide.md", limits=ChunkLimits(deadline=Deadline(20)))
    assert str(info.value) == "chunking took longer than 20 s (setting index.parse_timeout): skipped"
    counter = lambda ts: [len(t.split()) for t in ts]  # noqa: E731
    with pytest.raises(ChunkingTimeoutError):  # the tokenizer's calls are checked too
        chunk_document(
            big, "/docs", "guide.md", count_tokens=counter, max_tokens=128, limits=ChunkLimits(deadline=Deadline(20))
        )


#: Files whose chunking peaks high for their size: (what repeats, file name). Each line is a unit of
#: chunking, each section a heading path: memory goes with lines and sections as much as with text.
HEAVY = [
    ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt.\n", "p.txt"),
    ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt. ", "l.md"),
    ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt.\n\n", "b.txt"),
    ("a\n", "a.txt"),
    ("ab\n\n", "ab.txt"),
    ("# a\n\nb\n\n", "s.md"),
    ("東京都の天気は晴れです。明日も良い天気でしょう。\n\n", "cjk.txt"),
]


@pytest.mark.parametrize(("unit", "name"), HEAVY, ids=[n for _, n in HEAVY])
def test_the_memory_estimate_is_above_what_chunking_takes(tmp_path: Path, unit: str, name: str) -> None:
    """The limit on chunking's memory (index.max_parse_mb) is checked on an estimate made before it starts:
    the estimate must not fall below what chunking takes (its chunks included), for any shape of file."""
    import tracemalloc

    from mdrag.chunking import ChunkingMemoryError
    from mdrag.chunking.memory import chunking_mb
    from mdrag.parsers import parse_file
    from tests.conftest import HashEmbedder

    path = tmp_path / name
    path.write_text(unit * (100_000 // len(unit)), encoding="utf-8")
    doc = parse_file(path)
    embedder = HashEmbedder(max_tokens=256)
    tracemalloc.start()
    chunks = chunk_document(doc, str(tmp_path), name, None, embedder.count_tokens, 256)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    need = chunking_mb(doc)
    assert chunks and peak <= need <= 5 * peak, (peak, need)
    with pytest.raises(ChunkingMemoryError) as info:
        chunk_document(doc, str(tmp_path), name, None, embedder.count_tokens, 256, ChunkLimits(max_mb=need / 2))
    assert str(info.value).endswith(
        f"more than the {need / 2:g} MB one file may use (setting index.max_parse_mb): skipped"
    )
    assert (
        chunk_document(doc, str(tmp_path), name, None, embedder.count_tokens, 256, ChunkLimits(max_mb=need)) == chunks
    )


# -- tables: a header row travels with its rows -------------------------------------------------------------


def _rows_in(text: str, rows: list[str]) -> list[str]:
    lines = [" ".join(x.split()) for x in text.split("\n")]
    return [r for r in rows if r in lines]


def _padded_table(n: int) -> str:
    """A Markdown table as formatters write it: cells padded to the widest, a delimiter row of dashes."""
    rows = [f"| `SETTING_{i:03d}` | What setting {i} does, in a sentence of some length. | `{i}` |" for i in range(n)]
    header = "| Environment variable" + " " * 20 + "| Description" + " " * 40 + "| Default value |"
    return "\n".join([header, "| " + "-" * 36 + " | " + "-" * 50 + " | ------------- |", *rows])


def test_a_long_markdown_table_repeats_its_header_in_every_chunk() -> None:
    # otel docs: chunks holding only "| Environment variable | Description | Default value |" and its "---" row
    # were indexed and ranked; the chunks of the rows after them had no header at all.
    table = _padded_table(40)
    doc = _doc(
        Section(["Settings"], 2, [Block("Set these variables.", line_start=3), Block(table, "table", line_start=5)])
    )
    chunks = chunk_document(doc, "/docs", "guide.md", ChunkSettings(size=400, overlap=80))
    rows = [" ".join(r.split()) for r in table.split("\n")[2:]]
    holding = [c for c in chunks if _rows_in(c.text, rows)]
    assert len(holding) > 3, "the table is cut"
    for c in chunks:
        lines = c.text.split("\n")
        assert lines[-1].startswith("| `SETTING_") or "|" not in lines[-1], "no chunk ends with the header"
    for c in holding:
        lines = [" ".join(x.split()) for x in c.text.split("\n")]
        at = lines.index("| Environment variable | Description | Default value |")
        assert c.text.split("\n")[at + 1] == "| --- | --- | --- |", "the delimiter row under it, written short"
        first_row = rows.index(_rows_in(c.text, rows)[0])
        # its lines are those of its own text: the header written before later rows is not on them
        assert c.line_start == (3 if "Set these" in c.text else 5 if first_row == 0 else 7 + first_row)
        assert c.line_end == 7 + rows.index(_rows_in(c.text, rows)[-1])
    assert [r for c in holding for r in _rows_in(c.text, rows)] == rows, "every row once, in order, none cut"


def test_a_long_html_table_repeats_its_header_in_every_chunk() -> None:
    from mdrag.parsers.html import parse

    cells = "".join(
        f"<tr><td>option-{i}</td><td>What option {i} sets, in a sentence of some length.</td></tr>" for i in range(40)
    )
    table = f"<table><tr><th>Name</th><th>Meaning</th></tr>{cells}</table>"
    page = f"<html><body><h1>Options</h1><p>The options.</p>{table}</body></html>"
    doc = parse(page.encode(), "/docs/options.html", main_content=False)
    chunks = chunk_document(doc, "/docs", "options.html", ChunkSettings(size=400, overlap=80))
    holding = [c for c in chunks if "option-" in c.text]
    assert len(holding) > 3
    for c in holding:
        lines = c.text.split("\n")
        rows = [x for x in lines if x.startswith("option-")]
        assert lines[lines.index(rows[0]) - 1] == "Name | Meaning", c.text[:80]
    assert all(c.text.split("\n")[-1] != "Name | Meaning" for c in chunks)
    assert sum(c.text.count("option-") for c in holding) == 40


def test_a_table_over_the_window_repeats_its_header_within_the_window(shared_data: Path) -> None:
    # zero-code/dotnet/configuration.md: its padded delimiter rows alone were 344 of MiniLM's 256 word pieces.
    from mdrag.embedding.local import LocalEmbedder

    emb = LocalEmbedder()  # the tokenizer only: no model is loaded
    chunks, lines = _otel_chunks(shared_data, "content/en/docs/zero-code/dotnet/configuration.md")
    assert all(n <= 256 for n in emb.count_tokens([c.embed_text for c in chunks]))
    rows = [c for c in chunks if re.search(r"^\| `OTEL_\w+` +\|", c.text, re.MULTILINE)]
    assert len(rows) > 15
    for c in rows:
        assert re.search(r"^\| Environment variable +\|.*\n\| --- \|", c.text, re.MULTILINE), c.text[:120]
    assert not [
        c for c in chunks if all(x.startswith("| Environment") or x.startswith("| ---") for x in c.text.split("\n"))
    ]
    assert all(_span_holds(c, lines) for c in chunks)
