"""Indexing and search on the Hugo docs (992 Markdown files), as a user runs them.

Figures: end-to-end index time (chunks/s, files/s) and peak memory of a
`mdrag index` process; re-index with nothing changed; one edited file;
one-shot `mdrag search` wall time; warm in-process search p50/p95.
Baselines in the same run: the model's own throughput on the same chunks
(the same embedder on 512 stored chunks, no parsing or store) and exact numpy search
over the same vectors.

    python benchmarks/hugo_index.py [--backend auto|torch|onnx|openvino] [--json out.json] [--keep DIR]

Also in the same run: `mdrag eval` of the fresh index on the Hugo questions
(benchmarks/data/hugo_qa.jsonl), every search mode.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from common import HUGO, QA, mdrag_cli, seed_model_cache

QUERIES = [
    "how do I define a custom output format",
    "build drafts and future content",
    "configure pagination page size",
    "image processing resize in page bundle",
    "what is a taxonomy",
    "deploy to GitHub Pages",
    "how to use partial templates with context",
    "syntax highlighting code block options",
    "menu configuration in front matter",
    "hugo modules mount a theme",
    "shortcode with named parameters",
    "multilingual site language configuration",
    "minify css with hugo pipes",
    "render hook for links",
    "sort pages by date descending",
    "install hugo on linux",
    "what does the where function do",
    "related content configuration",
    "how to create a section list page",
    "environment variables in config",
]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", type=Path, help="keep the mdrag home (index) here, for benchmarks/threshold.py")
    ap.add_argument("--backend", default="auto", help="embedding.backend: auto, torch, onnx or openvino")
    ap.add_argument(
        "--model-cache",
        type=Path,
        help="a cache folder with models/ (embedders.py --cache): the one-time ONNX export, not timed",
    )
    args = ap.parse_args()
    out: dict[str, object] = {"backend": args.backend}
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "hugo"
        shutil.copytree(HUGO, docs)
        home = Path(tmp) / "home"
        home.mkdir()
        seed_model_cache(home, args.model_cache)
        (home / "config.yaml").write_text(f"embedding:\n  backend: {args.backend}\n")
        n_files = sum(1 for _ in docs.rglob("*.md"))

        wall, stdout = mdrag_cli(home, "index", str(docs), "--json", "-q")
        s = json.loads(stdout)
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        out["index"] = {
            "files": n_files,
            "chunks": s["chunks_total"],
            "wall_s": round(wall, 1),
            "chunks_per_s": round(s["chunks_total"] / wall, 1),
            "files_per_s": round(n_files / wall, 1),
            "peak_rss_mb": round(peak_mb),
            "skipped": s["skipped"],
            "embed_s": s["embed_seconds"],
        }
        _, stdout = mdrag_cli(home, "eval", str(QA), "--mode", "all", "--json")
        out["eval"] = json.loads(stdout)
        wall, stdout = mdrag_cli(home, "index", str(docs), "--json", "-q")
        s = json.loads(stdout)
        out["reindex_unchanged"] = {
            "wall_s": round(wall, 2),
            "in_process_s": s["seconds"],
            "embedded": s["chunks_embedded"],
        }

        target = docs / "content" / "en" / "getting-started" / "quick-start.md"
        target.write_text(target.read_text() + "\n## Benchmark edit\n\nOne new paragraph to embed.\n")
        wall, stdout = mdrag_cli(home, "index", str(docs), "--json", "-q")
        s = json.loads(stdout)
        out["reindex_one_edit"] = {
            "wall_s": round(wall, 2),
            "in_process_s": s["seconds"],
            "embed_s": s["embed_seconds"],  # loading the model included
            "wall_less_embed_s": round(wall - s["embed_seconds"], 2),
            "embedded": s["chunks_embedded"],
        }

        one_shot = [mdrag_cli(home, "search", q, "--json")[0] for q in QUERIES[:5]]
        out["search_one_shot_ms"] = {"p50": round(pct(one_shot, 50)), "p95": round(pct(one_shot, 95))}

        os.environ["MDRAG_HOME"] = str(home)
        from mdrag.config import load_config
        from mdrag.index import Index

        index = Index(load_config())
        top5 = [r.rel_path for r in index.search(QUERIES[0], k=5)]
        out["output_formats_in_top5"] = any("output-format" in p for p in top5)
        warm = []
        for _ in range(3):
            for q in QUERIES:
                t = time.perf_counter()
                index.search(q, k=10)
                warm.append(time.perf_counter() - t)
        # Baseline: exact cosine in numpy over the same vectors, same query embedding cost.
        rows = index.store.client.query(index.store.collection, filter="", output_fields=["vector"], limit=16384)
        mat = np.asarray([r["vector"] for r in rows], dtype=np.float32)
        base = []
        for _ in range(3):
            for q in QUERIES:
                t = time.perf_counter()
                v = index.embedder.embed_query(q)
                np.argpartition(-(mat @ v), 10)[:10]
                base.append(time.perf_counter() - t)
        out["search_warm_ms"] = {"p50": round(pct(warm, 50), 2), "p95": round(pct(warm, 95), 2)}
        out["baseline_numpy_exact_ms"] = {"p50": round(pct(base, 50), 2), "p95": round(pct(base, 95), 2)}

        # Baseline: the model alone on 512 of the same chunks.
        texts = [
            r["text"]
            for r in index.store.client.query(index.store.collection, filter="", output_fields=["text"], limit=512)
        ]
        t = time.perf_counter()
        index.embedder.embed(texts)
        raw = len(texts) / (time.perf_counter() - t)
        out["embedder"] = type(index.embedder).__name__
        out["baseline_model_only_chunks_per_s"] = round(raw, 1)
        index.close()
        if args.keep:
            shutil.rmtree(args.keep, ignore_errors=True)
            shutil.copytree(home, args.keep)

    idx = out["index"]
    print(
        f"index: {idx['files']} files, {idx['chunks']} chunks in {idx['wall_s']} s: "
        f"{idx['chunks_per_s']} chunks/s, {idx['files_per_s']} files/s, peak RSS {idx['peak_rss_mb']} MB"
    )
    print(
        f"  ratio to the model alone ({out['baseline_model_only_chunks_per_s']} chunks/s): "
        f"{idx['chunks_per_s'] / out['baseline_model_only_chunks_per_s']:.2f}"
    )
    print(f"re-index, nothing changed: {out['reindex_unchanged']}")
    print(f"re-index, one file edited: {out['reindex_one_edit']}")
    print(f"one-shot `mdrag search` wall ms: {out['search_one_shot_ms']}")
    print(
        f"warm search ms: {out['search_warm_ms']}; numpy exact baseline ms: {out['baseline_numpy_exact_ms']}; "
        f"ratio p50 {out['search_warm_ms']['p50'] / out['baseline_numpy_exact_ms']['p50']:.2f}"
    )
    print(f"output-formats page in the top 5: {out['output_formats_in_top5']}")
    ev = out["eval"]
    assert isinstance(ev, dict)
    for mode in ("dense", "bm25", "hybrid"):
        print(f"eval {mode:>6}: " + ", ".join(f"{k} {v:.3f}" for k, v in ev[mode].items()))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
