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
  the page that shares passages with the fewest other pages, then the one with the smaller share of its
  passages found elsewhere, then the first path. The page that gathers passages from many pages (an
  all-in-one reference) loses its repeats to the pages each came from; of pages that include the same
  source (a command and its synonym), the narrower one keeps it;
- a page none of whose blocks would be left keeps them all, as with the site's blocks.

The choice is made from the pages' prints alone (:class:`~mdrag.ingest.manifest.PagePrints`: ``passages``),
as the site's blocks are, so that :func:`mdrag.ingest.boilerplate.stale` finds the pages to chunk again when
a page that holds such a passage comes, changes or goes: the keeper may change, and each page records what
was left out of it (``FileState.dropped``). A page records too which of its passages others leave out for it
(``FileState.kept``), so that a result from it names those pages (:mod:`mdrag.retrieval.copies`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from mdrag.ingest.manifest import PagePrints

__all__ = ["PASSAGE_CHARS", "is_passage", "keepers"]

#: A block this long (about two sentences) is a passage that reads alone; a shorter one reads through its page.
PASSAGE_CHARS = 200


def is_passage(text: str) -> bool:
    """Whether a block's text is long enough to be kept on one page only (see the module's docstring)."""
    return len(" ".join(text.split())) >= PASSAGE_CHARS


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

    def rank(path: str) -> tuple[int, float, str]:
        return len(others[path]) - 1, repeated[path] / max(1, len(pages[path].passages)), path

    out: dict[str, dict[str, set[str]]] = defaultdict(dict)
    for (_, fp), paths in shared.items():
        keeper = min(paths, key=rank)
        out[keeper][fp] = paths - {keeper}
    return dict(out)
