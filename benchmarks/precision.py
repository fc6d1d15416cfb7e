"""Retrieval quality of the int8 model against the float one: every question set, every mode, one run.

Each corpus of ../shared/data is indexed twice in one home (FAISS store, onnxruntime, the largest write
batches): ``<corpus>_fp32`` with ``embedding.precision: fp32`` and ``<corpus>_int8`` with ``int8``. Then
every question set of benchmarks/data/ (and SciFact's test queries) is measured on both, as
``mdrag eval --mode all --json`` measures it, each in its own process with the home's settings
(``embedding.precision: fp32``): the int8 index is searched with the int8 model because it records it.
The table gives Hit@5, MRR@5 and nDCG@10 per set and mode, and the questions int8 loses or gains at Hit@5;
the build lines the chunks each index holds and the CPU seconds its run took (chunks per CPU second).

Indexes and evaluations already in the home are reused (``--fresh`` starts over): the figures are kept in
``<home>/precision.json`` as each step ends.

    nice -n 10 python benchmarks/precision.py --home /tmp/mdrag-precision [--corpus hugo ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import mdrag_cli, seed_model_cache  # noqa: E402
from render import machine  # noqa: E402

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data"
SETS = HERE / "data"
PRECISIONS = ("fp32", "int8")
MODES = ("dense", "bm25", "hybrid")
BATCH_CHUNKS = 8192  # chunks per embed + write round: the largest batches, one length-sorted order per round
# corpus -> (its documents under ../shared/data, its question sets in benchmarks/data/); SciFact's are BEIR's.
CORPORA: dict[str, tuple[str, tuple[str, ...]]] = {
    "cncf": ("markdown_cncf_glossary", ("cncf_qa",)),
    "commonmark": ("commonmark/spec-0.31.2.txt", ("commonmark_qa",)),
    "vault": ("notes_vault_obsidian-tasks", ("vault_qa", "vault_heldout_qa")),
    "html": ("html_readability_pages", ("html_qa", "html_keyword_qa")),
    "hugo": ("markdown_hugo_docs", ("hugo_qa", "hugo_keyword_qa", "hugo_detail_qa")),
    "otel": ("markdown_otel_docs", ("otel_qa", "otel_keyword_qa", "otel_detail_qa", "otel_retrieval_qa")),
    "scifact": ("scifact", ("scifact",)),
}


def documents(corpus: str, home: Path) -> Path:
    """The folder indexed for ``corpus``: the shared data's, or one made in the home as the other benchmarks
    make it (the CommonMark spec as one Markdown file, each HTML page named after its folder, each SciFact
    abstract a Markdown file)."""
    source = DATA / CORPORA[corpus][0]
    made = home / "docs" / corpus
    if corpus not in ("commonmark", "html", "scifact"):
        return source
    if made.is_dir():
        return made
    tmp = made.with_name(corpus + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if corpus == "commonmark":
        shutil.copyfile(source, tmp / "commonmark-spec.md")
    elif corpus == "html":
        for page in sorted(source.glob("*/source.html")):
            shutil.copyfile(page, tmp / f"{page.parent.name}.html")
    else:
        with gzip.open(source / "corpus.jsonl.gz", "rt") as f:
            for line in f:
                d = json.loads(line)
                (tmp / f"{d['_id']}.md").write_text(f"# {d['title']}\n\n{d['text']}\n", encoding="utf-8")
    tmp.rename(made)
    return made


def build(corpus: str, precision: str, home: Path) -> dict[str, Any]:
    """Index ``corpus`` at ``precision`` in this process; its chunks, wall and CPU seconds."""
    from mdrag.config import load_config
    from mdrag.index import Index

    docs = documents(corpus, home)
    config = load_config({"index": f"{corpus}_{precision}", "embedding.precision": precision})
    before, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with Index(config) as index:
        summary = index.update([docs], batch_chunks=BATCH_CHUNKS)
        identity = index.embedder.identity
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "chunks": summary.chunks_total,
        "wall_s": round(time.perf_counter() - t, 1),
        "cpu_s": round(cpu, 1),
        "identity": identity,
        "load": os.getloadavg()[0],
    }


def evaluate(corpus: str, qa: str, precision: str, home: Path) -> dict[str, Any]:
    """``mdrag eval --mode all --json`` of question set ``qa`` on the corpus's index at ``precision``."""
    index = ["--index", f"{corpus}_{precision}", "--mode", "all", "--json", "-q"]
    if qa == "scifact":
        beir = DATA / "scifact"
        args = ["--queries", str(beir / "queries.test.tsv"), "--qrels", str(beir / "qrels" / "test.tsv")]
        _, out = mdrag_cli(home, "eval", *args, "--doc-id", "stem", *index)
    else:
        _, out = mdrag_cli(home, "eval", str(SETS / f"{qa}.jsonl"), *index)
    result: dict[str, Any] = json.loads(out)
    return result


def table(figures: dict[str, Any]) -> list[str]:
    """The Markdown table: each set and mode, fp32 / int8 figures and the questions int8 loses at Hit@5."""
    lines = [
        "| set (questions) | mode | Hit@5 fp32 / int8 | lost at Hit@5 | MRR@5 fp32 / int8 | nDCG@10 fp32 / int8 |",
        "|---|---|---|---|---|---|",
    ]
    for _, sets in CORPORA.values():
        for qa in sets:
            both = [figures.get("eval", {}).get(f"{qa}/{p}") for p in PRECISIONS]
            if None in both:
                continue
            fp, q8 = both
            n = fp["questions"]
            for mode in MODES:
                a, b = fp[mode], q8[mode]
                lost = round((a["hit@5"] - b["hit@5"]) * n)
                lines.append(
                    f"| {qa} ({n}) | {mode} | {a['hit@5']:.3f} / {b['hit@5']:.3f} | {lost:+d} | "
                    f"{a['mrr']:.3f} / {b['mrr']:.3f} | {a['ndcg@10']:.4f} / {b['ndcg@10']:.4f} |"
                )
    return lines


def decision(figures: dict[str, Any]) -> str:
    """The rule: int8 may be the default for new indexes when no set loses more than one question at Hit@5
    in any mode and SciFact's nDCG@10 falls by at most 0.005 in every mode."""
    worst, fall = (0, ""), (0.0, "")
    for _, sets in CORPORA.values():
        for qa in sets:
            fp, q8 = (figures.get("eval", {}).get(f"{qa}/{p}") for p in PRECISIONS)
            if fp is None or q8 is None:
                return f"incomplete: {qa} not measured"
            for mode in MODES:
                lost = round((fp[mode]["hit@5"] - q8[mode]["hit@5"]) * fp["questions"])
                worst = max(worst, (lost, f"{qa} {mode}"))
                if qa == "scifact":
                    fall = max(fall, (fp[mode]["ndcg@10"] - q8[mode]["ndcg@10"], f"scifact {mode}"))
    ok = worst[0] <= 1 and fall[0] <= 0.005
    return (
        f"{'int8 passes' if ok else 'int8 fails'}: most questions lost at Hit@5 {worst[0]} ({worst[1] or '-'}); "
        f"largest SciFact nDCG@10 fall {fall[0]:.4f} ({fall[1] or '-'})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, default=Path("/tmp/mdrag-precision"), help="MDRAG_HOME of the indexes")
    ap.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="only these corpora (repeatable)")
    ap.add_argument("--model-cache", type=Path, help="a cache folder whose models/ to copy into the home first")
    ap.add_argument("--fresh", action="store_true", help="delete the home first")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument(
        "--with",
        dest="others",
        type=Path,
        action="append",
        default=[],
        help="the home of a run of other corpora (in parallel): its figures join this one's table (repeatable)",
    )
    args = ap.parse_args()
    home = args.home.resolve()
    if args.fresh:
        shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        "embedding:\n  backend: onnx\n  precision: fp32\nstore:\n  backend: faiss\n", encoding="utf-8"
    )
    seed_model_cache(home, args.model_cache)
    os.environ["MDRAG_HOME"] = str(home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    saved = home / "precision.json"
    figures: dict[str, Any] = json.loads(saved.read_text()) if saved.is_file() else {}
    figures.update({"machine": machine(), "python": platform.python_version(), "cpus": os.cpu_count()})

    def keep() -> None:
        saved.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")

    for corpus in args.corpus or CORPORA:
        for precision in PRECISIONS:
            key = f"{corpus}/{precision}"
            if key not in figures.setdefault("build", {}):
                figures["build"][key] = build(corpus, precision, home)
                keep()
            b = figures["build"][key]
            print(f"built {key}: {b['chunks']} chunks, {b['cpu_s']} CPU s, {b['wall_s']} s (load {b['load']:.1f})")
            for qa in CORPORA[corpus][1]:
                key = f"{qa}/{precision}"
                if key not in figures.setdefault("eval", {}):
                    figures["eval"][key] = evaluate(corpus, qa, precision, home)
                    keep()
    for other in args.others:
        theirs = json.loads((other / "precision.json").read_text())
        for part in ("build", "eval"):
            figures.setdefault(part, {}).update(theirs.get(part, {}))
    print("\n".join(table(figures)))
    for corpus in CORPORA:
        fp, q8 = (figures["build"].get(f"{corpus}/{p}") for p in PRECISIONS)
        if fp and q8:
            rate = [b["chunks"] / b["cpu_s"] for b in (fp, q8)]
            print(
                f"{corpus}: {rate[0]:.1f} / {rate[1]:.1f} chunks per CPU second (index run), x{rate[1] / rate[0]:.2f}"
            )
    print(decision(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
