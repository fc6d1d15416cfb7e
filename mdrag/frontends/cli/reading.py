"""The commands that read: `mdrag search`, `get`, `status` (from the local index or through a server), `eval` and
`config`.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.errors import ConfigError, MdragError
from mdrag.frontends.cli.output import _name, _safe
from mdrag.frontends.cli.parser import _overrides

if TYPE_CHECKING:
    from mdrag.config import Config

log = logging.getLogger("mdrag")


def _server_url(config: Any) -> str:
    host = config["server.host"]
    host = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::", "") else host
    return f"ws://{host}:{config['server.port']}"


def _through_server(config: Any, message: dict[str, Any], why: Exception | None, url: str | None) -> dict[str, Any]:
    """Ask `mdrag serve`: the one at ``url``, or, while it owns the local index (``why``), the configured one."""
    from mdrag.frontends.client import Client, ServerUnavailableError

    url = url or _server_url(config)
    try:
        with Client(url, token=config["server.token"]) as client:
            return client.request(message)
    except ServerUnavailableError:
        if why is None:
            raise
        raise MdragError(f"{why} No mdrag server answers at {url} either.") from why


def _search_message(args: argparse.Namespace) -> dict[str, Any]:
    """The `search` message for the server: the query, and the options the command line sets (the
    server's settings apply to the others)."""
    msg: dict[str, Any] = {"type": "search", "query": args.query}
    options = {key: getattr(args, f"search.{key}") for key in ("k", "threshold", "mode", "collapse")}
    msg.update((key, value) for key, value in options.items() if value is not None)
    filters = _filters(args)
    if filters:
        msg["filters"] = filters
    if args.index is not None:
        msg["index"] = args.index
    return msg


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    if args.path:
        filters["path_prefix"] = args.path
    if args.tag:
        filters["tags"] = args.tag
    return filters


def _cmd_search(args: argparse.Namespace, config: Any, index: Any | None) -> int:
    """`mdrag search`: from the local index, or through the server (``index`` None: --server was given)."""
    from mdrag.errors import StoreInUseError
    from mdrag.ingest.manifest import Manifest
    from mdrag.retrieval.shown import distinct_names, why_nothing

    roots: list[str] = []
    shared: frozenset[str] = frozenset()
    if index is None:
        results = _through_server(config, _search_message(args), None, args.server)["results"]
    else:
        try:
            found = index.search(args.query, filters=_filters(args) or None)
            roots, shared = index.shared_names
            # ref: what `mdrag get` takes; the absolute path for a relative one that files of two folders share
            results = [{**r.to_dict(), "ref": r.path if r.rel_path in shared else r.rel_path} for r in found]
        except StoreInUseError as e:
            results = _through_server(config, _search_message(args), e, args.server)["results"]
        if not results and (why := why_nothing(Manifest.load(index.manifest_path), index.name, _filters(args))):
            raise MdragError(why)
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
        return 0
    names = distinct_names([(r["path"], r["rel_path"]) for r in results], roots, shared)
    if not results:
        print(
            "no results: no chunk of the files the filters let through is above the threshold "
            "(try other words, or --threshold 0; check --path and --tag)"
            if _filters(args)
            else "no results above the threshold (try --threshold 0, or other words)"
        )
    for i, (r, name) in enumerate(zip(results, names, strict=True), 1):
        where = _name(name) + (f" p.{r['page']}" if r["page"] else "")
        where += f":{r['line_start']}" if r["line_start"] else ""
        reranked = f" (rerank {r['rerank_score']:.3f})" if r.get("rerank_score") is not None else ""
        print(f"{i:2}. {r['score']:.3f}{reranked}  {where}" + (f"  [{_name(r['heading'])}]" if r["heading"] else ""))
        snippet = " ".join(_safe(r["text"]).split())
        print(f"    {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
    return 0


def _cmd_get(args: argparse.Namespace, index: Any) -> int:
    """`mdrag get`: documents of the local index (or parts), read from disk; several under a header each."""
    fetched = index.get(args.refs)
    if args.json:
        print(json.dumps(fetched.to_dict(), indent=2, ensure_ascii=False))
        return 0
    headers = len(fetched.parts) > 1 or len(args.refs) > 1
    for part in fetched.parts:
        if part.changed:
            log.warning("%s changed since it was indexed: run `mdrag index` to update the index", part.rel_path)
        if headers:
            where = f"lines {part.line_start}-{part.line_end} of {part.lines}"
            print(f"==> {_name(part.rel_path)} ({where}) <==")
        print(_safe(part.text))
    for left_out in fetched.omitted:
        log.warning("%s left out: %s", left_out["rel_path"] or left_out["ref"], left_out["reason"])
    return 0


def _cmd_status(args: argparse.Namespace, config: Any, index: Any | None) -> int:
    """`mdrag status`: of the local index, or of the server's (``index`` None: --server was given)."""
    from mdrag.errors import StoreInUseError

    if index is None:
        return _served_status(args, config, None)
    try:
        st = index.status(verify=args.verify).to_dict()
    except StoreInUseError as e:
        return _served_status(args, config, e)
    if args.json:
        print(json.dumps(st, indent=2))
        return 1 if st["damaged"] or st["manifest_lost"] else 0
    last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st["last_indexed"])) if st["last_indexed"] else "never"
    unknown = "unknown (the manifest is lost)" if st["manifest_lost"] else None
    print(f"index:        {st['index']}")
    empty = "" if st["exists"] or st["damaged"] else "  (empty: run `mdrag index DIR`)"
    print(f"store:        {st['backend']}, {st['store_uri']}{empty}")
    print(f"model:        {st['model'].get('model')} ({st['model'].get('dimension')}-d)")
    print(f"folders:      {', '.join(st['folders']) or unknown or '-'}")
    print(f"files:        {unknown or st['files']}")
    print(f"chunks:       {st['chunks']}" + ("  (as its manifest lists them)" if st["model_mismatch"] else ""))
    print(
        f"last indexed: {unknown or last}"
        + ("  (interrupted: the next `mdrag index` repairs it)" if st["interrupted"] else "")
    )
    if st["model_mismatch"]:
        checked = "; --verify checked nothing: the store opens only with that embedder" if args.verify else ""
        print(f"note:         {st['model_mismatch']}{checked}")
    if st["manifest_lost"]:
        lost = "is unreadable or lists no folder" if Path(st["manifest"]).exists() else "is missing"
        print(
            f"note:         the manifest {st['manifest']} {lost}, though the store holds {st['chunks']} "
            "chunks: `mdrag index` takes the index's folders back from the store and writes the manifest "
            "again (its stored vectors are reused)"
        )
    if st["verified"] is not None:
        what = "; ".join(st["verified"]["checked"]) or "nothing (no index store to read)"
        print(f"verified:     {what}, in {st['verified']['seconds']:.2f} s")
    if st["damaged"]:
        print(f"damaged:      {st['damaged']}: run `mdrag index` to repair it")
    return 1 if st["damaged"] or st["manifest_lost"] else 0


def _served_status(args: argparse.Namespace, config: Any, why: Exception | None) -> int:
    reply = _through_server(config, {"type": "status"}, why, args.server)
    st = {"served_by": args.server or _server_url(config), **reply}
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print(
            f"index {st['index']} is served by {st['served_by']}: {st['state']}, "
            f"{st['files']} files, {st['chunks']} chunks"
        )
    return 0


def _cmd_eval(args: argparse.Namespace, index: Any) -> int:

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


def _evaluate(args: argparse.Namespace, index: Any, questions: list[Any], modes: tuple[str, ...]) -> dict[str, Any]:
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


def _cmd_config(args: argparse.Namespace) -> int:
    from mdrag.config import load_config
    from mdrag.knowledge.config import keys_table
    from mdrag.settings import settings_table

    if args.markdown:  # the generated tables of docs/configuration.md and docs/mcp.md, between the comments there
        for what, source, table in (
            ("settings table", "mdrag/settings.py", settings_table()),
            (".knowledge/config.yaml keys", "mdrag/knowledge/config.py", keys_table()),
        ):
            print(f"<!-- {what}: made by `mdrag config --markdown` from {source}; edit it there -->")
            print(f"{table}<!-- end of {what} -->\n")
        return 0
    config = load_config(_overrides(args))
    rows = config.explain()
    if args.json:
        print(
            json.dumps({"home": str(config.home), "file": config.file and str(config.file), "settings": rows}, indent=2)
        )
        return 0
    print(f"# config file: {config.file or f'none ({config.home}/config.yaml or config.toml)'}")
    width = max(map(len, rows))
    for key, row in rows.items():
        print(f"{key:<{width}}  {json.dumps(row['value'])}  # {_origin(row, rows, config)}")
    return 0


def _origin(row: dict[str, Any], rows: dict[str, dict[str, Any]], config: Config) -> str:
    """Where a setting's value in effect came from, as `mdrag config` prints it after its value."""
    if row["source"] == "inherited":
        parent = rows[row["from"]]
        return f"from {row['from']}" + ("" if parent["source"] == "default" else f" ({_origin(parent, rows, config)})")
    if "depends_on" in row:
        return f"default for {row['depends_on']} {config[row['depends_on']]}"
    return str(row.get("variable") or row["source"])
