"""The command line's parser: its commands, their flags, and the settings the flags set.

A flag that sets a setting is made from the setting's declaration (:mod:`mdrag.settings`): its
type, choices, default and help are written there once.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence
from typing import Any, NoReturn

from mdrag import __version__

_SERVER_HELP = (
    "ask this `mdrag serve` (ws://HOST:PORT, or the http:// address it prints) instead of opening the local "
    "index; without it, the server on "
    "server.port is asked only while it owns the local index"
)

EXAMPLES = {
    "index": "example: mdrag index ./docs ./notes   (later, plain `mdrag index` updates both; only changes are "
    "re-embedded)",
    "remove": "example: mdrag remove ./notes   (its chunks leave the index; the files stay on disk)",
    "search": 'example: mdrag search "how do I define a custom output format" -k 5 --json',
    "status": "example: mdrag status --json",
    "get": "example: mdrag get docs/config.md:10-40   |   mdrag get 'docs/config.md#Menus'   |   "
    "mdrag get 'docs/api/*.md' --json",
    "serve": 'example: mdrag serve ./docs --port 8765   (then, elsewhere: mdrag ask "how do I ...?")',
    "ask": 'example: mdrag ask "How do I create a custom shortcode?"   (no question: an interactive prompt, one '
    "conversation: follow-up questions are asked with the earlier ones; /new starts a new conversation)",
    "mcp": "example: register `mdrag mcp` (or `agentic-knowledge-mcp`) as a stdio server in your MCP client; "
    "over HTTP: mdrag mcp --http   (then point the client at http://127.0.0.1:8766/mcp)",
    "knowledge": "example: mdrag knowledge init react   |   mdrag knowledge refresh   |   mdrag knowledge status",
    "config": "example: mdrag config --json   (each setting's value and where it came from)",
    "eval": "example: mdrag eval benchmarks/data/hugo_qa.jsonl --index hugo   "
    "(BEIR: mdrag eval --queries queries.tsv --qrels qrels/test.tsv --doc-id stem; with and without a "
    "reranker: --rerank --rerank-url http://127.0.0.1:8080/v1/rerank)",
}


#: The flags that set a setting, by that setting, with their metavar: their type, choices, default and help
#: come from the setting's declaration (mdrag/settings.py), and the value lands in ``args`` under its key.
_SETTING_FLAGS: dict[str, tuple[str, str | None]] = {
    "index": ("--index", "NAME"),
    "milvus_uri": ("--milvus-uri", "URI"),
    "store.backend": ("--store", None),
    "chunk.size": ("--chunk-size", "N"),
    "chunk.overlap": ("--chunk-overlap", "N"),
    "search.k": ("-k", "N"),
    "search.threshold": ("--threshold", "S"),
    "search.mode": ("--mode", None),
    "search.collapse": ("--collapse", None),
    "server.host": ("--host", None),
    "server.port": ("--port", None),
    "server.reload_interval": ("--reload-interval", "S"),
    "server.token": ("--token", None),
    "server.allowed_origins": ("--allow-origin", "ORIGIN"),
    "mcp.port": ("--port", None),
    "rerank.url": ("--rerank-url", "URL"),
    "rerank.path": ("--rerank-path", "DIR"),
    "rerank.model": ("--rerank-model", "NAME"),
    "rerank.top_n": ("--rerank-top-n", "N"),
}

_RERANK_FLAGS = ("rerank.url", "rerank.path", "rerank.model", "rerank.top_n")  # on `search` and `eval`


def _setting_flag(p: argparse.ArgumentParser, key: str) -> None:
    """Add the flag of setting ``key`` (:data:`_SETTING_FLAGS`), made from the setting's declaration."""
    from mdrag.settings import FIELDS, choices, doc_references, shown_default

    flag, metavar = _SETTING_FLAGS[key]
    field = FIELDS[key]
    values = choices(key)
    metavar = metavar or (None if values else flag.lstrip("-").upper())  # choices show themselves
    options: dict[str, Any] = {"dest": key, "metavar": metavar, "choices": values}
    text = doc_references(field.description or "", markdown=False)
    if field.annotation is int:
        options["type"] = int
    elif field.annotation == int | float:
        options["type"] = float
    elif field.annotation == list[str]:
        options["action"] = "append"
        text += " (repeatable)"
    text = f"{text} (default: {shown_default(key)}; setting: {key})"
    p.add_argument(flag, help=text.replace("`", "").replace("%", "%%"), **options)


def _common(p: argparse.ArgumentParser) -> None:
    _setting_flag(p, "index")
    _setting_flag(p, "milvus_uri")
    _setting_flag(p, "store.backend")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose error for an option it does not know names the command's usage, and the
    option meant when one is close (``--treshold``: did you mean ``--threshold``?)."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._unknown(parsed, extras)
        return parsed

    def _unknown(self, parsed: argparse.Namespace, extras: list[str]) -> NoReturn:
        """Exit 2 with the usage of the (sub)command that was given ``extras``, and the option meant."""
        command: argparse.ArgumentParser = self
        for dest in ("command", "action"):  # `mdrag knowledge init`: the parser of `init`
            subs = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
            if subs and getattr(parsed, dest, None) in subs[0].choices:
                command = subs[0].choices[getattr(parsed, dest)]
        known = [flag for action in command._actions for flag in action.option_strings if flag.startswith("--")]
        for extra in extras:
            given = extra.split("=", 1)[0]
            close = difflib.get_close_matches(given, known, n=1, cutoff=0.6) if given.startswith("--") else []
            if close:
                command.error(f"unrecognized option {given}: did you mean {close[0]}?")
        command.error(f"unrecognized arguments: {' '.join(extras)}")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mdrag",
        description="Local-first retrieval over Markdown, PDF, DOCX and HTML documentation.",
        epilog="Settings: $MDRAG_HOME/config.yaml (default ~/.md-qa), MARKDOWN_QA_* variables, flags.",
    )
    parser.add_argument("--version", action="version", version=f"mdrag {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("index", help="add or update folders in the index (incrementally)", epilog=EXAMPLES["index"])
    p.add_argument(
        "folders",
        nargs="*",
        metavar="DIR",
        help="folders to add or update; the index's other folders are kept (default: all of the index's "
        "folders; for a new index, setting folders, ./markdown)",
    )
    p.add_argument("--rebuild", action="store_true", help="drop the index and build it again")
    _setting_flag(p, "chunk.size")
    _setting_flag(p, "chunk.overlap")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _common(p)

    p = sub.add_parser("remove", help="take folders out of the index", epilog=EXAMPLES["remove"])
    p.add_argument("folders", nargs="+", metavar="DIR", help="folders of the index to remove (they need not exist)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    _common(p)

    p = sub.add_parser("search", help="search the index", epilog=EXAMPLES["search"])
    p.add_argument("query", help="what to look for, in plain words")
    _setting_flag(p, "search.k")
    _setting_flag(p, "search.threshold")
    p.add_argument(
        "--path",
        metavar="PREFIX",
        help="only files whose path starts with PREFIX: relative to the indexed folder (as results show "
        "it) or absolute; end it with / for a folder (docs/api also matches docs/api-old)",
    )
    p.add_argument("--tag", action="append", metavar="TAG", help="only files with this frontmatter tag (repeatable)")
    _setting_flag(p, "search.mode")
    _setting_flag(p, "search.collapse")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.add_argument("--server", metavar="URL", help=_SERVER_HELP)
    _setting_flag(p, "server.token")
    for key in _RERANK_FLAGS:
        _setting_flag(p, key)
    _common(p)

    p = sub.add_parser("get", help="print documents of the index, or parts of them", epilog=EXAMPLES["get"])
    p.add_argument(
        "refs",
        nargs="+",
        metavar="REF",
        help="a file of the index: its path relative to an indexed folder (as search shows it), its absolute "
        "path, a chunk id from `search --json`, or a glob (docs/api/*.md); PATH:10-40 for lines, PATH#HEADING "
        "for a section, PATH#page=3 for a PDF's page",
    )
    p.add_argument("--json", action="store_true", help="print the documents as JSON")
    _common(p)

    p = sub.add_parser("status", help="show what the index holds", epilog=EXAMPLES["status"])
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument(
        "--verify",
        action="store_true",
        help="check every row of the store against what its last run recorded, not only what is cheap to check",
    )
    p.add_argument("--server", metavar="URL", help=_SERVER_HELP)
    _setting_flag(p, "server.token")
    _common(p)

    p = sub.add_parser("serve", help="run the WebSocket Q&A server", epilog=EXAMPLES["serve"])
    p.add_argument(
        "folders",
        nargs="*",
        metavar="DIR",
        help="folders to add to the index; all of the index's folders are indexed and watched (default: "
        "the index's folders; for a new index, setting folders)",
    )
    for key in ("server.host", "server.port", "server.reload_interval", "server.token", "server.allowed_origins"):
        _setting_flag(p, key)
    _common(p)

    p = sub.add_parser("ask", help="ask the server a question", epilog=EXAMPLES["ask"])
    p.add_argument("question", nargs="?", help="the question; none: interactive prompt")
    p.add_argument(
        "--server",
        metavar="URL",
        help="server address: ws://HOST:PORT, or the http:// address `mdrag serve` prints (default "
        "ws://localhost:PORT from server.port)",
    )
    _setting_flag(p, "server.token")
    _common(p)

    p = sub.add_parser("eval", help="measure retrieval quality on known questions", epilog=EXAMPLES["eval"])
    p.add_argument("questions", nargs="?", help="JSON Lines: question, gold (list of paths)")
    p.add_argument("--queries", help="BEIR queries (JSON Lines or TSV), with --qrels")
    p.add_argument("--qrels", help="BEIR qrels TSV (query-id, corpus-id, score)")
    p.add_argument("--doc-id", choices=["path", "stem"], default="path", help="match gold by path or by file stem")
    p.add_argument("--mode", choices=["dense", "bm25", "hybrid", "all"], default="all", help="ranking mode(s)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument(
        "--rerank",
        action="store_true",
        help="measure with and without the reranker (rerank.url or rerank.path; --rerank-url), side by side",
    )
    for key in _RERANK_FLAGS:
        _setting_flag(p, key)
    _common(p)

    p = sub.add_parser("config", help="show the settings in effect and where each came from", epilog=EXAMPLES["config"])
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument("--markdown", action="store_true", help="print every setting's default and help as a Markdown table")
    _common(p)

    p = sub.add_parser("mcp", help="run the MCP server for AI assistants (stdio, or HTTP)", epilog=EXAMPLES["mcp"])
    _setting_flag(p, "store.backend")
    p.add_argument(
        "--http",
        action="store_true",
        help="serve the tools over MCP's streamable HTTP transport (at /mcp) instead of stdin/stdout; several "
        "clients may connect at once",
    )
    for key in ("server.host", "mcp.port", "server.token", "server.allowed_origins"):
        _setting_flag(p, key)
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")

    p = sub.add_parser("knowledge", help="manage docsets (.knowledge/config.yaml)", epilog=EXAMPLES["knowledge"])
    ks = p.add_subparsers(dest="action", metavar="ACTION")
    ks.required = True
    for name, text in (
        ("init", "download a docset's web sources and build its index"),
        ("refresh", "update web sources and indexes (all docsets, or one)"),
        ("status", "show each docset: when each web source was last updated, or its folder filled by hand"),
    ):
        kp = ks.add_parser(name, help=text, epilog=EXAMPLES["knowledge"])
        if name == "init":
            kp.add_argument("docset", help="the docset id from .knowledge/config.yaml")
        elif name == "refresh":
            kp.add_argument("docset", nargs="?", help="only this docset")
        kp.add_argument("--json", action="store_true", help="print the result as JSON")
        kp.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
        kp.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
        _setting_flag(kp, "store.backend")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings that the command line's flags set (:data:`_SETTING_FLAGS`)."""
    return {key: v for key in _SETTING_FLAGS if (v := getattr(args, key, None)) is not None}
