"""The FAISS store (mdrag/store/faiss/store.py) at the Hugo index's size and at 100k chunks.

Chunks are passages of the Hugo docs with clustered 384-d unit vectors, as in
benchmarks/store_scale.py (same generators); BM25 texts are stemmed as
`search.stemming` does. Queries: the Hugo questions' text (benchmarks/data/hugo_qa.jsonl)
for BM25, with generated query vectors.

Figures per size: build time (upserts of 1,000 chunks, then end_run), an
update run (20 chunks replaced and 20 deleted, then end_run, which saves the
.faiss file), warm search p50/p95 (k=10) for dense, bm25, hybrid (the core's
two lists of 30 and weighted fusion: mdrag.retrieval.search with mode hybrid), and dense
filtered to one folder; and, in a fresh process, the time to open the store
(load vectors and build the BM25 index) and its RSS after 200 hybrid searches.
Baseline measured in the same process: exact dense top-10 in numpy over the
same vectors (matrix product + argpartition); the ratio is store / baseline.

    python benchmarks/faiss_store.py [--sizes 3600,100000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from store_scale import IDENTITY, hugo_passages, make_chunks, make_vectors  # noqa: E402

from mdrag.retrieval.fusion import fuse  # noqa: E402
from mdrag.stemming import stemmer  # noqa: E402
from mdrag.store.base import Filter, Hit  # noqa: E402
from mdrag.store.faiss import FaissStore  # noqa: E402

K = 10
DEPTH = 30  # mdrag.retrieval.search's hybrid depth for k=10
QUESTIONS = ROOT / "benchmarks" / "data" / "hugo_qa.jsonl"


def questions() -> list[str]:
    return [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines() if line.strip()]


def p(xs: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(xs) * 1000, q)), 3)


def timed(fn: Any, args: list[Any]) -> list[float]:
    out = []
    for a in args:
        t = time.perf_counter()
        fn(a)
        out.append(time.perf_counter() - t)
    return out


def hybrid(store: FaissStore, q: np.ndarray, text: str) -> list[Hit]:
    dense = store.search(q, DEPTH, mode="dense", text=text)
    bm25 = store.search(q, DEPTH, mode="bm25", text=text)
    return fuse(dense, bm25, "weighted", 0.5)[:K]


def rss_mb() -> dict[str, float]:
    status = Path("/proc/self/status").read_text()
    fields = {line.split(":")[0]: line.split()[1] for line in status.splitlines() if line.startswith("Vm")}
    return {"rss_mb": round(int(fields["VmRSS"]) / 1024, 1), "peak_rss_mb": round(int(fields["VmHWM"]) / 1024, 1)}


def child(folder: str) -> None:
    """In a fresh process: open the store, run hybrid searches, print load time and RSS as JSON."""
    t = time.perf_counter()
    store = FaissStore(folder, "bench", IDENTITY, stemmer())
    store.open(create=False)
    load_s = time.perf_counter() - t
    queries = np.load(Path(folder) / "queries.npy")
    texts = questions()
    for i in range(200):
        hybrid(store, queries[i % len(queries)], texts[i % len(texts)])
    print(json.dumps({"load_s": round(load_s, 3), **rss_mb()}))


def run_size(n: int, passages: list[Any], tmp: Path) -> dict[str, Any]:
    folder = tmp / f"n{n}"
    vectors, queries = make_vectors(n, seed=n)
    chunks = make_chunks(n, passages, seed=n)
    store = FaissStore(folder, "bench", IDENTITY, stemmer())
    store.open()
    t = time.perf_counter()
    for i in range(0, n, 1000):
        store.upsert(chunks[i : i + 1000], vectors[i : i + 1000])
    store.end_run(set(), set(), whole=True)
    build_s = time.perf_counter() - t

    t = time.perf_counter()
    store.upsert(chunks[:20], vectors[:20])
    store.delete_ids([c.id for c in chunks[20:40]])
    store.end_run(set(), set(), whole=False)
    update_s = time.perf_counter() - t

    texts = questions()
    qs = [(queries[i % len(queries)], texts[i % len(texts)]) for i in range(200)]
    for q, text in qs[:20]:  # warm up
        hybrid(store, q, text)
    folder_filter = Filter(path_prefix="/".join(chunks[0].rel_path.split("/")[:3]) + "/")  # a section of the docs
    res: dict[str, Any] = {"chunks": store.count(), "build_s": round(build_s, 2), "update_run_s": round(update_s, 3)}
    for label, fn in {
        "dense": lambda a: store.search(a[0], K, mode="dense"),
        "bm25": lambda a: store.search(a[0], K, mode="bm25", text=a[1]),
        "hybrid": lambda a: hybrid(store, a[0], a[1]),
        "dense_filtered": lambda a: store.search(a[0], K, where=folder_filter, mode="dense"),
        "bm25_filtered": lambda a: store.search(a[0], K, where=folder_filter, mode="bm25", text=a[1]),
    }.items():
        ts = timed(fn, qs)
        res[label] = {"p50_ms": p(ts, 50), "p95_ms": p(ts, 95)}
    res["filter_passes"] = int(sum(folder_filter.matches(c.__dict__) for c in chunks[40:]))

    def numpy_exact(a: tuple[np.ndarray, str]) -> np.ndarray:
        sims = vectors @ a[0]
        top = np.argpartition(-sims, K)[:K]
        return top[np.argsort(-sims[top])]

    base = timed(numpy_exact, qs)
    found = [{h.id for h in store.search(q, K)} for q, _ in qs]
    live = np.r_[0:20, 40:n]  # chunks 20-39 were deleted by the update run
    truth = [{chunks[live[i]].id for i in np.argsort(-(vectors[live] @ q))[:K]} for q, _ in qs]
    res["dense_recall@10"] = round(float(np.mean([len(f & t) / K for f, t in zip(found, truth)])), 4)
    res["dense_index"] = "HNSW" if store._mem.index.hnsw else "flat"
    res["baseline_numpy_dense"] = {"p50_ms": p(base, 50), "p95_ms": p(base, 95)}
    for label in ("dense", "bm25", "hybrid", "dense_filtered", "bm25_filtered"):
        res[label]["x_baseline"] = round(res[label]["p50_ms"] / res["baseline_numpy_dense"]["p50_ms"], 2)
    store.close()
    np.save(folder / "queries.npy", queries)
    out = subprocess.run([sys.executable, __file__, "--child", str(folder)], capture_output=True, text=True, check=True)
    res["fresh_process"] = json.loads(out.stdout.strip().splitlines()[-1])
    res["disk_mb"] = {f.name: round(f.stat().st_size / 2**20, 1) for f in folder.iterdir() if f.suffix != ".npy"}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="3600,100000")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    passages = hugo_passages()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mdrag-faiss-bench-") as tmp:
        for n in [int(s) for s in args.sizes.split(",")]:
            out[str(n)] = run_size(n, passages, Path(tmp))
            print(json.dumps({str(n): out[str(n)]}, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
