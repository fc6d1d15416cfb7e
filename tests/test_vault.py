"""Notes vaults: the Obsidian Tasks plugin's documentation vault (../shared/data, read in place) read as
Obsidian shows it: links as their text, inline tags as tags, aliases searched, embeds and callouts,
notes opened by name, links and backlinks kept as data; a plain Markdown corpus read as before."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from mdrag.chunking import chunk_document
from mdrag.config import load_config
from mdrag.errors import MdragError
from mdrag.frontends.cli import main
from mdrag.index import Index
from mdrag.parsers import parse_file, vault
from mdrag.types import Document
from tests.conftest import SHARED_DATA, HashEmbedder

VAULT = SHARED_DATA / "notes_vault_obsidian-tasks"
needs_vault = pytest.mark.skipif(not VAULT.is_dir(), reason=f"the shared vault is absent: {VAULT}")
_INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)


def _note(rel: str) -> Document:
    return vault.read_note(parse_file(VAULT / rel))


def _texts(doc: Document) -> list[str]:
    return [b.text for s in doc.sections for b in s.blocks if b.kind != "code"]


# -- reading one note ---------------------------------------------------------------------------------


@needs_vault
def test_every_note_reads_its_links_as_their_text() -> None:
    raw = []
    for path in sorted(VAULT.rglob("*.md")):
        doc = vault.read_note(parse_file(path))
        for text in _texts(doc) + [h for s in doc.sections for h in s.heading_path]:
            # Left as written: inline code, and one typo of the source whose link holds "]".
            if "[[" in _INLINE_CODE.sub("", text) and "[[Set up custom statuses|` and `]`" not in text:
                raw.append((path.name, text[:120]))
    assert not raw
    text = "\n".join(_texts(_note("Queries/Backlinks.md")))
    assert "See Nested Backlink." in text or "See Nested Backlink" in text  # [[Layout#...|Nested Backlink]]
    assert "See Layout." in text  # [[Layout]]
    text = "\n".join(_texts(_note("Getting Started/Task Dependencies.md")))
    assert "see Create or edit Task > Dependencies." in text  # [[Create or edit Task#Dependencies]]
    # A link whose heading holds inline code is a link, not code: [[Tasks Api#`executeToggle...`|Tasks API]].
    assert "programmatically via the Tasks API." in "\n".join(_texts(_note("Editing/Toggling and Editing Statuses.md")))


def test_block_links_comments_and_callouts_without_a_title() -> None:
    doc = Document(
        path="/v/n.md",
        sections=[],
        metadata={"aliases": "Only one", "tags": "a, #b"},
    )
    from mdrag.types import Block, Section

    doc.sections = [
        Section(["N"], 1, [Block("See [[Other^abc123]] and [[Other#^abc123|there]]. %%hidden%% shown", line_start=3)]),
        Section(["N"], 1, [Block("before %%a comment", line_start=5), Block("still hidden", line_start=7)]),
        Section(["N"], 1, [Block("end of it%% after", line_start=9), Block("> [!NOTE]\n> body", line_start=11)]),
    ]
    doc = vault.read_note(doc)
    assert _texts(doc) == ["See Other and there.  shown", "before", " after", "> Note\n> body"]
    assert doc.links == [(3, "Other"), (3, "Other")]
    assert doc.aliases == ["Only one"] and doc.metadata["tags"] == ["a", "b"]


@needs_vault
def test_embeds_are_linked_not_read_and_callouts_read_as_title_and_text() -> None:
    doc = _note("Support and Help/Known Limitations.md")
    text = "\n".join(_texts(doc))
    assert "Presets#" not in text and "Presets > " not in text  # ![[Presets#Limitations]]: its text stays there
    assert {"Presets", "Tasks Api", "Urgency"} <= {note for _, note in doc.links or []}
    assert "Sample HTML - Full mode" not in "\n".join(_texts(_note("Advanced/Styling.md")))  # the embed
    texts = _texts(_note("Getting Started/Use Filename as Default Date.md"))
    assert any(t.startswith("> Seeing implied dates\n") for t in texts)  # > [!info] Seeing implied dates
    assert any(t.startswith("> Released\n") for t in texts) and not any("[!" in t for t in texts)


@needs_vault
def test_inline_tags_join_the_tags_never_from_code() -> None:
    assert _note("How To/Style custom statuses.md").metadata["tags"] == ["css", "feature/statuses"]  # in a <span>
    assert _note("Reference/Task Formats/Dataview Format.md").metadata["tags"] == [
        "task-formats",
        "task-format/dataview",
        "plugin/dataview",
    ]
    assert "tags" not in _note("Getting Started/Global Filter.md").metadata  # `#task` in code and inline code
    assert "tags" not in _note("SOURCE.md").metadata  # `<span ...>#feature/statuses #css</span>` in inline code
    assert _note("Queries/Backlinks.md").metadata["tags"] == ["feature/backlinks"]  # after its frontmatter aliases


@needs_vault
def test_a_vault_is_detected_and_a_plain_corpus_is_not(tmp_path: Path) -> None:
    assert vault.in_vault(str(VAULT / "Queries" / "Filters.md"))
    plain = tmp_path / "note.md"
    plain.write_text("# Note\n\nPlain text, `[[in code]]`.\n\n```toml\n[[cascade]]\n```\n")
    assert not vault.applies(parse_file(plain))
    plain.write_text("# Note\n\nSee [[Filters|the filters]].\n")
    assert vault.applies(parse_file(plain))  # wikilinks, no .obsidian/ above it
    hugo = SHARED_DATA / "markdown_hugo_docs" / "content" / "en" / "content-management" / "front-matter.md"
    if hugo.exists():  # TOML in a shortcode, outside code: "[[cascade]]" alone on its line
        assert not vault.applies(parse_file(hugo))


@needs_vault
def test_aliases_and_tags_are_in_the_header_and_links_in_each_chunk() -> None:
    doc = _note("Support and Help/Useful Links.md")
    chunks = chunk_document(doc, str(VAULT), "Support and Help/Useful Links.md")
    assert "aliases: Useful Links, Support and Help/Resources" in chunks[0].context
    assert all(c.metadata["aliases"] == ["Useful Links", "Support and Help/Resources"] for c in chunks)
    doc = _note("Queries/Backlinks.md")
    chunks = chunk_document(doc, str(VAULT), "Queries/Backlinks.md")
    assert "tags: feature/backlinks" in chunks[0].context
    holding = [c for c in chunks if "See Layout" in c.text]
    assert holding and all("Layout" in c.metadata["links"] for c in holding)
    assert all(c.metadata["links"] == [] for c in chunks if "Layout" not in c.text)


# -- an index of the vault ------------------------------------------------------------------------------


def _index(**overrides: object) -> Index:
    return Index(
        load_config({"index": "v" + os.urandom(4).hex(), "store.backend": "faiss", **overrides}),
        embedder=HashEmbedder(max_tokens=256),
    )


@pytest.fixture(scope="module")
def vault_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mdrag home of :func:`indexed`."""
    return tmp_path_factory.mktemp("vault-home")


@pytest.fixture(scope="module")
def indexed(vault_home: Path) -> Iterator[Index]:
    """An index of the whole vault, read in place (the FAISS store, the suite's hash embedder)."""
    if not VAULT.is_dir():
        pytest.skip(f"the shared vault is absent: {VAULT}")
    home = vault_home
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MDRAG_HOME", str(home))
        idx = _index()
        idx.update([VAULT])
        yield idx
        idx.close()


def _files(idx: Index, **filters: object) -> set[str]:
    return {
        r.rel_path for r in idx.search("tasks", k=200, threshold=0.0, filters=filters, mode="bm25", collapse="file")
    }


def test_the_tag_filter_finds_exactly_the_notes_with_an_inline_tag(indexed: Index) -> None:
    assert _files(indexed, tags=["css"]) == {
        "How To/How to style buttons.md",
        "How To/Style custom statuses.md",
        "How To/How to style backlinks.md",
        "Advanced/Styling.md",
    }
    statuses = _files(indexed, tags=["feature/statuses"])
    assert len(statuses) == 14 and "SOURCE.md" not in statuses
    assert not _files(indexed, tags=["task"])  # only ever in code


def test_an_alias_is_searched_and_in_the_header(indexed: Index) -> None:
    hits = indexed.search("Support and Help/Resources", k=3, threshold=0.0, mode="bm25")
    hit = next(h for h in hits if h.rel_path == "Support and Help/Useful Links.md")
    assert hit.metadata["aliases"] == ["Useful Links", "Support and Help/Resources"]
    for query, note in [
        ("Getting Started/Backlinks", "Queries/Backlinks.md"),
        ("Advanced/Quickadd", "Other Plugins/QuickAdd.md"),
    ]:
        assert indexed.search(query, k=1, threshold=0.0, mode="bm25")[0].rel_path == note, query


def test_the_setting_turns_vault_reading_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not VAULT.is_dir():
        pytest.skip(f"the shared vault is absent: {VAULT}")
    monkeypatch.setenv("MDRAG_HOME", str(tmp_path))
    idx = _index(**{"index.include": ["Queries/Backlinks.md", "How To/Style custom statuses.md"], "chunk.vault": False})
    try:
        idx.update([VAULT])
        hits = idx.search("backlink layout", k=50, threshold=0.0, mode="bm25")
        assert any("[[Layout]]" in h.text for h in hits)
        assert all("links" not in h.metadata and "aliases" not in h.metadata for h in hits)
        assert not _files(idx, tags=["css"])
    finally:
        idx.close()


def test_get_opens_a_note_by_its_name_or_alias(indexed: Index, tmp_path: Path) -> None:
    assert [p.rel_path for p in indexed.get("Filters").parts] == ["Queries/Filters.md"]
    assert [p.rel_path for p in indexed.get("backlink").parts] == ["Queries/Backlinks.md"]  # an alias, any case
    [part] = indexed.get("Backlinks#Hiding backlinks").parts
    assert part.section == ["Backlinks", "Hiding backlinks"]
    with pytest.raises(MdragError, match="is not a file of the index, nor the name or an alias of one of its notes"):
        indexed.get("No Such Note")


def test_get_lists_the_notes_a_name_shared_by_several_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not VAULT.is_dir():
        pytest.skip(f"the shared vault is absent: {VAULT}")
    monkeypatch.setenv("MDRAG_HOME", str(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    (other / "Filters.md").write_text("# Filters\n\nAnother folder's note of the same name.\n")
    idx = _index(**{"index.include": ["Queries/Filters.md", "Filters.md"]})
    try:
        idx.update([VAULT, other])
        with pytest.raises(MdragError, match=r"'filters' names 2 notes: Filters.md, Queries/Filters.md; give the path"):
            idx.get("filters")
    finally:
        idx.close()


def test_links_and_backlinks_are_data(indexed: Index) -> None:
    [part] = indexed.get("Backlinks", links=True).parts
    assert {"note": "Layout", "rel_path": "Queries/Layout.md"} in (part.links or [])
    assert "How To/How to style backlinks.md" in (part.backlinks or [])
    assert part.to_dict()["backlinks"] == part.backlinks
    assert "links" not in indexed.get("Queries/Filters.md").parts[0].to_dict()  # only when asked for
    hits = indexed.search("hide nested backlink show tree", k=5, threshold=0.0, mode="bm25")
    hit = next(h for h in hits if h.rel_path == "Queries/Backlinks.md" and "Queries/Layout.md" in h.metadata["links"])
    assert "How To/How to style backlinks.md" in hit.to_dict()["metadata"]["backlinks"]  # search --json, protocol, MCP


def test_get_links_on_the_command_line(
    indexed: Index, vault_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MDRAG_HOME", str(vault_home))
    assert main(["get", "Backlinks", "--links", "--json", "--index", indexed.name]) == 0
    [doc] = json.loads(capsys.readouterr().out)["documents"]
    assert doc["rel_path"] == "Queries/Backlinks.md" and "How To/How to style backlinks.md" in doc["backlinks"]
    assert main(["get", "Backlinks", "--links", "--index", indexed.name]) == 0
    out = capsys.readouterr().out
    assert "links to    Queries/Layout.md" in out and "linked from How To/How to style backlinks.md" in out


def test_milvus_lite_carries_tags_aliases_and_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not VAULT.is_dir():
        pytest.skip(f"the shared vault is absent: {VAULT}")
    monkeypatch.setenv("MDRAG_HOME", str(tmp_path))
    notes = ["Queries/Backlinks.md", "Queries/Layout.md", "How To/How to style backlinks.md", "Advanced/Styling.md"]
    idx = _index(**{"index.include": notes, "store.backend": "milvus", "milvus_uri": str(tmp_path / "m.db")})
    try:
        idx.update([VAULT])
        assert _files(idx, tags=["css"]) == {"How To/How to style backlinks.md", "Advanced/Styling.md"}
        hits = idx.search("hide nested backlink show tree", k=10, threshold=0.0, mode="bm25")
        hit = next(h for h in hits if h.rel_path == "Queries/Backlinks.md" and h.metadata["links"])
        assert "Queries/Layout.md" in hit.metadata["links"] and hit.metadata["aliases"][0] == "Backlink"
        assert hit.metadata["backlinks"] == [
            "Advanced/Styling.md",
            "How To/How to style backlinks.md",
            "Queries/Layout.md",
        ]
    finally:
        idx.close()
