"""Whether a question can be answered from an index at all ("no relevant information").

A fixed cosine does not carry from one set of documents to another: on
documentation about one subject, every question near that subject finds
passages with a cosine of 0.5 or more, answered or not. What carries is
whether the documents use the question's words. A question the documents do
not answer is, most of the time, about something they never name: "Nagios",
"Alertmanager", "Kibana" appear nowhere in the OpenTelemetry docs, "PostgreSQL"
nowhere in Hugo's. A question they answer is put in their own words.

So the rule weighs each word of the question (stemmed as the BM25 text is) by
its inverse document frequency in the index, as BM25 does, and takes the
*unknown share*: the part of the question's weight carried by words that no
chunk of the index holds. Above ``answer.max_unknown`` the answer is "no
relevant information" and no LLM is asked; so it is when the best result's
cosine is below ``answer.min_score``, which catches what the words do not
(a question in the documents' words about something they do not cover).

The share is a ratio of the question's own weights, so it means the same on
any corpus, and it does not depend on how results are ranked or fused:
measured on three document sets in benchmarks/refusal.py.

This module knows nothing of the server or the store: :class:`TermStats` is
counted from an index's texts (``Index.term_stats``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from mdrag.types import SearchResult

__all__ = ["TermStats", "refuse", "unknown_share"]

_WORD = re.compile(r"\w+", re.UNICODE)


def _plain(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


class TermStats:
    """Document frequencies of the words in an index's chunks, and the idf they give."""

    def __init__(self, texts: Iterable[str], prepare: Callable[[str], str] | None = None) -> None:
        """``texts``: the chunks' BM25 text (already prepared); ``prepare``: how a question is made alike."""
        self.prepare = prepare or _plain  # text -> space-separated words, spelled as in the BM25 text (stemmed)
        self.df: Counter[str] = Counter()  # word -> chunks holding it
        self.n = 0  # chunks counted
        for text in texts:
            self.df.update(set(_WORD.findall(text.lower())))
            self.n += 1

    def words(self, text: str) -> set[str]:
        """The distinct words of ``text``, spelled as the index's BM25 text spells them."""
        return set(self.prepare(text).split())

    def idf(self, word: str) -> float:
        """BM25's idf: high for a word few chunks hold, highest for one no chunk holds."""
        df = self.df.get(word, 0)
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5))


def unknown_share(question: str, stats: TermStats) -> float:
    """The share (0..1) of ``question``'s idf weight carried by words that no chunk of the index holds."""
    weights = {w: stats.idf(w) for w in stats.words(question)}
    total = sum(weights.values())
    if not total:
        return 1.0  # no word at all (only punctuation): nothing to answer
    return sum(v for w, v in weights.items() if not stats.df.get(w)) / total


def refuse(
    question: str, results: Sequence[SearchResult], stats: TermStats, min_score: float, max_unknown: float
) -> bool:
    """Whether to answer "no relevant information" rather than from ``results``; see the module docstring."""
    if not results or max(r.score for r in results) < min_score:
        return True
    return unknown_share(question, stats) > max_unknown
