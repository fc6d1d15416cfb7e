"""Blocks a site repeats on its pages are left out of chunks, decided from the folder itself, and kept so
as pages come and go; each page's own text stays."""

from __future__ import annotations

import functools
import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mdrag import knowledge
from mdrag.config import load_config
from mdrag.index import Index
from mdrag.ingest import boilerplate
from mdrag.ingest.manifest import Manifest, PagePrints
from mdrag.knowledge import KnowledgeBase
from mdrag.knowledge.docsets import docset_index, update_docset_index
from mdrag.types import Block, Document, Section
from tests.test_knowledge import write_config

_TOPICS = [
    "rebasing a branch onto the upstream after a force push",
    "recovering a commit that was lost after a hard reset",
    "signing tags with a hardware security key",
    "splitting one large repository into two smaller ones",
    "tracking large binary files outside the object database",
    "cleaning untracked build artifacts from the working tree",
    "bisecting a regression between two released versions",
    "rewriting author names across the whole history",
    "sharing a stash between two clones of one project",
    "pruning remote branches that were deleted upstream",
    "cherry picking a fix onto several maintenance branches",
    "resolving a conflict in a generated lock file",
    "mirroring a repository to a second hosting service",
]
FOOTER = "Part of the Quarry toolkit suite"


def _page(n: int, footer: bool = True) -> str:
    """A page as a manual's generator writes it: a header, sections each in its own div, the site's closing
    section on (some) pages, with a build date that differs per page."""
    topic = _TOPICS[n]
    closing = (
        f'<div class="sect1"><h2 id="_quarry">QUARRY</h2><div class="sectionbody"><p>{FOOTER}, '
        f"built 2024-05-{n + 1:02d}</p></div></div>"
        if footer
        else ""
    )
    return (
        f'<html><head><title>guide-{n}(7)</title></head><body class="manpage">'
        f'<div id="header"><h1>guide-{n}(7) Manual Page</h1><h2>NAME</h2><div class="sectionbody">'
        f"<p>guide-{n} - a guide to {topic}</p></div></div>"
        f'<div id="content"><div class="sect1"><h2 id="_description">DESCRIPTION</h2><div class="sectionbody">'
        f"<p>This guide explains {topic}, step by step, with the commands to run and what each of them "
        f"prints, so that a reader new to the tool can follow it from an empty shell to the end.</p>"
        f"<p>Guide {n} closes with the mistakes people make most often when {topic}, and how to undo them "
        f"without losing any work that was already committed.</p></div></div>{closing}</div>"
        f'<div id="footer"><div id="footer-text">Last updated 2024-05-{n + 1:02d} 00:35:55 UTC</div></div>'
        "</body></html>"
    )


def _write(root: Path, numbers: range | list[int], footer: bool = True) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for n in numbers:
        (root / f"guide-{n}.html").write_text(_page(n, footer), encoding="utf-8")


def _texts(ix: Index, query: str) -> list[tuple[str, str]]:
    """(page, chunk text) of every chunk the query's words find."""
    return [(r.rel_path, r.text) for r in ix.search(query, k=100, mode="bm25", threshold=0.0, collapse="none")]


def _footer_pages(ix: Index) -> set[str]:
    return {page for page, text in _texts(ix, "Quarry toolkit suite built") if FOOTER in text}


def _own_text_everywhere(ix: Index, numbers: list[int], pages: tuple[str, ...] = ()) -> bool:
    found = {page for page, text in _texts(ix, "guide explains step by step") if "This guide explains" in text}
    return found == {f"guide-{n}.html" for n in numbers} | set(pages)


def test_a_footer_on_every_page_is_in_no_chunk_and_stays_out_as_pages_are_added(tmp_path: Path, minilm) -> None:
    root = tmp_path / "manual"
    _write(root, range(6))
    ix = Index(load_config({"index": "b" + os.urandom(4).hex()}), embedder=minilm)
    ix.update([root])
    assert _footer_pages(ix) == set()
    assert _own_text_everywhere(ix, list(range(6)))
    _write(root, [6])  # a page added: its footer is known to be the site's before it is chunked
    summary = ix.update([root])
    assert summary.added == 1 and summary.modified == 0
    assert _footer_pages(ix) == set()
    assert _own_text_everywhere(ix, list(range(7)))
    again = ix.update([root])  # nothing changed: nothing is chunked again
    assert (again.added, again.modified, again.unchanged) == (0, 0, 7)


def test_a_block_crossing_the_share_is_taken_out_of_every_page_holding_it_and_back(tmp_path: Path, minilm) -> None:
    root = tmp_path / "manual"
    _write(root, [0, 1])  # 2 of 10 pages: not the site's
    _write(root, range(2, 10), footer=False)
    ix = Index(load_config({"index": "b" + os.urandom(4).hex()}), embedder=minilm)
    ix.update([root])
    assert _footer_pages(ix) == {"guide-0.html", "guide-1.html"}
    _write(root, [10, 11])  # 4 of 12 pages: the site's; the two pages indexed with it are chunked again
    summary = ix.update([root])
    assert (summary.added, summary.modified) == (2, 2)
    assert _footer_pages(ix) == set()
    assert _own_text_everywhere(ix, list(range(12)))
    manifest = Manifest.load(ix.manifest_path)
    assert manifest is not None
    assert sorted(p.rsplit("/", 1)[1] for p, s in manifest.files.items() if s.dropped) == [
        f"guide-{n}.html" for n in (0, 1, 10, 11)
    ]
    for n in (10, 11):  # back to 2 of 10 pages: the footer is the pages' own again
        (root / f"guide-{n}.html").unlink()
    summary = ix.update([root])
    assert (summary.deleted, summary.modified) == (2, 2)
    assert _footer_pages(ix) == {"guide-0.html", "guide-1.html"}


def test_markdown_pages_keep_a_paragraph_they_all_repeat(tmp_path: Path, minilm) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    for n in range(6):
        (root / f"note-{n}.md").write_text(f"# Note {n}\n\nAbout {_TOPICS[n]}.\n\n{FOOTER}, built 2024.\n")
    ix = Index(load_config({"index": "b" + os.urandom(4).hex()}), embedder=minilm)
    ix.update([root])
    assert len(_footer_pages(ix)) == 6


def _prints(rel: str, blocks: list[str]) -> PagePrints:
    return PagePrints("/r", rel, 0, 0, sorted(blocks))


def test_the_share_is_counted_in_each_folder_and_a_page_of_only_such_blocks_keeps_them() -> None:
    pages = {f"/r/a/p{n}.html": _prints(f"a/p{n}.html", ["own" + str(n), "crumb"]) for n in range(5)}
    pages.update({f"/r/b/q{n}.html": _prints(f"b/q{n}.html", ["own-b" + str(n)]) for n in range(20)})
    pages["/r/a/only.html"] = _prints("a/only.html", ["crumb"])
    drops = boilerplate.repeated(pages)
    # 6 of 26 pages in all (23%), but 6 of 6 in a/: the folder a/'s own crumb
    assert drops == {f"/r/a/p{n}.html": ["crumb"] for n in range(5)}


def test_a_date_or_count_in_a_block_does_not_make_it_another() -> None:
    def doc(text: str) -> Document:
        return Document("/p.html", [Section(["Footer"], 2, [Block(text)])])

    a = boilerplate.fingerprints(doc("Last updated  2024-05-31 00:35:55 UTC"))
    assert a == boilerplate.fingerprints(doc("Last updated 2023-01-02\n10:11:12 UTC"))
    assert a != boilerplate.fingerprints(doc("Last edited 2024-05-31 00:35:55 UTC"))
    stripped = boilerplate.strip(doc("Last updated 2022-12-01 09:00:00 UTC"), a)
    assert [s.blocks for s in stripped.sections] == [[]]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_a_crawled_sites_footer_is_in_no_chunk(
    tmp_path: Path, mdrag_home: Path, minilm, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = tmp_path / "served" / "docs"
    _write(served, range(6))
    links = "".join(f'<li><a href="guide-{n}.html">Guide {n}</a></li>' for n in range(6))
    home = _page(12).replace('<div id="content">', f'<ul>{links}</ul><div id="content">')
    (served / "index.html").write_text(home, encoding="utf-8")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(served.parent)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr("mdrag.knowledge.web_source.WebsiteLoader.__init__.__defaults__", (0.0, 5.0))
        monkeypatch.setattr("mdrag.index.make_embedder", lambda config: minilm)
        project = tmp_path / "project"
        write_config(
            project,
            "allow_local_web: true\ndocsets:\n  - id: site\n    web_sources:\n      - type: website\n"
            f"        url: http://127.0.0.1:{server.server_address[1]}/docs/\n",
        )
        kb = KnowledgeBase(start=project)
        (result,) = knowledge.init_docset(kb, "site")
        assert result.ok, result.error
        assert len([f for f in result.files if f.endswith(".html")]) == 7
        with docset_index("site", project) as ix:
            update_docset_index(ix, kb.resolve("site"))
            assert _footer_pages(ix) == set()
            assert _own_text_everywhere(ix, list(range(6)), ("index.html",))
    finally:
        server.shutdown()
        server.server_close()
