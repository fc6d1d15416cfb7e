"""What the chunker makes of real documents: blocks kept whole, no fragments, right line spans.

Chunks the OpenTelemetry docs, the Hugo docs and the py-pdf sample PDFs with
the default settings and the default embedder's tokenizer and window (as
`mdrag index` does; nothing is embedded) and counts, per corpus:

- chunks, and their mean / median length in characters;
- code fences that fit the model's window (with their chunk header) and are
  cut anyway, of all fences;
- chunks under 30 characters, and how many of them are the whole text of
  their section (a short section is not a fragment);
- line-span mismatches: chunks whose lines are not all found, in order, in the
  file's lines ``line_start..line_end``, or whose first or last line is not
  on ``line_start`` / ``line_end`` (text formats only; PDF pages have none).

Baseline, measured in the same run: the same script on the chunker of
``--baseline-ref`` (default: the last commit whose chunker cut small fences and left fragments), extracted with
``git archive`` into a temporary folder and run in a child process.

    python benchmarks/chunks.py [--json out.json] [--baseline-ref REF | --no-baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import ROOT
from render import command, dig, fint, not_measured, num, prose, table, verdict  # noqa: E402
from steps import NA, Benchmark, Data, Json, Row, Section, Step, Target  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
CORPORA = {
    "otel": (DATA / "markdown_otel_docs", "*.md"),
    "hugo": (DATA / "markdown_hugo_docs", "*.md"),
    "pdf": (DATA / "pdf_py-pdf_sample-files", "*.pdf"),
}
SHORT = 30  # characters: a chunk shorter than this is a fragment unless its section is that short
BASELINE_REF = "514c09a"  # the last main whose chunker cut small fences and left fragments


def _norm(s: str) -> str:
    """Runs of spaces, and of dashes (a table's delimiter row, written short in a chunk), shortened."""
    return re.sub(r"-{3,}", "---", " ".join(s.split()))


def span_problem(text: str, lines: list[str], start: int | None, end: int | None) -> str | None:
    """Why ``text`` is not what lines ``start..end`` (1-based) of the file hold, or None. A table's header
    written before the rows of a chunk (at most two leading table lines found above ``start``, not in the
    span) is not part of its lines."""
    if start is None or end is None:
        return "no line span"
    if not 1 <= start <= end <= len(lines):
        return f"span {start}..{end} outside the file's {len(lines)} lines"
    span = [_norm(x) for x in lines[start - 1 : end]]
    above = {_norm(x) for x in lines[: start - 1]}
    for _ in range(2):
        first, _, rest = text.partition("\n")
        if rest and "|" in first and _norm(first) not in span and _norm(first) in above:
            text = rest
    flat = " ".join(span)
    pos = 0
    for line in (x for x in (_norm(x) for x in text.split("\n")) if x):
        found = flat.find(line, pos)
        if found < 0:
            return f"line {line[:60]!r} not in lines {start}..{end}"
        pos = found + len(line)
    first = next(x for x in (_norm(x) for x in text.split("\n")) if x)
    last = next(x for x in (_norm(x) for x in reversed(text.split("\n"))) if x)
    if not (span[0] and (first.startswith(span[0][-40:]) or span[0].endswith(first[:40]) or first[:40] in span[0])):
        return f"line {start} does not hold the chunk's first line {first[:60]!r}"
    if not (span[-1] and (span[-1][:40] in last or last[-40:] in span[-1])):
        return f"line {end} does not hold the chunk's last line {last[-60:]!r}"
    return None


def measure(name: str, folder: Path, pattern: str) -> dict:
    from mdrag.chunking import ChunkSettings, chunk_document
    from mdrag.config import load_config
    from mdrag.index import make_embedder
    from mdrag.parsers import parse_file

    config = load_config()
    embedder = make_embedder(config)
    settings = ChunkSettings.from_config(config)
    window = embedder.max_tokens
    files = sorted(folder.rglob(pattern))
    sizes: list[int] = []
    fences = fences_fit = fences_cut = 0
    short = short_ok = mismatches = 0
    examples: dict[str, list[str]] = {"cut": [], "short": [], "span": []}
    t = time.perf_counter()
    for path in files:
        rel = path.relative_to(folder).as_posix()
        try:
            doc = parse_file(path)
        except Exception:  # a file the parser skips is skipped by the indexer too
            continue
        chunks = chunk_document(doc, str(folder), rel, settings, embedder.count_tokens, window)
        sizes += [len(ch.text) for ch in chunks]
        # A fence "fits" when it alone, under its section's header, is within the window.
        codes = [(s, b) for s in doc.sections for b in s.blocks if b.kind == "code"]
        heads = [" > ".join([doc.title or "", *s.heading_path]) for s, _ in codes]
        counts = embedder.count_tokens([f"{h}\n\n{b.text}" for h, (_, b) in zip(heads, codes)])
        for (_, b), n in zip(codes, counts):
            fences += 1
            if window is not None and n > window:
                continue
            fences_fit += 1
            if not any(b.text.strip() in ch.text for ch in chunks):
                fences_cut += 1
                if len(examples["cut"]) < 5:
                    examples["cut"].append(f"{rel}:{b.line_start} ({n} tokens)")
        section_text = {tuple(s.heading_path): _norm(s.text) for s in doc.sections}
        for ch in chunks:
            if len(ch.text) < SHORT:
                short += 1
                if len(section_text.get(tuple(ch.heading_path), "")) < SHORT:
                    short_ok += 1
                elif len(examples["short"]) < 5:
                    examples["short"].append(f"{rel}:{ch.line_start} {ch.text!r}")
        if pattern != "*.pdf":
            lines = path.read_text(encoding=doc.encoding or "utf-8", errors="replace")
            lines = lines.replace("\r\n", "\n").replace("\r", "\n").split("\n")
            for ch in chunks:
                why = span_problem(ch.text, lines, ch.line_start, ch.line_end)
                if why:
                    mismatches += 1
                    if len(examples["span"]) < 5:
                        examples["span"].append(f"{rel}:{ch.line_start}-{ch.line_end}: {why}")
    return {
        "files": len(files),
        "chunks": len(sizes),
        "mean_chars": statistics.fmean(sizes) if sizes else None,
        "median_chars": statistics.median(sizes) if sizes else None,
        "fences": fences,
        "fences_fit_window": fences_fit,
        "fences_cut": fences_cut,
        "short_chunks": short,
        "short_whole_section": short_ok,
        "short_fragments": short - short_ok,
        "span_mismatches": mismatches if pattern != "*.pdf" else None,
        "seconds": time.perf_counter() - t,
        "examples": examples,
    }


def measure_all() -> dict:
    out = {}
    for name, (folder, pattern) in CORPORA.items():
        if folder.is_dir():
            out[name] = measure(name, folder, pattern)
    return out


def baseline(ref: str) -> dict:
    """The same figures from the chunker (and parsers) of git ``ref``, in a child process."""
    with tempfile.TemporaryDirectory(prefix="mdrag-chunks-") as tmp:
        archive = subprocess.run(["git", "archive", ref, "mdrag"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        env = {**os.environ, "PYTHONPATH": tmp, "HF_HUB_OFFLINE": "1"}
        p = subprocess.run(
            [sys.executable, __file__, "--no-baseline", "--print-json"], env=env, capture_output=True, text=True
        )
        if p.returncode != 0:
            raise SystemExit(f"the baseline run at {ref} failed:\n{p.stderr[-2000:]}")
        return json.loads(p.stdout)["corpora"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--baseline-ref", default=BASELINE_REF, help="git ref whose chunker is the baseline")
    ap.add_argument("--no-baseline", action="store_true", help="measure this checkout only")
    ap.add_argument("--print-json", action="store_true", help=argparse.SUPPRESS)  # the baseline child's output
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import mdrag

    result = {"mdrag": str(Path(mdrag.__file__).parent), "short_limit": SHORT, "corpora": measure_all()}
    if args.print_json:
        print(json.dumps(result))
        return
    if not args.no_baseline:
        result["baseline_ref"] = args.baseline_ref
        result["baseline"] = baseline(args.baseline_ref)
    for name, f in result["corpora"].items():
        b = result.get("baseline", {}).get(name, {})

        def show(key: str, f: dict = f, b: dict = b) -> str:
            return f"{f[key]}" + (f" (was {b[key]})" if key in b else "")

        print(f"{name}: {show('files')} files, {show('chunks')} chunks, mean {f['mean_chars']:.0f} chars")
        print(f"  fences cut though they fit the window: {show('fences_cut')} of {show('fences_fit_window')}")
        print(f"  chunks under {SHORT} chars: {show('short_chunks')}, fragments {show('short_fragments')}")
        print(f"  line-span mismatches: {show('span_mismatches')}")
        for kind, xs in f["examples"].items():
            for x in xs:
                print(f"    {kind}: {x}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


# -- in the report (benchmarks/report.py) --------------------------------------

SHORT_CHUNK = 30  # characters: a shorter chunk is a fragment unless its section is that short


def t_chunks(data: Data) -> list[Row]:
    names = {
        "fences_cut": "otel docs: no code fence that fits the model's window is cut",
        "short_fragments": f"otel docs: no chunk under {SHORT_CHUNK} characters unless its section is that short",
        "span_mismatches": "otel docs: every chunk's lines are at its line_start..line_end",
    }
    ch = data.get("chunks")
    if not ch:
        return [Row(name, not_measured("chunks", data)) for name in names.values()]
    now, was = dig(ch, "corpora", "otel") or {}, dig(ch, "baseline", "otel") or {}
    of = {"fences_cut": "fences_fit_window", "short_fragments": "chunks", "span_mismatches": "chunks"}
    rows = []
    for key, name in names.items():
        n = num(now.get(key))
        rows.append(
            Row(
                name,
                f"{fint(n)} of {fint(now.get(of[key]))}",
                f"{fint(was.get(key))} of {fint(was.get(of[key]))} ({ch.get('baseline_ref', NA)})" if was else NA,
                NA,
                verdict(None if n is None else n == 0),
            )
        )
    return rows


def section_chunks(data: Data) -> list[str]:
    ch = data.get("chunks")
    lines = ["## Chunking", ""]
    lines += prose("chunks", cmd_chunks=command(data, "chunks"), short_chunk=SHORT_CHUNK)
    if not ch:
        return lines + [not_measured("chunks", data), ""]
    rows = []
    for name, now in (ch.get("corpora") or {}).items():
        was = dig(ch, "baseline", name) or {}

        def cell(key: str, fmt: Callable[[Any], str] = fint, now: Json = now, was: Json = was) -> str:
            return f"{fmt(now.get(key))} ({fmt(was.get(key))})" if was else fmt(now.get(key))

        rows.append(
            [
                name,
                cell("files"),
                cell("chunks"),
                f"{cell('fences_cut')} of {cell('fences_fit_window')}",
                cell("short_chunks"),
                cell("short_fragments"),
                cell("span_mismatches"),
                cell("mean_chars"),
                cell("median_chars"),
            ]
        )
    lines += [f"Now (baseline {ch.get('baseline_ref', NA)} in brackets):", ""]
    lines += table(
        [
            "corpus",
            "files",
            "chunks",
            "fences cut that fit the window",
            f"chunks < {SHORT_CHUNK} chars",
            "of which fragments",
            "line-span mismatches",
            "mean chars",
            "median chars",
        ],
        rows,
    )
    return lines


BENCHMARK = Benchmark(
    steps=(Step("chunks", 190, (), ("corpora", "short_limit")),),
    sections=(Section("Chunking", 140, section_chunks),),
    targets=(Target(130, t_chunks),),
)


if __name__ == "__main__":
    main()
