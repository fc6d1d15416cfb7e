"""`mdrag mcp` and `mdrag knowledge`: docsets for AI assistants."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.errors import ConfigError, MdragError
from mdrag.frontends.cli.indexing import _IndexBar
from mdrag.frontends.cli.output import safe_text
from mdrag.frontends.cli.parser import overrides, setting_flag

if TYPE_CHECKING:
    from mdrag.config import Config
    from mdrag.frontends.cli.parser import Commands
    from mdrag.knowledge.model import Docset

_EXAMPLE = "example: mdrag knowledge init react   |   mdrag knowledge refresh   |   mdrag knowledge status"


def register(commands: Commands) -> None:
    """Declare `mdrag mcp` and `mdrag knowledge` (with its actions: init, refresh, status)."""
    p = commands.add_parser(
        "mcp",
        help="run the MCP server for AI assistants (stdio, or HTTP)",
        epilog="example: mdrag mcp --index notes   (your index made by `mdrag index ~/notes --index notes`, from any "
        "folder) | mdrag mcp --project ~/code/app   (that project's docsets) | mdrag mcp   (the docsets of the "
        "project around the current folder); over HTTP: add --http (then point the client at "
        "http://127.0.0.1:8766/mcp). docs/mcp.md has each client's configuration",
    )
    p.add_argument(
        "--index",
        dest="serve_indexes",
        action="append",
        default=[],
        metavar="NAME",
        help="serve this index made by `mdrag index` (repeat for several), kept current while the server runs: "
        "files that change in its folders are indexed; works from any folder, no project needed",
    )
    p.add_argument(
        "--project",
        metavar="DIR",
        help="serve the docsets of the project in DIR (its .knowledge/config.yaml), wherever the server is "
        "started (default: $MDRAG_PROJECT; without either, the project around the current folder)",
    )
    setting_flag(p, "store.backend")
    p.add_argument(
        "--http",
        action="store_true",
        help="serve the tools over MCP's streamable HTTP transport (at /mcp) instead of stdin/stdout; several "
        "clients may connect at once",
    )
    for key in ("server.host", "mcp.port", "server.token", "server.allowed_origins"):
        setting_flag(p, key)
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")
    p.set_defaults(run=_mcp)

    p = commands.add_parser("knowledge", help="manage docsets (.knowledge/config.yaml)", epilog=_EXAMPLE)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    for name, text in (
        ("init", "download a docset's web sources and build its index"),
        ("refresh", "update web sources and indexes (all docsets, or one)"),
        ("status", "show each docset: when each web source was last updated, or its folder filled by hand"),
    ):
        kp = actions.add_parser(name, help=text, epilog=_EXAMPLE)
        if name == "init":
            kp.add_argument("docset", help="the docset id from .knowledge/config.yaml")
        elif name == "refresh":
            kp.add_argument("docset", nargs="?", help="only this docset")
        kp.add_argument("--json", action="store_true", help="print the result as JSON")
        kp.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
        kp.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
        setting_flag(kp, "store.backend")
    p.set_defaults(run=_knowledge)


def docset_settings(docset: str, config: Config) -> Config:
    """The settings of the index of ``docset`` (an id or alias of ./.knowledge/config.yaml): `--docset` of
    `mdrag search`, `get` and `status`. ConfigError when that index has not been built yet."""
    from mdrag import knowledge as k
    from mdrag.knowledge.docsets import docset_config

    kb = k.KnowledgeBase(allowed_outside=config["knowledge.allowed_paths"])
    ds = kb.resolve(docset)
    settings = docset_config(ds.id, kb.config().root.parent, config)
    if not settings.manifest_path().exists():
        raise ConfigError(f"docset {ds.id!r} has no index yet: run `mdrag knowledge init {ds.id}` to build it")
    return settings


_HTTP_ONLY = {"server.host": "--host", "mcp.port": "--port", "server.token": "--token"}  # flags of --http


def _mcp(args: argparse.Namespace) -> int:
    """`mdrag mcp`: the MCP server, over stdin/stdout or (--http) HTTP."""
    from mdrag.config import load_config

    config = load_config(overrides(args))
    project = _project(args.project)
    indexes = [_index_name(n) for n in args.serve_indexes]
    if not args.http:
        given = [flag for key, flag in _HTTP_ONLY.items() if getattr(args, key) is not None]
        given += ["--allow-origin"] if getattr(args, "server.allowed_origins") else []
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise ConfigError(f"{', '.join(given)} only {verb} to the MCP server over HTTP: add --http")
        from mdrag.frontends.mcp import run_stdio

        run_stdio(config=config, indexes=indexes, project=project)
        return 0
    from mdrag.frontends.mcp.http import MCPHTTPServer

    server = MCPHTTPServer(config=config, indexes=indexes, project=project)
    print(f"mdrag: MCP server on {server.url} (streamable HTTP); Ctrl+C stops it", file=sys.stderr, flush=True)
    server.run()
    print("mdrag: MCP server stopped", file=sys.stderr, flush=True)
    return 0


def _project(flag: str | None) -> Path | None:
    """The project folder `mdrag mcp` serves: --project, else $MDRAG_PROJECT, else None (found from the current
    folder). It must exist: the server would otherwise answer every call with an error."""
    import os

    given = flag if flag is not None else os.environ.get("MDRAG_PROJECT") or None
    if given is None:
        return None
    folder = Path(given).expanduser()
    if not folder.is_dir():
        source = "--project" if flag is not None else "MDRAG_PROJECT"
        raise ConfigError(f"{source} {given}: no such folder; give the folder that holds .knowledge/config.yaml")
    return folder.resolve()


def _index_name(name: str) -> str:
    """An index name of --index, checked as the `index` setting is."""
    from mdrag.config import load_config

    try:
        return str(load_config({"index": name})["index"])
    except ConfigError as e:
        raise ConfigError(f"--index {name}: {e}") from None


def _knowledge(args: argparse.Namespace) -> int:
    """`mdrag knowledge init | refresh | status`."""
    from mdrag import knowledge as k
    from mdrag.config import load_config

    config = load_config(overrides(args))
    kb = k.KnowledgeBase(allowed_outside=config["knowledge.allowed_paths"])

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"mdrag: {message}", file=sys.stderr, flush=True)

    if args.action == "status":
        rows = k.status(kb)
        if args.json:
            print(json.dumps(rows, indent=2))
        elif not rows:
            print(f"no docsets in {kb.config().path}")
        for row in [] if args.json else rows:
            print(_status_lines(row))
        return 0
    named = args.docset is not None  # `init` always names one
    chosen = [kb.resolve(args.docset)] if named else list(kb.config().docsets)
    loaded = {d.id: k.init_docset(kb, d.id, progress) for d in chosen if d.web_sources}
    failed = 0
    out: dict[str, Any] = {}
    for d in chosen:
        sources = loaded.get(d.id, [])  # none: the docset's folder is filled by hand
        for s in sources:
            if not s.ok:
                failed += 1
            if not args.json:
                if s.ok:
                    print(
                        f"{d.id}: {s.url}: {len(s.files)} files ({len(s.added)} added, "
                        f"{len(s.changed)} changed, {len(s.removed)} removed)"
                    )
                else:
                    print(f"{d.id}: {s.url}: failed: {s.error}")
                if s.warning:
                    print(f"{d.id}: {s.url}: warning: {s.warning}")
        if sources and not any(s.ok for s in sources) and not Path(d.local_path).is_dir():
            again = f"mdrag knowledge {args.action} {d.id if named else ''}".strip()
            indexed: dict[str, Any] = {
                "note": f"no source loaded, so its folder {d.local_path} does not exist yet: fix what the error "
                f"above says, then run `{again}` again"
            }
        else:
            quiet = args.quiet or args.json
            indexed = _index_docset(d, kb.config().root.parent, config, progress=not quiet, named=named)
        failed += "error" in indexed
        out[d.id] = {"sources": [s.__dict__ for s in sources], **indexed}
        if not args.json:
            if "index" in indexed:
                print(f"{d.id}: {_index_line(indexed['index'])}")
            else:
                print(f"{d.id}: index not updated: {indexed.get('error') or indexed['note']}")
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    return 1 if failed else 0


def _status_lines(row: dict[str, Any]) -> str:
    """What `mdrag knowledge status` says about one web source: when it loaded, its files (and those no
    parser reads), and why its last load failed, if it did; or about a docset with no web sources: its
    folder and the files there."""
    docset = row.get("id")
    failed = row.get("last_error")
    last = row.get("last_fetched") or ("never" if failed else f"never (run `mdrag knowledge init {docset}`)")
    files = f"files: {row.get('files', 0)}"
    kinds = row.get("unsearchable") or {}
    if kinds:
        listed = ", ".join(f"{ext} {n}" for ext, n in kinds.items())
        files += f" ({sum(kinds.values())} with no parser, which the `search` tool cannot find: {listed})"
    if row.get("url") is None:  # no web sources: the folder is filled by hand
        text = f"{docset}: local folder {row.get('local_path')} (no web sources)\n    "
        if not row.get("folder_exists"):
            return safe_text(text + "the folder does not exist: create it and put the documentation there")
        return safe_text(text + files)
    text = f"{docset}: {row.get('url')}\n    last updated: {last}; {files}"
    if row.get("skipped"):
        text += f"\n    {len(row['skipped'])} pages not kept by the last crawl (each with its reason: --json)"
    if failed:
        action = "refresh" if row.get("last_fetched") else "init"
        text += (
            f"\n    the last load failed ({row.get('failed_at')}): {failed}\n"
            f"    fix that, then run `mdrag knowledge {action} {docset}`"
        )
    return safe_text(text)


def _index_docset(d: Docset, project: Path, config: Config, progress: bool, named: bool) -> dict[str, Any]:
    """Build or update the project's docset's index, the one `mdrag mcp` searches.

    Returns {"index": its summary}, {"error": why not} (a failure), or {"note": why
    not}: a docset with no folder yet that the command did not name.
    """
    from mdrag.errors import StoreInUseError
    from mdrag.knowledge.docsets import docset_folder, docset_index, update_docset_index

    try:
        docset_folder(d)
    except MdragError as e:
        return {"error" if named else "note": str(e)}
    try:
        with docset_index(d.id, project, config) as index, _IndexBar(shown=progress) as bar:
            summary = update_docset_index(index, d, progress=bar)
    except StoreInUseError as e:
        return {"error": f"{e} If `mdrag mcp` is running, it updates the docset's index itself."}
    except MdragError as e:
        return {"error": str(e)}
    return {"index": {"name": index.name, **summary.to_dict()}}


def _index_line(s: dict[str, Any]) -> str:
    return (
        f"index {s['name']}: files {s['added']} added, {s['modified']} changed, {s['deleted']} removed; "
        f"{s['chunks_total']} chunks ({s['chunks_embedded']} embedded) in {s['seconds']:.1f} s"
    )
