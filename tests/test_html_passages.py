"""Passages several HTML pages of a folder repeat: kept on one page, left out of the others, named in results."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.ingest import boilerplate
from mdrag.ingest.manifest import Manifest, PagePrints
from mdrag.ingest.passages import is_own, is_passage
from mdrag.types import Block, Document, Section

_WHAT = ["rendered frames", "exported layers", "imported fonts", "thumbnail sheets"]
_CODENAMES = ["zanzibar", "quillwort", "vermilion", "jacaranda"]  # a word of each page's own


def _passage(n: int, edit: str = "") -> str:
    """A setting's text as a manual's generator includes it in its command's page and in the reference."""
    return (
        f"The cache of {_WHAT[n]} keeps every entry on disk for this many days before the cleaner removes it{edit}; "
        f"a value of zero keeps {_WHAT[n]} forever and a negative value turns this cache off for every project."
    )


def _page(title: str, body: str) -> str:
    return f'<html><head><title>{title}</title></head><body><div id="content">{body}</div></body></html>'


def _section(heading: str, inner: str) -> str:
    return f'<div class="sect1"><h2>{heading}</h2><div class="sectionbody">{inner}</div></div>'


def _item(n: int, edit: str = "") -> str:
    return f"<dt>cache.{_WHAT[n].split()[1]}</dt><dd><p>{_passage(n, edit)}</p></dd>"


def command(root: Path, n: int, edit: str = "") -> None:
    own = f"<p>Command {n} ({_CODENAMES[n]}) makes {_WHAT[n]} for a drawing and writes them where the project keeps "
    own += "its output.</p>"
    config = f'<div class="dlist"><dl>{_item(n, edit)}</dl></div>'
    body = _section("DESCRIPTION", own) + _section("CONFIGURATION", config)
    (root / f"cmd-{n}.html").write_text(_page(f"cmd-{n}(1)", body), encoding="utf-8")


def manual(root: Path) -> None:
    """Four command pages, each with one setting, and the reference of every setting (and one of its own)."""
    root.mkdir(parents=True, exist_ok=True)
    for n in range(4):
        command(root, n)
    own = (
        "<dt>core.owner</dt><dd><p>The name written into every file the tool creates, as its author; when it is "
        "not set the tool asks the operating system for the login name of the user who runs it and writes "
        "that one instead (paraphernalia).</p></dd>"
    )
    items = "".join(_item(n) for n in range(4)) + own
    body = _section("VARIABLES", f'<div class="dlist"><dl>{items}</dl></div>')
    (root / "reference.html").write_text(_page("reference(5)", body), encoding="utf-8")


def _holders(ix: Index, n: int, edit: str = "") -> list[str]:
    """The pages whose chunks hold setting ``n``'s text, one entry per chunk."""
    text = _passage(n, edit)
    results = ix.search(f"cache of {_WHAT[n]} on disk", k=50, mode="bm25", threshold=0.0, collapse="none")
    return sorted(r.rel_path for r in results if text in " ".join(r.text.split()))


def _index(root: Path, minilm) -> Index:
    ix = Index(load_config({"index": "p" + os.urandom(4).hex()}), embedder=minilm)
    ix.update([root])
    return ix


def test_a_passage_the_reference_repeats_is_kept_on_its_commands_page_and_names_the_reference(
    tmp_path: Path, minilm
) -> None:
    root = tmp_path / "manual"
    manual(root)
    ix = _index(root, minilm)
    for n in range(4):
        assert _holders(ix, n) == [f"cmd-{n}.html"]
    own = ix.search("login name of the user written into every file", k=5, mode="bm25", threshold=0.0)
    assert own and own[0].rel_path == "reference.html"
    (hit,) = [r for r in ix.search("cache of imported fonts", k=20, mode="bm25") if _passage(2) in r.text]
    assert [rel for _, rel in hit.also] == ["reference.html"]
    described = [r for r in ix.search("Command 2 makes imported fonts", k=20, mode="bm25") if "Command 2" in r.text]
    assert described and all(not r.also for r in described)  # its own description is on no other page
    manifest = Manifest.load(ix.manifest_path)
    assert manifest is not None
    assert len(manifest.files[str((root / "reference.html").resolve())].dropped or []) == 4


def test_deleting_adding_and_changing_a_page_chunks_again_the_page_that_repeats_it(tmp_path: Path, minilm) -> None:
    root = tmp_path / "manual"
    manual(root)
    ix = _index(root, minilm)
    (root / "cmd-1.html").unlink()  # its setting is the reference's alone again
    summary = ix.update([root])
    assert (summary.deleted, summary.modified, summary.added) == (1, 1, 0)
    assert _holders(ix, 1) == ["reference.html"]
    assert _holders(ix, 0) == ["cmd-0.html"]
    command(root, 1)  # back: the reference leaves it out again
    summary = ix.update([root])
    assert (summary.added, summary.modified) == (1, 1)
    assert _holders(ix, 1) == ["cmd-1.html"]
    command(root, 2, edit=" or sooner when the disk is full")  # the command's text is its own now
    summary = ix.update([root])
    assert (summary.added, summary.modified) == (0, 2)
    assert _holders(ix, 2) == ["reference.html"]
    assert _holders(ix, 2, " or sooner when the disk is full") == ["cmd-2.html"]
    again = ix.update([root])  # nothing changed: nothing is chunked again
    assert (again.added, again.modified, again.unchanged) == (0, 0, 5)


def _prints(rel: str, blocks: list[str], passages: list[str], root: str = "/r") -> PagePrints:
    return PagePrints(root, rel, 0, 0, sorted(blocks + passages), sorted(passages))


def test_the_page_that_gathers_passages_from_most_pages_loses_them_and_a_page_of_only_repeats_keeps_them() -> None:
    pages = {f"/r/cmd-{n}.html": _prints(f"cmd-{n}.html", [f"own{n}"], [f"item{n}", f"long{n}"]) for n in range(3)}
    pages["/r/ref.html"] = _prints("ref.html", [], ["item0", "item1", "item2", "refown"])
    pages["/r/cmd-0-alias.html"] = _prints("cmd-0-alias.html", [], ["item0"])  # only a repeat: keeps it
    pages["/s/ref.html"] = _prints("ref.html", [], ["item1", "other"], root="/s")  # another folder: its own
    pages.update({f"/r/guide-{n}.html": _prints(f"guide-{n}.html", [f"guide{n}"], []) for n in range(8)})
    drops, kept = boilerplate.decide(pages)
    assert drops == {"/r/ref.html": ["item0", "item1", "item2"]}
    assert kept == {f"/r/cmd-{n}.html": {f"item{n}": ["/r/ref.html"]} for n in range(3)}


def test_a_short_block_is_no_passage() -> None:
    assert not is_passage("Be quiet; only errors are reported.")
    assert is_passage(_passage(0))
    short = Document("/p.html", [Section(["OPTIONS"], 2, [Block("Be quiet."), Block(_passage(0))])])
    assert boilerplate.passage_prints(short) == [
        boilerplate.fingerprints(Document("/q.html", [Section([], 1, [Block(_passage(0))])]))[0]
    ]


_FONTS = _passage(2)  # the named item's text, repeated byte for byte in the guide
_GUIDE_OWN = [
    "Drawings grow old quickly: a project that renders every night fills its output folder within weeks, and "
    "nobody looks at the frames of last spring again once the film is cut and the colour grading is done.",
    "Before you change anything, look at what takes the room: the output folder of each project lists its "
    "caches by kind, and the largest of them is nearly always the one that holds what the renderer wrote.",
]


def _settings(root: Path, *, named: bool = True) -> None:
    """A reference of settings, each a named item (a definition list, or h3 headings); only cache.fonts is
    long enough to be a passage. ``named=False``: the same text as one section's paragraphs, no names."""
    short = [("cache.frames", "How many rendered frames are kept."), ("cache.sheets", "Where thumbnails go.")]
    items = [short[0], ("cache.fonts", _FONTS), short[1]]
    if not named:
        more = "Each cache is a folder of the project's output, named after what it holds, and each can be emptied "
        more += "by hand at any time: the renderer writes again what it needs on its next run, only slower."
        body = _section("CACHES", "".join(f"<p>{text}</p>" for _, text in items) + f"<p>{more}</p>")
    elif named == "headings":
        body = _section("SETTINGS", "".join(f"<h3>{name}</h3><p>{text}</p>" for name, text in items))
    else:
        body = _section("SETTINGS", "<dl>" + "".join(f"<dt>{n}</dt><dd><p>{t}</p></dd>" for n, t in items) + "</dl>")
    (root / "settings.html").write_text(_page("settings(5)", body), encoding="utf-8")


def _guide(root: Path) -> None:
    """A guide that repeats the cache.fonts setting's text as one paragraph of three under its own heading."""
    paragraphs = [_GUIDE_OWN[0], _FONTS, _GUIDE_OWN[1]]
    body = _section("Keeping the disk tidy", "".join(f"<p>{p}</p>" for p in paragraphs))
    (root / "guide.html").write_text(_page("A tidy disk", body), encoding="utf-8")


def _first_fonts_hit(ix: Index) -> tuple[str, list[str], list[str]]:
    hit = next(r for r in ix.search("cache.fonts setting", k=5, mode="bm25") if _FONTS in " ".join(r.text.split()))
    return hit.rel_path, hit.heading_path, [rel for _, rel in hit.also]


@pytest.mark.parametrize("named", [True, "headings"])
def test_a_named_items_text_a_guide_repeats_is_kept_under_the_items_name(tmp_path: Path, minilm, named) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    _settings(root, named=named)
    _guide(root)
    ix = _index(root, minilm)
    rel, headings, also = _first_fonts_hit(ix)
    assert (rel, also) == ("settings.html", ["guide.html"])
    assert "cache.fonts" in headings[-1].split(", ")  # its own heading, or its group's (short items share one)
    best = ix.search("cache.fonts setting", k=5)
    assert best[0].rel_path == "settings.html" and "cache.fonts" in best[0].heading_path[-1]
    assert best[0].also and best[0].also[0][1] == "guide.html"


def test_a_passages_heading_changing_moves_it_and_chunks_again_exactly_the_pages_concerned(
    tmp_path: Path, minilm
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    _settings(root)
    _guide(root)
    ix = _index(root, minilm)
    _settings(root, named=False)  # the setting's name is gone: neither page names it, the guide keeps it
    summary = ix.update([root])
    assert (summary.added, summary.modified, summary.deleted) == (0, 2, 0)
    assert _first_fonts_hit(ix)[::2] == ("guide.html", ["settings.html"])
    (root / "settings.html").unlink()
    summary = ix.update([root])
    assert (summary.deleted, summary.modified) == (1, 1)
    assert _first_fonts_hit(ix) == ("guide.html", ["Keeping the disk tidy"], [])
    _settings(root)  # back, named: it keeps the text again, and the guide leaves it out
    summary = ix.update([root])
    assert (summary.added, summary.modified) == (1, 1)
    assert _first_fonts_hit(ix)[::2] == ("settings.html", ["guide.html"])
    (root / "guide.html").unlink()  # the keeper names no other page now: chunked again for its record alone
    summary = ix.update([root])
    assert (summary.deleted, summary.modified) == (1, 1)
    assert _first_fonts_hit(ix)[::2] == ("settings.html", [])
    _guide(root)
    summary = ix.update([root])
    assert (summary.added, summary.modified) == (1, 1)
    assert _first_fonts_hit(ix)[::2] == ("settings.html", ["guide.html"])
    again = ix.update([root])
    assert (again.added, again.modified, again.unchanged) == (0, 0, 2)


def test_a_passage_under_a_heading_of_its_own_is_kept_there_before_the_page_sharing_with_fewer() -> None:
    named = Section(["reference(5)", "cache.frames, cache.fonts"], 3, [Block("cache.frames"), Block("Short."),
                    Block("cache.fonts"), Block(_FONTS)])  # fmt: skip
    guide = Section(["Keeping the disk tidy"], 2, [Block(p) for p in (_GUIDE_OWN[0], _FONTS, _GUIDE_OWN[1])])
    led = Section(["cache.fonts"], 3, [Block("cache.fonts: " + _FONTS), Block(_GUIDE_OWN[0])])
    assert is_own(named, 3) and not is_own(guide, 1) and is_own(led, 0) and is_own(guide, 0) is False
    assert is_own(Section(["Caches"], 2, [Block(_FONTS), Block("Defaults to seven days.")]), 0)  # most of it
    pages = {"/r/ref.html": _prints("ref.html", [], ["fonts", "frames", "item0", "item1"])}
    pages["/r/ref.html"].own = ["fonts", "frames"]
    pages["/r/guide.html"] = _prints("guide.html", ["g"], ["fonts"])  # shares with one page; ref with three
    pages.update({f"/r/cmd-{n}.html": _prints(f"cmd-{n}.html", ["c"], [f"item{n}", f"own{n}"]) for n in range(2)})
    drops, kept = boilerplate.decide(pages)
    assert drops == {"/r/guide.html": ["fonts"], "/r/ref.html": ["item0", "item1"]}
    assert kept["/r/ref.html"] == {"fonts": ["/r/guide.html"]}
