"""Text a site repeats on its pages (taglines, footers, "last modified" lines, crumbs), left out of chunks.

A parser sees one file; which of its blocks a site's template put on every page shows only across the
folder. So the index run reads, before it chunks a folder's new pages (:func:`read_pages`), the
fingerprints of each HTML page's blocks (:func:`fingerprints`: each block's text with its whitespace
collapsed, lower-cased, its digits made one, so "Last updated 2024-05-31" and "Last updated 2023-01-02"
are one block), keeps them in the manifest (``Manifest.pages``), and
:func:`repeated` decides from them alone, never from a list of sites: a block is left out of a page when,
in a folder holding the page (its own, or one above it up to the indexed folder; each counts every page
below it), the folder has at least ``MIN_PAGES`` pages and the block is on ``SHARE`` of them and on
``MIN_REPEATS`` at least. A page none of whose blocks would be left keeps them all: a block is never
dropped from a page whose only content it is. :func:`strip` takes the blocks out of a parsed page before
it is chunked.

Each indexed page records the fingerprints that were left out of its chunks (``FileState.dropped``);
when pages come, change or go and a block crosses the share either way, :func:`stale` names the pages
whose record no longer matches: exactly those holding that block, which are chunked again.

The same prints decide which passages (long blocks) that a few pages of a folder repeat are kept on one
of them and left out of the others (:mod:`mdrag.ingest.passages`; :func:`decide` gives both).

Only HTML pages (:func:`applies`): they are rendered by a site's template, which adds the same blocks
to every page. Markdown, reStructuredText and the like are what authors wrote: a paragraph they repeat
(a shared note, an included snippet) is their content, and no template adds a footer to them.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import PurePosixPath

from mdrag.errors import IndexingCancelledError, ParseError, UnsupportedFormatError
from mdrag.ingest import passages
from mdrag.ingest.manifest import FileState, PagePrints
from mdrag.types import Document

__all__ = [
    "MIN_PAGES",
    "MIN_REPEATS",
    "SHARE",
    "applies",
    "decide",
    "fingerprints",
    "lines_of",
    "own_prints",
    "passage_prints",
    "prune",
    "read_pages",
    "repeated",
    "stale",
    "strip",
]

log = logging.getLogger(__name__)

#: A block on this share of a folder's pages is the site's, not the page's. Taglines and footers of a
#: template sit on most pages (Git's manual: its "Part of the git(1) suite" section on 57% of the pages);
#: content that pages share (an option's name such as "-q, --quiet", an included paragraph) was found on
#: 14% at most there: 30% leaves twice that.
SHARE = 0.3
MIN_PAGES = 5  # a folder of fewer pages says nothing about what its site repeats
MIN_REPEATS = 3  # nor does a block that two pages share
_SUFFIXES = (".html", ".htm")
_KEEP_CHARS = 64_000_000  # text of the pages read ahead kept for the run to chunk (more: parsed again)
_DIGITS = re.compile(r"\d+")


def applies(path: str) -> bool:
    """Whether repeated blocks are left out of the file at ``path``: an HTML page (see the module's docstring)."""
    return path.lower().endswith(_SUFFIXES)


def _key(text: str) -> str:
    norm = _DIGITS.sub("0", " ".join(text.split()).lower())
    # 32 bits: a page's own block mistaken for one its folder repeats takes one chance in 2**32 per pair
    return hashlib.blake2b(norm.encode("utf-8"), digest_size=4).hexdigest()


def fingerprints(doc: Document) -> list[str]:
    """The sorted distinct fingerprints of the page's blocks (text, code and tables; headings are not blocks:
    a section whose every block is left out is left out with its heading)."""
    return sorted({_key(b.text) for s in doc.sections for b in s.blocks if b.text.strip()})


def passage_prints(doc: Document) -> list[str]:
    """The sorted distinct fingerprints of the page's blocks long enough to be kept on one page only
    (:mod:`mdrag.ingest.passages`)."""
    return sorted({_key(b.text) for s in doc.sections for b in s.blocks if passages.is_passage(b.text)})


def own_prints(doc: Document) -> list[str]:
    """The sorted distinct fingerprints of the page's passages that sit under a heading of their own
    (:func:`mdrag.ingest.passages.is_own`): a page holding one so keeps it before a page that does not."""
    own: set[str] = set()
    for s in doc.sections:
        chars = passages.section_chars(s)  # once per section, not per passage
        own.update(
            _key(b.text) for i, b in enumerate(s.blocks) if passages.is_passage(b.text) and passages.is_own(s, i, chars)
        )
    return sorted(own)


def _folders(rel_path: str) -> list[str]:
    """The folders holding a page, from the indexed folder ("") down to its own."""
    parents = [p.as_posix() for p in PurePosixPath(rel_path).parents]
    return ["" if p == "." else p for p in reversed(parents)]


def _site(pages: Mapping[str, PagePrints]) -> dict[str, list[str]]:
    """For each page, the sorted fingerprints of the blocks its site repeats (see the module's docstring)."""
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    sizes: Counter[tuple[str, str]] = Counter()
    for p in pages.values():
        for folder in _folders(p.rel_path):
            counts[p.root, folder].update(p.blocks)
            sizes[p.root, folder] += 1
    site: dict[tuple[str, str], set[str]] = {}
    for group, n in sizes.items():
        if n >= MIN_PAGES:
            least = max(MIN_REPEATS, SHARE * n)
            site[group] = {k for k, c in counts[group].items() if c >= least}
    out: dict[str, list[str]] = {}
    for path, p in pages.items():
        common: set[str] = set()
        for folder in _folders(p.rel_path):
            common |= site.get((p.root, folder), set())
        drop = common.intersection(p.blocks)
        if drop and len(drop) < len(p.blocks):  # a page that is only such blocks keeps them
            out[path] = sorted(drop)
    return out


def decide(pages: Mapping[str, PagePrints]) -> tuple[dict[str, list[str]], dict[str, dict[str, list[str]]]]:
    """What is left out of each page's chunks, and kept for others, from the pages' prints alone: (for each
    page, the sorted fingerprints of its blocks left out, as its site's or as passages another page keeps,
    :mod:`mdrag.ingest.passages`; for each page that keeps passages other pages leave out, each one's
    fingerprint with those pages, sorted). Pages with none are not listed."""
    site = _site(pages)
    groups = passages.keepers(pages, site)
    drops = {path: set(fps) for path, fps in site.items()}
    for held in groups.values():
        for fp, others in held.items():
            for path in others:
                drops.setdefault(path, set()).add(fp)
    for path, drop in drops.items():
        if len(drop) >= len(pages[path].blocks):  # a page none of whose blocks would be left keeps its passages
            drops[path] = set(site.get(path, ()))
    kept: dict[str, dict[str, list[str]]] = {}
    for keeper, held in groups.items():
        for fp, others in held.items():
            if leaving := sorted(p for p in others if fp in drops[p]):
                kept.setdefault(keeper, {})[fp] = leaving
    return {path: sorted(drop) for path, drop in drops.items() if drop}, kept


def repeated(pages: Mapping[str, PagePrints]) -> dict[str, list[str]]:
    """For each page (by its key in ``pages``), the sorted fingerprints of its blocks that are left out of
    its chunks (:func:`decide`); pages with none are not listed."""
    return decide(pages)[0]


def stale(files: Mapping[str, FileState], pages: Mapping[str, PagePrints], skip: Iterable[str] = ()) -> list[str]:
    """The indexed HTML ``files`` whose chunks left out other blocks than :func:`decide` now gives for them,
    or that keep other passages for other pages (a block crossed the share, or a passage's keeper changed, as
    pages came, changed or went): they are chunked again. ``skip``: files being indexed anyway. A file with
    no prints, or a copy of another (its chunks are the other's), is left as it is."""
    (drops, kept), skipped = decide(pages), set(skip)
    return sorted(
        path
        for path, state in files.items()
        if path in pages
        and path not in skipped
        and state.copy_of is None
        and ((state.dropped or []) != drops.get(path, []) or sorted(state.kept or ()) != sorted(kept.get(path, ())))
    )


def strip(doc: Document, drop: Iterable[str]) -> Document:
    """The page without the blocks whose fingerprint is in ``drop`` (sections left empty are not chunked)."""
    gone = set(drop)
    if not gone:
        return doc
    sections = [replace(s, blocks=[b for b in s.blocks if _key(b.text) not in gone]) for s in doc.sections]
    return replace(doc, sections=sections)


def lines_of(doc: Document, prints: Iterable[str]) -> dict[str, list[int]]:
    """For each of ``prints``, the [first, last] line of the page's first block with that fingerprint ([0, 0]:
    none has it, or its lines are not known)."""
    wanted, out = set(prints), {}
    for s in doc.sections:
        for b in s.blocks:
            key = _key(b.text)
            if key in wanted and key not in out and b.line_start is not None:
                out[key] = [b.line_start, b.line_end or b.line_start]
    return {fp: out.get(fp, [0, 0]) for fp in sorted(wanted)}


def read_pages(
    paths: Iterable[str],
    found: Mapping[str, tuple[str, str, int, int]],
    pages: dict[str, PagePrints],
    parse: Callable[[str], Document],
    cancel: threading.Event | None = None,
) -> dict[str, Document | Exception]:
    """Read the prints of the HTML pages among ``paths`` whose prints in ``pages`` are not those of the page
    the scan ``found``, with ``parse``, into ``pages``: before any page of a folder is chunked, so that what
    its site repeats is known. Returns what each parse gave (the document, up to ``_KEEP_CHARS`` of text in
    all, or the ParseError, UnsupportedFormatError or OSError it raised: such a page has no prints), for the
    run to chunk without parsing again. Once ``cancel`` is set, IndexingCancelledError is raised."""
    todo = [p for p in paths if applies(p) and p in found and not (p in pages and pages[p].current(found[p]))]
    if todo:
        log.info("reading %d HTML pages for the blocks their site repeats", len(todo))
    out: dict[str, Document | Exception] = {}
    kept = 0
    for path in todo:
        if cancel is not None and cancel.is_set():
            raise IndexingCancelledError("indexing was cancelled before it finished; the next run completes it")
        try:
            doc = parse(path)
        except (ParseError, UnsupportedFormatError, OSError) as e:
            pages.pop(path, None)
            out[path] = e
            continue
        root, rel, mtime_ns, size = found[path]
        pages[path] = PagePrints(root, rel, mtime_ns, size, fingerprints(doc), passage_prints(doc), own_prints(doc))
        chars = sum(len(b.text) for s in doc.sections for b in s.blocks)
        if kept + chars <= _KEEP_CHARS:
            out[path], kept = doc, kept + chars
    return out


def prune(pages: dict[str, PagePrints], roots: Iterable[str], gone: Callable[[str, PagePrints], bool]) -> None:
    """Forget the prints of pages outside the index's ``roots``, or ``gone`` (deleted, or now skipped)."""
    keep = set(roots)
    for path in [p for p, prints in pages.items() if prints.root not in keep or gone(p, prints)]:
        del pages[path]
