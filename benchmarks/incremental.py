"""Ranking after many small updates: Milvus Lite scores BM25 per segment.

Indexes a copy of the Hugo docs, asks the Hugo questions (every mode), then
moves the gold files of N questions one at a time, with one `mdrag index` run
per file, each run a small update of its own segment, and asks again. The
baseline in the same run is the fresh index. Without mdrag's padding of small
updates (see mdrag/store/milvus/store.py, `_pad_segment`), the moved files' BM25 scores
collapse and hybrid falls below dense on their questions.

    python benchmarks/incremental.py [--files 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from common import HUGO, QA, mdrag_cli
from render import MODES, command, dig, fnum, fsec, not_measured, prose, table  # noqa: E402
from steps import NA, Benchmark, Data, Section, Step  # noqa: E402


def _moved(path: str) -> str:
    p = Path(path)
    return str(p.with_name(p.stem + "-moved" + p.suffix))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=15, help="gold files moved, one update each")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not HUGO.is_dir():
        sys.exit(f"shared data not found at {HUGO}")
    questions = [json.loads(line) for line in QA.read_text().splitlines() if line.strip()]
    questions = [q for q in questions if q.get("gold")]
    gold: list[str] = []
    for q in questions:
        if q["gold"][0] not in gold:
            gold.append(q["gold"][0])
    moved = set(gold[: args.files])
    touched = [q for q in questions if q["gold"][0] in moved]
    after = [{**q, "gold": [_moved(g) if g in moved else g for g in q["gold"]]} for q in questions]
    after_touched = [q for q in after if q["gold"][0] in {_moved(g) for g in moved}]

    out: dict[str, object] = {"files_moved": len(moved), "questions": len(questions), "touched": len(touched)}
    with tempfile.TemporaryDirectory() as tmp:
        docs, home = Path(tmp) / "hugo", Path(tmp) / "home"
        shutil.copytree(HUGO, docs)

        def evaluate(qs: list[dict]) -> dict:
            f = Path(tmp) / "qa.jsonl"
            f.write_text("".join(json.dumps(q) + "\n" for q in qs))
            ev = json.loads(mdrag_cli(home, "eval", str(f), "--mode", "all", "--json")[1])
            return {m: ev[m] for m in ("dense", "bm25", "hybrid")}

        mdrag_cli(home, "index", str(docs), "-q")
        out["fresh"], out["fresh_touched"] = evaluate(questions), evaluate(touched)
        runs = []
        for g in sorted(moved):
            (docs / g).rename(docs / _moved(g))
            runs.append(mdrag_cli(home, "index", str(docs), "-q")[0])
        out["update_wall_s"] = {"mean": round(sum(runs) / len(runs), 2), "max": round(max(runs), 2)}
        out["after"], out["after_touched"] = evaluate(after), evaluate(after_touched)

    print(f"{len(moved)} gold files moved, one `mdrag index` run each (mean {out['update_wall_s']})")
    print(f"{'questions':<28}{'mode':>8}{'Hit@5':>8}{'MRR':>8}{'fresh Hit@5':>13}{'fresh MRR':>11}")
    for label, key, base in (("all", "after", "fresh"), ("on the moved files", "after_touched", "fresh_touched")):
        for mode in ("dense", "bm25", "hybrid"):
            a, b = out[key][mode], out[base][mode]  # type: ignore[index]
            print(f"{label:<28}{mode:>8}{a['hit@5']:>8.3f}{a['mrr']:>8.3f}{b['hit@5']:>13.3f}{b['mrr']:>11.3f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------


def section_incremental(data: Data) -> list[str]:
    inc = data.get("incremental")
    lines = ["### After many small updates (Milvus Lite)", ""]
    lines += prose("incremental", cmd_incremental=command(data, "incremental"))
    if not inc:
        return lines + [not_measured("incremental", data), ""]
    lines += [
        f"{inc.get('files_moved', NA)} files moved, {inc.get('touched', NA)} of {inc.get('questions', NA)} "
        f"questions have their gold there; one update took {fsec(dig(inc, 'update_wall_s', 'mean'))} "
        f"on average (max {fsec(dig(inc, 'update_wall_s', 'max'))}).",
        "",
    ]
    rows = []
    for label, key, base in (("all", "after", "fresh"), ("moved files only", "after_touched", "fresh_touched")):
        for mode in MODES:
            a, b = dig(inc, key, mode, "hit@5"), dig(inc, base, mode, "hit@5")
            ma, mb = dig(inc, key, mode, "mrr"), dig(inc, base, mode, "mrr")
            rows.append([label, mode, fnum(a, 3), fnum(b, 3), fnum(ma, 3), fnum(mb, 3)])
    lines += table(["questions", "mode", "Hit@5 after", "Hit@5 fresh", "MRR after", "MRR fresh"], rows)
    return lines + [""]


BENCHMARK = Benchmark(
    steps=(Step("incremental", 70, (), ("files_moved", "fresh", "after", "after_touched")),),
    sections=(Section("After many small updates (Milvus Lite)", 34, section_incremental, under="Retrieval quality"),),
)


if __name__ == "__main__":
    main()
