"""Reading a notes-vault note against its size: linear in its links and its tags.

Figures:

- :func:`mdrag.parsers.vault.read_note` (links as their text, inline tags, comments, callouts) on a note
  whose one paragraph holds a ``[[link]]`` on each line, at 64, 128, 256, 512 and 1,024 KB, and on a note
  of 2,000, 4,000, 8,000 and 16,000 distinct inline tags (ten to a line); CPU seconds, best of
  ``--repeat`` runs (the machine is shared), the parse timed apart. The growth is each size's CPU time
  over the previous size's (target: at most 2.2x per doubling; 4x is quadratic);
- the store a note of 2,000 distinct inline tags (61 kB, 143 paragraphs) makes, indexed alone by
  ``mdrag index`` with the default model on each store (FAISS, Milvus Lite): its chunks, its tag rows
  (FAISS) and its files' bytes, beside the same note without its tags.

    python benchmarks/vault_reading.py [--link-kb 64 128 256 512 1024] [--tags 2000 4000 8000 16000]
                                       [--repeat 3] [--no-store] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from render import command, fint, fratio, not_measured, prose, table, verdict  # noqa: E402
from steps import Benchmark, Data, Row, Section, Step, Target  # noqa: E402

TARGET = 2.2  # the most reading time may grow per doubling of the links or tags
log = logging.getLogger("vault_reading")


def links_note(size: int) -> str:
    """A note whose one paragraph holds a link on each line, ``size`` bytes or a line more."""
    lines = ["# Links", "", "Notes this one points at:"]
    total, i = 0, 0
    while total < size:
        line = f"see [[Note {i}]] for the details of part {i}"
        lines.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(lines) + "\n"


def tags_note(tags: int) -> str:
    """A note of ``tags`` distinct inline tags, ten to a line, in one paragraph."""
    words = [f"#topic-{i:05d}" for i in range(tags)]
    lines = [" ".join(words[i : i + 10]) for i in range(0, tags, 10)]
    return "# Tags\n\nWhat this note is about:\n" + "\n".join(lines) + "\n"


def reading_times(folder: Path, cases: list[tuple[str, float, str]], repeat: int) -> list[dict[str, Any]]:
    """Per case (its kind, its size in KB or tags, its text): parse seconds, reading CPU seconds, growth."""
    from mdrag.parsers import parse_file, vault

    rows: list[dict[str, Any]] = []
    for kind, size, text in cases:
        path = folder / f"{kind}-{size:g}.md"
        path.write_text(text, encoding="utf-8")
        t = time.perf_counter()
        doc = parse_file(path)
        parsed = time.perf_counter() - t
        cpu = wall = float("inf")
        for _ in range(repeat):
            t, c = time.perf_counter(), time.process_time()
            read = vault.read_note(doc)
            wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
        before = rows[-1] if rows and rows[-1]["kind"] == kind else None
        growth = cpu / before["cpu_s"] if before and before["cpu_s"] > 0 else None
        row = {"kind": kind, "size": size, "bytes": len(text.encode()), "parse_s": parsed, "cpu_s": cpu}
        row |= {"wall_s": wall, "links": len(read.links or []), "tags": len(read.metadata.get("tags", []))}
        rows.append({**row, "growth": growth})
        log.info("%s %g: parse %.2f s, read %.3f s CPU, %d links, %d tags, growth %s", kind, size, parsed, cpu,
                 row["links"], row["tags"], f"{growth:.2f}x" if growth else "-")  # fmt: skip
        path.unlink()
    return rows


def tagged_note(tags: int, tagged: bool = True) -> str:
    """A note of ``tags`` short lines, each naming a distinct inline tag (or, without ``tagged``, the same
    word), fourteen lines to a paragraph."""
    lines = [f"Item {i} is on {'#' if tagged else ''}tag-{i:05d} now." for i in range(tags)]
    return "# Tags\n\n" + "\n\n".join("\n".join(lines[i : i + 14]) for i in range(0, tags, 14)) + "\n"


def _bytes(paths: list[Path]) -> int:
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*") if p.is_dir() else []) if f.is_file()]
    return sum(f.stat().st_size for f in files)


def store_sizes(folder: Path, tags: int) -> list[dict[str, Any]]:
    """Per store, the note with and without its tags: chunks, tag rows (FAISS) and the store's bytes."""
    import sqlite3

    from mdrag.config import load_config
    from mdrag.embedding import make_embedder
    from mdrag.index import Index

    embedder = make_embedder(load_config())
    rows: list[dict[str, Any]] = []
    for backend in ("faiss", "milvus"):
        for tagged in (True, False):
            home = folder / f"{backend}-{tagged}"
            docs = home / "notes"
            (docs / ".obsidian").mkdir(parents=True)  # a vault: its inline tags are tags
            (docs / "tags.md").write_text(tagged_note(tags, tagged), encoding="utf-8")
            os.environ["MDRAG_HOME"] = str(home)
            config = load_config({"index": "tags", "store.backend": backend})
            with Index(config, embedder=embedder) as idx:
                summary = idx.update([docs])
            cache = config.cache_dir
            if backend == "faiss":
                files = [cache / "faiss" / f"tags.{ext}" for ext in ("sqlite", "faiss", "bm25")]
                with sqlite3.connect(files[0]) as db:
                    tag_rows = int(db.execute("SELECT count(*) FROM tags").fetchone()[0])
            else:
                files, tag_rows = [cache / "milvus.db", Path(f"{cache / 'milvus.db'}.mdrag")], None
            row = {"store": backend, "tagged": tagged, "chunks": summary.chunks_total, "tag_rows": tag_rows}
            rows.append({**row, "bytes": _bytes(files), "note_bytes": len(tagged_note(tags, tagged).encode())})
            log.info("%s, %s: %d chunks, %s tag rows, %.2f MB", backend, "tagged" if tagged else "no tags",
                     row["chunks"], tag_rows, rows[-1]["bytes"] / 1e6)  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--link-kb", type=float, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--tags", type=int, nargs="+", default=[2000, 4000, 8000, 16000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--store-tags", type=int, default=2000, help="tags of the note whose store is measured")
    ap.add_argument("--no-store", action="store_true", help="leave out the store's size")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cases = [("links", kb, links_note(int(kb * 1024))) for kb in args.link_kb]
    cases += [("tags", float(n), tags_note(n)) for n in args.tags]
    with tempfile.TemporaryDirectory() as tmp:
        result: dict[str, Any] = {"reading": reading_times(Path(tmp), cases, args.repeat)}
        if not args.no_store:
            result["store"] = store_sizes(Path(tmp), args.store_tags)
    result["cpus"] = os.cpu_count()
    summary(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


def summary(result: dict[str, Any]) -> None:
    for kind, unit in (("links", "KB"), ("tags", "tags")):
        rows = [r for r in result["reading"] if r["kind"] == kind]
        figures = ", ".join(
            f"{r['size']:g} {unit} {r['cpu_s']:.3f} s" + (f" ({r['growth']:.2f}x)" if r["growth"] else "") for r in rows
        )
        print(f"{kind}: {figures}; per doubling, smallest to largest: {fratio(_overall(rows))}")
    for r in result.get("store") or []:
        print(f"store {r['store']}, {'tagged' if r['tagged'] else 'no tags'}: {r['chunks']} chunks, "
              f"{r['tag_rows']} tag rows, {r['bytes'] / 1e6:.2f} MB")  # fmt: skip


# -- in the report (benchmarks/report.py) --------------------------------------

TITLE = "Reading notes-vault notes"
KINDS = {"links": ("a link on each line of one paragraph", "KB"), "tags": ("distinct inline tags", "tags")}


def _overall(rows: list[dict[str, Any]]) -> float | None:
    """CPU time's growth per doubling from the smallest size to the largest (the steps' geometric mean)."""
    if len(rows) < 2 or not rows[0].get("cpu_s") or not rows[-1].get("cpu_s"):
        return None
    doublings = math.log2(rows[-1]["size"] / rows[0]["size"])
    return float((rows[-1]["cpu_s"] / rows[0]["cpu_s"]) ** (1 / doublings))


def section_vault_reading(data: Data) -> list[str]:
    vr = data.get("vault_reading")
    lines = [f"## {TITLE}", "", *prose("vault_reading", cmd_vault_reading=command(data, "vault_reading"))]
    if not vr:
        return lines + [not_measured("vault_reading", data), ""]
    for kind, (what, unit) in KINDS.items():
        rows = [r for r in vr.get("reading") or [] if r.get("kind") == kind]
        if not rows:
            continue
        cells = [f"{r['cpu_s']:.3f} s" + (f" ({fratio(r['growth'])})" if r.get("growth") else "") for r in rows]
        lines += table(
            ["note", *[f"{r['size']:g} {unit}" for r in rows], "growth per doubling, smallest to largest"],
            [[what, *cells, fratio(_overall(rows))]],
        )
    stores = vr.get("store") or []
    if stores:
        lines += [
            "The store of one note of 2,000 distinct inline tags, indexed alone (each set of tags is stored once; "
            "before, every chunk stored all of its note's tags, see above):",
            "",
        ]
        lines += table(
            ["store", "note", "chunks", "tag rows", "store files"],
            [
                [
                    r["store"],
                    "2,000 inline tags" if r["tagged"] else "the same without tags",
                    fint(r.get("chunks")),
                    fint(r.get("tag_rows")),
                    f"{r['bytes'] / 1e6:.2f} MB",
                ]  # fmt: skip
                for r in stores
            ],
        )
    return lines


def t_vault_reading(data: Data) -> list[Row]:
    vr = data.get("vault_reading") or {}
    growths = [_overall([r for r in vr.get("reading") or [] if r.get("kind") == k]) for k in KINDS]
    worst = max((g for g in growths if g is not None), default=None)
    return [
        Row(
            f"vault note reading CPU time per doubling of its links or tags (worst case) <= {TARGET:g}x",
            fratio(worst),
            result=verdict(worst <= TARGET if worst is not None else None),
        )
    ]


BENCHMARK = Benchmark(
    steps=(Step("vault_reading", 245, (), ("reading",)),),
    sections=(Section(TITLE, 175, section_vault_reading),),
    targets=(Target(145, t_vault_reading),),
)


if __name__ == "__main__":
    main()
