"""Where the detail questions' answers land: the page, and the passage that holds the detail.

`mdrag eval` scores a detail question (benchmarks/data/otel_detail_qa.jsonl, hugo_detail_qa.jsonl) by its page: a
hit when any result comes from the gold page. On a long page that is not what a user gets: `mdrag search` shows
passages and `mdrag ask` gives the LLM passages, and the passage that holds the detail may be missing while other
passages of the same page are listed. This measures both, per search mode, over the indexes of a home:

- page Hit@5: the gold page is among the first 5 pages the results come from (what `mdrag eval` counts);
- answer Hit@5 and answer MRR@5: a result among the first 5 is a passage of the gold page whose lines hold the
  detail (the line of the answer's rarest word at its recorded offset, found as ``detail_qa.py`` checks it);
- answer Hit@10: the same among the first 10 (`search.k`, what `mdrag ask` gives the LLM by default).

The search is the index's own (`Index.search`, the home's settings; ``--collapse`` overrides `search.collapse`
to compare). Indexes missing from the home are built with `mdrag index --store faiss` (or ``--store``).

    python benchmarks/detail_answers.py --home DIR [--store faiss|milvus] [--collapse section] [--json out.json]
    python benchmarks/detail_answers.py --home DIR --corpus otel --index default    # a home of one corpus
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import mdrag_cli  # noqa: E402
from detail_qa import CORPORA, locate  # noqa: E402
from render import machine  # noqa: E402

MODES = ("dense", "bm25", "hybrid")


def answer_lines(corpus: str) -> list[tuple[dict[str, Any], int]]:
    """Each question of the corpus's detail set, with the line (1-based) of its page that holds the detail."""
    root, path = CORPORA[corpus]
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            q = json.loads(line)
            text = (root / q["gold"][0]).read_text(encoding="utf-8")
            at = min(locate(text, q["answer"]), key=lambda f: abs(f - q["offset"]))
            out.append((q, text[: round(at * len(text))].count("\n") + 1))
    return out


def measure(corpus: str, collapse: str | None, name: str) -> dict[str, Any]:
    """Per mode: page Hit@5, answer Hit@5, answer MRR@5, answer Hit@10, and the ids of the answers missed at 5."""
    import mdrag

    questions = answer_lines(corpus)
    figures: dict[str, Any] = {"questions": len(questions)}
    with mdrag.open_index(name) as index:
        for mode in MODES:
            page = hit5 = hit10 = 0
            rr = 0.0
            missed = []
            for q, line in questions:
                results = index.search(q["question"], k=10, mode=mode, collapse=collapse)
                gold = q["gold"][0]
                holds = [
                    i
                    for i, r in enumerate(results)
                    if r.rel_path == gold and (r.line_start or 0) <= line <= (r.line_end or 0)
                ]
                page += gold in list(dict.fromkeys(r.rel_path for r in results))[:5]  # pages, as `mdrag eval`
                hit5 += bool(holds) and holds[0] < 5
                hit10 += bool(holds)
                rr += 1 / (holds[0] + 1) if holds and holds[0] < 5 else 0.0
                if not (holds and holds[0] < 5):
                    missed.append(q["id"])
            n = len(questions)
            figures[mode] = {
                "page_hit@5": round(page / n, 3),
                "answer_hit@5": round(hit5 / n, 3),
                "answer_mrr@5": round(rr / n, 3),
                "answer_hit@10": round(hit10 / n, 3),
                "missed@5": missed,
            }
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, required=True, help="the mdrag home holding (or to hold) the indexes")
    ap.add_argument("--store", choices=("faiss", "milvus"), default="faiss", help="store of indexes built here")
    ap.add_argument(
        "--collapse", choices=("auto", "none", "passage", "section", "file"), help="override search.collapse"
    )
    ap.add_argument("--corpus", choices=sorted(CORPORA), help="only this corpus (default: both)")
    ap.add_argument("--index", help="the index that holds --corpus (default: the corpus's name)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    home = args.home.resolve()
    os.environ["MDRAG_HOME"] = str(home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out: dict[str, Any] = {"machine": machine(), "python": platform.python_version(), "collapse": args.collapse}
    for corpus in [args.corpus] if args.corpus else CORPORA:
        name = args.index or corpus
        if not (home / "cache" / "manifests" / f"{name}.json").is_file():
            mdrag_cli(home, "index", str(CORPORA[corpus][0]), "--index", name, "--store", args.store, "-q")
        out[corpus] = measure(corpus, args.collapse, name)
        print(f"{corpus} ({out[corpus]['questions']} questions)")
        for mode in MODES:
            f = out[corpus][mode]
            print(
                f"  {mode:6s} page Hit@5 {f['page_hit@5']:.3f}  answer Hit@5 {f['answer_hit@5']:.3f}  "
                f"MRR@5 {f['answer_mrr@5']:.3f}  Hit@10 {f['answer_hit@10']:.3f}"
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
