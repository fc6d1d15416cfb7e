"""The ranking question pool measured by kind: Hit@5 and MRR@5 per set, half, kind and mode, and each miss.

Each set of the pool (benchmarks/data/pool_<corpus>_tune.jsonl and _test.jsonl; corpora fetched by
benchmarks/fetch_pool.sh) is searched in its index (``pool_<corpus>``, built by `mdrag index DIR --index
pool_<corpus>` in MDRAG_HOME) as `mdrag eval` searches: the index's settings, only the mode named. The
figures per half and mode are those of `mdrag eval --mode all --json` on that file; this script adds them by
kind and lists the answerable questions whose gold file is not in the first five files, with the rank of
the gold file (None: not returned).

    python benchmarks/pool_baseline.py [--corpora starlette,zsh,flask] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "benchmarks" / "data"
MODES = ("dense", "bm25", "hybrid")


def measure(corpus: str) -> dict[str, dict]:
    """Per half: per mode and kind, questions, Hit@5 and MRR@5; and the misses."""
    from mdrag.config import load_config
    from mdrag.index import Index
    from mdrag.retrieval.evaluate import _match, score_ranking

    out: dict[str, dict] = {}
    with Index(load_config({"index": f"pool_{corpus}"})) as idx:
        for half in ("tune", "test"):
            rows = [json.loads(x) for x in (DATA / f"pool_{corpus}_{half}.jsonl").read_text().splitlines() if x]
            kinds: dict[str, dict[str, list[float]]] = {}
            misses = []
            for mode in MODES:
                for q in rows:
                    if not q["gold"]:
                        continue
                    ranked = list(dict.fromkeys(r.rel_path for r in idx.search(q["question"], mode=mode)))
                    gold = {_match(g, ranked) for g in q["gold"]}
                    s = score_ranking(ranked, gold)
                    for kind in (q["kind"], "all"):
                        cell = kinds.setdefault(mode, {}).setdefault(kind, [0, 0.0, 0.0])
                        cell[0] += 1
                        cell[1] += s["hit@5"]
                        cell[2] += s["mrr@5"]
                    if not s["hit@5"]:
                        rank = next((i + 1 for i, d in enumerate(ranked) if d in gold), None)
                        misses.append({"id": q["id"], "mode": mode, "kind": q["kind"], "rank": rank, "top": ranked[:3]})
            out[half] = {
                "by_kind": {
                    m: {
                        k: {"n": c[0], "hit@5": round(c[1] / c[0], 3), "mrr@5": round(c[2] / c[0], 3)}
                        for k, c in ks.items()
                    }
                    for m, ks in kinds.items()
                },
                "misses": misses,
            }
    return out


def _cell(c: list[float]) -> dict[str, float]:
    """Questions, Hit@5 and MRR@5 of one kind and mode, from their count and sums."""
    return {"n": c[0], "hit@5": round(c[1] / c[0], 3), "mrr@5": round(c[2] / c[0], 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="starlette,zsh,flask")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    report = {c: measure(c) for c in args.corpora.split(",")}
    for corpus, halves in report.items():
        for half, r in halves.items():
            for mode in MODES:
                cells = " ".join(f"{k} {v['hit@5']:.2f}/{v['n']}" for k, v in sorted(r["by_kind"][mode].items()))
                print(f"{corpus:9} {half:4} {mode:6} Hit@5 by kind: {cells}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
