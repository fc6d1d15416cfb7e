"""Milvus Lite at 1k, 10k and 100k chunks: exact search (FLAT) against HNSW (faiss-cpu).

mdrag creates its vector index as AUTOINDEX, which Milvus Lite turns into HNSW
(M=16, efConstruction=200, ef=64) when faiss-cpu is importable and into brute
force when it is not. milvus-lite 3.2.2 declares faiss-cpu as a dependency, so
a normal install gets HNSW; an install without it (--no-deps, no wheel for the
platform) gets brute force. This benchmark names the index types explicitly,
so the result does not depend on what is installed: FLAT (exact), HNSW with
the parameters below, and AUTOINDEX as it behaves in this environment.

Each collection has mdrag's schema (it is created by `MilvusStore` itself; only
the vector index type is swapped) and is filled through `MilvusStore.upsert`,
1,000 rows per batch, each batch flushed, as `mdrag index` does. Vectors are
384-d clustered unit vectors, calibrated on the MiniLM vectors of the Hugo docs
index (mean pairwise cosine ~0.2, a query's 10th neighbour ~0.6); texts are
passages of the Hugo docs (~400 characters), so BM25 has real work on insert.

Figures, per index type and corpus size: insert + flush time, the time to close
the store (Milvus Lite compacts segments and builds their indexes in the
background; closing waits for it), a fresh process's time to open the file,
load the collection and answer its first query, and its peak RSS; warm dense
search p50/p95 (200 queries, k=10, mdrag's output fields); recall@10 against
exact results; the size on disk. Baseline in the same run: exact search in
numpy over the same vectors (matrix product + top 10).

    python benchmarks/store_scale.py [--sizes 1000,10000,100000] [--json out.json] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from render import (  # noqa: E402
    PLOT_SIZE,
    command,
    dig,
    div,
    fmb,
    fms,
    fnum,
    fratio,
    fsec,
    guarded,
    not_measured,
    num,
    prose,
    save,
    table,
    verdict,
)
from steps import NA, Benchmark, Data, Json, Plot, Row, Section, Step, Target  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HUGO = ROOT.parent / "shared" / "data" / "markdown_hugo_docs"

DIM = 384
BATCH = 1000  # rows per upsert (and flush)
QUERIES = 200
K = 10
EF_SWEEP = (16, 32, 64, 128)  # HNSW search-time ef values measured for recall / latency
IDENTITY = {"model": "sentence-transformers/all-MiniLM-L6-v2", "dimension": DIM}
INDEX = "bench"  # mdrag index name: collection mdrag_bench


@dataclass(frozen=True)
class Variant:
    """One vector index configuration."""

    name: str  # key in the JSON and the table
    index_type: str  # Milvus index_type
    build: dict[str, int] = field(default_factory=dict)  # index params (HNSW: M, efConstruction)
    ef: int | None = None  # search-time ef sent with each query; None: send nothing, as mdrag does today


VARIANTS = [
    Variant("FLAT", "FLAT"),
    Variant("HNSW", "HNSW", {"M": 16, "efConstruction": 100}, ef=64),
    Variant("AUTOINDEX", "AUTOINDEX"),
]

# The fresh process: what a CLI user's `mdrag search` pays before its first answer
# (without mdrag's own imports and the model). Reads the query on stdin.
CHILD = r"""
import json, logging, resource, sys, time
t0 = time.perf_counter()
from pymilvus import MilvusClient
for name in ("pymilvus", "grpc._server", "milvus_lite"):
    logging.getLogger(name).setLevel(logging.CRITICAL)
t1 = time.perf_counter()
args = json.loads(sys.stdin.read())
client = MilvusClient(args["uri"])
t2 = time.perf_counter()
client.load_collection(args["collection"])
t3 = time.perf_counter()
res = client.search(
    args["collection"], data=[args["vector"]], limit=args["k"], output_fields=args["output"],
    search_params=args["search_params"],
)
t4 = time.perf_counter()
assert len(res[0]) == args["k"], res
print(json.dumps({
    "import_s": t1 - t0, "connect_s": t2 - t1, "load_s": t3 - t2, "first_search_s": t4 - t3,
    "open_to_answer_s": t4 - t1, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
sys.stdout.flush()
"""


def pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(xs) * 1000, q)), 3)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


# -- data ---------------------------------------------------------------------


def hugo_passages(min_chars: int = 300, max_chars: int = 1000) -> list[tuple[str, str, str, str]]:
    """(rel_path, title, heading, text) passages of the Hugo docs' prose: consecutive
    paragraphs under one heading joined to at least ``min_chars``, like a chunk."""
    out = []
    for p in sorted(HUGO.rglob("*.md")):
        raw = p.read_text(encoding="utf-8", errors="ignore")
        rel = p.relative_to(HUGO).as_posix()
        title = p.stem.replace("-", " ")
        if raw.startswith("---"):
            end = raw.find("\n---", 3)
            if end > 0:
                m = re.search(r"^title:\s*['\"]?(.+?)['\"]?\s*$", raw[3:end], re.M)
                title = m.group(1) if m else title
                raw = raw[end + 4 :]
        heading, buf = "", ""
        for block in re.split(r"\n\s*\n", raw):
            block = block.strip()
            if block.startswith("#"):
                if buf:
                    out.append((rel, title, heading, buf[:max_chars]))
                heading, buf = block.splitlines()[0].lstrip("#").strip(), ""
                continue
            if len(block) < 40 or block.startswith(("```", "{{", "|", "<")):
                continue
            buf = f"{buf}\n\n{block}" if buf else block
            if len(buf) >= min_chars:
                out.append((rel, title, heading, buf[:max_chars]))
                buf = ""
        if buf:
            out.append((rel, title, heading, buf[:max_chars]))
    return out


def make_vectors(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` clustered unit vectors and ``QUERIES`` queries (perturbed stored vectors).

    min(3000, n/10) centres share a common direction (anisotropy, as sentence
    embeddings have); each row is a centre plus gaussian noise, normalised.
    """
    rng = np.random.default_rng(seed)
    n_centres = max(1, min(3000, n // 10))
    common = _unit(rng.standard_normal(DIM))
    centres = _unit(rng.standard_normal((n_centres, DIM)) / np.sqrt(DIM) + 0.6 * common)
    labels = rng.integers(0, n_centres, n)
    vectors = _unit(centres[labels] + 0.75 * rng.standard_normal((n, DIM)).astype(np.float32) / np.sqrt(DIM))
    picked = rng.choice(n, QUERIES, replace=False)
    queries = _unit(vectors[picked] + 0.3 * rng.standard_normal((QUERIES, DIM)).astype(np.float32) / np.sqrt(DIM))
    return vectors, queries


def vector_stats(vectors: np.ndarray, truth_sims: np.ndarray) -> dict[str, float]:
    sample = vectors[: min(2000, len(vectors))]
    s = sample @ sample.T
    off = s[~np.eye(len(sample), dtype=bool)]
    return {
        "mean_pairwise_cosine": round(float(off.mean()), 3),
        "query_top1_cosine_p50": round(float(np.median(truth_sims[:, 0])), 3),
        "query_10th_cosine_p50": round(float(np.median(truth_sims[:, -1])), 3),
    }


def make_chunks(n: int, passages: list[tuple[str, str, str, str]], seed: int) -> list[Any]:
    from mdrag.types import Chunk

    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(passages), n)
    root = "/docs/hugo"
    chunks = []
    for i, j in enumerate(picks):
        rel, title, heading, text = passages[int(j)]
        heads = [title, heading] if heading else [title]
        chunks.append(
            Chunk(
                id=f"{i:016x}",
                text=text,
                context=" > ".join(heads),
                path=f"{root}/{rel}",
                rel_path=rel,
                root=root,
                heading_path=heads,
                level=len(heads),
                position=i % 50,
                content_hash=f"{i:064x}",
                line_start=1 + i % 400,
                line_end=10 + i % 400,
                metadata={"title": title},
            )
        )
    return chunks


def exact_top_k(
    vectors: np.ndarray, queries: np.ndarray, passes: int = 3
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Ground truth (ids, sims) and the numpy baseline's per-query latencies:
    the fastest of ``passes`` passes over the queries (by p50), so that another
    process on the machine inflates the baseline less."""
    ids = np.empty((len(queries), K), dtype=np.int64)
    sims = np.empty((len(queries), K), dtype=np.float32)
    best: list[float] = []
    for _ in range(passes):
        times = []
        for i, q in enumerate(queries):
            t = time.perf_counter()
            s = vectors @ q
            top = np.argpartition(-s, K)[:K]
            top = top[np.argsort(-s[top])]
            times.append(time.perf_counter() - t)
            ids[i], sims[i] = top, s[top]
        if not best or np.median(times) < np.median(best):
            best = times
    return ids, sims, best


# -- Milvus --------------------------------------------------------------------


def open_store(db: Path, variant: Variant) -> Any:
    """A MilvusStore on ``db``, its collection created by mdrag's own code with
    only the vector index type and params replaced by ``variant``'s."""
    from mdrag.stemming import stemmer
    from mdrag.store.milvus import MilvusStore

    store = MilvusStore(str(db), INDEX, IDENTITY, prepare_text=stemmer())  # stemming is mdrag's default
    store._connect()  # open() connects only when not connected: patch the client in between
    client = store.client
    prepare = client.prepare_index_params

    def prepare_index_params() -> Any:
        ip = prepare()
        add = ip.add_index

        def add_index(field_name: str, **kw: Any) -> None:
            if field_name == "vector":
                kw["index_type"] = variant.index_type
                if variant.build:
                    # Nested: pymilvus flattens `params` into top-level keys, which Milvus
                    # Lite ignores; it reads build params only from a "params" JSON key.
                    kw["params"] = {"params": dict(variant.build)}
            add(field_name, **kw)

        ip.add_index = add_index
        return ip

    client.prepare_index_params = prepare_index_params
    store.open()
    client.prepare_index_params = prepare
    return store


def search_params(ef: int | None) -> dict[str, Any]:
    sp: dict[str, Any] = {"metric_type": "COSINE"}  # what MilvusStore.search sends
    if ef is not None:
        sp["params"] = {"ef": ef}
    return sp


def milvus_search(store: Any, q: np.ndarray, sp: dict[str, Any]) -> list[int]:
    """The dense query of MilvusStore.search (same output fields), ids as row numbers."""
    from mdrag.store.milvus.store import _OUTPUT

    res = store.client.search(
        store.collection, data=[q.tolist()], limit=K, filter="", output_fields=_OUTPUT, search_params=sp
    )
    return [int(h["id"], 16) for h in res[0]]


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    return round(float(np.mean([len(set(f) & set(t.tolist())) / K for f, t in zip(found, truth)])), 4)


def warm_search(store: Any, queries: np.ndarray, sp: dict[str, Any]) -> tuple[list[float], list[list[int]]]:
    for q in queries[:5]:
        milvus_search(store, q, sp)
    times, found = [], []
    for q in queries:
        t = time.perf_counter()
        found.append(milvus_search(store, q, sp))
        times.append(time.perf_counter() - t)
    return times, found


def cold_start(db: Path, collection: str, q: np.ndarray, sp: dict[str, Any]) -> dict[str, float]:
    from mdrag.store.milvus.store import _OUTPUT

    args = {"uri": str(db), "collection": collection, "vector": q.tolist(), "k": K, "output": _OUTPUT}
    args["search_params"] = sp
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", CHILD], input=json.dumps(args), capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"cold-start process failed: {p.stderr[-2000:]}")
    out = {k: round(v, 3) for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items()}
    out["process_wall_s"] = round(wall, 3)
    return out


def disk_mb(path: Path) -> float:
    files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    return round(sum(f.stat().st_size for f in files) / 2**20, 1)


def index_files(db: Path) -> dict[str, int]:
    """Index sidecar files on disk by kind (HNSW files written by faiss, .npy brute force)."""
    kinds: dict[str, int] = {}
    for f in db.rglob("*.idx"):
        with open(f, "rb") as fh:
            magic = fh.read(6)
        kind = "numpy" if magic == b"\x93NUMPY" else "faiss" if magic[:4] in (b"IHNf", b"IHNs") else "other"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def segment_count(db: Path) -> int:
    return sum(1 for _ in db.rglob("data/data_*.parquet"))


def run_variant(
    variant: Variant,
    db: Path,
    chunks: list[Any],
    vectors: np.ndarray,
    queries: np.ndarray,
    truth: np.ndarray,
) -> dict[str, Any]:
    n = len(chunks)
    out: dict[str, Any] = {"index_type": variant.index_type, "build_params": variant.build, "ef": variant.ef}
    store = open_store(db, variant)
    desc = store.client.describe_index(store.collection, "vector") or {}
    out["index_as_stored"] = {k: desc[k] for k in ("index_type", "metric_type", "params") if k in desc}
    t = time.perf_counter()
    for i in range(0, n, BATCH):
        store.upsert(chunks[i : i + BATCH], vectors[i : i + BATCH])
    out["insert_flush_s"] = round(time.perf_counter() - t, 2)
    out["rows_per_s"] = round(n / out["insert_flush_s"], 1)
    t = time.perf_counter()
    store.close()  # Milvus Lite waits for its background compaction and index builds
    out["close_s"] = round(time.perf_counter() - t, 2)
    out["build_total_s"] = round(out["insert_flush_s"] + out["close_s"], 2)
    out["disk_mb"] = disk_mb(db)
    out["segments"] = segment_count(db)
    out["index_files"] = index_files(db)

    sp = search_params(variant.ef)
    out["cold"] = cold_start(db, store.collection, queries[0], sp)

    store = open_store(db, variant)
    try:
        times, found = warm_search(store, queries, sp)
        out["warm_ms"] = {"p50": pct(times, 50), "p95": pct(times, 95)}
        out["recall_at_10"] = recall(found, truth)
        if variant.index_type != "FLAT" and out["index_files"].get("faiss"):
            sweep = {}
            for ef in EF_SWEEP:
                ts, fs = warm_search(store, queries[:100], search_params(ef))
                sweep[str(ef)] = {"p50_ms": pct(ts, 50), "recall_at_10": recall(fs, truth[:100])}
            out["ef_sweep_100q"] = sweep
    finally:
        store.close()
    return out


def probe_index_types(tmp: Path) -> dict[str, str]:
    """Which vector index_type names this Milvus Lite builds and searches (a 200-row collection each)."""
    from pymilvus import DataType, MilvusClient

    for name in ("pymilvus", "grpc._server", "milvus_lite"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    rng = np.random.default_rng(0)
    vecs = _unit(rng.standard_normal((200, DIM)))
    result = {}
    for i, kind in enumerate(("FLAT", "BRUTE_FORCE", "HNSW", "HNSW_SQ", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "DISKANN")):
        db = tmp / f"probe{i}.db"
        client = MilvusClient(str(db))
        try:
            s = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
            s.add_field("id", DataType.INT64, is_primary=True)
            s.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
            ip = client.prepare_index_params()
            # HNSW: params as pymilvus documents them (it sends them as top-level keys);
            # IVF: nested under "params", the only form Lite reads (nlist 4 for 200 rows).
            params = {"M": 8} if kind.startswith("HNSW") else {"params": {"nlist": 4}} if "IVF" in kind else {}
            ip.add_index("vector", index_type=kind, metric_type="COSINE", params=params)
            client.create_collection("p", schema=s, index_params=ip)
            if params:
                kept = (client.describe_index("p", "vector") or {}).get("params")
                result[f"{kind} params {params}"] = f"stored as {kept}" if kept else "dropped by Milvus Lite"
            client.insert("p", [{"id": j, "vector": v.tolist()} for j, v in enumerate(vecs)])
            client.flush("p")
            client.release_collection("p")
            client.load_collection("p")
            res = client.search("p", data=[vecs[3].tolist()], limit=3, search_params={"metric_type": "COSINE"})
            result[kind] = "ok" if res[0] and res[0][0]["id"] == 3 else f"wrong result {res}"
        except Exception as e:  # report what Lite says, whatever it is
            msg = getattr(e, "message", None) or str(e)
            result[kind] = f"error: {msg.strip().splitlines()[0][:160]}"
        finally:
            client.close()
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(str(db))
    return result


# -- report --------------------------------------------------------------------


def print_table(out: dict[str, Any], sizes: list[int]) -> None:
    names = [v.name for v in VARIANTS]
    head = (
        f"{'index':<10} {'chunks':>7} {'insert s':>9} {'close s':>8} {'cold s':>7} {'cold RSS':>9} "
        f"{'p50 ms':>8} {'p95 ms':>8} {'x numpy':>8} {'recall':>7} {'disk MB':>8} {'segs':>5}"
    )
    print(head)
    print("-" * len(head))
    for n in sizes:
        base = out["numpy_exact"][str(n)]["p50_ms"]
        print(f"{'numpy':<10} {n:>7} {'':>9} {'':>8} {'':>7} {'':>9} {base:>8.3f} "
              f"{out['numpy_exact'][str(n)]['p95_ms']:>8.3f} {1:>8.1f} {1:>7.3f}")  # fmt: skip
        for name in names:
            r = out[name].get(str(n))
            if r is None:
                continue
            if "skipped" in r:
                print(f"{name:<10} {n:>7} skipped: {r['skipped']}")
                continue
            print(
                f"{name:<10} {n:>7} {r['insert_flush_s']:>9.1f} {r['close_s']:>8.1f} "
                f"{r['cold']['open_to_answer_s']:>7.2f} {r['cold']['peak_rss_mb']:>6.0f} MB "
                f"{r['warm_ms']['p50']:>8.2f} {r['warm_ms']['p95']:>8.2f} {r['warm_ms']['p50'] / base:>8.1f} "
                f"{r['recall_at_10']:>7.3f} {r['disk_mb']:>8.1f} {r['segments']:>5}"
            )
    print(
        "\ninsert s: upsert + flush in batches of 1,000; close s: closing the store (background compaction and "
        "index builds); cold s: fresh process, MilvusClient(path) + load + first search (pymilvus import not "
        "included); p50/p95: warm dense search, k=10; x numpy: p50 / numpy exact p50; recall@10 vs exact."
    )
    for name in names:
        for n in sizes:
            sweep = out[name].get(str(n), {}).get("ef_sweep_100q")
            if sweep:
                cells = ", ".join(
                    f"ef={ef}: p50 {c['p50_ms']:.2f} ms, recall {c['recall_at_10']:.3f}" for ef, c in sweep.items()
                )
                print(f"{name} {n}: {cells}")
    for note in out["notes"]:
        print(f"note: {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="corpus sizes, comma-separated")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--out-dir", type=Path, help="where the Milvus Lite files go (kept); default a temp dir, deleted")
    ap.add_argument(
        "--max-build-s",
        type=float,
        default=300,
        help="skip a size for an index type when its projected build time (from the previous size) exceeds this",
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    import pymilvus
    from milvus_lite.index.factory import is_faiss_available

    out: dict[str, Any] = {v.name: {} for v in VARIANTS}
    out["numpy_exact"] = {}
    out["notes"] = []
    faiss = is_faiss_available()
    out["meta"] = {
        "pymilvus": pymilvus.__version__,
        "milvus_lite": _version("milvus-lite"),
        "faiss_cpu": _version("faiss-cpu") if faiss else None,
        "milvus_lite_requires": _requires("milvus-lite"),
        "autoindex_is": "HNSW (M=16, efConstruction=200, ef=64)" if faiss else "BRUTE_FORCE",
        "dim": DIM,
        "queries": QUERIES,
        "k": K,
        "batch": BATCH,
    }
    if not faiss:
        out["notes"].append("faiss-cpu is not installed: HNSW cannot be built (pip install faiss-cpu)")

    tmp_ctx = tempfile.TemporaryDirectory() if args.out_dir is None else None
    tmp = Path(tmp_ctx.name) if tmp_ctx else args.out_dir
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        probe = out["meta"]["index_type_probe"] = probe_index_types(tmp)
        if any(v == "dropped by Milvus Lite" for v in probe.values()):
            out["notes"].append(
                "Milvus Lite drops index params sent the way pymilvus sends them (top-level keys such as M): "
                "they only reach it nested, params={'params': {...}}, as done here"
            )
        passages = hugo_passages()
        out["meta"]["passages"] = len(passages)
        out["meta"]["passage_chars_p50"] = int(np.median([len(p[3]) for p in passages]))
        last_build: dict[str, tuple[int, float]] = {}
        for n in sizes:
            vectors, queries = make_vectors(n, seed=n)
            truth, truth_sims, base_times = exact_top_k(vectors, queries)
            out["numpy_exact"][str(n)] = {"p50_ms": pct(base_times, 50), "p95_ms": pct(base_times, 95)}
            out["meta"].setdefault("vector_stats", {})[str(n)] = vector_stats(vectors, truth_sims)
            chunks = make_chunks(n, passages, seed=n)
            for v in VARIANTS:
                if v.index_type == "HNSW" and not faiss:
                    out[v.name][str(n)] = {"skipped": "faiss-cpu not installed"}
                    continue
                if v.name in last_build:
                    n0, s0 = last_build[v.name]
                    projected = s0 * (n / n0) ** 1.1
                    if projected > args.max_build_s:
                        msg = f"projected build {projected:.0f} s > --max-build-s {args.max_build_s:.0f}"
                        out[v.name][str(n)] = {"skipped": msg}
                        out["notes"].append(f"{v.name} at {n} chunks skipped: {msg} (too slow in Milvus Lite)")
                        continue
                db = tmp / f"{v.name.lower()}_{n}.db"
                print(f"[{time.strftime('%H:%M:%S')}] {v.name} {n} chunks ...", file=sys.stderr, flush=True)
                r = run_variant(v, db, chunks, vectors, queries, truth)
                out[v.name][str(n)] = r
                last_build[v.name] = (n, r["build_total_s"])
                if args.out_dir is None:
                    shutil.rmtree(db, ignore_errors=True)
    finally:
        if tmp_ctx:
            tmp_ctx.cleanup()

    print_table(out, sizes)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))


def _requires(dist: str) -> list[str]:
    from importlib.metadata import PackageNotFoundError, requires

    try:
        return [r for r in requires(dist) or [] if "extra ==" not in r]
    except PackageNotFoundError:
        return []


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


# -- in the report (benchmarks/report.py) --------------------------------------

STORE_VARIANTS = ("FLAT", "HNSW", "AUTOINDEX")
STORE_SIZE = 100_000
STORE_P50_MS = 10.0
# Milvus Lite's own search in faiss at 100k rows, profiled by hand (cProfile of Collection.search);
# store_scale.json does not record it (meta.faiss_search_ms is read when present).
FAISS_SEARCH_MS_PROFILED = 0.35
MARKERS = {"FLAT": "s", "HNSW": "^", "AUTOINDEX": "o", "numpy exact": "x"}


def store_sizes(ss: Json) -> list[int]:
    keys: set[str] = set(dig(ss, "numpy_exact") or {})
    for v in STORE_VARIANTS:
        keys |= set(ss.get(v) or {})
    return sorted(int(k) for k in keys if str(k).isdigit())


def store_entry(ss: Json, variant: str, n: int) -> Json | None:
    e = dig(ss, variant, str(n))
    return e if isinstance(e, dict) and "skipped" not in e else None


def t_store(data: Data) -> list[Row]:
    name = (
        f"warm search p50 at {STORE_SIZE:,} chunks (Milvus Lite, AUTOINDEX as mdrag creates it) <= {STORE_P50_MS:g} ms"
    )
    ss = data.get("store_scale")
    if not ss:
        return [Row(name, not_measured("store_scale", data))]
    e = store_entry(ss, "AUTOINDEX", STORE_SIZE)
    if e is None:
        why = dig(ss, "AUTOINDEX", str(STORE_SIZE), "skipped") or "not in store_scale.json"
        return [
            Row(name, f"not measured at {STORE_SIZE:,} chunks ({why})", result="see [Store at size](#store-at-size)")
        ]
    p50 = num(dig(e, "warm_ms", "p50"))
    base = dig(ss, "numpy_exact", str(STORE_SIZE), "p50_ms")
    ok = None if p50 is None else p50 <= STORE_P50_MS
    result = verdict(ok)
    if ok is False:
        auto = [(n, num(dig(store_entry(ss, "AUTOINDEX", n), "warm_ms", "p50"))) for n in store_sizes(ss)]
        cross = crossing([(n, p) for n, p in auto if p is not None], STORE_P50_MS)
        where = f" past ~{round(cross / 1000):,}k chunks" if cross is not None else ""
        result = f"**FAIL**: see [Store at size](#store-at-size) (a Milvus server{where})"
    return [
        Row(
            name,
            f"{fms(p50)} (p95 {fms(dig(e, 'warm_ms', 'p95'))}, recall@10 {fnum(e.get('recall_at_10'), 3)})",
            f"exact numpy {fms(base)}",
            fratio(div(p50, base), 1),
            result,
        )
    ]


def section_store(data: Data) -> list[str]:
    ss = data.get("store_scale")
    lines = ["## Store at size", ""]
    lines += prose("store", cmd_store_scale=command(data, "store_scale"))
    if not ss:
        return lines + [not_measured("store_scale", data), ""]
    meta = ss.get("meta") or {}
    lines += [
        f"pymilvus {meta.get('pymilvus', NA)}, milvus-lite {meta.get('milvus_lite', NA)}, faiss-cpu "
        f"{meta.get('faiss_cpu') or 'not installed'}; AUTOINDEX here is {meta.get('autoindex_is', NA)}; "
        f"{meta.get('queries', NA)} queries, k={meta.get('k', NA)}.",
        "",
    ]
    sizes = store_sizes(ss)
    rows = []
    for n in sizes:
        npx = dig(ss, "numpy_exact", str(n)) or {}
        rows.append(
            [
                "numpy exact (baseline)",
                f"{n:,}",
                NA,
                NA,
                NA,
                NA,
                fms(npx.get("p50_ms")),
                fms(npx.get("p95_ms")),
                "1.0x",
                "1.000",
                NA,
            ]
        )
        for v in STORE_VARIANTS:
            raw = dig(ss, v, str(n))
            if not isinstance(raw, dict):
                continue
            if "skipped" in raw:
                rows.append([v, f"{n:,}", f"skipped: {raw['skipped']}", *[NA] * 8])
                continue
            label = v
            if raw.get("build_params") or raw.get("ef") is not None:
                label += (
                    " ("
                    + ", ".join(
                        [*(f"{k}={x}" for k, x in (raw.get("build_params") or {}).items()), f"ef={raw.get('ef')}"]
                    )
                    + ")"
                )
            rows.append(
                [
                    label,
                    f"{n:,}",
                    fsec(raw.get("insert_flush_s")),
                    fsec(raw.get("close_s")),
                    fsec(dig(raw, "cold", "open_to_answer_s")),
                    fmb(dig(raw, "cold", "peak_rss_mb")),
                    fms(dig(raw, "warm_ms", "p50")),
                    fms(dig(raw, "warm_ms", "p95")),
                    fratio(div(dig(raw, "warm_ms", "p50"), npx.get("p50_ms")), 1),
                    fnum(raw.get("recall_at_10"), 3),
                    f"{fnum(raw.get('disk_mb'), 1)} MB",
                ]
            )
    lines += table(
        [
            "index",
            "chunks",
            "insert + flush",
            "close",
            "cold: open to answer",
            "cold RSS",
            "warm p50",
            "warm p95",
            "x numpy",
            "recall@10",
            "disk",
        ],
        rows,
    )
    lines += [
        "insert + flush: upserts in batches of 1,000; close: closing the store (Milvus Lite finishes its background "
        "compaction and index builds); cold: a fresh process's `MilvusClient(path)` + load + first search, and its "
        "peak RSS; warm: dense search, k=10, mdrag's output fields; recall@10 against exact results.",
        "",
    ]
    sweep_rows = []
    for v in STORE_VARIANTS:
        for n in sizes:
            sweep = dig(ss, v, str(n), "ef_sweep_100q")
            if isinstance(sweep, dict) and sweep:
                cells = [f"{fms(c.get('p50_ms'))}, {fnum(c.get('recall_at_10'), 3)}" for c in sweep.values()]
                sweep_rows.append([v, f"{n:,}", *cells])
                efs = list(sweep)
    if sweep_rows:
        lines += ["HNSW search depth (100 queries): p50 and recall@10 by `ef`.", ""]
        lines += table(["index", "chunks", *[f"ef={e}" for e in efs]], sweep_rows)
    for note in ss.get("notes") or []:
        lines += [f"- {note}"]
    if ss.get("notes"):
        lines.append("")
    lines += guarded("The explanation", lambda: store_explanation(ss), 0)
    return lines


def crossing(points: Sequence[tuple[int, float]], limit: float) -> float | None:
    """Where a piecewise-linear p50(size) first rises past ``limit``; None if it never does or starts above."""
    for (n0, p0), (n1, p1) in zip(points, points[1:]):
        if p0 <= limit < p1:
            return n0 + (limit - p0) * (n1 - n0) / (p1 - p0)
    return None


def store_explanation(ss: Json) -> list[str]:
    meta = ss.get("meta") or {}
    sizes = store_sizes(ss)
    auto = [(n, num(dig(store_entry(ss, "AUTOINDEX", n), "warm_ms", "p50"))) for n in sizes]
    auto_pts = [(n, p) for n, p in auto if p is not None]
    if not auto_pts:
        return ["No AUTOINDEX figures to explain.", ""]
    big = auto_pts[-1][0]
    graph = {
        v: num(dig(store_entry(ss, v, big), "warm_ms", "p50"))
        for v in STORE_VARIANTS
        if v != "FLAT" and store_entry(ss, v, big)
    }
    graph_p50 = [p for p in graph.values() if p is not None]
    flat = num(dig(store_entry(ss, "FLAT", big), "warm_ms", "p50"))
    npx = num(dig(ss, "numpy_exact", str(big), "p50_ms"))
    per_row_us = None
    if len(auto_pts) >= 2:
        (n0, p0), (n1, p1) = auto_pts[-2], auto_pts[-1]
        per_row_us = (p1 - p0) / (n1 - n0) * 1000
    cross = crossing(auto_pts, STORE_P50_MS)
    sweep = dig(store_entry(ss, "AUTOINDEX", big), "ef_sweep_100q") or {}
    sweep_p50 = {int(k): num(dig(v, "p50_ms")) for k, v in sweep.items() if str(k).isdigit()}
    sweep_p50 = {k: v for k, v in sweep_p50.items() if v is not None}
    faiss_ms = num(meta.get("faiss_search_ms"))
    faiss_src = "store_scale.json" if faiss_ms is not None else "profiled separately with cProfile; not in the JSON"
    faiss_ms = faiss_ms if faiss_ms is not None else FAISS_SEARCH_MS_PROFILED
    spread = (
        f"{min(graph_p50):.0f}–{max(graph_p50):.0f} ms"
        if graph_p50 and max(graph_p50) - min(graph_p50) >= 1
        else (f"~{sum(graph_p50) / len(graph_p50):.0f} ms" if graph_p50 else NA)
    )
    auto_big = auto_pts[-1][1]
    where = f"{round(cross / 1000):,}k" if cross is not None else "20k"
    server = (
        "use a Milvus server: `docker compose -f docker-compose.milvus.yml up -d` and "
        "`milvus_uri: http://localhost:19530` in the config; see docs/scaling.md."
    )
    if auto_big <= STORE_P50_MS:
        return [
            f"AUTOINDEX ({meta.get('autoindex_is', NA)}) answers in {fms(auto_big)} p50 at {big:,} chunks, within "
            f"the {STORE_P50_MS:g} ms target. For larger collections, {server}",
            "",
        ]
    by_index = ", ".join(f"{k} {fms(v)}" for k, v in graph.items())
    text = [
        f"**Why warm search misses {STORE_P50_MS:g} ms at {big:,} chunks.** "
        f"Milvus Lite's AUTOINDEX is faiss {meta.get('autoindex_is', 'HNSW (M=16, efConstruction=200, ef=64)')}. "
        f"At {big:,} chunks warm search costs {spread} whatever the graph index ({by_index}"
        + (f"; FLAT, brute force in Lite, {fms(flat)}" if flat is not None else "")
        + f"; exact numpy over the same vectors {fms(npx)}), "
    ]
    if len(sweep_p50) >= 2:
        lo, hi = min(sweep_p50), max(sweep_p50)
        text.append(
            f"and it hardly depends on the graph search: raising `ef` from {lo} to {hi} ({hi // lo}x the search "
            f"work) moves the p50 by {sweep_p50[hi] - sweep_p50[lo]:+.1f} ms. "
        )
    if per_row_us is not None:
        text.append(
            f"The time grows with the rows instead, about {per_row_us:.2f} µs per row (AUTOINDEX p50 from "
            f"{auto_pts[-2][0]:,} to {big:,} chunks), "
        )
    text.append(
        "because Milvus Lite does per-row Python bookkeeping on every query (the valid-row mask, the max-sequence "
        f"and deleted-row checks), while the faiss search itself takes about {faiss_ms:g} ms ({faiss_src}). "
    )
    if cross is not None:
        step = 5000 if cross >= 10_000 else 1000
        text.append(
            f"Warm p50 passes {STORE_P50_MS:g} ms at about {round(cross / step) * step:,} chunks (linear "
            "interpolation between the measured sizes). "
        )
    text.append(f"So past about {where}–50k chunks {server}")
    return ["".join(text), ""]


def store_series(ss: Json, metric: Callable[[Json], Any]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for v in STORE_VARIANTS:
        pts = []
        for n in store_sizes(ss):
            e = store_entry(ss, v, n)
            y = num(metric(e)) if e else None
            if y is not None:
                pts.append((n, y))
        if pts:
            out[v] = pts
    return out


def plot_store_lines(
    series: dict[str, list[tuple[int, float]]],
    path: Path,
    ylabel: str,
    title: str,
    logy: bool,
    hline: float | None = None,
) -> bool:
    if not series:
        return False
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=PLOT_SIZE)
    for name, pts in series.items():
        style = "--" if name.startswith("numpy") else "-"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker=MARKERS.get(name, "o"), label=name)
    if hline is not None:
        ax.axhline(hline, color="red", linestyle=":", linewidth=1, label=f"target {hline:g}")
    ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("chunks in the collection (log scale)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)


def plot_index_time(data: Data, path: Path) -> bool:
    ss = data.get("store_scale")
    series = store_series(ss, lambda e: dig(e, "build_total_s")) if ss else {}
    points: list[tuple[str, float, float]] = []
    for step, label in (("hugo", "Hugo, mdrag index (default)"), ("hugo_torch", "Hugo, mdrag index (torch)")):
        o = data.get(step)
        c, w = num(dig(o, "index", "chunks")), num(dig(o, "index", "wall_s"))
        if c and w:
            points.append((f"{label}: {w:.0f} s", c, w))
    for step, label in (("scifact", "SciFact, mdrag (default)"), ("scifact_torch", "SciFact, mdrag (torch)")):
        o = data.get(step)
        c, w = num(dig(o, "chunks")), num(dig(o, "index_seconds"))
        if c and w:
            points.append((f"{label}: {w:.0f} s", c, w))
    li = data.get("llamaindex")
    c, w = num(dig(li, "llamaindex", "chunks")), num(dig(li, "llamaindex", "wall_s"))
    if c and w:
        points.append((f"Hugo, LlamaIndex: {w:.0f} s", c, w))
    if not series and not points:
        return False
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=PLOT_SIZE)
    for name, pts in series.items():
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            "-",
            marker=MARKERS.get(name, "o"),
            label=f"store insert + close, {name}",
        )
    markers = ("*", "P", "D", "d", "X")
    for i, (label, c, w) in enumerate(points):
        ax.scatter([c], [w], marker=markers[i % len(markers)], s=90, zorder=3, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks (log scale)")
    ax.set_ylabel("time to build the index (s, log scale)")
    ax.set_title("Index build time: Milvus Lite insert + close vs end-to-end indexing")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return save(fig, path)


def plot_latency(data: Data, path: Path) -> bool:
    ss = data.get("store_scale")
    if not ss:
        return False
    series = store_series(ss, lambda e: dig(e, "warm_ms", "p50"))
    npx = [(n, num(dig(ss, "numpy_exact", str(n), "p50_ms"))) for n in store_sizes(ss)]
    pts = [(n, p) for n, p in npx if p is not None]
    if pts:
        series["numpy exact"] = pts
    return plot_store_lines(
        series,
        path,
        "warm dense search p50 (ms, log scale)",
        "Milvus Lite warm search p50 vs collection size (k=10)",
        logy=True,
        hline=STORE_P50_MS,
    )


def plot_memory(data: Data, path: Path) -> bool:
    ss = data.get("store_scale")
    if not ss:
        return False
    series = store_series(ss, lambda e: dig(e, "cold", "peak_rss_mb"))
    return plot_store_lines(
        series,
        path,
        "peak RSS of a fresh process (MB)",
        "Cold open + first search: memory vs collection size",
        logy=False,
    )


BENCHMARK = Benchmark(
    steps=(Step("store_scale", 130, (), ("FLAT", "HNSW", "AUTOINDEX", "numpy_exact", "meta")),),
    sections=(Section("Store at size", 80, section_store),),
    targets=(Target(40, t_store),),
    plots=(
        Plot(
            20, "search_latency_vs_size.png", "Warm search latency vs collection size", ("store_scale",), plot_latency
        ),
        Plot(30, "memory_vs_size.png", "Cold-start memory vs collection size", ("store_scale",), plot_memory),
        Plot(
            40,
            "index_time_vs_size.png",
            "Index build time vs size",
            ("store_scale", "hugo", "scifact", "llamaindex"),
            plot_index_time,
        ),
    ),
)


if __name__ == "__main__":
    main()
