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


if __name__ == "__main__":
    main()
