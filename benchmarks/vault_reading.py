"""Reading a notes-vault note against its size: linear in its links and its tags.

Figures:

- :func:`mdrag.parsers.vault.read_note` (links as their text, inline tags, comments, callouts) on a note
  whose one paragraph holds a ``[[link]]`` on each line, at 64, 128, 256, 512 and 1,024 KB, and on a note
  of 2,000, 4,000, 8,000 and 16,000 distinct inline tags (ten to a line); CPU seconds, best of
  ``--repeat`` runs (the machine is shared), the parse timed apart. The growth is each size's CPU time
  over the previous size's (target: at most 2.2x per doubling; 4x is quadratic).

    python benchmarks/vault_reading.py [--link-kb 64 128 256 512 1024] [--tags 2000 4000 8000 16000]
                                       [--repeat 3] [--json out.json]
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

from render import command, fratio, not_measured, prose, table, verdict  # noqa: E402
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--link-kb", type=float, nargs="+", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--tags", type=int, nargs="+", default=[2000, 4000, 8000, 16000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cases = [("links", kb, links_note(int(kb * 1024))) for kb in args.link_kb]
    cases += [("tags", float(n), tags_note(n)) for n in args.tags]
    with tempfile.TemporaryDirectory() as tmp:
        result: dict[str, Any] = {"reading": reading_times(Path(tmp), cases, args.repeat)}
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
