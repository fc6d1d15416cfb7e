"""Embedding backends compared on real Hugo chunks: torch (the baseline) against onnxruntime and OpenVINO.

Figures per backend, each with its ratio to torch from the same run:
throughput on 512 chunks at batch 32 (after a warm-up batch), single-query
latency p50/p95 over 100 queries, mean and min cosine of the chunk vectors to
torch's, and the share of top-10 neighbours kept (50 questions: the top-10
chunks under each backend against the top-10 under torch). Also the first
load (the one-time ONNX export when the cache is empty; OpenVINO's compile),
and a fresh process's time to its first query vector and its peak memory.
OpenVINO runs at its default precision (bf16 on CPUs with AMX or AVX-512
BF16) and at f32.

Quality guard: mean cosine >= 0.9999 and >= 0.99 of top-10 neighbours kept.

    python benchmarks/embedders.py [--json out.json] [--cache DIR] [--chunks 512] [--longest]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mdrag.chunking import chunk_document  # noqa: E402
from mdrag.embedding.base import Embedder  # noqa: E402
from mdrag.embedding.local import LocalEmbedder  # noqa: E402
from mdrag.parsers import parse_file  # noqa: E402

HUGO = ROOT.parent / "shared" / "data" / "markdown_hugo_docs"
QA = ROOT / "benchmarks" / "data" / "hugo_qa.jsonl"
MIN_COSINE = 0.9999
MIN_KEPT = 0.99


def load_chunks(embedder: Embedder, n: int, longest: bool = False) -> list[str]:
    """``n`` chunk texts spread evenly over the Hugo docs (or the ``n`` longest), cut as the indexer cuts them."""
    texts: list[str] = []
    for f in sorted(HUGO.rglob("*.md")):
        doc = parse_file(f)
        rel = f.relative_to(HUGO).as_posix()
        chunks = chunk_document(doc, str(HUGO), rel, count_tokens=embedder.count_tokens, max_tokens=embedder.max_tokens)
        texts.extend(c.embed_text for c in chunks)
    if len(texts) <= n:
        return texts
    if longest:
        return sorted(texts, key=len)[-n:]
    return [texts[int(i * len(texts) / n)] for i in range(n)]


def load_questions() -> list[str]:
    return [json.loads(line)["question"] for line in QA.read_text().splitlines() if line.strip()]


def top10(queries: np.ndarray, chunks: np.ndarray) -> list[set[int]]:
    scores = queries @ chunks.T
    return [set(np.argpartition(-row, 10)[:10].tolist()) for row in scores]


def cold_start(code: str) -> dict[str, float]:
    """A fresh process: seconds to its first query vector, and its peak RSS."""
    script = (
        "import time\n"
        "t = time.perf_counter()\n"
        f"{code}\n"
        "e.embed_query('how do I build drafts')\n"
        "secs = time.perf_counter() - t\n"
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec.
        "hwm = [line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]\n"
        "print(secs, hwm)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    secs, rss_kb = p.stdout.split()
    return {"first_query_s": round(float(secs), 2), "peak_rss_mb": round(int(rss_kb) / 1024)}


def measure(embedder: Embedder, chunks: list[str], questions: list[str], batch: int) -> dict[str, Any]:
    embedder.batch_size = batch
    embedder.embed(chunks[:batch])  # warm-up: load the model, first allocations
    t = time.perf_counter()
    vectors = embedder.embed(chunks)
    wall = time.perf_counter() - t
    for q in questions[:5]:
        embedder.embed_query(q)
    lat = []
    for i in range(100):
        t = time.perf_counter()
        embedder.embed_query(questions[i % len(questions)])
        lat.append((time.perf_counter() - t) * 1000)
    return {
        "chunks_per_s": round(len(chunks) / wall, 1),
        "query_ms": {"p50": round(float(np.percentile(lat, 50)), 2), "p95": round(float(np.percentile(lat, 95)), 2)},
        "_vectors": vectors,
        "_queries": np.vstack([embedder.embed_query(q) for q in questions[:50]]),  # as search embeds them
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--cache", type=Path, help="ONNX export cache (default: a temporary folder, exported afresh)")
    ap.add_argument("--chunks", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--longest", action="store_true", help="the longest chunks instead of a spread over the docs")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    torch_e = LocalEmbedder()
    chunks = load_chunks(torch_e, args.chunks, args.longest)
    questions = load_questions()
    tokens = torch_e.count_tokens(chunks)
    out: dict[str, Any] = {
        "chunks": len(chunks),
        "selection": "longest" if args.longest else "spread",
        "mean_chars": round(float(np.mean([len(c) for c in chunks]))),
        "mean_tokens": round(float(np.mean([min(t, torch_e.max_tokens or t) for t in tokens]))),
        "batch": args.batch,
        "cpus": os.cpu_count(),
        "backends": {},
    }
    print(
        f"{out['chunks']} Hugo chunks ({out['selection']}), "
        f"mean {out['mean_chars']} chars / {out['mean_tokens']} tokens, "
        f"batch {args.batch}, {out['cpus']} CPUs",
        flush=True,
    )

    tmp = tempfile.TemporaryDirectory(prefix="mdrag-bench-")
    cache = args.cache or Path(tmp.name)
    backends: dict[str, tuple[Callable[[], Embedder], str]] = {
        "torch": (lambda: torch_e, "from mdrag.embedding.local import LocalEmbedder; e = LocalEmbedder()"),
    }
    try:
        from mdrag.embedding.onnx import OnnxEmbedder, OpenVinoEmbedder, onnx_available, openvino_available
    except ImportError as exc:
        print(f"onnx, openvino: skipped ({exc})")
    else:
        mod = f"from mdrag.embedding.onnx import OnnxEmbedder, OpenVinoEmbedder; cache = {str(cache)!r}; "
        if onnx_available():
            backends["onnx"] = (lambda: OnnxEmbedder(cache_dir=cache), mod + "e = OnnxEmbedder(cache_dir=cache)")
        else:
            print("onnx: skipped (onnxruntime is not installed)")
        if openvino_available():
            backends["openvino"] = (
                lambda: OpenVinoEmbedder(cache_dir=cache),
                mod + "e = OpenVinoEmbedder(cache_dir=cache)",
            )
            backends["openvino-f32"] = (
                lambda: OpenVinoEmbedder(cache_dir=cache, precision="f32"),
                mod + "e = OpenVinoEmbedder(cache_dir=cache, precision='f32')",
            )
        else:
            print("openvino: skipped (openvino is not installed)")

    base: dict[str, Any] = {}
    for name, (make, code) in backends.items():
        embedder = make()
        fig: dict[str, Any] = {}
        if name != "torch":
            t = time.perf_counter()
            _ = embedder.session  # type: ignore[attr-defined]  # exports when the cache is empty; compiles
            fig["first_load_s"] = round(time.perf_counter() - t, 2)
        fig.update(measure(embedder, chunks, questions, args.batch))
        fig.update(cold_start(code))
        vec, qv = fig.pop("_vectors"), fig.pop("_queries")
        if name == "torch":
            base = {"vectors": vec, "top10": top10(qv, vec), **fig}
            cos = np.ones(len(chunks))
            kept = 1.0
        else:
            cos = (vec * base["vectors"]).sum(axis=1)
            kept = float(np.mean([len(a & b) / 10 for a, b in zip(top10(qv, vec), base["top10"])]))
        fig["mean_cosine"] = round(float(cos.mean()), 6)
        fig["min_cosine"] = round(float(cos.min()), 6)
        fig["top10_kept"] = round(kept, 4)
        fig["speedup_chunks_per_s"] = round(fig["chunks_per_s"] / base["chunks_per_s"], 2)
        fig["query_p50_ratio"] = round(fig["query_ms"]["p50"] / base["query_ms"]["p50"], 2)
        fig["first_query_ratio"] = round(fig["first_query_s"] / base["first_query_s"], 2)
        fig["quality"] = "PASS" if cos.mean() >= MIN_COSINE and kept >= MIN_KEPT else "FAIL"
        out["backends"][name] = fig
        print(
            f"{name:12} {fig['chunks_per_s']:7.1f} chunks/s (x{fig['speedup_chunks_per_s']:.2f})  "
            f"query p50 {fig['query_ms']['p50']:6.2f} ms (x{fig['query_p50_ratio']:.2f}), "
            f"p95 {fig['query_ms']['p95']:.2f} ms  "
            f"fresh process {fig['first_query_s']:.2f} s to a query vector (x{fig['first_query_ratio']:.2f}), "
            f"{fig['peak_rss_mb']} MB peak  "
            f"cosine mean {fig['mean_cosine']:.6f} min {fig['min_cosine']:.6f}  "
            f"top-10 kept {fig['top10_kept']:.3f}  {fig['quality']}"
            + (f"  (first load {fig['first_load_s']} s)" if "first_load_s" in fig else ""),
            flush=True,
        )
    tmp.cleanup()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
