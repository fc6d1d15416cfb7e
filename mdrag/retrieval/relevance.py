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
chunk of the index holds. An unknown word that is an ordinary English word
(:func:`ordinary_words`) or a number, and not capitalised as a name is after the
first word, counts ``ORDINARY_UNKNOWN`` (half) of its weight: on a small
documentation set a user's everyday words ("disappear", "stars", "bare") are
often in no chunk though a passage answers in other words,
where a term ("redis", "gettext", "trim_blocks") cannot be put otherwise (on the
ranking pool's tuning halves, Starlette's answerable questions refused fell from
9 of 36 to 7). Above ``answer.max_unknown`` the answer is "no
relevant information" and no LLM is asked; so it is when the best result's
cosine is below ``answer.min_score``, unless one of the first ``NAMED_TOP``
results holds every word of the question: a short keyword question
("removePathAccents setting") answered by one row of a long table scores a
low cosine (the model embeds the whole chunk), and the search keeps such an
exact match whatever its cosine (mdrag.retrieval.search), so the answer does too.

Documents about one subject often name the neighbours of what they do not
cover: the OpenTelemetry blog mentions Istio, Envoy, CloudWatch and InfluxDB,
so "How do I make Istio's Envoy sidecars write access logs in JSON format?"
has no unknown word, and its best passage scores 0.49. What gives it away is
that the passages found name neither Istio nor Envoy. So the rule also checks
the things the question names, which no passage can put in other words: "Istio's Envoy
sidecars" answered by a passage that names neither Istio nor Envoy is not answered.
A name is a run of capitalised words next to each other ("New Relic", "Istio's
Envoy", "Datadog"; the first word of the question and "I" aside). A single word
that is an ordinary English word is not a name, however written: "URL", "Japanese"
or "Chinese" may be put otherwise ("link", "CJK languages") by a passage that answers.
The ordinary words are the whole words of the default model's WordPiece vocabulary
(about 21,700; :func:`ordinary_words`). Each word of a name that the index holds
must be in one of the first ``NAMED_TOP`` results (text, heading path or file
path); when one is not, and the best cosine is below ``NAMED_SURE``, the answer
is "no relevant information". A question written in capitals or Title Case (most
of its words capitalised) names nothing this way and is not checked, nor are
users who name things in lower case (the Hugo questions mostly): this check adds
refusals, it never removes one.

The share is a ratio of the question's own weights, so it means the same on
any corpus of a few hundred chunks or more (:data:`mdrag.knobs.MIN_CHUNKS`; a smaller
index lacks everyday words, and the word check is skipped). ``NAMED_TOP``
and ``NAMED_SURE`` were picked on the OpenTelemetry and Hugo question sets
(benchmarks/refusal.py, which measures them, the CNCF glossary and a held-out
CommonMark set, and says what was tuned where).

This module knows nothing of the server or the store: :class:`TermStats` is
counted from an index's texts (``Index.term_stats``).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

from mdrag.errors import MdragError
from mdrag.knobs import MIN_CHUNKS, NAMED_SURE, NAMED_TOP, ORDINARY_UNKNOWN
from mdrag.types import SearchResult

__all__ = [
    "TermStats",
    "holds_every_word",
    "missing_names",
    "names",
    "ordinary_words",
    "refuse",
    "unknown_share",
]

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w+", re.UNICODE)
_TOKEN = re.compile(r"\w[\w.'-]*", re.UNICODE)  # a word as written, "X-Ray", "newrelic.ini", "Istio's" whole
_ENDINGS = ("s", "es", "ed", "ing")  # "dashboards", "upgraded": ordinary when the word they end is


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


def unknown_share(question: str, stats: TermStats, ordinary: float = ORDINARY_UNKNOWN) -> float:
    """The share (0..1) of ``question``'s idf weight carried by words that no chunk of the index holds.

    An unknown word that is an ordinary English word (:func:`ordinary_words`) or a number counts
    ``ordinary`` of its weight: a user's everyday word ("disappear", "stars", "bare") is one a passage that
    answers may put otherwise, a term ("redis", "gettext", "trim_blocks") or a word capitalised as a name is
    ("Quartz", "Microsoft", after the first word) one it cannot.
    """
    weights = {w: stats.idf(w) for w in stats.words(question)}
    total = sum(weights.values())
    if not total:
        return 1.0  # no word at all (only punctuation): nothing to answer
    unknown = {w for w in weights if not stats.df.get(w)}
    if not unknown or ordinary >= 1:
        return sum(weights[w] for w in unknown) / total
    tokens, capital = _capitalised(question)
    named = {w.lower() for m, c in zip(tokens, capital) if c for w in _WORD.findall(m.group())}
    terms = {w for t in _WORD.findall(question.lower()) if t in named or not _everyday(t) for w in stats.words(t)}
    return sum(weights[w] * (1.0 if w in terms else ordinary) for w in unknown) / total


def _everyday(token: str) -> bool:
    """An ordinary English word or a number, which a passage may put otherwise."""
    return token.isdigit() or _ordinary(token)


def _capitalised(question: str) -> tuple[list[re.Match[str]], list[bool]]:
    """``question``'s words as written, and which of them are capitalised as a name is: not the first word,
    nor "I"; none in a question whose words are mostly capitalised (Title Case or capitals say nothing)."""
    tokens = list(_TOKEN.finditer(question))
    capital = [i > 0 and m.group() != "I" and m.group() != m.group().lower() for i, m in enumerate(tokens)]
    if 2 * sum(capital) > len(tokens):
        capital = [False] * len(tokens)
    return tokens, capital


@lru_cache(maxsize=1)
def ordinary_words() -> frozenset[str]:
    """Ordinary English words, lower case: the whole words of the default model's WordPiece vocabulary.

    Empty (every capitalised word is then a name) when the model package cannot be read.
    """
    from mdrag.embedding.local import DEFAULT_MODEL, resolve_model_dir

    try:
        path = resolve_model_dir(DEFAULT_MODEL, ("tokenizer.json",)) / "tokenizer.json"  # the vocabulary alone
        vocab = json.loads(path.read_text(encoding="utf-8"))["model"]["vocab"]
    except (MdragError, OSError, ValueError, KeyError, TypeError) as e:
        log.warning("no list of ordinary words (%s): every capitalised word counts as a name", e)
        return frozenset()
    return frozenset(w for w in vocab if len(w) > 1 and w.isascii() and w.isalpha())


def _ordinary(word: str) -> bool:
    words = ordinary_words()
    if word in words:
        return True
    for end in _ENDINGS:
        stem = word[: -len(end)]
        if word.endswith(end) and len(stem) >= 3 and (stem in words or stem + "e" in words):
            return True
    return False


def names(question: str) -> list[str]:
    """The things ``question`` names, as written: runs of adjacent capitalised words, ordinary single words left out.

    A name of one word keeps only its parts that are not ordinary words ("GitHub-style": "GitHub").

    The first word (capitalised as the start of a sentence) and "I" are not
    names; nor is anything in a question whose words are mostly capitalised.
    """
    tokens, capital = _capitalised(question)
    runs: list[list[str]] = []
    for i, m in enumerate(tokens):
        if not capital[i]:
            continue
        if capital[i - 1] and question[tokens[i - 1].end() : m.start()] == " ":
            runs[-1].append(m.group())
        else:
            runs.append([m.group()])
    out = []
    for run in runs:
        if len(run) == 1:  # "GitHub-style": "GitHub"; "URL": "URL"; "Japanese": nothing
            run = [w for w in re.findall(r"[^\W_]+", run[0]) if len(w) > 1 and not _ordinary(w.lower())]
        if run:
            out.append(" ".join(run))
    return out


def missing_names(question: str, results: Sequence[SearchResult], stats: TermStats) -> set[str]:
    """The words of things ``question`` names (:func:`names`) that the index holds but none of the first results.

    Only the first ``NAMED_TOP`` results count; a word's heading path and file
    path count with its text. Words of one letter ("S" of "Istio's") are left out.
    """
    named = {word for name in names(question) for word in stats.words(name) if len(word) > 1 and stats.df.get(word)}
    if not named:
        return named
    held: set[str] = set()
    for r in results[:NAMED_TOP]:
        held |= _held(r, stats)
    return named - held


def _held(result: SearchResult, stats: TermStats) -> set[str]:
    """The words of ``result`` as the index spells them: its text, heading path and file path."""
    return stats.words(" ".join([result.text, " ".join(result.heading_path), result.rel_path]))


def holds_every_word(question: str, results: Sequence[SearchResult], stats: TermStats) -> bool:
    """Whether one of the first ``NAMED_TOP`` results holds every word of ``question``: an exact match of
    what was asked (a setting's name, a table row), which the search keeps whatever its cosine."""
    asked = stats.words(question)
    return bool(asked) and any(asked <= _held(r, stats) for r in results[:NAMED_TOP])


def refuse(
    question: str,
    results: Sequence[SearchResult],
    stats: TermStats,
    min_score: float,
    max_unknown: float,
    ordinary: float = ORDINARY_UNKNOWN,
) -> bool:
    """Whether to answer "no relevant information" rather than from ``results``; see the module docstring.

    ``ordinary``: what an unknown ordinary word weighs in :func:`unknown_share`.
    """
    best = max((r.score for r in results), default=0.0)
    if not results or (best < min_score and not holds_every_word(question, results, stats)):
        return True
    if stats.n >= MIN_CHUNKS and unknown_share(question, stats, ordinary) > max_unknown:
        return True
    return best < NAMED_SURE and bool(missing_names(question, results, stats))
