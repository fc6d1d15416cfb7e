"""Choose `search.threshold` by measurement: Hugo docs questions with gold files,
and questions the docs do not answer (benchmarks/data/hugo_qa.jsonl).

For each threshold: the share of answerable questions whose gold section (best
gold-file hit in the top 10) still passes, and the share of unanswerable
questions left with no result at all. The default is the highest threshold that
keeps at least 95% of the gold hits. Baseline in the same run: the spec's fixed 0.7.

    python benchmarks/threshold.py --home DIR [--index NAME] [--qa FILE]
    (DIR: an mdrag home whose index holds the Hugo docs, e.g. from hugo_index.py --keep)
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
from render import command, div, fint, fnum, fpct, fratio, not_measured, num, prose, quantile, setting, table, verdict  # noqa: E402
from steps import HOME, NA, Benchmark, Data, Json, Row, Section, Step, Target  # noqa: E402

QA = Path(__file__).resolve().parent / "data" / "hugo_qa.jsonl"


def _same(rel_path: str, gold: str) -> bool:
    """A hit's path relative to its indexed folder against a gold path relative to the corpus."""
    return rel_path == gold or gold.endswith("/" + rel_path) or rel_path.endswith("/" + gold)


def measure(index, qa: list[dict], mode: str | None = None, collapse: str | None = None) -> dict:
    gold_scores, top1_unanswerable, top1_answerable, ranks = [], [], [], []
    for q in qa:
        hits = index.search(q["question"], k=10, threshold=0, mode=mode, collapse=collapse)
        if not q["gold"]:
            top1_unanswerable.append(max((h.score for h in hits), default=0.0))
            continue
        # the best score among the results, as the Q&A server's "no relevant information" rule reads it
        top1_answerable.append(max((h.score for h in hits), default=0.0))
        gold = set(q["gold"])
        pos = [i for i, h in enumerate(hits) if any(_same(h.rel_path, g) for g in gold)]
        ranks.append(pos[0] + 1 if pos else None)
        if pos:
            gold_scores.append(hits[pos[0]].score)
    found = [r for r in ranks if r]
    return {
        "answerable": len(ranks),
        "hit@5": sum(1 for r in found if r <= 5) / len(ranks),
        "hit@10": len(found) / len(ranks),
        "mrr@10": sum(1 / r for r in found) / len(ranks),
        "gold_scores": gold_scores,
        "unanswerable_top1": top1_unanswerable,
        "answerable_top1": top1_answerable,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, required=True)
    ap.add_argument("--qa", type=Path, default=QA, help="questions: JSON Lines with question, gold (paths)")
    ap.add_argument("--index", default="default")
    ap.add_argument("--mode", choices=["dense", "bm25", "hybrid"], help="ranking mode (default: the setting)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ["MDRAG_HOME"] = str(args.home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from mdrag.config import load_config
    from mdrag.index import Index

    qa = [json.loads(line) for line in args.qa.read_text().splitlines() if line.strip()]
    index = Index(load_config({"index": args.index}))
    if not args.mode:
        for mode in ("dense", "bm25", "hybrid"):
            for collapse in ("none", "section", "file"):
                r = measure(index, qa, mode, collapse)
                print(
                    f"{mode:>6} collapse={collapse:<7}: hit@5 {r['hit@5']:.3f}, hit@10 {r['hit@10']:.3f}, "
                    f"MRR@10 {r['mrr@10']:.3f}"
                )
    m = measure(index, qa, args.mode)
    index.close()
    gold = np.asarray(m["gold_scores"])
    neg = np.asarray(m["unanswerable_top1"])
    rows = []
    for t in np.round(np.arange(0.0, 0.75, 0.05), 2):
        kept, emptied = float((gold >= t).mean()), float((neg < t).mean())
        rows.append({"threshold": float(t), "gold_kept": kept, "unanswerable_emptied": emptied})
    chosen = max(r["threshold"] for r in rows if r["gold_kept"] >= 0.95)
    spec = next(r for r in rows if r["threshold"] == 0.7)
    pick = next(r for r in rows if r["threshold"] == chosen)
    print(f"answerable {m['answerable']}: hit@5 {m['hit@5']:.3f}, hit@10 {m['hit@10']:.3f}, MRR@10 {m['mrr@10']:.3f}")
    print(f"gold-hit scores: min {gold.min():.3f}, p5 {np.percentile(gold, 5):.3f}, median {np.median(gold):.3f}")
    print(f"unanswerable top-1 scores: median {np.median(neg):.3f}, max {neg.max():.3f}")
    print(f"{'threshold':>9} {'gold kept':>10} {'unanswerable emptied':>21}")
    for r in rows:
        print(f"{r['threshold']:>9.2f} {r['gold_kept']:>10.2%} {r['unanswerable_emptied']:>21.2%}")
    print(
        f"chosen default {chosen:.2f}: keeps {pick['gold_kept']:.0%} of gold hits, empties "
        f"{pick['unanswerable_emptied']:.0%} of unanswerable; spec's 0.7 keeps {spec['gold_kept']:.0%} "
        f"(ratio chosen/spec gold kept: {pick['gold_kept'] / max(spec['gold_kept'], 1e-9):.1f}x)"
    )
    # Refusing to answer ("no relevant information") looks at the best score only.
    pos = np.asarray(m["answerable_top1"])
    print(f"{'refuse below':>12} {'answerable refused':>19} {'unanswerable refused':>21}")
    for t in np.round(np.arange(0.30, 0.61, 0.025), 3):
        print(f"{t:>12.3f} {(pos < t).mean():>19.2%} {(neg < t).mean():>21.2%}")
    if args.json:
        m.update({"table": rows, "chosen": chosen})
        args.json.write_text(json.dumps(m, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------

UNANSWERABLE_REFUSED = 0.80
ANSWERABLE_REFUSED = 0.05


def refusal(th: Json, cut: float) -> tuple[float | None, float | None]:
    """Shares of answerable and unanswerable questions refused at ``cut`` (best score below it)."""
    pos = [x for x in th.get("answerable_top1") or [] if num(x) is not None]
    neg = [x for x in th.get("unanswerable_top1") or [] if num(x) is not None]
    a = sum(x < cut for x in pos) / len(pos) if pos else None
    u = sum(x < cut for x in neg) / len(neg) if neg else None
    return a, u


def t_refusal(data: Data) -> list[Row]:
    cut = num(setting("answer.min_score"))
    names = (
        f'"No relevant information": unanswerable questions refused (best score < answer.min_score {cut}) '
        f">= {UNANSWERABLE_REFUSED:.0%}",
        f'"No relevant information": answerable questions refused <= {ANSWERABLE_REFUSED:.0%}',
    )
    th = data.get("threshold")
    if not th:
        return [Row(n, not_measured("threshold", data)) for n in names]
    if cut is None:
        return [Row(n, "answer.min_score is not in mdrag.settings.DEFAULTS") for n in names]
    a, u = refusal(th, cut)
    base_cut = num(setting("search.threshold"))
    ba, bu = refusal(th, base_cut) if base_cut is not None else (None, None)
    n_pos, n_neg = len(th.get("answerable_top1") or []), len(th.get("unanswerable_top1") or [])
    if a is None:
        first = Row(names[1], "threshold.json has no `answerable_top1` (predates the script)")
    else:
        first = Row(
            names[1],
            f"{fpct(a)} of {n_pos}",
            f"at search.threshold {base_cut}: {fpct(ba)}",
            NA,
            verdict(a <= ANSWERABLE_REFUSED + 1e-9),
        )
    second = Row(
        names[0],
        f"{fpct(u)} of {n_neg}" if u is not None else "threshold.json has no `unanswerable_top1`",
        f"at search.threshold {base_cut}: {fpct(bu)}",
        NA,
        verdict(None if u is None else u >= UNANSWERABLE_REFUSED - 1e-9),
    )
    return [second, first]


def section_threshold(data: Data) -> list[str]:
    th = data.get("threshold")
    search_t, min_score = num(setting("search.threshold")), num(setting("answer.min_score"))
    lines = ["## Relevance threshold and refusal", ""]
    lines += prose("threshold", cmd_threshold=command(data, "threshold"))
    if not th:
        return lines + [not_measured("threshold", data), ""]
    gold = sorted(x for x in th.get("gold_scores") or [] if num(x) is not None)
    neg = sorted(x for x in th.get("unanswerable_top1") or [] if num(x) is not None)
    lines += [
        f"{fint(th.get('answerable'))} answerable questions: Hit@5 {fnum(th.get('hit@5'), 3)}, "
        f"Hit@10 {fnum(th.get('hit@10'), 3)}, MRR@10 {fnum(th.get('mrr@10'), 3)}. "
        f"Score of the gold hit ({len(gold)} found in the top 10): min {fnum(gold[0] if gold else None, 3)}, "
        f"5th percentile {fnum(quantile(gold, 0.05), 3)}, median {fnum(quantile(gold, 0.5), 3)}. "
        f"Best score of the {len(neg)} unanswerable questions: median {fnum(quantile(neg, 0.5), 3)}, "
        f"max {fnum(neg[-1] if neg else None, 3)}.",
        "",
    ]
    rows_in = [r for r in th.get("table") or [] if isinstance(r, dict)]
    spec = next((r for r in rows_in if num(r.get("threshold")) == 0.7), None)
    chosen = num(th.get("chosen"))
    rows = []
    for r in rows_in:
        t = num(r.get("threshold"))
        marks = []
        if t is not None and chosen is not None and abs(t - chosen) < 1e-9:
            marks.append("chosen by the script")
        if t is not None and search_t is not None and abs(t - search_t) < 1e-9:
            marks.append("`search.threshold` default")
        if t == 0.7:
            marks.append("spec, baseline")
        label = fnum(t, 2) + (f" ({', '.join(marks)})" if marks else "")
        rows.append(
            [
                f"**{label}**" if marks and "spec, baseline" not in marks else label,
                fpct(r.get("gold_kept")),
                fpct(r.get("unanswerable_emptied"), 0),
                fratio(div(r.get("gold_kept"), spec.get("gold_kept") if spec else None), 1),
            ]
        )
    lines += table(["threshold", "gold hits kept", "unanswerable left with no result", "gold kept / at 0.7"], rows)
    lines += [
        "The script chooses the highest threshold that keeps at least 95% of gold hits.",
        "",
        f'Refusal ("no relevant information", no LLM call) looks at a question\'s best score only; '
        f"`answer.min_score` is {min_score}.",
        "",
    ]
    if not th.get("answerable_top1"):
        return lines + [
            "threshold.json has no `answerable_top1`: it predates the refusal figures "
            "(`python benchmarks/run.py --only threshold`).",
            "",
        ]
    n_pos, n_neg = len(th.get("answerable_top1") or []), len(neg)
    cuts = sorted({round((min_score or 0.45) + d, 3) for d in (-0.05, -0.025, 0, 0.025, 0.05)} | ({search_t} - {None}))
    rows = []
    for c in cuts:
        a, u = refusal(th, c)
        label = f"{c:.3f}"
        if min_score is not None and abs(c - min_score) < 1e-9:
            label = f"**{label} (`answer.min_score`)**"
        elif search_t is not None and abs(c - search_t) < 1e-9:
            label += " (`search.threshold`)"
        rows.append([label, fpct(a), fpct(u)])
    lines += table(["refuse below", f"answerable refused (of {n_pos})", f"unanswerable refused (of {n_neg})"], rows)
    return lines


BENCHMARK = Benchmark(
    steps=(
        Step(
            "threshold",
            50,
            ("--home", str(HOME)),
            ("answerable_top1", "unanswerable_top1", "gold_scores", "table", "chosen"),
        ),
    ),
    sections=(Section("Relevance threshold and refusal", 40, section_threshold),),
    targets=(Target(80, t_refusal),),
)


if __name__ == "__main__":
    main()
