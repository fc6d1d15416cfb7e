"""BM25 in the FAISS store against Milvus Lite's, on the Hugo docs and questions.

The Hugo docs are parsed and chunked as `mdrag index` does (default chunk
settings; token counts by words, which moves a few boundaries but gives both
stores the same chunks), stemmed as `search.stemming` does, and written to a
Milvus Lite file and to a FAISS store with the same (random) vectors. For each
Hugo question (benchmarks/data/hugo_qa.jsonl), BM25 top-10 in each store:
Hit@5 (a gold file among the first five), and how many of the ten both
return (overlap@10) and whether they agree on the first.

    python benchmarks/faiss_bm25_parity.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HUGO = ROOT.parent / "shared" / "data" / "markdown_hugo_docs"
QUESTIONS = ROOT / "benchmarks" / "data" / "hugo_qa.jsonl"

from mdrag.chunking import ChunkSettings, chunk_document  # noqa: E402
from mdrag.parsers import parse_file  # noqa: E402
from mdrag.stemming import stemmer  # noqa: E402
from mdrag.store.base import Hit  # noqa: E402
from mdrag.store.faiss import FaissStore  # noqa: E402
from mdrag.store.milvus import MilvusStore  # noqa: E402

DIM = 8
IDENTITY = {"model": "bench:random", "dimension": DIM}


def chunks() -> list[Any]:
    out = []
    for p in sorted(HUGO.rglob("*.md")):
        doc = parse_file(p)
        rel = p.relative_to(HUGO).as_posix()
        out += chunk_document(doc, str(HUGO), rel, ChunkSettings(), lambda ts: [len(t.split()) for t in ts], 256)
    return out


def hit(rows: list[Hit], gold: list[str]) -> bool:
    return any(r.rel_path in gold for r in rows[:5])


def main() -> None:
    cs = chunks()
    vecs = np.random.default_rng(0).normal(size=(len(cs), DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    stem = stemmer()
    qs = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        milvus = MilvusStore(str(Path(tmp) / "milvus.db"), "parity", IDENTITY, None, stem)
        milvus.open()
        for i in range(0, len(cs), 1000):
            milvus.upsert(cs[i : i + 1000], vecs[i : i + 1000])
        milvus.flush()
        faiss_store = FaissStore(Path(tmp) / "faiss", "parity", IDENTITY, stem)
        faiss_store.open()
        faiss_store.upsert(cs, vecs)
        faiss_store.end_run(set(), set(), whole=True)
        q = vecs[0]
        res = {"milvus_hit5": 0, "faiss_hit5": 0, "overlap10": [], "same_first": 0}
        for item in qs:
            m = milvus.search(q, 10, mode="bm25", text=item["question"])
            f = faiss_store.search(q, 10, mode="bm25", text=item["question"])
            res["milvus_hit5"] += hit(m, item["gold"])
            res["faiss_hit5"] += hit(f, item["gold"])
            res["overlap10"].append(len({r.id for r in m} & {r.id for r in f}))
            res["same_first"] += bool(m and f and m[0].id == f[0].id)
        milvus.close()
        faiss_store.close()
    n = len(qs)
    print(
        json.dumps(
            {
                "chunks": len(cs),
                "questions": n,
                "bm25_hit@5_milvus_lite": round(res["milvus_hit5"] / n, 3),
                "bm25_hit@5_faiss": round(res["faiss_hit5"] / n, 3),
                "overlap@10_mean": round(float(np.mean(res["overlap10"])), 2),
                "same_first": round(res["same_first"] / n, 3),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
