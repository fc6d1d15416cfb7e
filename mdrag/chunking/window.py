"""The embedder's window: whether a chunk's text fits under its header, and cutting the ones that do not."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mdrag.chunking.split import TokenCounter, cut_spans, token_counts
from mdrag.chunking.units import SectionText

__all__ = ["Window"]


class Window:
    """The embedder's window, and the room a chunk's text has in it after its header."""

    def __init__(self, header: Callable[[int, bool], str], count_tokens: TokenCounter, max_tokens: int) -> None:
        # The header embedded before a chunk of a section (by index), the file's first chunk or not
        # (ChunkBuilder.header): the window holds it and the chunk's text.
        self.header = header
        self.max_tokens = max_tokens  # the model's window, in tokens
        self.count = token_counts(count_tokens)  # tokens of each text, [CLS] and [SEP] included
        self.body = token_counts(count_tokens, -2)  # without the [CLS] and [SEP] of each text
        self.rooms: dict[tuple[int, bool], int] = {}  # (section, first chunk of the file) -> room

    def room(self, si: int, first: bool) -> int:
        """The window less the header and a margin for tokens that merge or split at the seam."""
        if (si, first) not in self.rooms:
            ctx = self.header(si, first)
            self.rooms[si, first] = max(16, self.max_tokens - 2 - (self.body([ctx])[0] if ctx else 0) - 4)
        return self.rooms[si, first]

    def fits(self, si: int, first: bool, texts: Sequence[str]) -> list[bool]:
        """Whether each text, under its header, is within the window (counted exactly, no margin)."""
        ctx = self.header(si, first)
        return [n <= self.max_tokens for n in self.count([f"{ctx}\n\n{t}" if ctx else t for t in texts])]

    def fits_span(self, sec: SectionText, si: int, first: bool, a: int, b: int) -> bool:
        return self.fits(si, first, [sec.piece(a, b)])[0]

    def fit(self, pieces: list[tuple[int, int, int]], texts: list[SectionText]) -> list[tuple[int, int, int]]:
        """Split every piece whose embedded text exceeds the window, at a block's edge where one can, never
        inside a table's header nor just after it; a piece of a table's rows has room for its header."""
        embeds = []
        for n, (si, a, b) in enumerate(pieces):
            ctx = self.header(si, n == 0)
            embeds.append(f"{ctx}\n\n{texts[si].piece(a, b)}" if ctx else texts[si].piece(a, b))
        over = [n for n, count in enumerate(self.count(embeds)) if count > self.max_tokens]
        bodies = dict(zip(over, self.body([texts[pieces[n][0]].piece(pieces[n][1], pieces[n][2]) for n in over])))
        out: list[tuple[int, int, int]] = []
        for n, (si, a, b) in enumerate(pieces):
            sec, room = texts[si], self.room(si, n == 0)
            if bodies.get(n, 0) <= room:
                out.append((si, a, b))
                continue
            blocks = sec.atomic(a, b)
            keep = [s for s, ok in zip(blocks, self.fits(si, n == 0, [sec.text[p:q] for p, q in blocks])) if ok]
            heads = sec.headers(a, b)
            if heads:
                room = max(16, room - max(self.body(heads)) - 1)
            keep += sec.header_keeps(a, b)
            out.extend((si, p, q) for p, q in cut_spans(sec.text, a, b, room, 0, self.body, keep))
        return out
