"""Cutting text under a size limit, with overlap, and sizing texts in characters or tokens.

Pure functions on a text and spans of it (``lo..hi``): every piece is a slice
of the text, so it keeps the source's lines. Cuts fall after the coarsest
separator that works (paragraph, line, sentence, word, character), never
inside a ``keep`` span while there is another place to cut.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Sequence

__all__ = [
    "SEPARATORS",
    "Sizes",
    "TokenCounter",
    "char_lengths",
    "cut_spans",
    "separator_positions",
    "split_text",
    "strip_span",
    "token_counts",
    "word_tail",
]

TokenCounter = Callable[[Sequence[str]], list[int]]
Sizes = Callable[[Sequence[str]], list[int]]  # the size of each text, in one call: lengths or token counts

# Separators tried in order when text must be cut: paragraph, line, sentence, word, character.
SEPARATORS = ("\n\n", "\n", ". ", " ", "")

_COUNT_BATCH = 256  # texts per count_tokens call


def strip_span(text: str, lo: int, hi: int) -> tuple[int, int]:
    """``lo..hi`` without the whitespace at its ends (``lo == hi`` when it is all whitespace)."""
    piece = text[lo:hi]
    start = len(piece) - len(piece.lstrip())
    return lo + start, lo + len(piece.rstrip()) if piece.strip() else lo


def separator_positions(text: str, lo: int, hi: int, sep: str, keep: Sequence[tuple[int, int]]) -> list[int]:
    """The places after each ``sep`` inside ``lo..hi`` (every place for ""), none inside a ``keep`` span."""
    if sep:
        found, i = [], text.find(sep, lo, hi)
        while i >= 0:
            found.append(i + len(sep))
            i = text.find(sep, i + len(sep), hi)
    else:
        found = list(range(lo + 1, hi))
    return [p for p in found if lo < p < hi and not any(a < p < b for a, b in keep)]


def _boundaries(text: str, lo: int, hi: int, keep: Sequence[tuple[int, int]]) -> list[int]:
    """Where ``lo..hi`` may be cut: after the coarsest separator found, never inside a ``keep`` span."""
    for sep in SEPARATORS:
        cuts = separator_positions(text, lo, hi, sep, keep)
        if cuts:
            return cuts
    return _boundaries(text, lo, hi, ()) if keep else []


def split_text(text: str, limit: int, overlap: int = 0, measure: Callable[[str], int] = len) -> list[str]:
    """Cut ``text`` into pieces of at most ``limit`` (as ``measure`` counts),
    preferring paragraph, then line, sentence and word boundaries, with about
    ``overlap`` of shared text between neighbours."""
    if measure(text) <= limit:
        return [text]
    return [text[a:b] for a, b in cut_spans(text, 0, len(text), limit, overlap, lambda ts: [measure(t) for t in ts])]


def cut_spans(
    text: str, lo: int, hi: int, limit: int, overlap: int, sizes: Sizes, keep: Sequence[tuple[int, int]] = ()
) -> list[tuple[int, int]]:
    """:func:`split_text` of ``text[lo:hi]``, known to be over ``limit``, as spans of ``text``.

    Each piece is a slice of the text, so its lines are the source's lines; the
    overlap is the end of the previous piece. No cut falls inside a ``keep``
    span (a block that fits) while there is another place to cut. Every
    level's parts are sized in one call, and so are its pieces when they are
    checked: a tokenizer called once per word or character is what made a
    large file without paragraph breaks slow.
    """

    def kept(a: int, b: int) -> bool:
        a, b = strip_span(text, a, b)
        return any(ka <= a and b <= kb for ka, kb in keep)

    edges = [lo, *_boundaries(text, lo, hi, keep), hi]
    parts = list(zip(edges, edges[1:]))
    pieces: list[tuple[int, int]] = []
    window: deque[tuple[int, int, int]] = deque()  # parts of the piece being built: start, end, size
    total = 0
    for (a, b), size in zip(parts, sizes([text[a:b] for a, b in parts])):
        if size > limit:  # a part too big for any piece: flush, then cut it finer (unless it is kept)
            if window:
                pieces.append((window[0][0], window[-1][1]))
                window.clear()
                total = 0
            pieces.extend([(a, b)] if kept(a, b) else cut_spans(text, a, b, limit, overlap, sizes, keep))
            continue
        if total + size > limit and window:
            prev = (window[0][0], window[-1][1])
            pieces.append(prev)
            while window and (total > overlap or total + size > limit):
                total -= window.popleft()[2]
            if not window and overlap:  # parts longer than the overlap: share the previous piece's last words
                start = word_tail(text, *prev, min(overlap, limit - size), sizes)
                if start is not None:
                    window.append((start, a, sizes([text[start:a]])[0]))
                    total = window[0][2]
        window.append((a, b, size))
        total += size
    if window:
        pieces.append((window[0][0], window[-1][1]))
    # Measures that are not additive (tokens) can overshoot: check and cut again.
    stripped = [s for s in (strip_span(text, a, b) for a, b in pieces) if s[0] < s[1]]
    out: list[tuple[int, int]] = []
    for (a, b), size in zip(stripped, sizes([text[a:b] for a, b in stripped])):
        fine = size <= limit or b - a <= 1 or kept(a, b)
        out.extend([(a, b)] if fine else cut_spans(text, a, b, limit, 0, sizes, keep))
    return out


def word_tail(text: str, lo: int, hi: int, budget: int, sizes: Sizes) -> int | None:
    """Where the last words of ``text[lo:hi]`` that fit in ``budget`` (not all of them) start.

    Tails one word longer each are sized in growing groups, one call per group,
    up to the first that does not fit.
    """
    if budget <= 0:
        return None
    starts = [m.start() for m in re.finditer(r"\S+", text[lo:hi])]
    fit = 0  # words in the longest tail known to fit
    group = 8
    while fit < len(starts):
        lengths = range(fit + 1, min(len(starts), fit + group) + 1)
        tails = [text[lo + starts[-k] : hi].rstrip() for k in lengths]
        fits = [n <= budget for n in sizes(tails)]
        if not all(fits):
            fit += fits.index(False)
            break
        fit = lengths[-1]
        group *= 2
    return lo + starts[-fit] if 0 < fit < len(starts) else None


def char_lengths(texts: Sequence[str]) -> list[int]:
    return [len(t) for t in texts]


def token_counts(count_tokens: TokenCounter, offset: int = 0) -> Sizes:
    """``count_tokens`` (plus ``offset`` each), each distinct text counted once, at most
    ``_COUNT_BATCH`` texts per call.

    A text cut into characters or words repeats the same parts many times; and a
    tokenizer holds the encodings of all the texts of one call at once (one
    call for every chunk of a large file took hundreds of megabytes).
    """

    def sizes(texts: Sequence[str]) -> list[int]:
        distinct = list(dict.fromkeys(texts))
        counts: list[int] = []
        for i in range(0, len(distinct), _COUNT_BATCH):
            counts.extend(count_tokens(distinct[i : i + _COUNT_BATCH]))
        known = {t: n + offset for t, n in zip(distinct, counts)}
        return [known[t] for t in texts]

    return sizes
