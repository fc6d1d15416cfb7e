"""Milvus Lite and the FAISS store side by side: the same data, the same machine, the same run.

Two parts:

``hugo``: the Hugo docs (992 files) as a user meets them, for each backend
(``store.backend`` in the home's config.yaml): `mdrag index` wall time and peak
RSS; re-index with nothing changed; re-index after one edited file (wall, and
wall less its embedding, model loading included, as the indexer reports it);
one-shot `mdrag search` wall time; warm in-process search p50/p95 per mode
(`Index.search`, k 10, query embedding included, and the same less the query's
embedding); `mdrag eval` on the Hugo questions. Each home is kept under
``--keep DIR/<backend>`` for `benchmarks/server_load.py --home`.

``scale``: the stores alone at 10k and 100k chunks (``--sizes``): Hugo
passages with clustered 384-d vectors (benchmarks/store_scale.py's
generators), inserted in batches of 1,000 and one end_run; warm search p50/p95
(k 10; hybrid as mdrag.retrieval.search runs it: lists of 120 for 40 rows, weighted
fusion); in a fresh process, open to first answer and RSS after 200 hybrid
searches; disk. Baseline in the same process: exact numpy top-10 over the
same vectors.

    python benchmarks/stores.py hugo [--keep DIR] [--json out.json]
    python benchmarks/stores.py scale [--sizes 10000,100000] [--stores milvus,faiss] [--json out.json]
    python benchmarks/stores.py plot [--scale a.json b.json]   # benchmarks/plots/stores_side_by_side.png

Ratios are FAISS / Milvus Lite of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

from common import HUGO, QA  # noqa: E402
from hugo_index import QUERIES  # noqa: E402

STORES = ("milvus", "faiss")
K = 10


def ms(xs: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(xs) * 1000, q)), 2)


def spread(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": ms(xs, 50), "p95_ms": ms(xs, 95)}


def run_cli(home: Path, *args: str) -> tuple[float, str, float]:
    """`python -m mdrag ARGS` as a user runs it: (wall seconds, stdout, the child's own peak RSS in MB)."""
    env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "mdrag", *args], env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's rusage (RUSAGE_CHILDREN would merge them all)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"mdrag {' '.join(args)} failed ({proc.returncode}): {err.read()[-2000:]}")
        return wall, out.read(), usage.ru_maxrss / 1024


# -- hugo ---------------------------------------------------------------------


def hugo_one(backend: str, tmp: Path) -> dict[str, Any]:
    docs = tmp / backend / "hugo"
    shutil.copytree(HUGO, docs)
    home = tmp / backend / "home"
    home.mkdir(parents=True)
    (home / "config.yaml").write_text(f"store:\n  backend: {backend}\n")
    out: dict[str, Any] = {"home": str(home)}

    wall, stdout, peak = run_cli(home, "index", str(docs), "--json", "-q")
    s = json.loads(stdout)
    out["index"] = {
        "chunks": s["chunks_total"],
        "wall_s": round(wall, 1),
        "embed_s": s["embed_seconds"],
        "wall_less_embed_s": round(wall - s["embed_seconds"], 2),
        "peak_rss_mb": round(peak),
    }
    unchanged = [run_cli(home, "index", str(docs), "--json", "-q")[0] for _ in range(3)]
    out["reindex_unchanged_s"] = round(float(np.median(unchanged)), 2)

    target = docs / "content" / "en" / "getting-started" / "quick-start.md"
    edits = []
    for i in range(5):
        target.write_text(target.read_text() + f"\n## Benchmark edit {i}\n\nOne new paragraph to embed, number {i}.\n")
        wall, stdout, _ = run_cli(home, "index", str(docs), "--json", "-q")
        s = json.loads(stdout)
        edits.append((wall, s["embed_seconds"], s["seconds"], s["chunks_embedded"]))
    less = [w - e for w, e, _, _ in edits]
    out["reindex_one_edit"] = {
        "wall_s": round(float(np.median([w for w, *_ in edits])), 2),
        "embed_s": round(float(np.median([e for _, e, _, _ in edits])), 3),
        "wall_less_embed_s": round(float(np.median(less)), 2),
        "wall_less_embed_max_s": round(max(less), 2),
        "in_process_less_embed_s": round(float(np.median([p - e for _, e, p, _ in edits])), 3),
        "embedded": edits[-1][3],
    }
    one_shot = [run_cli(home, "search", q, "--json")[0] for q in QUERIES[:5]]
    out["search_one_shot_ms"] = spread(one_shot)
    _, stdout, _ = run_cli(home, "eval", str(QA), "--mode", "all", "--json")
    out["eval"] = json.loads(stdout)

    os.environ["MDRAG_HOME"] = str(home)
    from mdrag.config import load_config
    from mdrag.index import Index

    index = Index(load_config())
    index.search(QUERIES[0])
    warm: dict[str, Any] = {}
    for mode in ("dense", "bm25", "hybrid"):
        ts = []
        for _ in range(5):
            for q in QUERIES:
                t = time.perf_counter()
                index.search(q, k=K, mode=mode)
                ts.append(time.perf_counter() - t)
        warm[mode] = spread(ts)
    vectors = {q: index.embedder.embed_query(q) for q in QUERIES}
    embed = index.embedder.embed_query
    ts = []
    for _ in range(5):
        for q in QUERIES:
            t = time.perf_counter()
            embed(q)
            ts.append(time.perf_counter() - t)
    warm["query_embedding"] = spread(ts)
    index.embedder.embed_query = vectors.__getitem__  # type: ignore[method-assign]
    ts = []
    for _ in range(5):
        for q in QUERIES:
            t = time.perf_counter()
            index.search(q, k=K, mode="hybrid")
            ts.append(time.perf_counter() - t)
    warm["hybrid_less_embedding"] = spread(ts)
    index.close()
    out["warm"] = warm
    return out


def hugo(args: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) if args.keep is None else args.keep.resolve()  # an index cannot move: built in place
        for backend in args.stores.split(","):
            print(f"hugo: {backend}...", file=sys.stderr)
            shutil.rmtree(work / backend, ignore_errors=True)
            res[backend] = hugo_one(backend, work)
    return res


def print_hugo(res: dict[str, Any]) -> None:
    rows = [
        ("`mdrag index`, wall (s)", lambda r: r["index"]["wall_s"]),
        ("`mdrag index`, wall less embedding (s)", lambda r: r["index"]["wall_less_embed_s"]),
        ("`mdrag index`, peak RSS (MB)", lambda r: r["index"]["peak_rss_mb"]),
        ("re-index, nothing changed, wall (s)", lambda r: r["reindex_unchanged_s"]),
        ("re-index, one edited file, wall (s)", lambda r: r["reindex_one_edit"]["wall_s"]),
        ("re-index, one edited file, wall less embedding (s)", lambda r: r["reindex_one_edit"]["wall_less_embed_s"]),
        ("one-shot `mdrag search`, p50 (ms)", lambda r: r["search_one_shot_ms"]["p50_ms"]),
        ("warm dense p50 (ms)", lambda r: r["warm"]["dense"]["p50_ms"]),
        ("warm bm25 p50 (ms)", lambda r: r["warm"]["bm25"]["p50_ms"]),
        ("warm hybrid p50 (ms)", lambda r: r["warm"]["hybrid"]["p50_ms"]),
        ("warm hybrid p95 (ms)", lambda r: r["warm"]["hybrid"]["p95_ms"]),
        ("warm hybrid less query embedding p50 (ms)", lambda r: r["warm"]["hybrid_less_embedding"]["p50_ms"]),
        ("query embedding p50 (ms)", lambda r: r["warm"]["query_embedding"]["p50_ms"]),
        ("Hugo hybrid Hit@5", lambda r: r["eval"]["hybrid"]["hit@5"]),
        ("Hugo hybrid nDCG@10", lambda r: r["eval"]["hybrid"]["ndcg@10"]),
    ]
    names = list(res)
    print("| figure | " + " | ".join(names) + " | ratio |")
    print("|---|" + "---|" * (len(names) + 1))
    for label, get in rows:
        vals = [get(res[n]) for n in names]
        ratio = f"{vals[-1] / vals[0]:.2f}x" if len(vals) == 2 and vals[0] else "–"
        print(f"| {label} | " + " | ".join(str(v) for v in vals) + f" | {ratio} |")


# -- scale --------------------------------------------------------------------


def _questions() -> list[str]:
    return [json.loads(line)["question"] for line in QA.read_text().splitlines() if line.strip()]


def _open(backend: str, folder: Path, create: bool = True) -> Any:
    from store_scale import IDENTITY

    from mdrag.stemming import stemmer

    if backend == "faiss":
        from mdrag.store.faiss import FaissStore

        store: Any = FaissStore(folder, "bench", IDENTITY, stemmer())
    else:
        from mdrag.store.milvus import MilvusStore

        folder.mkdir(parents=True, exist_ok=True)
        store = MilvusStore(str(folder / "milvus.db"), "bench", IDENTITY, prepare_text=stemmer())
    store.open(create=create)
    return store


def _hybrid(store: Any, q: np.ndarray, text: str) -> list[dict[str, Any]]:
    from mdrag.retrieval.search import SearchOptions, _ranked

    return _ranked(store, q, text, 4 * K, None, SearchOptions(mode="hybrid", fusion="weighted"), frozenset())[:K]


def _rss_mb() -> dict[str, float]:
    status = Path("/proc/self/status").read_text()
    fields = {line.split(":")[0]: line.split()[1] for line in status.splitlines() if line.startswith("Vm")}
    return {"rss_mb": round(int(fields["VmRSS"]) / 1024), "peak_rss_mb": round(int(fields["VmHWM"]) / 1024)}


def child(backend: str, folder: str, n_queries: int = 200) -> None:
    """In a fresh process: open the store, answer one hybrid search, then ``n_queries``; print load time and RSS."""
    queries = np.load(Path(folder) / "queries.npy")
    texts = _questions()
    t = time.perf_counter()
    store = _open(backend, Path(folder), create=False)
    opened = time.perf_counter() - t
    _hybrid(store, queries[0], texts[0])
    first = time.perf_counter() - t
    for i in range(n_queries):
        _hybrid(store, queries[i % len(queries)], texts[i % len(texts)])
    print(json.dumps({"open_s": round(opened, 2), "open_to_first_answer_s": round(first, 2), **_rss_mb()}))
    store.close()


def scale_one(backend: str, n: int, tmp: Path, n_queries: int = 200) -> dict[str, Any]:
    from store_scale import hugo_passages, make_chunks, make_vectors

    folder = tmp / f"{backend}-{n}"
    vectors, queries = make_vectors(n, seed=n)
    chunks = make_chunks(n, hugo_passages(), seed=n)
    store = _open(backend, folder)
    t = time.perf_counter()
    for i in range(0, n, 1000):
        store.upsert(chunks[i : i + 1000], vectors[i : i + 1000])
    store.end_run(set(), set(), whole=True)
    build_s = time.perf_counter() - t
    texts = _questions()
    qs = [(queries[i % len(queries)], texts[i % len(texts)]) for i in range(n_queries)]
    for q, text in qs[:20]:
        _hybrid(store, q, text)
    res: dict[str, Any] = {"chunks": store.count(), "build_s": round(build_s, 1), "queries": n_queries}
    for mode, fn in {
        "dense": lambda a: store.search(a[0], K, mode="dense"),
        "bm25": lambda a: store.search(a[0], K, mode="bm25", text=a[1]),
        "hybrid": lambda a: _hybrid(store, a[0], a[1]),
    }.items():
        ts = []
        for a in qs:
            t = time.perf_counter()
            fn(a)
            ts.append(time.perf_counter() - t)
        res[mode] = spread(ts)
    found = [{h.id for h in store.search(q, K)} for q, _ in qs[:100]]
    truth = [{chunks[i].id for i in np.argsort(-(vectors @ q))[:K]} for q, _ in qs[:100]]
    res["dense_recall@10"] = round(float(np.mean([len(f & t) / K for f, t in zip(found, truth)])), 4)
    t = time.perf_counter()
    store.close()
    res["close_s"] = round(time.perf_counter() - t, 2)
    np.save(folder / "queries.npy", queries)
    proc = subprocess.run(
        [sys.executable, __file__, "child", backend, str(folder), str(n_queries)],
        capture_output=True,
        text=True,
        check=True,
    )
    res["fresh_process"] = json.loads(proc.stdout.strip().splitlines()[-1])
    res["disk_mb"] = round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20)
    shutil.rmtree(folder, ignore_errors=True)
    base = []
    for q, _ in qs:
        t = time.perf_counter()
        sims = vectors @ q
        top = np.argpartition(-sims, K)[:K]
        top[np.argsort(-sims[top])]
        base.append(time.perf_counter() - t)
    res["baseline_numpy_dense"] = spread(base)
    return res


def scale(args: argparse.Namespace) -> dict[str, Any]:
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            for backend in args.stores.split(","):
                print(f"scale: {backend} at {n:,} chunks...", file=sys.stderr)
                res.setdefault(str(n), {})[backend] = scale_one(backend, n, Path(tmp), args.queries)
    return res


def print_scale(res: dict[str, Any]) -> None:
    print("| chunks | store | build | dense p50 (p95) | bm25 p50 (p95) | hybrid p50 (p95) | recall@10 | "
          "fresh process: open, first answer | RSS after its hybrid searches | disk | numpy exact p50 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, by in res.items():
        for backend, r in by.items():
            f = r["fresh_process"]
            cells = [
                f"{int(n):,}",
                backend,
                f"{r['build_s']} s",
                *(f"{r[m]['p50_ms']} ms ({r[m]['p95_ms']})" for m in ("dense", "bm25", "hybrid")),
                str(r["dense_recall@10"]),
                f"{f['open_s']} s, {f['open_to_first_answer_s']} s",
                f"{f['rss_mb']} MB",
                f"{r['disk_mb']} MB",
                f"{r['baseline_numpy_dense']['p50_ms']} ms",
            ]
            print("| " + " | ".join(cells) + " |")


def plot(args: argparse.Namespace) -> None:
    """Two panels from the JSON files of `hugo` and `scale`: warm hybrid p50 and memory, by chunks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hugo_res = json.loads(args.hugo.read_text())
    scale_res: dict[str, Any] = {}
    for path in args.scale:  # e.g. 10k and 100k from one run, 1M (a long one) from another
        scale_res.update(json.loads(path.read_text()))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for backend, label, style, color in (("milvus", "Milvus Lite", "o-", "C0"), ("faiss", "FAISS", "s-", "C1")):
        sizes = sorted(int(n) for n in scale_res if backend in scale_res[n])
        hybrid = [scale_res[str(n)][backend]["hybrid"]["p50_ms"] for n in sizes]
        rss = [scale_res[str(n)][backend]["fresh_process"]["rss_mb"] for n in sizes]
        left.plot(sizes, hybrid, style, color=color, label=f"{label}, the store alone")
        if backend in hugo_res:
            h = hugo_res[backend]
            left.plot([h["index"]["chunks"]], [h["warm"]["hybrid"]["p50_ms"]], style[0], color=color, markersize=9,
                      markerfacecolor="none", label=f"{label}, Hugo docs via Index.search")  # fmt: skip
        right.plot(sizes, rss, style, color=color, label=label)
    left.set(xscale="log", yscale="log", xlabel="chunks", ylabel="warm hybrid search p50 (ms)")
    right.set(xscale="log", xlabel="chunks", ylabel="RSS after the timed hybrid searches (MB)")
    left.axhline(5, color="grey", lw=0.8, ls="--")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Milvus Lite and FAISS, both stores of a size in one run (benchmarks/stores.py)")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="part", required=True)
    h = sub.add_parser("hugo")
    h.add_argument("--keep", type=Path, help="keep each backend's home and docs under DIR/<backend>")
    s = sub.add_parser("scale")
    s.add_argument("--sizes", default="10000,100000")
    s.add_argument("--queries", type=int, default=200, help="questions timed per mode (fewer for a slow store at 1M)")
    for p in (h, s):
        p.add_argument("--stores", default=",".join(STORES))
        p.add_argument("--json", type=Path)
    pl = sub.add_parser("plot", help="draw the figures of `hugo` and `scale` from their JSON files")
    pl.add_argument("--hugo", type=Path, default=ROOT / "benchmarks" / "out" / "stores-hugo.json")
    pl.add_argument(
        "--scale",
        type=Path,
        nargs="+",
        default=[ROOT / "benchmarks" / "out" / "stores-scale.json"],
        help="one or more JSON files of `scale` (a size in several: the last one's figures)",
    )
    pl.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "plots" / "stores_side_by_side.png")
    c = sub.add_parser("child")
    c.add_argument("backend")
    c.add_argument("folder")
    c.add_argument("queries", type=int, nargs="?", default=200)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.part == "child":
        child(args.backend, args.folder, args.queries)
        return
    if args.part == "plot":
        plot(args)
        return
    res = hugo(args) if args.part == "hugo" else scale(args)
    (print_hugo if args.part == "hugo" else print_scale)(res)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
