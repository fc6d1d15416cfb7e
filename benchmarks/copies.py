"""Copies: files of one index with the same bytes, chunked and embedded once (mdrag.ingest.copies).

On each corpus, as a first build of it as one index sees it: the files the scan finds (the default
selection), which of them the indexer records as copies of another (the same function the indexer runs,
``plan_copies``, with nothing indexed yet), how many files it had to hash to tell (only those whose size
another file shares), and the chunks the copies would have added: each copy's original is parsed and
chunked with the default settings and the default embedder's tokenizer and window, as `mdrag index` does
(nothing is embedded). Before the change every copy was chunked, embedded and stored as a file of its own,
so "chunks before" counts every file's chunks and "chunks saved" the copies' share of them.

    python benchmarks/copies.py [--json benchmarks/out/copies.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from render import command, fint, not_measured, prose, table  # noqa: E402
from steps import Benchmark, Data, Section, Step  # noqa: E402

CORPORA = {
    "git-doc-html": ROOT.parent / "corpora" / "git-doc-html",
    "html_readability_pages": ROOT.parent / "shared" / "data" / "html_readability_pages",
    "markdown_otel_docs": ROOT.parent / "shared" / "data" / "markdown_otel_docs",
}


def measure(folder: Path) -> dict[str, Any]:
    """The copies a first build of ``folder`` records, and the chunks they would have added."""
    from mdrag.chunking import ChunkSettings
    from mdrag.config import load_config
    from mdrag.index import make_embedder
    from mdrag.ingest.copies import plan_copies
    from mdrag.ingest.reading import FileReader, read_hash
    from mdrag.ingest.scan import scan

    config = load_config()
    embedder = make_embedder(config)
    settings = ChunkSettings.from_config(config)
    t = time.perf_counter()
    found = scan([str(folder.resolve())])
    hashed: list[str] = []

    def hash_of(path: str) -> str | OSError:
        hashed.append(path)
        return read_hash(path)

    todo, plan = plan_copies({}, [(p, None) for p in sorted(found.files)], [], found, hash_of)
    plan_s = time.perf_counter() - t
    groups = {orig: copies for orig, copies in plan.after.items()}
    chunks: dict[str, int] = {}
    for path, _ in todo:
        root, rel, mtime_ns, size = found.files[path]
        chunks[path] = len(FileReader(embedder, settings).read(path, (root, rel, mtime_ns, size)).chunks)
    saved = sum(chunks[orig] * len(copies) for orig, copies in groups.items())
    examples = [[found.files[o][1], *(found.files[c][1] for c in cs)] for o, cs in list(groups.items())[:5]]
    return {
        "files": len(found.files),
        "groups": len(groups),
        "copies": plan.count,
        "files_hashed": len(hashed),
        "plan_s": round(plan_s, 3),
        "chunks_after": sum(chunks.values()),
        "chunks_before": sum(chunks.values()) + saved,
        "chunks_saved": saved,
        "examples": examples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    out: dict[str, Any] = {"corpora": {}}
    for name, folder in CORPORA.items():
        if not folder.is_dir():
            print(f"{name}: {folder} not found: skipped")
            continue
        r = out["corpora"][name] = measure(folder)
        print(
            f"{name:24s} {r['files']:5d} files, {r['copies']:3d} copies in {r['groups']:3d} groups "
            f"({r['files_hashed']} hashed, {r['plan_s']:.2f} s); chunks {r['chunks_before']} -> "
            f"{r['chunks_after']} ({r['chunks_saved']} saved)"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------


def section_copies(data: Data) -> list[str]:
    c = data.get("copies")
    lines = ["## Copies: files with the same bytes", "", *prose("copies", __doc__, cmd=command(data, "copies"))]
    if not c:
        return lines + [not_measured("copies", data), ""]
    rows = []
    for name, r in (c.get("corpora") or {}).items():
        share = f"{100 * r['chunks_saved'] / r['chunks_before']:.1f}%" if r.get("chunks_before") else "-"
        rows.append(
            [
                name,
                fint(r.get("files")),
                fint(r.get("copies")),
                fint(r.get("groups")),
                fint(r.get("files_hashed")),
                fint(r.get("chunks_before")),
                fint(r.get("chunks_after")),
                f"{fint(r.get('chunks_saved'))} ({share})",
            ]
        )
    headers = ["corpus", "files", "copies", "groups", "files hashed", "chunks before", "chunks after", "saved"]
    lines += table(headers, rows)
    for name, r in (c.get("corpora") or {}).items():
        if r.get("examples"):
            lines += [f"{name}, groups (the first is indexed): " + "; ".join(" = ".join(g) for g in r["examples"])]
            lines += [""]
    return lines


BENCHMARK = Benchmark(
    steps=(Step("copies", 205, (), ("corpora",)),),
    sections=(Section("Copies: files with the same bytes", 152, section_copies),),
)


if __name__ == "__main__":
    main()
