"""The commands that read the index: `mdrag search`, `get` and `status` (from the local index, or through a
server)."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.errors import ConfigError, MdragError
from mdrag.frontends.cli.opening import local_index
from mdrag.frontends.cli.output import safe_name, safe_text
from mdrag.frontends.cli.parser import RERANK_FLAGS, SERVER_HELP, common_flags, overrides, setting_flag
from mdrag.pageurls import page_url

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.frontends.cli.parser import Commands
    from mdrag.index import Index

log = logging.getLogger("mdrag")
_HTML_COMMENT = re.compile(r"<!--.*?(-->|$)", re.S)  # not shown in a snippet (`<!-- prettier-ignore -->`)


def register(commands: Commands) -> None:
    """Declare `mdrag search`, `get` and `status`."""
    p = commands.add_parser(
        "search",
        help="search the index",
        epilog='example: mdrag search "how do I define a custom output format" -k 5 --json',
    )
    p.add_argument("query", help="what to look for, in plain words")
    setting_flag(p, "search.k")
    setting_flag(p, "search.threshold")
    p.add_argument(
        "--path",
        metavar="PREFIX",
        help="only files whose path starts with PREFIX: relative to the indexed folder (as results show "
        "it) or absolute; end it with / for a folder (docs/api also matches docs/api-old)",
    )
    p.add_argument("--tag", action="append", metavar="TAG", help="only files with this frontmatter tag (repeatable)")
    setting_flag(p, "search.mode")
    setting_flag(p, "search.collapse")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    _docset_flag(p)
    p.add_argument("--server", metavar="URL", help=SERVER_HELP)
    setting_flag(p, "server.token")
    for key in RERANK_FLAGS:
        setting_flag(p, key)
    common_flags(p)
    p.set_defaults(run=_search, one_shot=True)

    p = commands.add_parser(
        "get",
        help="print documents of the index, or parts of them",
        epilog="example: mdrag get docs/config.md:10-40   |   mdrag get 'docs/config.md#Menus'   |   "
        "mdrag get 'docs/api/*.md' --json",
    )
    p.add_argument(
        "refs",
        nargs="+",
        metavar="REF",
        help="a file of the index: its path relative to an indexed folder (as search shows it), its absolute "
        "path, a chunk id from `search --json`, or a glob (docs/api/*.md); PATH:10-40 for lines, PATH#HEADING "
        "for a section, PATH#page=3 for a PDF's page",
    )
    p.add_argument("--json", action="store_true", help="print the documents as JSON")
    p.add_argument("--links", action="store_true", help="list each note's links and backlinks (notes vaults)")
    _docset_flag(p)
    common_flags(p)
    p.set_defaults(run=_get, one_shot=True)

    p = commands.add_parser("status", help="show what the index holds", epilog="example: mdrag status --json")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument(
        "--verify",
        action="store_true",
        help="check every row of the store against what its last run recorded, not only what is cheap to check",
    )
    _docset_flag(p)
    p.add_argument("--server", metavar="URL", help=SERVER_HELP)
    setting_flag(p, "server.token")
    common_flags(p)
    p.set_defaults(run=_status, one_shot=True)


def _docset_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--docset",
        metavar="ID",
        help="the index of this docset of the project's .knowledge/config.yaml (its id or an alias; `mdrag "
        "knowledge init ID` builds it) instead of --index",
    )


def _settings(args: argparse.Namespace) -> Config:
    """The settings the flags give; with --docset, those of that docset's index (mdrag.knowledge read only then)."""
    from mdrag.config import load_config

    given = overrides(args)
    config = load_config(given)
    if getattr(args, "docset", None) is None:
        return config
    if "index" in given:
        raise ConfigError("give --docset or --index, not both: a docset has an index of its own")
    if getattr(args, "server", None):
        raise ConfigError("--docset reads the docset's local index: leave out --server")
    from mdrag.frontends.cli.knowledge import docset_settings

    return docset_settings(args.docset, config)


def _search(args: argparse.Namespace) -> int:
    """`mdrag search`: from the local index (its model loading while the rest opens), or through --server."""
    config = _settings(args)
    if args.server:  # that server, never the local index
        return _search_in(args, config, None)
    with local_index(config, query=args.query) as index:
        return _search_in(args, config, index)


def _get(args: argparse.Namespace) -> int:
    """`mdrag get`: from the local index."""
    with local_index(_settings(args)) as index:
        return _get_from(args, index)


def _status(args: argparse.Namespace) -> int:
    """`mdrag status`: of the local index, or through --server."""
    config = _settings(args)
    if args.server:  # that server, never the local index
        return _status_of(args, config, None)
    with local_index(config) as index:
        return _status_of(args, config, index)


def server_url(config: Config) -> str:
    """The address of the `mdrag serve` that ``config`` sets (server.host, server.port), for a client."""
    host = config["server.host"]
    host = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::", "") else host
    return f"ws://{host}:{config['server.port']}"


def _through_server(config: Config, message: dict[str, Any], why: Exception | None, url: str | None) -> dict[str, Any]:
    """Ask `mdrag serve`: the one at ``url``, or, while it owns the local index (``why``), the configured one."""
    from mdrag.frontends.client import Client, ServerUnavailableError

    url = url or server_url(config)
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


def _search_in(args: argparse.Namespace, config: Config, index: Index | None) -> int:
    """`mdrag search`: from the local index, or through the server (``index`` None: --server was given)."""
    from mdrag.errors import StoreInUseError
    from mdrag.ingest.manifest import Manifest
    from mdrag.retrieval.shown import distinct_names, no_results, result_fields, why_nothing

    roots: list[str] = []
    shared: frozenset[str] = frozenset()
    partial: str | None = None  # the results come from part of the files (a first build runs, or was stopped)
    if index is None:
        reply = _through_server(config, _search_message(args), None, args.server)
        partial = (reply.get("partial") or {}).get("message")
    else:
        try:
            found = index.search(args.query, filters=_filters(args) or None)
            part = index.partial()
            partial = part.message() if part is not None else None
            roots, shared = index.shared_names
            threshold = index.config["search.threshold"]
            reply = {
                "results": [result_fields(r, shared) for r in found],
                "note": no_results(threshold, bool(_filters(args))),
            }
        except StoreInUseError as e:
            reply = _through_server(config, _search_message(args), e, args.server)
            partial = (reply.get("partial") or {}).get("message")
        if not reply["results"] and (
            why := why_nothing(Manifest.load(index.manifest_path), index.name, _filters(args))
        ):
            raise MdragError(why)
    results = reply["results"]
    if partial:
        print(f"mdrag: {safe_text(partial)}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
        return 0
    if not results:  # the server's note says the threshold it ran with
        note = reply.get("note") or no_results(None, bool(_filters(args)))
        lower = ", or a lower --threshold" if "search.threshold" in note else ""
        print(note + lower + ("; check --path and --tag" if _filters(args) else ""))
    reranked = any(r.get("rerank_score") is not None for r in results)
    names = distinct_names([(r["path"], r["rel_path"]) for r in results], roots, shared)
    for i, (r, name) in enumerate(zip(results, names, strict=True), 1):
        where = safe_name(name) + (f" p.{r['page']}" if r["page"] else "")
        where += f":{r['line_start']}" if r["line_start"] else ""
        where += f" <{safe_name(r['url'])}>" if r.get("url") else ""
        # a reranked search: the rows past rerank.top_n follow in the fused order, with their fused score
        fused = " (not reranked)" if reranked and r.get("rerank_score") is None else ""
        print(f"{i:2}. {r['score']:.3f}{fused}  {where}" + (f"  [{safe_name(r['heading'])}]" if r["heading"] else ""))
        snippet = " ".join(safe_text(_HTML_COMMENT.sub(" ", r["text"])).split())
        print(f"    {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
        if r.get("copies"):  # files with the same bytes, indexed once
            print("    the same as: " + ", ".join(safe_name(c["ref"]) for c in r["copies"]))
        if r.get("sections"):  # search.per_page: the page's other matching sections, best first
            print("    more of this page: " + "; ".join(_place(s) for s in r["sections"]))
        if r.get("also"):  # pages that repeat a passage of it, kept here once
            print("    also on: " + ", ".join(safe_name(c["ref"]) for c in r["also"]))
    return 0


def _place(section: dict[str, Any]) -> str:
    """Where an attached section is in its page: ``line 8 [Heading]``, ``p.3``..."""
    where = [
        f"p.{section['page']}" if section["page"] else "",
        f"line {section['line_start']}" * bool(section["line_start"]),
    ]
    where.append(f"[{safe_name(section['heading'])}]" if section["heading"] else "")
    return " ".join(w for w in where if w) or "another section"


def _get_from(args: argparse.Namespace, index: Index) -> int:
    """`mdrag get`: documents of the local index (or parts), read from disk; several under a header each."""
    fetched = index.get(args.refs, links=args.links)
    urls = [page_url(part.path, part.rel_path) for part in fetched.parts]  # website pages: where they came from
    if args.json:
        out = fetched.to_dict()
        for doc, url in zip(out["documents"], urls, strict=True):
            if url:
                doc["url"] = url
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    headers = len(fetched.parts) > 1 or len(args.refs) > 1
    for part, url in zip(fetched.parts, urls, strict=True):
        if part.changed:
            log.warning("%s changed since it was indexed: run `mdrag index` to update the index", part.rel_path)
        if headers or url or args.links:  # a crawled page's URL is shown even for one part: it is what to cite
            where = f"lines {part.line_start}-{part.line_end} of {part.lines}"
            print(f"==> {safe_name(part.rel_path)}{f' <{safe_name(url)}>' if url else ''} ({where}) <==")
        if args.links:
            for link in part.links or []:
                print(f"links to    {safe_text(link['rel_path'] or str(link['note']) + ' (no such note)')}")
            for source in part.backlinks or []:
                print(f"linked from {safe_text(source)}")
            continue
        print(safe_text(part.text))
    for left_out in fetched.omitted:
        log.warning("%s left out: %s", left_out["rel_path"] or left_out["ref"], left_out["reason"])
    return 0


def _status_of(args: argparse.Namespace, config: Config, index: Index | None) -> int:
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
    unfinished = "the last update failed or was interrupted, or the manifest was edited"
    print(
        f"last indexed: {unknown or last}"
        + (f"  ({unfinished}: the next `mdrag index` repairs it)" if st["interrupted"] else "")
    )
    if st["indexing"]:  # another process (or a server) holds the writers' lock and indexes
        print(f"now:          {st['indexing']['message']}")
    if st["partial"]:
        p = st["partial"]
        print(
            f"partial:      searches answer from {p['files_done']} of the {p['files_total']} files of its first build"
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


def _served_status(args: argparse.Namespace, config: Config, why: Exception | None) -> int:
    reply = _through_server(config, {"type": "status"}, why, args.server)
    st = {"served_by": args.server or server_url(config), **reply}
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print(
            f"index {st['index']} is served by {st['served_by']}: {st['state']}, "
            f"{st['files']} files, {st['chunks']} chunks"
        )
    return 0
