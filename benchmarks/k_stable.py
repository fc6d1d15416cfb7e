"""Whether the first results of a search depend on k: 300 Hugo docs, both stores, every mode.

The first 300 Markdown files of the Hugo docs (../shared/data, sorted by path) are indexed once per
store (FAISS, Milvus Lite) with the default settings, each in its own MDRAG_HOME under ``--work`` (kept,
and reused when it is there). Each of the first ``--questions`` questions of benchmarks/data/hugo_qa.jsonl is
searched with k 5 and with k 20 (every other setting the index's: threshold, collapse); a list "changes"
when the chunk ids of the k 5 search differ from the first five of the k 20 search. Printed: lists
changed per store and mode, out of the questions asked.

    python benchmarks/k_stable.py [--work /tmp/k-stable] [--questions 90] [--files 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HUGO = ROOT.parent / "shared" / "data" / "markdown_hugo_docs"
QA = ROOT / "benchmarks" / "data" / "hugo_qa.jsonl"
STORES = ("faiss", "milvus")
MODES = ("dense", "bm25", "hybrid")


def docs(work: Path, files: int) -> Path:
    """A copy of the first ``files`` Markdown files of the Hugo docs (sorted by path), their paths kept."""
    root = work / f"hugo-{files}"
    if not root.is_dir():
        for src in sorted(HUGO.rglob("*.md"))[:files]:
            dst = root / src.relative_to(HUGO)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    return root


def changed(store: str, root: Path, work: Path, questions: list[str]) -> dict[str, list[str]]:
    """The questions whose first five results differ between k 5 and k 20, per mode, on one store."""
    os.environ["MDRAG_HOME"] = str(work / f"home-{store}")
    from mdrag.config import load_config
    from mdrag.index import Index

    with Index(load_config({"index": f"kstable_{store}", "store.backend": store})) as idx:
        idx.update([root])
        out: dict[str, list[str]] = {}
        for mode in MODES:
            out[mode] = []
            for q in questions:
                narrow = [r.chunk_id for r in idx.search(q, k=5, mode=mode)]
                wide = [r.chunk_id for r in idx.search(q, k=20, mode=mode)][:5]
                if narrow != wide:
                    out[mode].append(q)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/k-stable"))
    ap.add_argument("--questions", type=int, default=90)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    root = docs(args.work, args.files)
    lines = QA.read_text(encoding="utf-8").splitlines()
    questions = [json.loads(x)["question"] for x in lines if x.strip()][: args.questions]
    report = {}
    for store in args.stores.split(","):
        found = changed(store, root, args.work, questions)
        report[store] = {mode: len(qs) for mode, qs in found.items()}
        for mode, qs in found.items():
            print(f"{store:7} {mode:7} lists changed between k 5 and k 20: {len(qs)} of {len(questions)}")
    if args.json:
        args.json.write_text(json.dumps({"questions": len(questions), "files": args.files, "changed": report}))


if __name__ == "__main__":
    main()
