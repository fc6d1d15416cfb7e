"""Retrieval quality of an index as a user gets it: nDCG@10, Recall@10, MRR and Hit@5.

Questions come from a JSON Lines file (``{"question": ..., "gold": [paths]}``,
as in benchmarks/data/hugo_qa.jsonl; questions with no gold are left out of
the ranking figures) or from BEIR files (queries + qrels TSV, documents named
by their id). Relevance is binary; a document is a file, and its rank is the
rank of its best chunk.

Each question is one search with the index's settings (``search.k``,
``search.threshold``, ``search.collapse``, and the reranker of ``rerank.*``
when one is set; `mdrag eval --rerank` measures without it too), the same call as a `search`
message with no options to `mdrag serve`, or `mdrag search` without flags;
only the mode is named, so that every mode can be measured (with the
setting's own mode, the call is the default one). The figures are those of
the results a user sees: a document the search does not return is missed.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdrag.errors import ConfigError
from mdrag.types import SearchResult

__all__ = ["MODES", "Question", "evaluate", "load_beir", "load_questions", "score_ranking"]

MODES = ("dense", "bm25", "hybrid")


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold: frozenset[str] = field(default_factory=frozenset)  # relevant documents: paths or BEIR ids


def load_questions(path: Path) -> list[Question]:
    """JSON Lines: ``question`` (or ``text``), ``gold`` (a list of paths), optional ``id``."""
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read questions file {path}: {e}") from e
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            text = d.get("question") or d.get("text")
            gold = d.get("gold") or []
            if not isinstance(text, str) or not isinstance(gold, list):
                raise ValueError('needs "question" (a string) and "gold" (a list of paths)')
        except (ValueError, AttributeError) as e:
            raise ConfigError(f"{path}, line {n}: {e}") from None
        out.append(Question(str(d.get("id", n)), text, frozenset(str(g) for g in gold)))
    return out


def load_beir(queries: Path, qrels: Path) -> list[Question]:
    """BEIR: queries as JSON Lines (``_id``, ``text``) or TSV (id, text); qrels TSV with a header."""
    texts: dict[str, str] = {}
    for line in queries.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            d = json.loads(line)
            texts[str(d["_id"])] = d["text"]
        else:
            qid, text = line.split("\t", 1)
            texts[qid] = text
    gold: dict[str, set[str]] = {}
    with qrels.open(encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) < 3 or row[0] == "query-id" or int(row[2]) <= 0:
                continue
            gold.setdefault(row[0], set()).add(row[1])
    return [Question(q, texts[q], frozenset(g)) for q, g in gold.items() if q in texts]


def score_ranking(ranked: Sequence[str], gold: Iterable[str]) -> dict[str, float]:
    """Binary-relevance metrics of one ranked list of documents (MRR: 0 when none is in the list)."""
    rel = set(gold)
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:10]) if d in rel)
    idcg = sum(1 / math.log2(i + 2) for i in range(min(len(rel), 10)))
    first = next((i for i, d in enumerate(ranked) if d in rel), None)
    return {
        "ndcg@10": dcg / idcg if idcg else 0.0,
        "recall@10": len(rel & set(ranked[:10])) / len(rel) if rel else 0.0,
        "mrr": 1 / (first + 1) if first is not None else 0.0,
        "mrr@5": 1 / (first + 1) if first is not None and first < 5 else 0.0,
        "hit@5": 1.0 if first is not None and first < 5 else 0.0,
    }


def _documents(results: Sequence[SearchResult], key: Callable[[SearchResult], str]) -> list[str]:
    return list(dict.fromkeys(key(r) for r in results))


def evaluate(
    search: Callable[..., list[SearchResult]],
    questions: Sequence[Question],
    modes: Sequence[str] = MODES,
    doc_key: str = "path",
) -> dict[str, Any]:
    """Mean metrics per mode. ``search`` is ``Index.search``, called as
    ``search(question, mode=mode)``: every other option is the index's setting.
    ``doc_key`` "path" matches gold paths against a hit's relative path (either
    may be the longer one), "stem" matches BEIR ids against the file name
    without extension."""
    answerable = [q for q in questions if q.gold]
    if not answerable:
        raise ConfigError("no question has gold documents to evaluate against")

    def key(r: SearchResult) -> str:
        return Path(r.rel_path).stem if doc_key == "stem" else r.rel_path

    out: dict[str, Any] = {"questions": len(answerable), "without_gold": len(questions) - len(answerable)}
    for mode in modes:
        totals: dict[str, float] = {}
        for q in answerable:
            ranked = _documents(search(q.text, mode=mode), key)
            gold = q.gold if doc_key == "stem" else {_match(g, ranked) for g in q.gold}
            for name, value in score_ranking(ranked, gold).items():
                totals[name] = totals.get(name, 0.0) + value
        out[mode] = {name: round(v / len(answerable), 4) for name, v in totals.items()}
    return out


def unknown_gold(questions: Sequence[Question], files: Iterable[str], doc_key: str = "path") -> list[str]:
    """The gold documents that name no indexed file (``files``: relative paths), as :func:`evaluate`
    matches them: a typo there counts as a miss and nothing else says so."""
    names = list(files)
    keys = {Path(f).stem for f in names} if doc_key == "stem" else set(names)
    gold = sorted({g for q in questions for g in q.gold})
    if doc_key == "stem":
        return [g for g in gold if g not in keys]
    return [g for g in gold if g not in keys and _match(g, names) == g]


def _match(gold: str, ranked: Sequence[str]) -> str:
    """The ranked document a gold path names (paths may be relative to different folders)."""
    for d in ranked:
        if d == gold or gold.endswith("/" + d) or d.endswith("/" + gold):
            return d
    return gold
