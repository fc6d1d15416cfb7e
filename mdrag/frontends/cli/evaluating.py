"""`mdrag eval`: retrieval quality on known questions, measured on the local index."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.errors import ConfigError
from mdrag.frontends.cli.opening import local_index
from mdrag.frontends.cli.parser import RERANK_FLAGS, common_flags, overrides, setting_flag

if TYPE_CHECKING:
    from mdrag.frontends.cli.parser import Commands
    from mdrag.index import Index
    from mdrag.retrieval.evaluate import Question

log = logging.getLogger("mdrag")


def register(commands: Commands) -> None:
    """Declare `mdrag eval`."""
    p = commands.add_parser(
        "eval",
        help="measure retrieval quality on known questions",
        epilog="example: mdrag eval benchmarks/data/hugo_qa.jsonl --index hugo   "
        "(BEIR: mdrag eval --queries queries.tsv --qrels qrels/test.tsv --doc-id stem; with and without a "
        "reranker: --rerank --rerank-url http://127.0.0.1:8080/v1/rerank)",
    )
    p.add_argument("questions", nargs="?", metavar="FILE", help="JSON Lines: question, gold (list of paths)")
    p.add_argument("--queries", metavar="FILE", help="BEIR queries (JSON Lines or TSV), with --qrels")
    p.add_argument("--qrels", metavar="FILE", help="BEIR qrels TSV (query-id, corpus-id, score)")
    p.add_argument("--doc-id", choices=["path", "stem"], default="path", help="match gold by path or by file stem")
    p.add_argument("--mode", choices=["dense", "bm25", "hybrid", "all"], default="all", help="ranking mode(s)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument(
        "--rerank",
        action="store_true",
        help="measure with and without the reranker (rerank.url or rerank.path; --rerank-url), side by side",
    )
    for key in RERANK_FLAGS:
        setting_flag(p, key)
    common_flags(p)
    p.set_defaults(run=_eval)


def _eval(args: argparse.Namespace) -> int:
    """`mdrag eval`: on the local index."""
    from mdrag.config import load_config

    with local_index(load_config(overrides(args))) as index:
        return _eval_on(args, index)


def _eval_on(args: argparse.Namespace, index: Index) -> int:
    from mdrag.retrieval import evaluate as ev

    if args.qrels or args.queries:
        if not (args.qrels and args.queries):
            raise ConfigError("BEIR evaluation needs both --queries and --qrels")
        questions = ev.load_beir(Path(args.queries), Path(args.qrels))
    elif args.questions:
        questions = ev.load_questions(Path(args.questions))
    else:
        raise ConfigError("give a questions file, or --queries and --qrels")
    modes: tuple[str, ...] = ev.MODES if args.mode == "all" else (args.mode,)
    result = _evaluate(args, index, questions, modes)
    result["unknown_gold"] = ev.unknown_gold(questions, index.files, doc_key=args.doc_id)
    if result["unknown_gold"]:
        unknown = result["unknown_gold"]
        log.warning(
            "%d gold document%s name%s no indexed file, so every question citing %s counts as a miss "
            "(a typo, or a file outside the index?): %s",
            len(unknown),
            "" if len(unknown) == 1 else "s",
            "s" if len(unknown) == 1 else "",
            "it" if len(unknown) == 1 else "them",
            ", ".join(unknown[:10]) + (", ..." if len(unknown) > 10 else ""),
        )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['questions']} questions ({result['without_gold']} without gold left out)")
    print("each one search as `mdrag search` runs it: " + ", ".join(f"{k} {v}" for k, v in result["search"].items()))
    rows = [(mode, result[mode]) for mode in modes]
    if "rerank" in result:
        rows = [row for mode in modes for row in ((mode, result[mode]), (f"{mode}+rerank", result["rerank"][mode]))]
    if result.get("rerank_failed"):
        failed = result["rerank_failed"]
        print(f"the reranker failed on {failed} searches, which kept the fused order (see the warnings)")
    width = max(len(name) for name, _ in rows) + 2
    print(f"{'mode':<{width}}{'nDCG@10':>9}{'R@10':>8}{'MRR':>8}{'Hit@5':>8}")
    for name, m in rows:
        print(f"{name:<{width}}{m['ndcg@10']:>9.4f}{m['recall@10']:>8.4f}{m['mrr']:>8.4f}{m['hit@5']:>8.4f}")
    return 0


def _evaluate(
    args: argparse.Namespace, index: Index, questions: list[Question], modes: tuple[str, ...]
) -> dict[str, Any]:
    """`mdrag eval`'s figures: each mode as `mdrag search` ranks (with the reranker, when one is set); with
    ``--rerank``, each mode without the reranker, and with it under ``"rerank"``."""
    from mdrag.retrieval import evaluate as ev
    from mdrag.retrieval import rerank

    reranker = index.search_options.rerank
    if not args.rerank:
        result = ev.evaluate(index.search, questions, modes, doc_key=args.doc_id)
    elif reranker is None:
        raise ConfigError(
            "--rerank compares the figures with and without a reranker, and none is set: give --rerank-url URL "
            "(a /rerank endpoint) or --rerank-path DIR (a CrossEncoder folder), or set rerank.url or rerank.path"
        )
    else:
        reranked = ev.evaluate(index.search, questions, modes, doc_key=args.doc_id)
        config = index.config
        index.config = config.with_overrides(rerank.OFF)  # the same index, searched without the reranker
        try:
            result = ev.evaluate(index.search, questions, modes, doc_key=args.doc_id)
        finally:
            index.config = config
        result["rerank"] = {mode: reranked[mode] for mode in modes}
    result["search"] = {key: index.config[f"search.{key}"] for key in ("mode", "k", "threshold", "collapse")}
    result["search"]["mode"] = ", ".join(modes)  # the modes measured, not the setting's (each row is one)
    result["search"]["rerank"] = reranker.shown if reranker is not None else "off"
    if reranker is not None:  # searches that kept the fused order: their figures are not the reranker's
        result["rerank_failed"] = reranker.failures
    return result
