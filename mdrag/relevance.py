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
cosine is below ``answer.min_score``.

Documents about one subject often name the neighbours of what they do not
cover: the OpenTelemetry blog mentions Istio, Envoy, CloudWatch and InfluxDB,
so "How do I make Istio's Envoy sidecars write access logs in JSON format?"
has no unknown word, and its best passage scores 0.49. What gives it away is
that the passages found name neither Istio nor Envoy. So the rule also checks
the things the question names: its capitalised words (the first word of the
question and "I" aside) that the index holds must each be in one of the first
``NAMED_TOP`` results (text, heading path or file path); when one is not, and
the best cosine is below ``NAMED_SURE``, the answer is "no
relevant information". Users who name things in lower case are not checked
(the Hugo questions mostly): the rule adds refusals, it never removes one.

The share is a ratio of the question's own weights, so it means the same on
any corpus of a few hundred chunks or more (:data:`MIN_CHUNKS`; a smaller
index lacks everyday words, and the word check is skipped). ``NAMED_TOP``
and ``NAMED_SURE`` were picked on the OpenTelemetry and Hugo question sets
(benchmarks/refusal.py, which measures all three sets and says what was
tuned where).

This module knows nothing of the server or the store: :class:`TermStats` is
counted from an index's texts (``Index.term_stats``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from mdrag.types import SearchResult

__all__ = ["NAMED_SURE", "NAMED_TOP", "TermStats", "missing_names", "refuse", "unknown_share"]

#: The word check needs this many chunks: a smaller index's vocabulary says little about what it
#: covers (in the 15 chunks of examples/docs, "when" and "happen" are in none).
MIN_CHUNKS = 200
NAMED_TOP = 3  # the things a question names must be in one of this many first results...
NAMED_SURE = 0.6  # ... unless the best result's cosine reaches this

_WORD = re.compile(r"\w+", re.UNICODE)
_TOKEN = re.compile(r"\w[\w.'-]*", re.UNICODE)  # a word as written, "X-Ray", "newrelic.ini", "Istio's" whole


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


def missing_names(question: str, results: Sequence[SearchResult], stats: TermStats) -> set[str]:
    """The words of things ``question`` names (capitalised words) that the index holds but none of the first results.

    Only the first ``NAMED_TOP`` results count; a word's heading path and file
    path count with its text. Words of one letter ("S" of "Istio's") are left out.
    """
    named = {
        word
        for token in _TOKEN.findall(question)[1:]  # the first word is capitalised as the start of a sentence
        if token != "I" and token != token.lower()
        for word in stats.words(token)
        if len(word) > 1 and stats.df.get(word)
    }
    if not named:
        return named
    held: set[str] = set()
    for r in results[:NAMED_TOP]:
        held |= stats.words(" ".join([r.text, " ".join(r.heading_path), r.rel_path]))
    return named - held


def refuse(
    question: str, results: Sequence[SearchResult], stats: TermStats, min_score: float, max_unknown: float
) -> bool:
    """Whether to answer "no relevant information" rather than from ``results``; see the module docstring."""
    best = max((r.score for r in results), default=0.0)
    if not results or best < min_score:
        return True
    if stats.n >= MIN_CHUNKS and unknown_share(question, stats) > max_unknown:
        return True
    return best < NAMED_SURE and bool(missing_names(question, results, stats))
