"""Chunking time against file size: linear, and a file too big for the time limit skipped alone.

Figures:

- ``chunk_document`` on three shapes of big file, 1, 2, 4, 8 and 16 MB each
  (one paragraph of lines in a ``.txt``, one line in a ``.md``, one-line
  paragraphs between blank lines in a ``.txt``), with the default model's
  token counter and window as ``mdrag index`` chunks, best of ``--repeat``
  runs (the machine is shared); the parse is timed apart. The growth ratio is each size's time over the previous size's
  (target: at most 2.2x per doubling; 4x is quadratic);
- a reStructuredText file of ``Same\\n----\\n\\ntext\\n\\n`` sections at 0.5,
  1 and 2 MB, parsed (docutils, read in parts);
- ``mdrag index`` of a folder holding a 20 MB ``.txt`` and 20 Hugo
  pages, with the default time limit and with a 5 s one: whether the big file
  is indexed or skipped with its reason, and that the other files are indexed;
- chunking's peak memory (tracemalloc, its chunks included) against the
  document's text at 1, 2 and 4 MB, for the three shapes and two that peak
  higher (short lines, tiny sections), with the estimate that
  ``index.max_parse_mb`` is checked against before chunking starts
  (:mod:`mdrag.chunking.memory`).

    python benchmarks/chunk_scale.py [--sizes 1 2 4 8 16] [--memory-sizes 1 2 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from render import command, fint, fratio, fsec, not_measured, prose, table, verdict  # noqa: E402
from steps import NA, Benchmark, Data, Row, Section, Step, Target  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
LINE = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt."
SHAPES = {  # name -> (what repeats, file name)
    "one-paragraph .txt": (LINE + "\n", "big.txt"),
    "one-line .md": (LINE + " ", "big.md"),
    "blank-line paragraphs .txt": (LINE + "\n\n", "big.txt"),
}
#: Shapes whose chunking takes more memory for their size: each line is a unit, each section a heading path.
HEAVY = {
    "short lines .txt": ("a\n", "big.txt"),
    "tiny sections .md": ("# a\n\nb\n\n", "big.md"),
}
TARGET = 2.2  # the most time may grow per doubling of the size
log = logging.getLogger("chunk_scale")


def _write(path: Path, unit: str, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((unit * (size // len(unit) + 1))[:size], encoding="utf-8")
    return path


def chunk_times(folder: Path, sizes_mb: list[float], repeat: int) -> dict[str, list[dict[str, Any]]]:
    """Per shape, per size: parse and chunk seconds, chunks, and the chunk time's growth over the size before."""
    from mdrag.chunking import chunk_document
    from mdrag.config import load_config
    from mdrag.embedding import make_embedder
    from mdrag.parsers import parse_file

    embedder = make_embedder(load_config())
    embedder.count_tokens(["warm up"])
    out: dict[str, list[dict[str, Any]]] = {}
    for shape, (unit, name) in SHAPES.items():
        rows: list[dict[str, Any]] = []
        for mb in sizes_mb:
            path = _write(folder / f"{shape.split()[0]}-{mb:g}" / name, unit, int(mb * 2**20))
            t = time.perf_counter()
            doc = parse_file(path)
            parsed = time.perf_counter() - t
            took = cpu = float("inf")
            for _ in range(repeat):
                t, c = time.perf_counter(), time.process_time()
                chunks = chunk_document(doc, str(path.parent), name, None, embedder.count_tokens, embedder.max_tokens)
                took, cpu = min(took, time.perf_counter() - t), min(cpu, time.process_time() - c)
            growth = cpu / rows[-1]["chunk_cpu_s"] if rows else None
            row = {"mb": mb, "parse_s": parsed, "chunk_s": took, "chunk_cpu_s": cpu, "chunks": len(chunks)}
            rows.append({**row, "growth": growth})
            log.info("%s %g MB: parse %.2f s, chunk %.2f s, %d chunks, growth %s", shape, mb, parsed, took,
                     len(chunks), f"{growth:.2f}x" if growth else "-")  # fmt: skip
            path.unlink()
        out[shape] = rows
    return out


def chunk_memory(folder: Path, sizes_mb: list[float]) -> dict[str, list[dict[str, Any]]]:
    """Per shape, per size: the text the document holds (MB of its strings), chunking's peak memory
    (tracemalloc, its chunks included), their ratio, and the estimate checked against index.max_parse_mb."""
    import tracemalloc

    from mdrag.chunking import chunk_document
    from mdrag.chunking.memory import chunking_mb
    from mdrag.config import load_config
    from mdrag.embedding import make_embedder
    from mdrag.parsers import parse_file

    embedder = make_embedder(load_config())
    embedder.count_tokens(["warm up"])
    out: dict[str, list[dict[str, Any]]] = {}
    for shape, (unit, name) in {**SHAPES, **HEAVY}.items():
        rows: list[dict[str, Any]] = []
        for mb in sizes_mb:
            path = _write(folder / f"mem-{shape.split()[0]}-{mb:g}" / name, unit, int(mb * 2**20))
            doc = parse_file(path)
            text = sum(sys.getsizeof(b.text) for s in doc.sections for b in s.blocks) / 2**20
            tracemalloc.start()
            chunk_document(doc, str(path.parent), name, None, embedder.count_tokens, embedder.max_tokens)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            row = {"mb": mb, "text_mb": text, "peak_mb": peak, "factor": peak / text, "estimate_mb": chunking_mb(doc)}
            rows.append(row)
            log.info("memory %s %g MB: text %.1f MB, peak %.1f MB (x%.2f), estimate %.1f MB", shape, mb, text, peak,
                     row["factor"], row["estimate_mb"])  # fmt: skip
            path.unlink()
        out[shape] = rows
    return out


def rst_times(folder: Path, sizes_mb: list[float]) -> list[dict[str, Any]]:
    """Parse seconds of a reStructuredText file of equal sections at each size."""
    from mdrag.parsers import parse_file

    rows: list[dict[str, Any]] = []
    for mb in sizes_mb:
        path = _write(folder / f"rst-{mb:g}" / "manual.rst", "Same\n----\n\ntext\n\n", int(mb * 2**20))
        t = time.perf_counter()
        doc = parse_file(path)
        took = time.perf_counter() - t
        growth = took / rows[-1]["parse_s"] if rows else None
        rows.append({"mb": mb, "parse_s": took, "sections": len(doc.sections), "growth": growth})
        log.info("rst %g MB: parse %.2f s, %d sections", mb, took, len(doc.sections))
    return rows


def index_big(folder: Path, timeout: float | None) -> dict[str, Any]:
    """`mdrag index` (the library's Index.update) of the 20 MB .txt and 20 Hugo pages, in a fresh home."""
    from mdrag.config import load_config
    from mdrag.index import Index

    docs = folder / f"docs-{timeout or 'default'}"
    docs.mkdir()
    _write(docs / "big.txt", LINE + "\n", 20_000_000)
    for md in sorted((DATA / "markdown_hugo_docs").rglob("*.md"))[:20]:
        shutil.copy(md, docs / md.name)
    os.environ["MDRAG_HOME"] = str(folder / f"home-{timeout or 'default'}")
    overrides: dict[str, Any] = {"index": "big"}
    if timeout is not None:
        overrides["index.parse_timeout"] = timeout
    files = sum(1 for p in docs.iterdir() if p.is_file())  # pages of the same name were copied once
    t = time.perf_counter()
    with Index(load_config(overrides)) as idx:
        summary = idx.update([docs])
    took = time.perf_counter() - t
    reasons = dict(summary.skipped_files)
    big = str(docs / "big.txt")
    row = {
        "timeout_s": timeout if timeout is not None else load_config()["index.parse_timeout"],
        "seconds": took,
        "files": files,
        "indexed": summary.added,
        "skipped": summary.skipped,
        "big_file": "skipped: " + reasons[big] if big in reasons else "indexed",
        "chunks": summary.chunks_total,
    }
    log.info("index with limit %s: %s", row["timeout_s"], row)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 4, 8, 16], help="MB (default 1 2 4 8 16)")
    ap.add_argument("--rst-sizes", type=float, nargs="+", default=[0.5, 1, 2], help="MB (default 0.5 1 2)")
    ap.add_argument("--repeat", type=int, default=2, help="chunking runs per size; the best counts (default 2)")
    ap.add_argument("--memory-sizes", type=float, nargs="+", default=[1, 2, 4], help="MB (default 1 2 4)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("mdrag").setLevel(logging.WARNING)
    if not (DATA / "markdown_hugo_docs").is_dir():
        sys.exit(f"no test files under {DATA}: see shared/data/README.md")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        result: dict[str, Any] = {"chunking": chunk_times(folder, args.sizes, args.repeat)}
        result["rst"] = rst_times(folder, args.rst_sizes)
        result["memory"] = chunk_memory(folder, args.memory_sizes)
        result["index"] = [index_big(folder, None), index_big(folder, 5.0)]
    result["cpus"] = os.cpu_count()
    summary(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


def summary(result: dict[str, Any]) -> None:
    for shape, rows in result["chunking"].items():
        figures = ", ".join(
            f"{r['mb']:g} MB {r['chunk_s']:.2f} s" + (f" ({r['growth']:.2f}x)" if r["growth"] else "") for r in rows
        )
        print(f"{shape}: {figures}")
    print("rst: " + ", ".join(f"{r['mb']:g} MB {r['parse_s']:.2f} s" for r in result["rst"]))
    for shape, rows in result.get("memory", {}).items():
        figures = ", ".join(f"{r['mb']:g} MB x{r['factor']:.2f} ({r['peak_mb']:.1f} MB)" for r in rows)
        print(f"memory, {shape}: {figures}")
    for r in result["index"]:
        print(f"index, limit {r['timeout_s']:g} s: {r['indexed']}/{r['files']} indexed, big file {r['big_file']}, "
              f"{r['seconds']:.1f} s")  # fmt: skip


# -- in the report (benchmarks/report.py) --------------------------------------

TITLE = "Chunking big files"


def _worst(rows: list[dict[str, Any]], key: str = "growth") -> float | None:
    growths = [r[key] for r in rows if r.get(key) is not None]  # CPU time's growth
    return max(growths) if growths else None


def _overall(rows: list[dict[str, Any]]) -> float | None:
    """CPU time's growth per doubling from the smallest size to the largest: the steps' geometric mean,
    steadier than any one step on a shared machine."""
    if len(rows) < 2 or not rows[0].get("chunk_cpu_s") or not rows[-1].get("chunk_cpu_s"):
        return None
    doublings = math.log2(rows[-1]["mb"] / rows[0]["mb"])
    return float((rows[-1]["chunk_cpu_s"] / rows[0]["chunk_cpu_s"]) ** (1 / doublings))


def section_chunk_scale(data: Data) -> list[str]:
    cs = data.get("chunk_scale")
    lines = [f"## {TITLE}", "", *prose("chunk_scale", cmd_chunk_scale=command(data, "chunk_scale"))]
    if not cs:
        return lines + [not_measured("chunk_scale", data), ""]
    chunking: dict[str, list[dict[str, Any]]] = cs.get("chunking") or {}
    sizes = [r["mb"] for r in next(iter(chunking.values()), [])]
    rows = []
    for shape, rs in chunking.items():
        cells = [f"{fsec(r.get('chunk_s'))}" + (f" ({fratio(r['growth'])})" if r.get("growth") else "") for r in rs]
        rows.append(
            [shape, *cells, fratio(_overall(rs)), fratio(_worst(rs)), fint(rs[-1].get("chunks") if rs else None)]
        )
    lines += table(
        [
            "shape",
            *[f"{mb:g} MB (growth)" for mb in sizes],
            "growth per doubling, smallest to largest",
            "worst single step",
            "chunks at the largest",
        ],
        rows,
    )
    rst = cs.get("rst") or []
    if rst:
        lines += [
            "reStructuredText of equal sections (`Same` / `----` / `text`), parse time: "
            + ", ".join(
                f"{r['mb']:g} MB {fsec(r['parse_s'])}" + (f" ({fratio(r['growth'])})" if r.get("growth") else "")
                for r in rst
            )
            + f" ({fint(rst[-1].get('sections'))} sections at the largest).",
            "",
        ]
    index_rows = [
        [
            f"{r.get('timeout_s', NA):g} s",
            f"{fint(r.get('indexed'))} of {fint(r.get('files'))}",
            r.get("big_file", NA),
            fint(r.get("chunks")),
            fsec(r.get("seconds")),
        ]  # fmt: skip
        for r in cs.get("index") or []
    ]
    lines += table(["index.parse_timeout", "files indexed", "the 20 MB .txt", "chunks", "whole run"], index_rows)
    memory: dict[str, list[dict[str, Any]]] = cs.get("memory") or {}
    if memory:
        lines += [
            "Chunking's peak memory (tracemalloc, its chunks included) over the text the parsed document holds, "
            "and the estimate `index.max_parse_mb` is checked against before chunking starts (a file over it is "
            "skipped with the reason):",
            "",
        ]
        mem_sizes = [r["mb"] for r in next(iter(memory.values()), [])]
        mem_rows = [
            [
                shape,
                *[f"{fratio(r.get('factor'))} ({fmb(r.get('peak_mb'))}; est. {fmb(r.get('estimate_mb'))})" for r in rs],
            ]
            for shape, rs in memory.items()
        ]
        lines += table(["shape", *[f"{mb:g} MB: peak / text (peak; estimate)" for mb in mem_sizes]], mem_rows)
    return lines


def fmb(value: float | None) -> str:
    return NA if value is None else f"{value:.1f} MB"


def t_chunk_scale(data: Data) -> list[Row]:
    cs = data.get("chunk_scale") or {}
    overall = [_overall(rs) for rs in (cs.get("chunking") or {}).values()]
    worst = max((g for g in overall if g is not None), default=None)
    return [
        Row(
            f"chunking CPU time per doubling of a big file's size (1 to 16 MB, worst shape) <= {TARGET:g}x",
            fratio(worst),
            result=verdict(worst <= TARGET if worst is not None else None),
        )
    ]


BENCHMARK = Benchmark(
    steps=(Step("chunk_scale", 240, (), ("chunking", "rst", "index", "memory")),),
    sections=(Section(TITLE, 170, section_chunk_scale),),
    targets=(Target(140, t_chunk_scale),),
)


if __name__ == "__main__":
    main()
