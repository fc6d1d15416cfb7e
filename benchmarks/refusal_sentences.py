"""Refusal read sentence by sentence: the score rule's cosine floor put on the best *sentence* of the first results.

The score rule (mdrag/retrieval/relevance.py) refuses when the best result's cosine is under
``answer.min_score`` (0.44). A chunk's vector averages all its sentences, so a passage that answers in one
sentence among many scores low ("which middleware is always the outermost layer": chunk 0.36, its sentence
0.91). This script tries the floor on the best cosine between the question and each sentence (and the
heading trail) of the first 1, 3 or 5 results, alone and as the larger of it and the chunk's, with the
rest of the rule (unknown words, names, exact matches) unchanged. It reads an index built already:

    MDRAG_HOME=<home> python benchmarks/refusal_sentences.py --index eval_starlette \
        benchmarks/data/pool_starlette_tune.jsonl benchmarks/data/pool_starlette_test.jsonl

Prints, per question set and variant, unanswerable refused / answerable refused (goal: >= 80% / <= 5%).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from mdrag.config import load_config
from mdrag.index import Index
from mdrag.knobs import MIN_CHUNKS, NAMED_SURE
from mdrag.retrieval.relevance import holds_every_word, missing_names, unknown_share

_SPLIT = re.compile(r"(?<=[.!?:])\s+|\n+")
FLOORS = (0.40, 0.44, 0.48, 0.52)
MIN_SENTENCE = 15  # characters: shorter pieces (a bullet, a code token) are not read


def sentences(text: str, heading: str) -> list[str]:
    """The sentences of a result worth reading, and its heading trail."""
    parts = [s.strip(" \t-*#|>")[:400] for s in _SPLIT.split(text)]
    return [s for s in parts if len(s) >= MIN_SENTENCE] + ([heading] if heading else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("sets", nargs="+", type=Path)
    args = ap.parse_args()
    config = load_config({"index": args.index})
    index = Index(config)
    stats = index.term_stats()
    variants = [("chunk", 0.44)] + [(f"{kind}{top}", f) for kind in ("sent", "max") for top in (1, 3) for f in FLOORS]
    print("set", *(f"{name}@{f}" for name, f in variants), sep="\t")
    for path in args.sets:
        tally = {v: [0, 0] for v in variants}
        counts = [0, 0]
        for line in path.read_text(encoding="utf-8").splitlines():
            q = json.loads(line)
            question, answerable = q["question"], bool(q["gold"])
            found = list(index.search(question))
            counts[answerable] += 1
            qv = index.embedder.embed_query(question)
            best_sent = []  # best sentence cosine within the first n results, n = 1..3
            for r in found[:3]:
                texts = sentences(r.text, " > ".join(r.heading_path))
                best = float((index.embedder.embed(texts) @ qv).max()) if texts else 0.0
                best_sent.append(max([best, *best_sent[-1:]]))
            best_chunk = max((r.score for r in found), default=0.0)
            other = (stats.n >= MIN_CHUNKS and unknown_share(question, stats) > config["answer.max_unknown"]) or (
                best_chunk < NAMED_SURE and bool(missing_names(question, found, stats))
            )
            exact = holds_every_word(question, found, stats)
            for v in variants:
                name, floor = v
                if name == "chunk":
                    value = best_chunk
                else:
                    sent = best_sent[min(int(name[-1]), len(best_sent)) - 1] if best_sent else 0.0
                    value = sent if name.startswith("sent") else max(sent, best_chunk)
                refused = not found or (value < floor and not exact) or other
                tally[v][answerable] += refused
        print(path.stem, *(f"{u}/{counts[0]} {a}/{counts[1]}" for u, a in tally.values()), sep="\t")
    index.close()


if __name__ == "__main__":
    main()
