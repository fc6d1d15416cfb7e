"""BM25 in memory: an inverted index over texts keyed by row number, with collection-wide statistics.

It ranks as Milvus Lite scores: the formula with k1 1.5, b 0.75 and idf
``log(1 + (N - df + 0.5) / (df + 0.5))``, words as Milvus's standard analyzer
splits them (:data:`_K1`). It knows nothing of where the texts are stored: the
FAISS store (:mod:`mdrag.store.faiss`) feeds it from SQLite, and saves it beside
its vector index (:meth:`Bm25.to_bytes`) so that a new process need not read
every text again.
"""

from __future__ import annotations

import io
import math
import re
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["Bm25"]

_TOKEN = re.compile(r"\w+", re.UNICODE)  # words, as Milvus's "standard" analyzer splits them (lowercased)
# BM25 parameters as Milvus Lite 3.2.2 scores: its scores fit k1 1.5 and b 0.75 exactly, and it ignores a
# bm25_k1 of 1.2 in the index's parameters (the documented default is 1.2; measured on one segment, the
# store contract test of BM25 scores holds it on every engine).
_K1, _B = 1.5, 0.75
_PENDING_MAX = 16384  # BM25 texts added before they become a segment (bounds the memory a load takes)
# From its second search, an index of at most this many postings keeps them in one segment: a search then
# reads one posting list per word, not one per word and segment (a first search does not wait for the merge).
_ONE_SEGMENT_MAX = 4_000_000

_FORMAT = 1  # the layout to_bytes() writes; from_bytes() reads no other
_Segment = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # BM25 postings: terms, starts, docs, tf


class Bm25:
    """An in-memory BM25 index over chunk texts, keyed by row number, with collection-wide statistics.

    Postings live in segments (term-sorted arrays); texts added since the last
    search wait in ``pending`` and become a segment when a search needs them.
    A removed row is only marked dead: its postings are skipped, and dropped
    when segments are merged.
    """

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}  # word -> term id
        self.segments: list[_Segment] = []  # terms, starts, docs, tf
        self.pending: list[tuple[int, np.ndarray, np.ndarray]] = []  # (row, term ids, term counts)
        self.alive = np.zeros(0, dtype=bool)  # by row number
        self.dl = np.zeros(0, dtype=np.float32)  # document length (tokens), by row number
        self.n = 0  # live documents
        self.total = 0.0  # sum of the live documents' lengths
        # (average document length, each row's length term of the BM25 denominator): made by a search,
        # dropped by every change of the lengths
        self._norm: tuple[float, np.ndarray] | None = None
        self._searched = False  # a search ran: the next merges the segments (_ONE_SEGMENT_MAX)

    def _grow(self, top: int) -> None:
        self._norm = None
        if top >= len(self.alive):
            cap = max(1024, 2 * top)
            self.alive = np.concatenate([self.alive, np.zeros(cap - len(self.alive), dtype=bool)])
            self.dl = np.concatenate([self.dl, np.zeros(cap - len(self.dl), dtype=np.float32)])

    def tokens(self, text: str) -> list[str]:
        return _TOKEN.findall(text.lower())

    def add(self, rows: Sequence[int], texts: Sequence[str]) -> None:
        if not rows:
            return
        self._grow(max(rows))
        vocab = self.vocab
        for row, text in zip(rows, texts):
            counts = Counter(vocab.setdefault(t, len(vocab)) for t in self.tokens(text))
            length = sum(counts.values())
            self.pending.append(
                (row, np.fromiter(counts.keys(), np.int32, len(counts)), np.fromiter(counts.values(), np.float32))
            )
            if self.alive[row]:
                self.total -= float(self.dl[row])
                self.n -= 1
            self.alive[row] = True
            self.dl[row] = length
            self.n += 1
            self.total += length
        if len(self.pending) >= _PENDING_MAX:
            self._flush()

    def remove(self, rows: Iterable[int]) -> None:
        self._norm = None
        for row in rows:
            if row < len(self.alive) and self.alive[row]:
                self.alive[row] = False
                self.n -= 1
                self.total -= float(self.dl[row])

    def _flush(self) -> None:
        if self.pending:
            terms = np.concatenate([p[1] for p in self.pending])
            docs = np.repeat(np.array([p[0] for p in self.pending], dtype=np.int32), [len(p[1]) for p in self.pending])
            tf = np.concatenate([p[2] for p in self.pending])
            self.pending = []
            self.segments.append(self._segment(terms, docs, tf))
        if len(self.segments) > 8:  # merge all but the largest, dropping dead postings
            self.segments.sort(key=lambda s: -len(s[2]))
            self._merge(self.segments[1:])

    def _merge(self, merged: list[_Segment]) -> None:
        """The ``merged`` segments (the last of ``segments``) become one, their dead postings dropped."""
        parts = [(np.repeat(s[0], np.diff(np.append(s[1], len(s[2])))), s[2], s[3]) for s in merged]
        terms, docs, tf = (np.concatenate([p[i] for p in parts]) for i in range(3))
        live = self.alive[docs]
        self.segments = [
            *self.segments[: len(self.segments) - len(merged)],
            self._segment(terms[live], docs[live], tf[live]),
        ]

    @staticmethod
    def _segment(terms: np.ndarray, docs: np.ndarray, tf: np.ndarray) -> _Segment:
        order = np.argsort(terms, kind="stable")
        terms = terms[order]
        uniq, starts = np.unique(terms, return_index=True)
        return uniq, starts, docs[order], tf[order]

    def search(self, query: str, k: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
        """The ``k`` best (row, BM25 score) pairs with a positive score; ``allowed``: a mask by row number."""
        self._flush()
        if self._searched and len(self.segments) > 1 and sum(len(s[2]) for s in self.segments) <= _ONE_SEGMENT_MAX:
            self._merge(self.segments)
        self._searched = True
        wanted = Counter(self.vocab[t] for t in self.tokens(query) if t in self.vocab)
        if not wanted or self.n == 0:
            return []
        avgdl = self.total / self.n
        if self._norm is None or self._norm[0] != avgdl:
            # each row's part of the denominator, computed for all rows at once (the same values, row by row)
            self._norm = (avgdl, _K1 * (1 - _B + _B * self.dl / avgdl))
        norm = self._norm[1]
        scores = np.zeros(len(self.alive), dtype=np.float32)
        asked = np.fromiter(wanted, dtype=np.int64, count=len(wanted))
        places = []  # per segment: where each asked term's postings start (-1: the segment has none)
        for terms, *_ in self.segments:
            at = np.minimum(np.searchsorted(terms, asked), max(len(terms) - 1, 0))
            held = (terms[at] == asked) if len(terms) else np.zeros(len(asked), dtype=bool)
            places.append(np.where(held, at, -1).tolist())
        for j, qtf in enumerate(wanted.values()):
            docs_parts, tf_parts = [], []
            for (_, starts, docs, tf), place in zip(self.segments, places):
                i = place[j]
                if i >= 0:
                    end = starts[i + 1] if i + 1 < len(starts) else len(docs)
                    d, f = docs[starts[i] : end], tf[starts[i] : end]
                    live = self.alive[d]
                    docs_parts.append(d[live])
                    tf_parts.append(f[live])
            if not docs_parts:
                continue
            d = np.concatenate(docs_parts)
            f = np.concatenate(tf_parts)
            df = len(d)
            if df == 0:
                continue
            idf = math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))
            scores[d] += qtf * idf * f * (_K1 + 1) / (f + norm[d])
        if allowed is not None:
            scores[: len(allowed)] *= allowed[: len(scores)]
            scores[len(allowed) :] = 0
        hit = np.flatnonzero(scores > 0)
        if len(hit) > k:
            hit = hit[np.argpartition(-scores[hit], k - 1)[:k]]
        hit = hit[np.lexsort((hit, -scores[hit]))]
        return [(int(r), float(scores[r])) for r in hit]

    def to_bytes(self) -> bytes:
        """The whole index as an ``.npz`` archive (no pickle): what :meth:`from_bytes` reads back.

        Pending texts become a segment first; the archive holds the vocabulary (one
        word a line: a word never holds a line break), the postings segments and the
        per-row statistics, so a search of the loaded index scores exactly as this one.
        """
        self._flush()
        words = "\n".join(sorted(self.vocab, key=self.vocab.__getitem__)).encode("utf-8")
        arrays: dict[str, np.ndarray] = {
            "format": np.array([_FORMAT, len(self.vocab), len(self.segments), self.n], dtype=np.int64),
            "total": np.array([self.total], dtype=np.float64),
            "vocab": np.frombuffer(words, dtype=np.uint8),
            "alive": self.alive,
            "dl": self.dl,
        }
        for i, segment in enumerate(self.segments):
            for name, part in zip(("terms", "starts", "docs", "tf"), segment):
                arrays[f"{name}{i}"] = part
        out = io.BytesIO()
        np.savez(out, **arrays)  # type: ignore[arg-type]  # numpy's stub: a key could fill its allow_pickle
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Bm25:
        """The index :meth:`to_bytes` wrote; ValueError saying what is wrong when ``data`` is not one."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                form, size, segments, n = (int(v) for v in z["format"])
                if form != _FORMAT:
                    raise ValueError(f"format {form}, expected {_FORMAT}")
                bm25 = cls()
                words = bytes(z["vocab"]).decode("utf-8")
                vocab = words.split("\n") if size else []
                if len(vocab) != size:
                    raise ValueError(f"{len(vocab)} words, expected {size}")
                bm25.vocab = dict(zip(vocab, range(size)))
                bm25.alive, bm25.dl = z["alive"].astype(bool), z["dl"].astype(np.float32)
                bm25.n, bm25.total = n, float(z["total"][0])
                bm25.segments = [(z[f"terms{i}"], z[f"starts{i}"], z[f"docs{i}"], z[f"tf{i}"]) for i in range(segments)]
        except (OSError, KeyError, EOFError, UnicodeDecodeError, zipfile.BadZipFile) as e:
            raise ValueError(f"not a saved BM25 index ({e})") from e
        bm25._check(size)
        return bm25

    def _check(self, size: int) -> None:
        """ValueError unless the arrays fit together (a damaged file that still unpacks)."""
        rows = len(self.alive)
        if (
            len(self.dl) != rows
            or int(self.alive.sum()) != self.n
            or float(self.dl[self.alive].astype(np.float64).sum()) != self.total
        ):
            raise ValueError("its row statistics disagree")
        for terms, starts, docs, tf in self.segments:
            if len(terms) != len(starts) or len(docs) != len(tf) or (len(starts) and starts[-1] >= len(docs)):
                raise ValueError("a postings segment is cut short")
            if len(terms) and (terms.min() < 0 or terms.max() >= size):
                raise ValueError("a posting names a word it does not hold")
            if len(docs) and (docs.min() < 0 or docs.max() >= rows):
                raise ValueError("a posting names a row it does not hold")
