"""The FAISS store and Milvus Lite on the same index content, question by question.

Each corpus (the Hugo docs, the OpenTelemetry docs) is indexed twice by
`mdrag index DIR --store faiss` and `--store milvus`, each in its own
MDRAG_HOME under ``--work`` (kept, and reused when it is there: delete it to
build again). Every question of the corpus's sets (those with no gold file
too: their lists are compared) is searched in each store in each mode as
`mdrag eval` searches (the index's settings: k 10, section collapse, threshold
0.35), with one query vector for both stores. Figures per set and mode:
questions whose top-5 (top-10) file lists differ between the stores, Hit@5 and
MRR per store (over the questions with gold files). Milvus Lite is searched
twice: with its own HNSW walk (ef 64, what mdrag once left it: the baseline) and
with the walk mdrag asks for now (mdrag.store.milvus.search._EF_PER_RESULT x k).

Each question whose file lists differ gets the causes found in the store-level
lists that mdrag.retrieval.search ranks from (dense and BM25 lists, 40 rows deep for
dense or BM25 mode, 120 for hybrid), checked against an exact ranking of the
stored vectors by numpy (cosines over every stored vector, ties by id):

- ``hnsw_milvus`` / ``hnsw_faiss``: the store's dense list lacks a chunk of
  the exact one that scores above the list's last row (an HNSW walk missed it;
  FAISS is exact below 20,000 chunks);
- ``dense_tie``: the same chunks, ordered differently where their cosines are
  within 1e-6 (equal texts: an include shared by several pages);
- ``bm25_score``: a chunk's BM25 score differs between the stores by more than
  1e-4 relative (Milvus Lite's per-segment statistics);
- ``bm25_tie``: the same BM25 scores, chunks of equal score ordered or cut
  differently;
- ``fusion``: both input lists agree and the fused lists still differ;
- ``other``: the store lists agree and the results differ (threshold, collapse).

Also: whether the two stores hold the same chunks and vectors, and warm search
latency per store, walk and mode (the store's part: the query's embedding is
given; the three are timed one after the other on each question, ``--repeat``
passes), against an exact numpy top 120 over the same vectors. ``--sweep``:
for Milvus Lite walks of 64 and 4, 8, 16, 32 x k, the questions whose dense
list of 10, 40 or 120 misses a chunk of the exact one.

    python benchmarks/store_parity.py [--work /tmp/parity] [--corpora hugo,otel]
        [--json benchmarks/out/store_parity.json]
    python benchmarks/store_parity.py --corpora hugo-edited --json benchmarks/out/store_parity_edited.json

``hugo-edited``: a copy of the Hugo docs, indexed, then indexed again after one
file gained a section (a small update, which Milvus Lite writes into a segment
of its own with a sample of the index: its BM25 statistics are per segment).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "benchmarks" / "data"
SHARED = ROOT.parent / "shared" / "data"

from mdrag.config import load_config  # noqa: E402
from mdrag.index import Index  # noqa: E402
from mdrag.knobs import STORE_MAX_ROWS  # noqa: E402
from mdrag.retrieval.evaluate import Question, _match, load_questions, score_ranking  # noqa: E402
from mdrag.retrieval.fusion import POOL  # noqa: E402
from mdrag.retrieval.search import search  # noqa: E402
from mdrag.store.base import Hit  # noqa: E402
from mdrag.store.milvus import search as milvus_search  # noqa: E402

CORPORA = {
    "hugo": (SHARED / "markdown_hugo_docs", ["hugo_qa.jsonl", "hugo_keyword_qa.jsonl"]),
    "hugo-edited": (SHARED / "markdown_hugo_docs", ["hugo_qa.jsonl", "hugo_keyword_qa.jsonl"]),
    "otel": (SHARED / "markdown_otel_docs", ["otel_qa.jsonl", "otel_retrieval_qa.jsonl", "otel_keyword_qa.jsonl"]),
}
# Indexed, then indexed again after this file gained EDIT: Milvus Lite's BM25 statistics per segment.
EDITED = {"hugo-edited": "content/en/getting-started/quick-start.md"}
EDIT = "\n## Benchmark edit\n\nOne new paragraph about the development server, written by an update.\n"
STORES = ("faiss", "milvus")
MODES = ("dense", "bm25", "hybrid")
TIE = 1e-6  # cosines this close are a tie (float32 rounding of the same product is ~1e-7)
BM25_REL = 1e-4
# Milvus Lite's HNSW walk, as mdrag.store.milvus.search._EF_PER_RESULT sets it: "lite_default" is Milvus Lite's
# own walk of 64 (what mdrag once left it), "shipped" the walk mdrag asks for now.
WALKS = {"lite_default": 0, "shipped": milvus_search._EF_PER_RESULT}
SWEEP = (0, 4, 8, 16, 32)  # --sweep: Milvus Lite's walk, times k


def build(corpus: str, backend: str, home: Path, model_cache: Path | None) -> dict[str, Any]:
    """`mdrag index DIR --store BACKEND` in ``home``, unless it holds a finished index already. An
    ``EDITED`` corpus is a copy of the docs (under ``home``'s parent), indexed, then indexed again
    after one file gained a section (a small update: Milvus Lite writes it in a segment of its own)."""
    done = home / "index.json"
    if done.is_file():
        return json.loads(done.read_text())
    home.mkdir(parents=True, exist_ok=True)
    if model_cache is not None and (model_cache / "models").is_dir() and not (home / "cache" / "models").exists():
        shutil.copytree(model_cache / "models", home / "cache" / "models")
    env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    docs = CORPORA[corpus][0]
    if corpus in EDITED:  # one copy for both stores, so that chunk ids (by path) are the same
        copy = home.parent / f"{corpus}-docs"
        if not copy.is_dir():
            shutil.copytree(docs, copy)
        docs = copy
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "mdrag", "index", str(docs), "--store", backend, "--json", "-q"]
    s = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
    out = {"chunks": s["chunks_total"], "wall_s": round(time.perf_counter() - t, 1)}
    if corpus in EDITED:
        target = docs / EDITED[corpus]
        before = target.read_bytes()
        target.write_text(target.read_text() + EDIT)
        s = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
        target.write_bytes(before)  # as the other store finds it
        out |= {"chunks": s["chunks_total"], "edited": EDITED[corpus], "chunks_embedded": s["chunks_embedded"]}
    done.write_text(json.dumps(out))
    return out


def open_index(home: Path) -> Index:
    index = Index(load_config(home=home))
    index.search("warm up", k=1)  # opens the store, loads the model and the FAISS store's BM25 index
    return index


def stored_vectors(index: Index) -> dict[str, np.ndarray]:
    """Every chunk's stored vector by id, read from the store's own files or API."""
    store: Any = index.store
    if index.backend == "faiss":
        db = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
        with db:
            rows = db.execute("SELECT id, vector FROM chunks").fetchall()
        db.close()
        return {i: np.frombuffer(v, dtype=np.float32) for i, v in rows}
    return {r["id"]: np.asarray(r["vector"], dtype=np.float32) for r in store._all_rows(["id", "vector"], None)}


def ids(rows: list[Hit]) -> list[str]:
    return [r.id for r in rows]


def scores(rows: list[Hit]) -> dict[str, float]:
    return {r.id: float(r.rank_score) for r in rows}


def _tied(a: list[str], b: list[str], score: dict[str, float], tol: float) -> bool:
    """Whether two lists of the same chunks differ only where scores are within ``tol``."""
    for x, y in zip(a, b):
        if x != y and abs(score[x] - score[y]) > tol:
            return False
    return True


def missed(got: list[Hit], exact: list[str], cosine: dict[str, float], tol: float = TIE) -> list[str]:
    """The chunks of the exact list that ``got`` lacks though they score above its last row (beyond ``tol``)."""
    if not got:
        return exact
    have, last = set(ids(got)), float(got[-1].rank_score)
    return [c for c in exact if c not in have and cosine[c] > last + tol]


def dense_cause(f: list[Hit], m: list[Hit], exact: list[str], cosine: dict[str, float], tol: float = TIE) -> list[str]:
    """Why two dense lists differ: [] when they agree."""
    fi, mi = ids(f), ids(m)
    if fi == mi:
        return []
    causes = [f"hnsw_{name}" for name, got in (("faiss", f), ("milvus", m)) if missed(got, exact, cosine, tol)]
    if causes:
        return causes
    return ["dense_tie"] if _tied(fi, mi, cosine, tol) else ["dense_order"]


def bm25_cause(f: list[Hit], m: list[Hit]) -> list[str]:
    fi, mi = ids(f), ids(m)
    if fi == mi and all(
        abs(a - b) <= BM25_REL * max(abs(a), 1.0) for a, b in zip(scores(f).values(), scores(m).values())
    ):
        return []
    fs, ms = scores(f), scores(m)
    both = set(fs) & set(ms)
    if any(abs(fs[i] - ms[i]) > BM25_REL * max(abs(fs[i]), 1.0) for i in both):
        return ["bm25_score"]
    fvals, mvals = sorted(fs.values(), reverse=True), sorted(ms.values(), reverse=True)
    if len(fvals) != len(mvals) or any(abs(a - b) > BM25_REL * max(abs(a), 1.0) for a, b in zip(fvals, mvals)):
        return ["bm25_score"]  # a chunk only one side returns, at a score the other side's list lacks
    return ["bm25_tie"]


def files(results: list[Any]) -> list[str]:
    return list(dict.fromkeys(r.rel_path for r in results))


def compare(
    indexes: dict[str, Index],
    questions: list[Question],
    mode: str,
    depth: int,
    vectors: dict[str, np.ndarray],
    order: list[str],
    matrix: np.ndarray,
) -> dict[str, Any]:
    """The two stores' file lists for each question in ``mode``, compared; the causes of each difference."""
    opts = dataclasses.replace(indexes["faiss"].search_options, mode=mode)
    embedder = indexes["faiss"].embedder
    diff5 = diff10 = 0
    causes: Counter[str] = Counter()
    metrics = {s: {"hit@5": 0.0, "mrr": 0.0} for s in STORES}
    examples = []
    for q in questions:
        v = vectors[q.text]
        lists = {s: files(search(indexes[s].store, embedder, q.text, opts, vector=v)) for s in STORES}
        for s in STORES if q.gold else ():
            sc = score_ranking(lists[s], {_match(g, lists[s]) for g in q.gold})
            metrics[s]["hit@5"] += sc["hit@5"]
            metrics[s]["mrr"] += sc["mrr"]
        diff5 += lists["faiss"][:5] != lists["milvus"][:5]
        if lists["faiss"][:10] == lists["milvus"][:10]:
            continue
        diff10 += 1
        why: list[str] = []
        sims = matrix @ (v / np.linalg.norm(v))
        exact = [order[i] for i in np.lexsort((np.arange(len(order)), -sims))[:depth]]
        cosine = dict(zip(order, sims.tolist()))
        detail: dict[str, Any] = {"question": q.text, **{s: lists[s][:10] for s in STORES}}
        if mode in ("dense", "hybrid"):
            dense = {s: indexes[s].store.search(v, depth, mode="dense") for s in STORES}
            why += dense_cause(dense["faiss"], dense["milvus"], exact, cosine)
            detail["missed_by_milvus"] = [
                {"exact_rank": exact.index(c) + 1, "cosine": round(cosine[c], 6)}
                for c in missed(dense["milvus"], exact, cosine)
            ]
            detail["dense_cosines"] = {s: [round(cosine[r.id], 7) for r in dense[s][:20]] for s in STORES}
        if mode in ("bm25", "hybrid"):
            bm25 = {s: indexes[s].store.search(v, depth, mode="bm25", text=q.text) for s in STORES}
            why += bm25_cause(bm25["faiss"], bm25["milvus"])
            detail["bm25_ranks_differ_at"] = [
                i + 1 for i, (a, b) in enumerate(zip(ids(bm25["faiss"]), ids(bm25["milvus"]))) if a != b
            ]
        detail["causes"] = why = why or (["fusion"] if mode == "hybrid" else ["other"])
        causes.update(why)
        examples.append(detail)
    n = sum(1 for q in questions if q.gold)
    return {
        "questions": len(questions),
        "with_gold": n,
        "top5_lists_differ": diff5,
        "top10_lists_differ": diff10,
        "causes": dict(causes),
        **{f"{s}_{k}": round(v / n, 4) for s in STORES for k, v in metrics[s].items()},
        "differences": examples,
    }


def sweep(
    store: Any, every: list[Question], vectors: dict[str, np.ndarray], order: list[str], matrix: np.ndarray
) -> dict[str, dict[str, int]]:
    """For each walk (``_EF_PER_RESULT``) and depth: questions whose Milvus Lite dense list misses a chunk of
    the exact one (scoring above the list's last row, beyond the tie tolerance)."""
    out: dict[str, dict[str, int]] = {}
    for per in SWEEP:
        milvus_search._EF_PER_RESULT = per
        row = out[f"ef max(64, {per} x k)" if per else "ef 64 (Lite's own)"] = {}
        for k in (10, 40, 120):
            bad = 0
            for q in every:
                v = vectors[q.text]
                sims = matrix @ (v / np.linalg.norm(v))
                exact = [order[i] for i in np.lexsort((np.arange(len(order)), -sims))[:k]]
                bad += bool(missed(store.search(v, k, mode="dense"), exact, dict(zip(order, sims.tolist()))))
            row[f"top {k}"] = bad
    milvus_search._EF_PER_RESULT = WALKS["shipped"]
    return out


def run_corpus(
    corpus: str, work: Path, model_cache: Path | None, repeat: int, with_sweep: bool = False
) -> dict[str, Any]:
    homes = {s: work / f"{corpus}-{s}" for s in STORES}
    built = {s: build(corpus, s, homes[s], model_cache) for s in STORES}
    indexes = {s: open_index(homes[s]) for s in STORES}
    stored = {s: stored_vectors(indexes[s]) for s in STORES}
    same_ids = set(stored["faiss"]) == set(stored["milvus"])
    order = sorted(stored["faiss"])
    matrix = np.vstack([stored["faiss"][i] for i in order])
    diff = max(float(np.abs(stored["faiss"][i] - stored["milvus"][i]).max()) for i in order) if same_ids else None
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    options = indexes["faiss"].search_options
    fetch = options.k * 4 if options.collapse != "none" else options.k
    depth = {"dense": fetch, "bm25": fetch, "hybrid": min(max(fetch, POOL), STORE_MAX_ROWS)}
    sets = {name: load_questions(DATA / name) for name in CORPORA[corpus][1]}
    every = [q for qs in sets.values() for q in qs]
    vectors = {q.text: indexes["faiss"].embedder.embed_query(q.text) for q in every}
    res: dict[str, Any] = {
        "chunks": {s: built[s]["chunks"] for s in STORES},
        "same_chunk_ids": same_ids,
        "max_vector_difference": diff,
        "depth": depth,
        "walks": {},
    }
    for walk, per in WALKS.items():
        milvus_search._EF_PER_RESULT = per
        res["walks"][walk] = {
            name: {mode: compare(indexes, qs, mode, depth[mode], vectors, order, matrix) for mode in MODES}
            for name, qs in sets.items()
        }
    # Warm latency, the store's part (the query vectors are given), each Milvus Lite walk timed
    # right after the other and after FAISS on the same question, so that load on the machine
    # falls on all alike.
    timings: dict[str, dict[str, list[float]]] = {c: {m: [] for m in MODES} for c in ("faiss", *WALKS)}
    for _ in range(repeat):
        for mode in MODES:
            opts = dataclasses.replace(options, mode=mode)
            for q in every:
                for column in ("faiss", *WALKS):
                    store = indexes["faiss" if column == "faiss" else "milvus"].store
                    milvus_search._EF_PER_RESULT = WALKS.get(column, 0)
                    t = time.perf_counter()
                    search(store, indexes["faiss"].embedder, q.text, opts, vector=vectors[q.text])
                    timings[column][mode].append(time.perf_counter() - t)
    milvus_search._EF_PER_RESULT = WALKS["shipped"]
    res["warm_search_ms"] = {
        c: {m: {q: round(float(np.percentile(ts, p)) * 1000, 2) for q, p in (("p50", 50), ("p95", 95))}
            for m, ts in timings[c].items()}
        for c in timings
    }  # fmt: skip
    t = time.perf_counter()
    for q in every:
        sims = matrix @ vectors[q.text]
        top = np.argpartition(-sims, depth["hybrid"])[: depth["hybrid"]]
        top[np.argsort(-sims[top])]
    res["baseline_numpy_exact_dense_ms"] = round((time.perf_counter() - t) / len(every) * 1000, 3)
    if with_sweep:
        res["sweep"] = sweep(indexes["milvus"].store, every, vectors, order, matrix)
    for index in indexes.values():
        index.close()
    return res


def print_table(results: dict[str, Any]) -> None:
    a, b = WALKS
    print(f"Milvus Lite's walk: {a} (ef 64) -> {b} (ef {WALKS[b]} x k). Lists: files of `mdrag eval`'s results.\n")
    print("| corpus | set | mode | questions (with gold) | top-5 / top-10 file lists differ "
          "| Hit@5 FAISS; Milvus Lite | MRR FAISS; Milvus Lite | causes |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for corpus, r in results.items():
        for name, per_mode in r["walks"][a].items():
            for mode, m in per_mode.items():
                n = r["walks"][b][name][mode]
                causes = " -> ".join(
                    ", ".join(f"{k} {v}" for k, v in sorted(x["causes"].items())) or "none" for x in (m, n)
                )
                print(
                    f"| {corpus} | {name.removesuffix('.jsonl')} | {mode} | {m['questions']} ({m['with_gold']}) "
                    f"| {m['top5_lists_differ']} / {m['top10_lists_differ']} -> "
                    f"{n['top5_lists_differ']} / {n['top10_lists_differ']} "
                    f"| {m['faiss_hit@5']}; {m['milvus_hit@5']} -> {n['milvus_hit@5']} "
                    f"| {m['faiss_mrr']}; {m['milvus_mrr']} -> {n['milvus_mrr']} | {causes} |"
                )
    for mode in MODES:
        tot = [
            sum(r["walks"][w][name][mode][f] for r in results.values() for name in r["walks"][w])
            for w in WALKS
            for f in ("top5_lists_differ", "top10_lists_differ")
        ]
        n = sum(m[mode]["questions"] for r in results.values() for m in r["walks"][a].values())
        print(f"| all | all | {mode} | {n} | {tot[0]} / {tot[1]} -> {tot[2]} / {tot[3]} | | | |")
    print()
    print("| corpus | chunks | same chunks; max vector difference | mode | FAISS warm p50 (p95) "
          f"| Milvus Lite, {a} | Milvus Lite, {b} | {b} / {a} | Milvus Lite {b} / FAISS |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for corpus, r in results.items():
        w = r["warm_search_ms"]
        for mode in MODES:
            f, x, y = w["faiss"][mode], w[a][mode], w[b][mode]
            print(
                f"| {corpus} | {r['chunks']['faiss']:,} | {r['same_chunk_ids']}; {r['max_vector_difference']:.1e} "
                f"| {mode} | {f['p50']} ms ({f['p95']}) | {x['p50']} ms ({x['p95']}) | {y['p50']} ms ({y['p95']}) "
                f"| {y['p50'] / x['p50']:.2f}x | {y['p50'] / f['p50']:.1f}x |"
            )
        print(f"| {corpus} | | | exact dense top {r['depth']['hybrid']} by numpy (baseline) "
              f"| {r['baseline_numpy_exact_dense_ms']} ms | | | | |")  # fmt: skip
    if any("sweep" in r for r in results.values()):
        print("\nQuestions whose Milvus Lite dense list misses a chunk of the exact top k:\n")
        print("| corpus | questions | walk | top 10 | top 40 | top 120 |")
        print("|---|---|---|---|---|---|")
        for corpus, r in results.items():
            n = sum(m["dense"]["questions"] for m in r["walks"][a].values())
            for walk, row in r.get("sweep", {}).items():
                print(f"| {corpus} | {n} | {walk} | {row['top 10']} | {row['top 40']} | {row['top 120']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/parity"), help="the homes, <corpus>-<store>")
    ap.add_argument("--corpora", default="hugo,otel", help=f"of {', '.join(CORPORA)}")
    ap.add_argument("--model-cache", type=Path, help="a home's cache folder with the ONNX export to copy")
    ap.add_argument("--repeat", type=int, default=3, help="timed passes over the questions")
    ap.add_argument("--sweep", action="store_true", help="questions whose Milvus Lite dense list misses an exact "
                    "chunk, by walk and depth")  # fmt: skip
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "out" / "store_parity.json")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = {c: run_corpus(c, args.work, args.model_cache, args.repeat, args.sweep) for c in args.corpora.split(",")}
    print_table(results)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
