"""What the header embedded with each chunk is worth: `chunk.context` none / headings / frontmatter.

Each setting indexes the Hugo docs afresh and `mdrag eval` asks the Hugo
questions (benchmarks/data/hugo_qa.jsonl) in every search mode. The baseline
in the same run is `none` (the chunk text alone).

    python benchmarks/context.py [--backend auto|torch|onnx|openvino] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import HUGO, QA, mdrag_cli, seed_model_cache
from render import (  # noqa: E402
    MODES,
    command,
    dig,
    div_sub,
    fdelta,
    fint,
    fnum,
    fsec,
    not_measured,
    num,
    prose,
    setting,
    table,
    verdict,
)
from steps import MODELS, NA, Benchmark, Data, Json, Row, Section, Step, Target  # noqa: E402

CONTEXTS = ("none", "headings", "frontmatter")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto", help="embedding.backend: auto, torch, onnx or openvino")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--model-cache",
        type=Path,
        help="a cache folder with models/ (embedders.py --cache): the one-time ONNX export, not timed",
    )
    args = ap.parse_args()
    if not HUGO.is_dir():
        sys.exit(f"shared data not found at {HUGO}")
    out: dict[str, object] = {"backend": args.backend, "contexts": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for context in CONTEXTS:
            home = Path(tmp) / context
            home.mkdir()
            seed_model_cache(home, args.model_cache)
            (home / "config.yaml").write_text(f"embedding:\n  backend: {args.backend}\nchunk:\n  context: {context}\n")
            wall, stdout = mdrag_cli(home, "index", str(HUGO), "--json", "-q")
            summary = json.loads(stdout)
            ev = json.loads(mdrag_cli(home, "eval", str(QA), "--mode", "all", "--json")[1])
            out["contexts"][context] = {  # type: ignore[index]
                "chunks": summary["chunks_total"],
                "index_s": round(wall, 1),
                **{m: ev[m] for m in ("dense", "bm25", "hybrid")},
            }
            print(f"{context}: {summary['chunks_total']} chunks in {wall:.0f} s", flush=True)
    res = out["contexts"]
    assert isinstance(res, dict)
    print(f"{'context':<12}{'mode':>8}{'Hit@5':>8}{'MRR':>8}{'nDCG@10':>9}{'R@10':>7}{'Hit@5 vs none':>15}")
    for context, r in res.items():
        for mode in ("dense", "bm25", "hybrid"):
            m, base = r[mode], res["none"][mode]
            print(
                f"{context:<12}{mode:>8}{m['hit@5']:>8.3f}{m['mrr']:>8.3f}{m['ndcg@10']:>9.3f}"
                f"{m['recall@10']:>7.3f}{m['hit@5'] - base['hit@5']:>+15.3f}"
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


# -- in the report (benchmarks/report.py) --------------------------------------


def context_best(ctx: Json) -> list[tuple[str, float, float]]:
    """(context, hybrid Hit@5, mean nDCG@10 over the three modes), best first.

    Hit@5 of the default mode decides; a tie (70 questions: steps of 0.014) is
    broken by nDCG@10 averaged over dense, bm25 and hybrid.
    """
    rows = []
    for name, r in (ctx.get("contexts") or {}).items():
        h = num(dig(r, "hybrid", "hit@5"))
        ns = [num(dig(r, m, "ndcg@10")) for m in MODES]
        n = sum(x for x in ns if x is not None) / len(ns) if all(x is not None for x in ns) else -1.0
        if h is not None:
            rows.append((name, h, n))
    return sorted(rows, key=lambda t: (t[1], t[2]), reverse=True)


def t_context(data: Data) -> list[Row]:
    default = setting("chunk.context") or "?"
    name = f"chunk.context default ({default}) is the best on hybrid Hit@5 (ties: mean nDCG@10 of the 3 modes)"
    ctx = data.get("context")
    if not ctx:
        return [Row(name, not_measured("context", data))]
    ranked = context_best(ctx)
    if not ranked:
        return [Row(name, "no hybrid figures in context.json")]
    mine = next((r for r in ranked if r[0] == default), None)
    none = next((r for r in ranked if r[0] == "none"), None)
    best = ranked[0]
    ok = mine is not None and (mine[1], mine[2]) == (best[1], best[2])
    measured = (
        f"{default}: Hit@5 {fnum(mine[1], 3)}, mean nDCG@10 {fnum(mine[2], 3)}" if mine else f"no `{default}` run"
    )
    return [
        Row(
            name,
            measured + (f"; best: {best[0]}" if not ok else ""),
            f"none: Hit@5 {fnum(none[1], 3)}, mean nDCG@10 {fnum(none[2], 3)}" if none else NA,
            f"Hit@5 {fdelta(mine[1] - none[1])} vs none" if mine and none else NA,
            verdict(ok if mine else None),
        )
    ]


def section_context(data: Data) -> list[str]:
    ctx = data.get("context")
    default = setting("chunk.context")
    lines = ["### chunk.context: the header embedded with each chunk", ""]
    lines += prose("context", cmd_context=command(data, "context"), default=default)
    if not ctx:
        return lines + [not_measured("context", data), ""]
    contexts: Json = ctx.get("contexts") or {}
    lines += [f"Backend: {ctx.get('backend', NA)}.", ""]
    # one way: the deltas against `none`, a column per mode
    rows = []
    for name, r in contexts.items():
        label = f"**{name}** (default)" if name == default else name
        row = [label]
        for mode in MODES:
            h, n = dig(r, mode, "hit@5"), dig(r, mode, "ndcg@10")
            dh = div_sub(h, dig(contexts, "none", mode, "hit@5"))
            dn = div_sub(n, dig(contexts, "none", mode, "ndcg@10"))
            row.append(f"{fnum(h, 3)} ({fdelta(dh)}) / {fnum(n, 3)} ({fdelta(dn)})")
        rows.append(row)
    lines += table(["context", *[f"{m}: Hit@5 (Δ none) / nDCG@10 (Δ none)" for m in MODES]], rows)
    # the other way: every figure, a row per context and mode
    rows = []
    for mode in MODES:
        for name, r in contexts.items():
            m = r.get(mode) or {}
            base = dig(contexts, "none", mode) or {}
            rows.append(
                [
                    mode,
                    f"**{name}**" if name == default else name,
                    fint(r.get("chunks")),
                    fsec(r.get("index_s")),
                    fnum(m.get("hit@5"), 3),
                    fnum(m.get("mrr"), 3),
                    fnum(m.get("ndcg@10"), 3),
                    fnum(m.get("recall@10"), 3),
                    fdelta(div_sub(m.get("hit@5"), base.get("hit@5"))),
                    fdelta(div_sub(m.get("ndcg@10"), base.get("ndcg@10"))),
                ]
            )
    lines += table(
        [
            "mode",
            "context",
            "chunks",
            "index time",
            "Hit@5",
            "MRR",
            "nDCG@10",
            "R@10",
            "Δ Hit@5 vs none",
            "Δ nDCG@10 vs none",
        ],
        rows,
    )
    ranked = context_best(ctx)
    if ranked:
        lines += [f"Best on hybrid Hit@5 (ties: mean nDCG@10 of the three modes): `{ranked[0][0]}`.", ""]
    return lines


BENCHMARK = Benchmark(
    steps=(Step("context", 60, ("--model-cache", str(MODELS)), ("backend", "contexts")),),
    sections=(
        Section("chunk.context: the header embedded with each chunk", 33, section_context, under="Retrieval quality"),
    ),
    targets=(Target(100, t_context),),
)


if __name__ == "__main__":
    main()
