"""Notes vaults' links in ranking: the notes that the best candidates link to are lifted a little.

A question often names a note's subject while its answer lives in a note that note links to ("what
dates does `happens` look at?" asked of the note that links to the filters page). Each of a search's
:data:`~mdrag.knobs.LINK_SOURCES` best candidates (before the cut) lends each note its lines link to
a share of the list's score range: ``search.link_boost`` times the linking candidate's own place in
that range (1 for the best, 0 for the last), the largest share a note is lent, added to the score of
that note's best candidate only, which then moves up; nothing else moves. A linked note that is not
among the candidates is not fetched.

Only chunks of notes vaults carry links (their ``links`` metadata, :mod:`mdrag.parsers.vault`): the
candidates of any other corpus are returned as they came, untouched, and the index's links are not
read. The figures that chose the weight and the number of sources are in benchmarks/RESULTS.md
("Notes vault questions").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from itertools import islice

from mdrag.knobs import LINK_SOURCES
from mdrag.store.base import Hit

__all__ = ["Resolver", "lift"]

#: The note (absolute path) that a link written ``target`` in the note at ``source`` leads to, or None:
#: :meth:`mdrag.retrieval.links.Notes.resolve`.
Resolver = Callable[[str, str], str | None]


def lift(
    rows: Iterable[Hit],
    weight: float,
    resolver: Callable[[], Resolver | None],
    shown: Callable[[Hit], bool] = lambda row: True,
) -> Iterable[Hit]:
    """``rows`` (a ranking's candidates, best first) with the best candidate of each note that one of the
    first :data:`~mdrag.knobs.LINK_SOURCES` candidates ``shown`` links to moved up as the module says, its
    ``rank_score`` raised by its lift; ``rows`` itself when nothing links (no vault note among the
    sources, ``weight`` 0, a link to no candidate). ``resolver`` gives the index's link resolver, and is
    called only when a source has links. ``rows`` may be walked more than once (a list, or
    :class:`~mdrag.retrieval.candidates.Candidates`: only its sources are read unless one has links)."""
    if weight <= 0:
        return rows
    sources = list(islice((r for r in rows if shown(r)), LINK_SOURCES))
    if not any((r.metadata or {}).get("links") for r in sources):
        return rows
    resolve = resolver()
    scores = [float(r.rank_score) for r in rows]
    low, span = min(scores), max(scores) - min(scores)
    if resolve is None or span <= 0:
        return rows
    lent: dict[str, float] = {}  # linked note (absolute path) -> the share of the range it is lent
    for r in sources:
        share = weight * (float(r.rank_score) - low) / span
        for written in (r.metadata or {}).get("links") or []:
            note = resolve(r.path, str(written))
            if note is not None and note != r.path and share > lent.get(note, 0.0):
                lent[note] = share
    lifted: list[Hit] = []
    rest: list[Hit] = []
    for r in rows:
        share = lent.pop(r.path, 0.0)  # the note's best candidate only: it comes first
        if share > 0:
            lifted.append(replace(r, rank_score=float(r.rank_score) + share * span))
        else:
            rest.append(r)
    return _merged(lifted, rest) if lifted else rows


def _merged(lifted: Sequence[Hit], rest: Sequence[Hit]) -> list[Hit]:
    """``rest`` in its order, each of ``lifted`` put before the first row of ``rest`` that scores below it."""
    out: list[Hit] = []
    waiting = sorted(lifted, key=lambda r: -r.rank_score)
    for r in rest:
        while waiting and waiting[0].rank_score > r.rank_score:
            out.append(waiting.pop(0))
        out.append(r)
    return out + waiting
