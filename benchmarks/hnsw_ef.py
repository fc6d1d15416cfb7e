"""The FAISS store's HNSW graph by size: recall@10 and search time for each efSearch.

The graph is built as mdrag.store.faiss builds it (IndexHNSWFlat, M 16,
efConstruction 100, inner product) over store_scale.py's clustered 384-d
vectors; each efSearch answers the same 200 queries on one thread (as the
store searches). Baseline in the same run: exact top-10 by numpy, which
defines recall. mdrag.store.faiss.index.ef_search's rule was chosen from these
figures (benchmarks/RESULTS.md).

    python benchmarks/hnsw_ef.py [--sizes 100000,1000000] [--ef 64,96,128,192,256,384,512]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from store_scale import make_vectors  # noqa: E402

K = 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--ef", default="64,96,128,192,256,384,512")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        v, q = make_vectors(n, seed=args.seed)
        v, q = np.ascontiguousarray(v, dtype=np.float32), np.ascontiguousarray(q, dtype=np.float32)
        t = time.perf_counter()
        truth = np.argsort(-(q @ v.T), axis=1)[:, :K]
        exact_ms = (time.perf_counter() - t) / len(q) * 1000
        idx = faiss.IndexHNSWFlat(v.shape[1], 16, faiss.METRIC_INNER_PRODUCT)
        idx.hnsw.efConstruction = 100
        t = time.perf_counter()
        idx.add(v)
        print(f"{n:,} vectors: graph built in {time.perf_counter() - t:.0f} s; exact numpy {exact_ms:.2f} ms/query")
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        for ef in (int(x) for x in args.ef.split(",")):
            params = faiss.SearchParametersHNSW()
            params.efSearch = ef
            t = time.perf_counter()
            _, ids = idx.search(q, K, params=params)
            ms = (time.perf_counter() - t) / len(q) * 1000
            recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(ids, truth)])
            print(f"  ef {ef:4d}: recall@10 {recall:.4f}  {ms:.2f} ms/query ({ms / exact_ms:.3f}x exact numpy)")
        faiss.omp_set_num_threads(threads)


if __name__ == "__main__":
    main()
