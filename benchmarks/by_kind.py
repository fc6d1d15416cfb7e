"""Retrieval figures of a question set split by the questions' ``kind``, on an index already built.

    MDRAG_HOME=... python benchmarks/by_kind.py benchmarks/data/gitdoc_qa.jsonl --index gitdoc [--json]

Each kind with gold pages gets `mdrag eval`'s figures (nDCG@10, Recall@10, MRR, Hit@5) in every mode, each
question one search as `mdrag search` runs it. The unanswerable kind (no gold) gets the share refused: the
questions whose search returns nothing (every result under ``search.threshold``), per mode.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from mdrag.config import load_config
from mdrag.frontends.cli.opening import local_index
from mdrag.retrieval import evaluate as ev


def by_kind(path: Path, index_name: str) -> dict[str, dict]:
    """{kind: figures} for the questions of ``path`` on the index ``index_name``."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    kinds: dict[str, list[ev.Question]] = defaultdict(list)
    for r in rows:
        kinds[r.get("kind", "all")].append(ev.Question(r["id"], r["question"], frozenset(r["gold"])))
    out: dict[str, dict] = {}
    with local_index(load_config({"index": index_name})) as index:
        for kind, questions in kinds.items():
            if any(q.gold for q in questions):
                out[kind] = ev.evaluate(index.search, questions, ev.MODES)
            else:
                out[kind] = {"questions": len(questions)}
                for mode in ev.MODES:
                    refused = sum(not index.search(q.text, mode=mode) for q in questions)
                    out[kind][mode] = {"refused": round(refused / len(questions), 4)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("questions", type=Path)
    ap.add_argument("--index", required=True)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = by_kind(args.questions, args.index)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print("| kind | n | mode | nDCG@10 | R@10 | MRR | Hit@5 / refused |\n|---|---|---|---|---|---|---|")
    for kind, figures in result.items():
        for mode in ev.MODES:
            m = figures[mode]
            if "refused" in m:
                print(f"| {kind} | {figures['questions']} | {mode} | | | | refused {m['refused']:.2f} |")
            else:
                print(
                    f"| {kind} | {figures['questions']} | {mode} | {m['ndcg@10']:.3f} | {m['recall@10']:.3f} "
                    f"| {m['mrr']:.3f} | {m['hit@5']:.3f} |"
                )


if __name__ == "__main__":
    main()
