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

``--precision``: onnxruntime's fp32 model against its int8 model (``embedding.precision``), in chunks per CPU
second of this process (its threads' user and system time: a shared machine's other work does not count) on
Hugo's and otel's chunks, with the ratio; then, int8, what else was tried against the defaults: onnxruntime's
graph optimisation level, its intra-op threads (and their spinning), batches cut by token count instead of 32
texts, and one length-sorted order over the run's chunks instead of one per write batch (512 chunks).

    python benchmarks/embedders.py --precision [--cache DIR] [--files-every 6] [--json out.json]
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

from render import (  # noqa: E402
    PLOT_SIZE,
    command,
    default_backend,
    dig,
    fdelta,
    fint,
    fmb,
    fms,
    fnum,
    fratio,
    fsec,
    not_measured,
    num,
    prose,
    save,
    scifact_metric,
    table,
    verdict,
    who,
)
from steps import MODELS, NA, Benchmark, Data, Plot, Row, Section, Step, Target  # noqa: E402

from mdrag.chunking import chunk_document  # noqa: E402
from mdrag.embedding.base import Embedder  # noqa: E402
from mdrag.embedding.local import LocalEmbedder  # noqa: E402
from mdrag.parsers import parse_file  # noqa: E402

HUGO = ROOT.parent / "shared" / "data" / "markdown_hugo_docs"
OTEL = ROOT.parent / "shared" / "data" / "markdown_otel_docs"
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


def corpus_chunks(root: Path, embedder: Embedder, every: int) -> list[str]:
    """The chunk texts of every ``every``-th Markdown file under ``root``, in the order an index run writes them."""
    texts: list[str] = []
    for f in sorted(root.rglob("*.md"))[::every]:
        rel = f.relative_to(root).as_posix()
        chunks = chunk_document(
            parse_file(f), str(root), rel, count_tokens=embedder.count_tokens, max_tokens=embedder.max_tokens
        )
        texts.extend(c.embed_text for c in chunks)
    return texts


def _cpu_rate(run: Callable[[], Any], n: int) -> tuple[float, Any]:
    """``n`` / the CPU seconds (user + system, every thread of this process) that ``run()`` took; its result."""
    t = time.process_time()
    out = run()
    return n / (time.process_time() - t), out


def _by_tokens(e: Any, texts: list[str], budget: int) -> np.ndarray:
    """``e.embed`` with batches cut at ``budget`` tokens (padded: texts x the longest) instead of 32 texts."""
    from mdrag.embedding.base import _normalize

    enc = e._encoder.encode_batch(texts)
    order = sorted(range(len(texts)), key=lambda i: len(enc[i].ids))
    parts, group = [], list[int]()
    for i in order:
        if group and (len(group) + 1) * len(enc[i].ids) > budget:
            parts.append(e._embed_encodings([enc[j] for j in group]))
            group = []
        group.append(i)
    parts.append(e._embed_encodings([enc[j] for j in group]))
    out = np.empty((len(texts), parts[0].shape[1]), dtype=np.float32)
    out[order] = np.vstack(parts)
    return _normalize(out)


def precision_speed(cache: Path | None, every: int) -> dict[str, Any]:
    """fp32 and int8 chunks per CPU second on Hugo and otel; then the int8 variants (see the module's doc)."""
    from mdrag.embedding import onnx
    from mdrag.embedding.onnx import OnnxEmbedder

    tmp = tempfile.TemporaryDirectory(prefix="mdrag-bench-")
    cache = cache or Path(tmp.name)
    fp, q8 = OnnxEmbedder(cache_dir=cache), OnnxEmbedder(cache_dir=cache, int8=True)
    corpora = {"hugo": corpus_chunks(HUGO, fp, every), "otel": corpus_chunks(OTEL, fp, every)}
    out: dict[str, Any] = {"cpus": os.cpu_count(), "files_every": every, "load": os.getloadavg()[0], "corpora": {}}
    for e in (fp, q8):
        e.embed(corpora["hugo"][:64])  # load the model, first allocations

    def per_write_batch(e: Any, texts: list[str], size: int = 512) -> np.ndarray:
        return np.vstack([e.embed(texts[i : i + size]) for i in range(0, len(texts), size)])  # as the indexer

    for name, texts in corpora.items():
        tokens = [min(t, 256) for t in q8.count_tokens(texts)]
        fig: dict[str, Any] = {"chunks": len(texts), "mean_tokens": round(float(np.mean(tokens)))}
        fig["fp32"], a = _cpu_rate(lambda t=texts: per_write_batch(fp, t), len(texts))
        fig["int8"], b = _cpu_rate(lambda t=texts: per_write_batch(q8, t), len(texts))
        cos = (a * b).sum(axis=1)
        fig.update(ratio=round(fig["int8"] / fig["fp32"], 2), cosine_mean=float(cos.mean()))
        fig["cosine_min"] = float(cos.min())
        out["corpora"][name] = fig
        print(
            f"{name}: {len(texts)} chunks ({fig['mean_tokens']} tokens on average): fp32 {fig['fp32']:.1f}, "
            f"int8 {fig['int8']:.1f} chunks per CPU second: x{fig['ratio']:.2f}; cosine to fp32 mean "
            f"{fig['cosine_mean']:.4f}, min {fig['cosine_min']:.4f}",
            flush=True,
        )
    # The int8 variants, on the Hugo chunks: each against the default (per write batch, 32 texts, ORT_ENABLE_ALL,
    # every core) measured again beside it.
    texts = corpora["hugo"]
    variants: dict[str, Callable[[], Any]] = {
        "default": lambda: per_write_batch(q8, texts),
        "one order over the run": lambda: q8.embed(texts),
        "batches of 4096 tokens": lambda: np.vstack(
            [_by_tokens(q8, texts[i : i + 512], 4096) for i in range(0, len(texts), 512)]
        ),
        "batches of 8192 tokens": lambda: np.vstack(
            [_by_tokens(q8, texts[i : i + 512], 8192) for i in range(0, len(texts), 512)]
        ),
        "batch 64 texts": lambda: per_write_batch(q8._with(batch_size=64), texts),
        "batch 16 texts": lambda: per_write_batch(q8._with(batch_size=16), texts),
        "1 intra-op thread": lambda: per_write_batch(q8._with(threads=1), texts),
    }
    new_session = onnx._new_session

    def session_with(**options: Any) -> Callable[[], Any]:
        def run() -> Any:
            def made(path: Path, threads: int) -> Any:
                ort = onnx._import_runtime("onnxruntime")
                opts = ort.SessionOptions()
                opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
                opts.log_severity_level = 3
                level = options.get("level", "ORT_ENABLE_ALL")
                opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
                for key, value in options.get("configs", {}).items():
                    opts.add_session_config_entry(key, value)
                return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])

            onnx._new_session = made
            onnx._sessions.clear()
            try:
                e = OnnxEmbedder(cache_dir=cache, int8=True)
                e.embed(texts[:64])
                return per_write_batch(e, texts)
            finally:
                onnx._new_session = new_session
                onnx._sessions.clear()

        return run

    variants["graph optimisation basic"] = session_with(level="ORT_ENABLE_BASIC")
    variants["graph optimisation extended"] = session_with(level="ORT_ENABLE_EXTENDED")
    variants["threads do not spin"] = session_with(
        configs={"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"}
    )
    out["int8_variants"] = {}
    q8._with(threads=1).embed(texts[:8])  # the one-thread session loaded before it is timed
    for name, run in variants.items():
        rate, _ = _cpu_rate(run, len(texts))
        out["int8_variants"][name] = round(rate, 1)
        print(f"  int8 hugo, {name}: {rate:.1f} chunks per CPU second", flush=True)
    tmp.cleanup()
    return out


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
    ap.add_argument("--precision", action="store_true", help="fp32 against int8 (onnxruntime), per CPU second")
    ap.add_argument("--files-every", type=int, default=6, help="--precision: the chunks of every n-th file")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.precision:
        out = precision_speed(args.cache, args.files_every)
        if args.json:
            args.json.write_text(json.dumps(out, indent=2) + "\n")
        return

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


# -- in the report (benchmarks/report.py) --------------------------------------

SCIFACT_DENSE_TOLERANCE = 0.002


def t_quality(data: Data) -> list[Row]:
    backend, source = default_backend(data)
    if backend is None:
        present = [f"{s}.json" for s in ("hugo", "scifact") if data.get(s)]
        if present:
            why = f"the default backend is not recorded ({' and '.join(present)}: no `embedder`)"
        else:
            why = "the default backend is unknown: " + not_measured("hugo", data, "scifact")
        return [Row("Quality guard of the default backend", why)]
    rows = []
    for step in ("embedders", "embedders_longest"):
        label = "spread" if step == "embedders" else "longest"
        name = (
            f"Quality guard, {backend} ({source}), {label} chunks: mean cosine >= {MIN_COSINE}, "
            f"top-10 kept >= {MIN_KEPT}"
        )
        obj = data.get(step)
        if not obj:
            rows.append(Row(name, not_measured(step, data)))
            continue
        fig = dig(obj, "backends", backend)
        if not isinstance(fig, dict):
            rows.append(
                Row(name, f"no `{backend}` entry in {step}.json (backends: {', '.join(obj.get('backends', {}))})")
            )
            continue
        cos, kept = num(fig.get("mean_cosine")), num(fig.get("top10_kept"))
        ok = None if cos is None or kept is None else cos >= MIN_COSINE and kept >= MIN_KEPT
        rows.append(
            Row(
                name,
                f"mean cosine {fnum(cos, 6)} (min {fnum(fig.get('min_cosine'), 6)}), top-10 kept {fnum(kept, 3)}",
                "torch fp32, same run",
                NA,
                verdict(ok),
            )
        )
    name = f"Quality guard, {backend}: SciFact dense nDCG@10 within {SCIFACT_DENSE_TOLERANCE} of torch"
    sci, sci_t = data.get("scifact"), data.get("scifact_torch")
    if not sci or not sci_t:
        rows.append(Row(name, not_measured("scifact" if not sci else "scifact_torch", data)))
    else:
        a, b = scifact_metric(sci, "dense"), scifact_metric(sci_t, "dense")
        diff = None if a is None or b is None else a - b
        rows.append(
            Row(
                name,
                f"{fnum(a, 4)} ({who(sci)})",
                f"{fnum(b, 4)} (torch)",
                f"{fdelta(diff, 4)}",
                verdict(None if diff is None else abs(diff) <= SCIFACT_DENSE_TOLERANCE + 1e-9),
            )
        )
    return rows


def section_embedders(data: Data) -> list[str]:
    lines = ["## Embedder backends", ""]
    lines += prose(
        "embedders",
        cmd_embedders=command(data, "embedders"),
        cmd_embedders_longest=command(data, "embedders_longest"),
        min_cosine=MIN_COSINE,
        min_kept=MIN_KEPT,
    )
    for step in ("embedders", "embedders_longest"):
        obj = data.get(step)
        title = "Chunks spread over the Hugo docs" if step == "embedders" else "The longest Hugo chunks"
        lines += [f"### {title}", ""]
        if not obj:
            lines += [not_measured(step, data), ""]
            continue
        lines += [
            f"{fint(obj.get('chunks'))} chunks ({obj.get('selection', 'spread')}), mean {fint(obj.get('mean_chars'))} "
            f"characters / {fint(obj.get('mean_tokens'))} tokens, batch {obj.get('batch', NA)}, "
            f"{obj.get('cpus', NA)} CPUs.",
            "",
        ]
        rows = []
        for name, f in (obj.get("backends") or {}).items():
            rows.append(
                [
                    f"{name} (baseline)" if name == "torch" else name,
                    f"{fnum(f.get('chunks_per_s'), 1)} ({fratio(f.get('speedup_chunks_per_s'))})",
                    f"{fms(dig(f, 'query_ms', 'p50'))} ({fratio(f.get('query_p50_ratio'))})",
                    fms(dig(f, "query_ms", "p95")),
                    fsec(f.get("first_load_s")),
                    f"{fsec(f.get('first_query_s'))} ({fratio(f.get('first_query_ratio'))})",
                    fmb(f.get("peak_rss_mb")),
                    fnum(f.get("mean_cosine"), 6),
                    fnum(f.get("min_cosine"), 6),
                    fnum(f.get("top10_kept"), 3),
                    f.get("quality", NA),
                ]
            )
        lines += table(
            [
                "backend",
                "chunks/s (x torch)",
                "query p50 (x torch)",
                "query p95",
                "first load",
                "fresh process to first vector (x torch)",
                "peak RSS",
                "mean cosine",
                "min cosine",
                "top-10 kept",
                "guard",
            ],
            rows,
        )
    lines += [
        "First load: the one-time ONNX export when the cache is empty, OpenVINO's compile. `openvino` runs at "
        "OpenVINO's default precision (bf16 where the CPU has AMX or AVX-512 BF16), `openvino-f32` at f32.",
        "",
    ]
    return lines


def plot_throughput(data: Data, path: Path) -> bool:
    sel = [(s, data.get(s)) for s in ("embedders", "embedders_longest")]
    sel = [(s, o) for s, o in sel if o and isinstance(o.get("backends"), dict)]
    if not sel:
        return False
    import matplotlib.pyplot as plt

    names: list[str] = []
    for _, o in sel:
        names += [n for n in o["backends"] if n not in names]
    fig, ax = plt.subplots(figsize=PLOT_SIZE)
    width = 0.8 / len(sel)
    colors = ("tab:blue", "tab:orange")
    top = 0.0
    for i, (step, o) in enumerate(sel):
        label = f"{o.get('selection', 'spread' if step == 'embedders' else 'longest')} chunks"
        vals = [num(dig(o, "backends", n, "chunks_per_s")) or 0.0 for n in names]
        xs = [j + (i - (len(sel) - 1) / 2) * width for j in range(len(names))]
        bars = ax.bar(xs, vals, width, label=label, color=colors[i % 2])
        base = num(dig(o, "backends", "torch", "chunks_per_s"))
        for b, v in zip(bars, vals):
            if v:
                txt = f"{v:.0f}" + (f"\n{v / base:.2f}x" if base else "")
                ax.annotate(
                    txt,
                    (b.get_x() + b.get_width() / 2, v),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
                )
        if base:
            ax.axhline(
                base, color=colors[i % 2], linestyle="--", linewidth=1, label=f"torch baseline, {label}: {base:.1f}"
            )
        top = max(top, *vals)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, top * 1.25 or 1)
    ax.set_xlabel("embedding backend")
    ax.set_ylabel("throughput (chunks/s, batch 32)")
    ax.set_title("Embedding throughput by backend (Hugo chunks; ratio to torch fp32)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


BENCHMARK = Benchmark(
    steps=(
        Step("embedders", 10, ("--cache", str(MODELS)), ("chunks", "selection", "backends"), ("cpus",)),
        Step(
            "embedders_longest",
            20,
            ("--longest", "--cache", str(MODELS)),
            ("chunks", "selection", "backends"),
            ("cpus",),
        ),
    ),
    sections=(Section("Embedder backends", 10, section_embedders),),
    targets=(Target(20, t_quality),),
    plots=(
        Plot(
            10,
            "throughput_by_backend.png",
            "Embedding throughput by backend",
            ("embedders", "embedders_longest"),
            plot_throughput,
        ),
    ),
)


if __name__ == "__main__":
    main()
