"""What parsing in a child process (mdrag.parsers.worker.ParseWorker) costs, against parsing in process.

Figures:

- start-up: from ``start()`` to the child's hello (a new interpreter imports
  mdrag.parsers and sets its limits), median of ``--starts`` fresh workers;
  then the first file, which also imports that format's parser in the child;
- per-file overhead: the same files parsed in process (``parse_file``) and
  through a warm worker, after one untimed pass of each (imports, page
  cache); best of ``--repeat`` interleaved passes; the difference divided
  by the files;
- the child's address space idle and at its peak over all those files
  (VmSize, VmPeak, VmHWM from /proc): how much a memory cap must allow;
- a 5,000-deep nested ``<div>`` HTML file (a 55 KB file that once hung the parser) parsed
  with a 5 s limit: when it is skipped, and that the next file still parses.

    python benchmarks/parse_worker.py [--md-files 200] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from render import (  # noqa: E402
    command,
    dig,
    div,
    div_sub,
    fint,
    fmb,
    fms,
    fnum,
    fratio,
    fsec,
    not_measured,
    num,
    prose,
    setting,
    table,
)
from steps import NA, Benchmark, Data, Section, Step  # noqa: E402

from mdrag.errors import ParseError  # noqa: E402
from mdrag.parsers import parse_file  # noqa: E402
from mdrag.parsers.worker import ParseWorker  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
log = logging.getLogger("parse_worker")


def _status(pid: int) -> dict[str, int]:
    """VmSize, VmPeak and VmHWM of process ``pid``, in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmSize", "VmPeak", "VmHWM"):
            out[key] = int(value.split()[0]) // 1024
    return out


def _pass(files: list[Path], parse: Any) -> float:
    """Seconds to parse every file once; parse errors count as parsed."""
    t = time.perf_counter()
    for f in files:
        try:
            parse(f)
        except ParseError:
            pass
    return time.perf_counter() - t


def start_up(starts: int, first: Path) -> dict[str, float]:
    ready, first_file = [], []
    for _ in range(starts):
        with ParseWorker(max_mb=4096) as w:
            t = time.perf_counter()
            w.start()
            w._connection()  # waits for the hello (private: the public API never needs to wait for it alone)
            ready.append(time.perf_counter() - t)
            t = time.perf_counter()
            w.parse(first, timeout=300)
            first_file.append(time.perf_counter() - t)
    return {"ready_ms": statistics.median(ready) * 1e3, "first_file_ms": statistics.median(first_file) * 1e3}


def overhead(name: str, files: list[Path], repeat: int) -> dict[str, Any]:
    with ParseWorker(max_mb=4096) as w:
        w.start()
        w._connection()
        assert w.pid is not None
        idle = _status(w.pid)
        in_process = lambda f: parse_file(f)  # noqa: E731
        in_child = lambda f: w.parse(f, timeout=300)  # noqa: E731
        _pass(files, in_process), _pass(files, in_child)  # warm: imports, page cache
        passes = [(_pass(files, in_process), _pass(files, in_child)) for _ in range(repeat)]  # interleaved
        ip, wk = min(p[0] for p in passes), min(p[1] for p in passes)
        busy = _status(w.pid)
    n = len(files)
    row = {
        "files": n,
        "in_process_ms_per_file": ip / n * 1e3,
        "worker_ms_per_file": wk / n * 1e3,
        "overhead_ms_per_file": (wk - ip) / n * 1e3,
        "worker_to_in_process": wk / ip,
        "child_idle_vmsize_mb": idle["VmSize"],
        "child_vmpeak_mb": busy["VmPeak"],
        "child_rss_peak_mb": busy["VmHWM"],
    }
    log.info("%s: %s", name, row)
    return row


def nested_divs(tmp: Path, limit: float) -> dict[str, Any]:
    html = tmp / "nested.html"
    html.write_text("<html><body>" + "<div>x" * 5000 + "</div>" * 5000 + "</body></html>")
    ok = tmp / "after.md"
    ok.write_text("# After\n\nthe next file\n")
    with ParseWorker(max_mb=4096) as w:
        t = time.perf_counter()
        try:
            w.parse(html, timeout=limit)
            outcome = "parsed"
        except ParseError as exc:
            outcome = str(exc).removeprefix(f"{html}: ")
        took = time.perf_counter() - t
        after = w.parse(ok, timeout=300).title
    row = {"bytes": html.stat().st_size, "limit_s": limit, "outcome": outcome, "seconds": took, "next_file": after}
    log.info("nested divs: %s", row)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--md-files", type=int, default=200, help="Hugo Markdown files to parse (default 200)")
    ap.add_argument("--repeat", type=int, default=5, help="timed passes; the best counts (default 5)")
    ap.add_argument("--starts", type=int, default=5, help="fresh workers for the start-up figure (default 5)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    md = sorted((DATA / "markdown_hugo_docs").rglob("*.md"))[: args.md_files]
    pdf = sorted((DATA / "pdf_py-pdf_sample-files").rglob("*.pdf"))
    if not md or not pdf:
        sys.exit(f"no test files under {DATA}: see shared/data/README.md")
    result: dict[str, Any] = {"start_up": start_up(args.starts, md[0])}
    log.info("start-up: %s", result["start_up"])
    result["markdown"] = overhead("markdown", md, args.repeat)
    result["pdf"] = overhead("pdf", pdf, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        result["nested_divs"] = nested_divs(Path(tmp), 5.0)
    result["cpus"] = os.cpu_count()
    summary(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


def summary(result: dict[str, Any]) -> None:
    """The figures, each per-file time with its ratio to parsing in process (the baseline, same run)."""
    s = result["start_up"]
    print(f"child start-up to ready: {s['ready_ms']:.0f} ms; its first file: {s['first_file_ms']:.0f} ms")
    for name in ("markdown", "pdf"):
        r = result[name]
        print(
            f"{name}: {r['files']} files, in process {r['in_process_ms_per_file']:.2f} ms/file (baseline), "
            f"in the worker {r['worker_ms_per_file']:.2f} ms/file: {r['worker_to_in_process']:.2f}x, "
            f"{r['overhead_ms_per_file']:+.2f} ms/file; child VmSize idle {r['child_idle_vmsize_mb']} MB, "
            f"VmPeak {r['child_vmpeak_mb']} MB, peak RSS {r['child_rss_peak_mb']} MB"
        )
    d = result["nested_divs"]
    print(
        f"5,000-deep nested divs ({d['bytes']:,} bytes), limit {d['limit_s']:g} s: {d['outcome']} "
        f"after {d['seconds']:.2f} s; the next file: {d['next_file']!r}"
    )


# -- in the report (benchmarks/report.py) --------------------------------------


def section_parse_worker(data: Data) -> list[str]:
    pw = data.get("parse_worker")
    timeout, cap = fint(setting("index.parse_timeout")), fint(setting("index.max_parse_mb"))
    lines = ["## Parsing in a child process (time limit and memory cap)", ""]
    lines += prose("parse_worker", cmd_parse_worker=command(data, "parse_worker"), timeout=timeout, cap=cap)
    if not pw:
        return lines + [not_measured("parse_worker", data), ""]
    rows = []
    for name, label in (("markdown", "Markdown (Hugo docs)"), ("pdf", "PDF (py-pdf sample files)")):
        r = pw.get(name) or {}
        ratio = r.get("worker_to_in_process")
        if ratio is None:
            ratio = div(r.get("worker_ms_per_file"), r.get("in_process_ms_per_file"))
        over = num(r.get("overhead_ms_per_file"))
        rows.append(
            [
                label,
                fint(r.get("files")),
                f"{fms(r.get('in_process_ms_per_file'))}",
                f"{fms(r.get('worker_ms_per_file'))}",
                fratio(ratio),
                NA if over is None else f"{over:+.2f} ms",
                f"{fmb(r.get('child_idle_vmsize_mb'))} / {fmb(r.get('child_vmpeak_mb'))} / "
                f"{fmb(r.get('child_rss_peak_mb'))}",
            ]
        )
    lines += table(
        [
            "format",
            "files",
            "in process, per file (baseline)",
            "in the worker, per file",
            "worker / in process",
            "overhead per file",
            "child address space idle / peak, peak RSS",
        ],
        rows,
    )
    s, d = pw.get("start_up") or {}, pw.get("nested_divs") or {}
    md_ms = num(dig(pw, "markdown", "in_process_ms_per_file"))
    ready = num(s.get("ready_ms"))
    growth = [
        x
        for x in (
            div_sub(dig(pw, n, "child_vmpeak_mb"), dig(pw, n, "child_idle_vmsize_mb")) for n in ("markdown", "pdf")
        )
        if x is not None
    ]
    lines += [
        f"- Child start-up, from `start()` to its hello: {fms(ready)} (median of fresh workers"
        + (f"; as long as parsing {ready / md_ms:,.0f} Markdown files in process" if ready and md_ms else "")
        + f"); its first file, which imports that format's parser in the child: {fms(s.get('first_file_ms'))}. "
        "Once per `mdrag index` run, and again after a file over the time limit (its child is killed) or one "
        "that left the child holding a big file's memory (it is replaced).",
        f"- Memory: the cap is the child's address space at start plus `index.max_parse_mb` ({cap} MB); parsing "
        f"these files grew it by at most {fmb(max(growth) if growth else None)} (peak minus idle).",
        f"- A {fint(d.get('bytes'))}-byte HTML file of 5,000 nested `<div>`s with a {fnum(d.get('limit_s'), 0)} s "
        f"limit: {d.get('outcome', NA)} in {fsec(d.get('seconds'))}; the next file in the same worker: "
        + (f"parsed (title {d['next_file']!r})" if d.get("next_file") else NA)
        + ".",
        "",
    ]
    return lines


BENCHMARK = Benchmark(
    steps=(Step("parse_worker", 160, (), ("start_up", "markdown", "pdf", "nested_divs")),),
    sections=(Section("Parsing in a child process (time limit and memory cap)", 110, section_parse_worker),),
)


if __name__ == "__main__":
    main()
