"""SciFact (BEIR test): mdrag's dense pipeline against the published all-MiniLM-L6-v2 figures.

Each abstract becomes a Markdown file (``# title`` + text) and goes through the
real pipeline: parser, chunker, MiniLM, Milvus Lite. Each query is one search
as a user runs it (the index's default k, threshold and collapse: mdrag.retrieval.evaluate);
a document ranks by its best chunk. The baseline in the same run is the textbook evaluation:
each whole document (title + text, truncated by the model at 256 word pieces)
embedded once and ranked by exact cosine in numpy.

    python benchmarks/scifact.py [--backend auto|torch|onnx|openvino] [--limit-queries N] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from render import (  # noqa: E402
    MODES,
    command,
    dig,
    div,
    fdelta,
    fint,
    fms,
    fnum,
    fratio,
    fsec,
    not_measured,
    num,
    prose,
    scifact_metric,
    table,
    verdict,
    who,
)
from steps import NA, Benchmark, Data, Row, Section, Step, Target  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
PUBLISHED = {"ndcg@10": 0.645, "recall@10": 0.783, "recall@100": 0.925}  # ../shared/data/baselines


def ndcg_at_k(ranked: list[str], gold: dict[str, int], k: int = 10) -> float:
    dcg = sum(gold.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(gold.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at_k(ranked: list[str], gold: dict[str, int], k: int) -> float:
    rel = {d for d, g in gold.items() if g > 0}
    return len(rel & set(ranked[:k])) / len(rel) if rel else 0.0


def evaluate(runs: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    qs = [q for q in qrels if q in runs]
    return {
        "ndcg@10": float(np.mean([ndcg_at_k(runs[q], qrels[q]) for q in qs])),
        "recall@10": float(np.mean([recall_at_k(runs[q], qrels[q], 10) for q in qs])),
        "recall@100": float(np.mean([recall_at_k(runs[q], qrels[q], 100) for q in qs])),
        "queries": len(qs),
    }


def load(limit: int | None) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    with gzip.open(DATA / "scifact" / "corpus.jsonl.gz", "rt") as f:
        corpus = [json.loads(line) for line in f]
    queries = {}
    for line in (DATA / "scifact" / "queries.test.tsv").read_text().splitlines():
        qid, text = line.split("\t", 1)
        queries[qid] = text
    qrels: dict[str, dict[str, int]] = {}
    for line in (DATA / "scifact" / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    if limit:
        keep = sorted(qrels)[:limit]
        qrels = {q: qrels[q] for q in keep}
    return corpus, queries, qrels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit-queries", type=int)
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument("--modes", default="dense,bm25,hybrid", help="search modes to evaluate")
    ap.add_argument(
        "--stemming", action=argparse.BooleanOptionalAction, default=True, help="search.stemming (default: on)"
    )
    from mdrag.settings import choices

    ap.add_argument("--backend", default="auto", choices=choices("embedding.backend"), help="embedding.backend")
    ap.add_argument("--store", choices=choices("store.backend"), help="store.backend (default: the setting's default)")
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit(f"shared data not found at {DATA}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    corpus, queries, qrels = load(args.limit_queries)

    from mdrag.config import load_config
    from mdrag.index import Index
    from mdrag.retrieval.evaluate import evaluate as user_path_eval
    from mdrag.retrieval.evaluate import load_beir

    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "scifact"
        docs.mkdir()
        for d in corpus:
            (docs / f"{d['_id']}.md").write_text(f"# {d['title']}\n\n{d['text']}\n", encoding="utf-8")
        os.environ["MDRAG_HOME"] = str(Path(tmp) / "home")
        index = Index(
            load_config(
                {
                    "index": "scifact",
                    "search.stemming": args.stemming,
                    "embedding.backend": args.backend,
                    **({"store.backend": args.store} if args.store else {}),
                }
            )
        )
        t = time.perf_counter()
        summary = index.update([docs])
        t_index = time.perf_counter() - t
        print(f"indexed {len(corpus)} abstracts into {summary.chunks_total} chunks in {t_index:.1f} s", file=sys.stderr)

        # The user's path: one search per question with the index's settings (k, threshold,
        # collapse), as `mdrag eval` and a default `search` message to `mdrag serve` run it.
        questions = load_beir(DATA / "scifact" / "queries.test.tsv", DATA / "scifact" / "qrels" / "test.tsv")
        questions = [q for q in questions if q.id in qrels]
        lat = []

        def timed_search(query: str, **options: Any) -> list[Any]:
            t = time.perf_counter()
            hits = index.search(query, **options)
            lat.append(time.perf_counter() - t)
            return hits

        ev = user_path_eval(timed_search, questions, args.modes.split(","), doc_key="stem")
        by_mode: dict[str, dict[str, float]] = {m: ev[m] for m in args.modes.split(",")}
        ours = by_mode["dense"] if "dense" in by_mode else next(iter(by_mode.values()))

        # Baseline: whole documents, exact cosine, same model, same process.
        emb = index.embedder
        t = time.perf_counter()
        dvec = emb.embed([f"{d['title']} {d['text']}" for d in corpus])
        t_base = time.perf_counter() - t
        ids = [d["_id"] for d in corpus]
        qvec = emb.embed([queries[q] for q in qrels])
        base_runs = {}
        for q, v in zip(qrels, qvec):
            order = np.argsort(-(dvec @ v))[:100]
            base_runs[q] = [ids[i] for i in order]
        base = evaluate(base_runs, qrels)
        index.close()

    out = {
        "backend": args.backend,
        "store": index.store.__class__.__name__,
        "embedder": type(index.embedder).__name__,
        "mdrag_dense": ours,
        "modes": by_mode,
        "baseline_whole_docs_exact": base,
        "published": PUBLISHED,
        "chunks": summary.chunks_total,
        "index_seconds": round(t_index, 1),
        "baseline_embed_seconds": round(t_base, 1),
        "search_ms_p50": round(1000 * float(np.percentile(lat, 50)), 2),  # default k
    }
    print(f"{'metric':<12}{'mdrag':>9}{'baseline':>10}{'published':>11}{'mdrag-published':>17}")
    for m in ("ndcg@10", "recall@10"):
        print(f"{m:<12}{ours[m]:>9.4f}{base[m]:>10.4f}{PUBLISHED[m]:>11.3f}{ours[m] - PUBLISHED[m]:>+17.4f}")
    print(f"ratio mdrag/baseline nDCG@10: {ours['ndcg@10'] / base['ndcg@10']:.3f}")
    for mode, m in by_mode.items():
        print(f"{mode:>7}: nDCG@10 {m['ndcg@10']:.4f}  R@10 {m['recall@10']:.4f}  Hit@5 {m['hit@5']:.4f}")
    print("published BM25 (bm25s): nDCG@10 0.687  R@10 0.819  R@100 0.913")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------

SCIFACT_HYBRID = 0.70
# Published SciFact figures: all-MiniLM-L6-v2 is in scifact.json ("published"); BM25 (bm25s) is
# what benchmarks/scifact.py prints beside it.
PUBLISHED_DENSE = {"ndcg@10": 0.645, "recall@10": 0.783, "recall@100": 0.925}
PUBLISHED_BM25 = {"ndcg@10": 0.687, "recall@10": 0.819, "recall@100": 0.913}


def t_scifact_hybrid(data: Data) -> list[Row]:
    name = f"SciFact hybrid nDCG@10 >= {SCIFACT_HYBRID}"
    sci = data.get("scifact")
    if not sci:
        return [Row(name, not_measured("scifact", data))]
    h = scifact_metric(sci, "hybrid")
    pub = num(dig(sci, "published", "ndcg@10")) or PUBLISHED_DENSE["ndcg@10"]
    pub_bm25 = num(dig(sci, "published_bm25", "ndcg@10")) or PUBLISHED_BM25["ndcg@10"]
    return [
        Row(
            name,
            f"{fnum(h, 4)} (dense {fnum(scifact_metric(sci, 'dense'), 4)}, "
            f"bm25 {fnum(scifact_metric(sci, 'bm25'), 4)})",
            f"published: dense all-MiniLM-L6-v2 {pub:.3f}, BM25 (bm25s) {pub_bm25:.3f}",
            f"{fratio(div(h, max(pub, pub_bm25)), 3)} of the better published",
            verdict(None if h is None else h >= SCIFACT_HYBRID),
        )
    ]


def section_scifact(data: Data) -> list[str]:
    sci, sci_t = data.get("scifact"), data.get("scifact_torch")
    lines = ["### SciFact (BEIR test)", ""]
    lines += prose(
        "scifact",
        cmd_scifact=command(data, "scifact"),
        cmd_scifact_torch=command(data, "scifact_torch"),
        published_dense_ndcg10=PUBLISHED_DENSE["ndcg@10"],
        published_bm25_ndcg10=PUBLISHED_BM25["ndcg@10"],
    )
    runs = [(label, obj) for label, obj in (("default", sci), ("torch", sci_t)) if obj]
    for step, obj in (("scifact", sci), ("scifact_torch", sci_t)):
        if not obj:
            lines += [f"{step}: {not_measured(step, data)}", ""]
    if not runs:
        return lines
    pub = dig(sci or sci_t, "published") or PUBLISHED_DENSE
    rows = []
    metrics = ("ndcg@10", "recall@10", "recall@100")
    for mode in MODES:
        published = PUBLISHED_DENSE if mode == "dense" else PUBLISHED_BM25
        if mode == "dense":
            published = {m: num(pub.get(m)) or PUBLISHED_DENSE[m] for m in metrics}
        for label, obj in runs:
            vals = [scifact_metric(obj, mode, m) for m in metrics]
            if all(v is None for v in vals):
                continue
            best_pub = (
                max(PUBLISHED_BM25["ndcg@10"], published["ndcg@10"]) if mode == "hybrid" else published["ndcg@10"]
            )
            other = scifact_metric(sci_t, mode) if label == "default" and sci_t else None
            rows.append(
                [
                    f"{mode} ({label}: {who(obj)})",
                    *[fnum(v, 4) for v in vals],
                    fdelta(None if vals[0] is None else vals[0] - best_pub, 4),
                    fdelta(None if vals[0] is None or other is None else vals[0] - other, 4),
                ]
            )
    for label, obj in runs:
        b = obj.get("baseline_whole_docs_exact") or {}
        rows.append([f"baseline: whole docs, exact ({label})", *[fnum(b.get(m), 4) for m in metrics], NA, NA])
    rows.append(
        ["published all-MiniLM-L6-v2", *[fnum(num(pub.get(m)) or PUBLISHED_DENSE[m], 3) for m in metrics], NA, NA]
    )
    rows.append(["published BM25 (bm25s)", *[fnum(PUBLISHED_BM25[m], 3) for m in metrics], NA, NA])
    lines += table(
        ["run", "nDCG@10", "Recall@10", "Recall@100", "nDCG@10 − published", "nDCG@10 default − torch"], rows
    )
    lines += [
        "nDCG@10 − published: against all-MiniLM-L6-v2 for dense, bm25s for bm25, the better of the two for hybrid.",
        "",
    ]
    rows = []
    for label, obj in runs:
        q = dig(obj, "modes", "dense", "queries") or dig(obj, "mdrag_dense", "queries")
        rows.append(
            [
                label,
                obj.get("embedder", NA),
                fint(q),
                fint(obj.get("chunks")),
                fsec(obj.get("index_seconds")),
                fnum(div(obj.get("chunks"), obj.get("index_seconds")), 1),
                fsec(obj.get("baseline_embed_seconds")),
                fms(obj.get("search_ms_p50")),
            ]
        )
    lines += table(
        [
            "run",
            "embedder",
            "queries",
            "chunks",
            "index time",
            "chunks/s",
            "baseline: embed whole docs",
            "search p50, k=300",
        ],
        rows,
    )
    return lines


EXPECTED_KEYS = ("backend", "embedder", "modes", "baseline_whole_docs_exact")
BENCHMARK = Benchmark(
    steps=(
        Step("scifact", 110, (), EXPECTED_KEYS),
        Step("scifact_torch", 120, ("--backend", "torch"), EXPECTED_KEYS),
    ),
    sections=(Section("SciFact (BEIR test)", 31, section_scifact, under="Retrieval quality"),),
    targets=(Target(60, t_scifact_hybrid),),
)


if __name__ == "__main__":
    main()
