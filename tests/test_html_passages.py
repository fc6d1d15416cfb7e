"""Passages several HTML pages of a folder repeat: kept on one page, left out of the others, named in results."""

from __future__ import annotations

import os
from pathlib import Path

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.ingest import boilerplate
from mdrag.ingest.manifest import Manifest, PagePrints
from mdrag.ingest.passages import is_passage
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
