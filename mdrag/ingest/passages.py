"""Passages two or more HTML pages of one indexed folder repeat, kept on one of them and left out of the others.

A manual's generator includes one source into several pages: Git's manual puts the text of each command's
configuration variables both on the command's page (git-gc.html's CONFIGURATION) and on git-config.html, the
reference of every variable; its diff options are on git-diff, git-log, git-show and four more. Indexed as
they are, every such passage is several chunks of the same text, which fill a result list with one answer
and make the page that gathers them (git-config.html) a large share of the index. A block the site repeats
on many pages is its template (mdrag.ingest.boilerplate); a passage on a few is content, kept once:

- what is a passage: a block (paragraph, list, table, code, a definition's text) of at least
  ``PASSAGE_CHARS`` characters, its text compared as the boilerplate's fingerprints compare it. A shorter
  block ("Be quiet.", "Defaults to true.", an option's one line) says little outside its page and is kept
  wherever it is;
- which page keeps it: of the pages of one indexed folder holding it (and not leaving it out as the site's),
  a page where it sits under a heading of its own (:func:`is_own`: it is most of its section's text, or the
  section's heading names its item), then the page that shares passages with the fewest other pages, then
  the one with the smaller share of its passages found elsewhere, then the first path. A named item's page
  keeps the item's text before a guide that repeats it as one paragraph among others under a heading that
  does not name it: a search naming the item finds it under its name, and the guide is named with it. Of
  pages that hold it alike (each under its own heading, or neither), the page that gathers passages from
  many pages (an all-in-one reference) loses its repeats to the pages each came from, and of pages that
  include the same source (a command and its synonym), the narrower one keeps it;
- a page none of whose blocks would be left keeps them all, as with the site's blocks.

The choice is made from the pages' prints alone (:class:`~mdrag.ingest.manifest.PagePrints`: ``passages``
and ``own``, read with the page), as the site's blocks are, so that :func:`mdrag.ingest.boilerplate.stale`
finds the pages to chunk again when a page that holds such a passage comes, changes or goes (or moves it
under another heading): the keeper may change, and each page records what was left out of it
(``FileState.dropped``). A page records too which of its passages others leave out for it (``FileState.kept``),
so that a result from it names those pages (:mod:`mdrag.retrieval.copies`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from mdrag.ingest.manifest import PagePrints
from mdrag.types import Section

__all__ = ["OWN_SHARE", "PASSAGE_CHARS", "is_own", "is_passage", "keepers", "section_chars"]

#: A block this long (about two sentences) is a passage that reads alone; a shorter one reads through its page.
PASSAGE_CHARS = 200
#: A passage this share of its section's text or more is the section's body: an item's text under its name, the
#: term or a short note beside it ("Defaults to true."), not one paragraph of a guide's several.
OWN_SHARE = 0.5


def _norm(text: str) -> str:
    return " ".join(text.split())


def is_passage(text: str) -> bool:
    """Whether a block's text is long enough to be kept on one page only (see the module's docstring)."""
    return len(_norm(text)) >= PASSAGE_CHARS


def _names(heading: str, name: str) -> bool:
    """Whether ``name`` is one of the names ``heading`` joins with ", " (a group of named items) or all of it."""
    return bool(name) and (
        heading == name or heading.startswith(name + ", ") or heading.endswith(", " + name) or f", {name}, " in heading
    )


def section_chars(section: Section) -> int:
    """The length of a section's text, spaces collapsed, as :func:`is_own` weighs a passage against it."""
    return sum(len(_norm(b.text)) for b in section.blocks)


def is_own(section: Section, index: int, chars: int | None = None) -> bool:
    """Whether the passage ``section.blocks[index]`` sits under a heading of its own (see the module's
    docstring): it is at least ``OWN_SHARE`` of its section's text, or the section's heading names its item
    (a group of short named items, mdrag.parsers.html_items, headed by their names joined with ", ": a term
    before it in the section, each of its lines, or the bold name it starts with, is one of them).
    ``chars``: :func:`section_chars` of the section, when the caller asks of several of its blocks."""
    if not section.heading_path:
        return False
    text = _norm(section.blocks[index].text)
    if len(text) >= OWN_SHARE * (section_chars(section) if chars is None else chars):
        return True
    heading = _norm(section.heading_path[-1]).lower()
    for term in section.blocks[:index]:
        if len(term.text) >= PASSAGE_CHARS:
            continue
        lines = [_norm(line).lower() for line in term.text.splitlines() if line.strip()]
        if lines and all(_names(heading, line) for line in lines):
            return True
    lead = text.lower()  # a bold name leading its item's text: "gc.auto: when there are ..."
    names = heading.split(", ")
    return any(len(n) > 1 and lead.startswith(n) and not lead[len(n) : len(n) + 1].isalnum() for n in names)


def keepers(pages: Mapping[str, PagePrints], site: Mapping[str, list[str]]) -> dict[str, dict[str, set[str]]]:
    """For each page (by its key in ``pages``) that keeps passages other pages of its folder hold too (see the
    module's docstring): each such passage's fingerprint, with the other pages holding it. ``site``: the blocks
    left out of each page as its site's, which are not passages here."""
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)  # (root, print) -> the pages holding it
    for path, p in pages.items():
        gone = set(site.get(path, ()))
        for fp in p.passages:
            if fp not in gone:
                holders[p.root, fp].add(path)
    shared = {key: paths for key, paths in holders.items() if len(paths) > 1}
    others: dict[str, set[str]] = defaultdict(set)  # page -> the pages it shares a passage with
    repeated: dict[str, int] = defaultdict(int)  # page -> how many of its passages others hold
    for paths in shared.values():
        for path in paths:
            others[path] |= paths
            repeated[path] += 1

    def rank(path: str, fp: str) -> tuple[bool, int, float, str]:
        share = repeated[path] / max(1, len(pages[path].passages))
        return fp not in pages[path].own, len(others[path]) - 1, share, path

    out: dict[str, dict[str, set[str]]] = defaultdict(dict)
    for (_, fp), paths in shared.items():
        keeper = min(paths, key=lambda path: rank(path, fp))
        out[keeper][fp] = paths - {keeper}
    return dict(out)
