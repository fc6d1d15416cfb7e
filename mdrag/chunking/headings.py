"""``chunk.strategy: headings``, the default: sections cut by size with overlap, fitted to the model's window.

Pure functions, no I/O. A chunk never crosses a heading. Inside a section,
paragraphs, tables and fenced code blocks are packed greedily up to
``size``; consecutive chunks share up to ``overlap`` of trailing text, never
more than a third of either (no chunk is mostly a copy of its neighbour). A code
block or table that fits the model's window (or, without one, a chunk) is
never cut, even when it is larger than ``size``. A chunk whose embedded text
(heading context + body) is longer than the embedder's window is split again,
at a block's edge where it can be, because the model silently drops
everything past it. A remainder too small to stand alone joins its neighbour
(or the two share the text evenly), and no chunk is only the overlap of the one
before it. Every chunk is a slice of its section's text, so its line span is
the lines it holds; a chunk that starts among a table's rows has the table's
header written before them (:mod:`mdrag.chunking.units`), and no cut falls
inside a header or just after it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import partial

from mdrag.chunking.build import Cut
from mdrag.chunking.deadline import Deadline
from mdrag.chunking.settings import ChunkSettings
from mdrag.chunking.split import (
    SEPARATORS,
    Sizes,
    TokenCounter,
    char_lengths,
    cut_spans,
    separator_positions,
    strip_span,
    token_counts,
    word_tail,
)
from mdrag.chunking.units import SectionText, block_units
from mdrag.chunking.window import Window
from mdrag.types import Document

__all__ = ["heading_cuts"]

_SHARED = 3  # neighbouring chunks share at most a third of either one's text
_WORD_START = re.compile(r"(?<=\s)\S")


def heading_cuts(
    doc: Document,
    settings: ChunkSettings,
    count_tokens: TokenCounter | None,
    max_tokens: int | None,
    header: Callable[[int, bool], str],
    deadline: Deadline | None = None,
) -> list[Cut]:
    """``doc`` cut by its headings, then by size: the chunks' texts and where they lie.

    ``count_tokens``/``max_tokens`` come from the embedder: with them, no chunk's
    embedded text (``header(section index, first chunk of the file)`` and its
    text) is longer than the model's window, and a block that fits the window
    is never cut. ``deadline`` is checked before every call to ``sizes`` and between sections.
    """
    sizes = token_counts(count_tokens) if count_tokens is not None and settings.unit == "tokens" else char_lengths
    if deadline is not None:
        sizes = deadline.guard(sizes)
    window = None
    if count_tokens is not None and max_tokens is not None:
        window = Window(header, count_tokens, max_tokens)
    texts = [SectionText(block_units(section.blocks)) for section in doc.sections]
    pieces: list[tuple[int, int, int]] = []  # (section index, start, end in its text)
    for si, sec in enumerate(texts):
        if deadline is not None:
            deadline.check()
        fits = None
        if window is not None:
            fits = partial(window.fits_span, sec, si, not pieces)
        pieces.extend((si, a, b) for a, b in _pack(sec, settings.size, settings.overlap, sizes, fits))
    pieces = [(si, *strip_span(texts[si].text, a, b)) for si, a, b in pieces]
    pieces = [(si, a, b) for si, a, b in pieces if a < b]
    if window is not None:
        pieces = window.fit(pieces, texts)
    pieces = _trim_overlaps(pieces, texts)
    pieces = _merge_remainders(pieces, texts, settings.size, sizes, window)
    pieces = _trim_overlaps(pieces, texts)  # a boundary moved between two pieces can leave one mostly overlap
    return [(texts[si].piece(a, b), si, texts[si].line(a), texts[si].line(b - 1)) for si, a, b in pieces]


def _pack(
    sec: SectionText, size: int, overlap: int, sizes: Sizes, fits: Callable[[int, int], bool] | None
) -> list[tuple[int, int]]:
    """Greedy packing of a section's units into chunk-sized spans, with text overlap.

    ``fits`` tells whether a span fits the model's window: an atomic unit that
    does is kept whole even when it is larger than ``size``. A table that is
    cut is cut between rows, never just after its header, into pieces that fit
    with the header written before them, and no text of it is carried over.
    """
    flat: list[tuple[int, int, int, bool]] = []  # spans no larger than a chunk: start, end, size, atomic
    for (a, b), u, u_size in zip(sec.spans, sec.units, sizes([u.text for u in sec.units])):
        if u_size <= size or (u.atomic and fits is not None and fits(a, b)):
            flat.append((a, b, u_size, u.atomic))
        else:
            heads = sec.headers(a, b)  # a table's header, repeated before each piece after its first
            limit = max(size - sizes([heads[0] + "\n"])[0], size // 2) if heads else size
            pieces = cut_spans(sec.text, a, b, limit, 0 if u.atomic else overlap, sizes, sec.header_keeps(a, b))
            flat.extend((p, q, n, u.table) for (p, q), n in zip(pieces, sizes([sec.piece(p, q) for p, q in pieces])))
    chunks: list[tuple[int, int]] = []
    cur: list[tuple[int, int, int, bool]] = []
    cur_size = 0
    for a, b, u_size, atomic in flat:
        if cur and cur_size + 2 + u_size > size:
            chunks.append((cur[0][0], cur[-1][1]))
            la, lb, _, l_atomic = cur[-1]
            cur, cur_size = [], 0
            # The end of the last text unit, cut at a word boundary; a piece of a cut unit has its own.
            start = None if l_atomic or a < lb else word_tail(sec.text, la, lb, min(overlap, size - u_size - 2), sizes)
            if start is not None:
                cur_size = sizes([sec.text[start:lb]])[0]
                cur = [(start, lb, cur_size, False)]
        cur.append((a, b, u_size, atomic))
        cur_size += u_size + (2 if len(cur) > 1 else 0)
    if cur:
        chunks.append((cur[0][0], cur[-1][1]))
    return chunks


def _trim_overlaps(pieces: list[tuple[int, int, int]], texts: list[SectionText]) -> list[tuple[int, int, int]]:
    """Overlap cut back, at a word, so that neighbours share at most a third (``_SHARED``) of either one's text.

    The overlap repeats the end of the piece before for continuity; where the
    window had cut that piece short (a paragraph alone), its last 200
    characters made the next piece mostly a copy of it. A piece whose own text
    is tiny keeps only a little overlap, and joins a neighbour as a remainder.
    """
    out = list(pieces)
    for i in range(1, len(out)):
        (ps, pa, pb), (si, a, b) = out[i - 1], out[i]
        if ps != si or not pa < a < pb < b:
            continue
        # shared <= previous / _SHARED, and shared <= (own text + shared) / _SHARED
        room = min((pb - pa) // _SHARED, (b - pb) // (_SHARED - 1))
        if pb - a <= room:
            continue
        text = texts[si].text
        word = _WORD_START.search(text, pb - room, pb) if room > 0 else None
        out[i] = (si, *strip_span(text, word.start() if word else pb, b))
    return out


def _merge_remainders(
    pieces: list[tuple[int, int, int]], texts: list[SectionText], size: int, sizes: Sizes, window: Window | None
) -> list[tuple[int, int, int]]:
    """Pieces under a tenth of ``size`` joined to a neighbour; pieces that are only overlap dropped.

    A remainder (the end of a paragraph cut for size, the last rows of a long
    table) joins the previous or next piece of its section when the two fit
    together in the model's window (without one: in ``size`` plus a tenth), so
    a chunk can pass ``size`` by a remainder; when they do not fit, the
    boundary between them moves to their middle. A piece lying inside a
    neighbour adds nothing and is dropped.
    """
    pieces = _drop_inside(pieces)
    minimum = size // 10
    known = dict(zip(pieces, sizes([texts[si].piece(a, b) for si, a, b in pieces])))

    def size_of(p: tuple[int, int, int]) -> int:
        if p not in known:
            known[p] = sizes([texts[p[0]].piece(p[1], p[2])])[0]
        return known[p]

    checked: dict[tuple[int, bool, int, int], bool] = {}  # (section, first, start, end) -> fits

    def fits(si: int, first: bool, spans: Sequence[tuple[int, int]]) -> list[bool]:
        todo = list(dict.fromkeys((a, b) for a, b in spans if (si, first, a, b) not in checked))
        parts = [texts[si].piece(a, b) for a, b in todo]
        ok = window.fits(si, first, parts) if window is not None else [n <= size + minimum for n in sizes(parts)]
        checked.update(((si, first, a, b), f) for (a, b), f in zip(todo, ok))
        return [checked[si, first, a, b] for a, b in spans]

    # The joins to try, checked in one call per section and kind of header.
    joins: dict[tuple[int, bool], list[tuple[int, int]]] = {}
    for i, (si, a, b) in enumerate(pieces):
        if known[pieces[i]] < minimum:
            for j in (i - 1, i + 1):
                if 0 <= j < len(pieces) and pieces[j][0] == si:
                    span = (min(a, pieces[j][1]), max(b, pieces[j][2]))
                    joins.setdefault((si, min(i, j) == 0), []).append(span)
    for (si, first), spans in joins.items():
        fits(si, first, spans)

    out = list(pieces)
    i = 0
    while i < len(out):
        si, a, b = out[i]
        if size_of(out[i]) >= minimum:
            i += 1
            continue
        near = [j for j in (i - 1, i + 1) if 0 <= j < len(out) and out[j][0] == si]
        # Both joins, and the joins with the pieces after them, in one call: a run of remainders joins one by one.
        direct = {(min(i, j) == 0, min(a, out[j][1]), max(b, out[j][2])) for j in near}
        if any((si, *d) not in checked for d in direct):
            ends = [out[t][2] for t in range(i, min(i + 18, len(out))) if out[t][0] == si]
            for first, lo, _ in direct:
                fits(si, first, [(lo, max(b, hi)) for hi in ends])
        for j in near:
            k = min(i, j)
            lo, hi = min(a, out[j][1]), max(b, out[j][2])
            if fits(si, k == 0, [(lo, hi)])[0]:
                out[k : k + 2] = [(si, lo, hi)]
                i = k  # joined to another remainder, it may still be one
                break
        else:
            if near:
                k = min(i, near[0])
                lo, hi = out[k][1], out[k + 1][2]
                cut = _halve(texts[si], lo, hi, minimum, sizes, partial(fits, si, k == 0))
                if cut is not None:
                    out[k : k + 2] = [(si, lo, cut[0]), (si, cut[1], hi)]
            i += 1

    return _drop_inside(out)


def _drop_inside(pieces: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``pieces`` less those that lie inside a neighbour (only overlap), and less the second of two equal ones.

    Two pieces are equal where the window cut the same text off the end of one
    chunk and the start of the next (a list item that was all the overlap).
    """

    def inside(p: tuple[int, int, int], q: tuple[int, int, int]) -> bool:
        return p[0] == q[0] and q[1] <= p[1] and p[2] <= q[2]

    out: list[tuple[int, int, int]] = []
    for p, after in zip(pieces, [*pieces[1:], None]):
        if not (out and inside(p, out[-1])) and not (after is not None and after != p and inside(p, after)):
            out.append(p)
    return out


def _halve(
    sec: SectionText,
    lo: int,
    hi: int,
    minimum: int,
    sizes: Sizes,
    fits: Callable[[Sequence[tuple[int, int]]], list[bool]],
) -> tuple[int, int] | None:
    """Where to cut ``lo..hi`` in two pieces that both fit: (end of the first, start of the second).

    The coarsest separator that allows it, nearest the middle; never inside a
    block that fits, but between the rows of a table (rather than leave a
    remainder alone).
    """
    blocks = sec.atomic(lo, hi, tables=False)
    keep = [s for s, ok in zip(blocks, fits(blocks)) if ok] + sec.header_keeps(lo, hi)
    mid = (lo + hi) / 2
    for sep in SEPARATORS:
        cuts = sorted(separator_positions(sec.text, lo, hi, sep, keep), key=lambda p: abs(p - mid))[:32]
        pairs = [(strip_span(sec.text, lo, p), strip_span(sec.text, p, hi)) for p in cuts]
        spans = [s for pair in pairs for s in pair]
        ok = [f and n >= minimum for f, n in zip(fits(spans), sizes([sec.piece(a, b) for a, b in spans]))]
        for c, (left, right) in enumerate(pairs):
            if ok[2 * c] and ok[2 * c + 1]:
                return left[1], right[0]
    return None
