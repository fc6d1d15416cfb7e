"""The `mdrag` command line: the only package that knows about argv and exit codes.

Exit codes: 0 ok, 1 error, 2 usage or configuration error, 130 interrupted,
141 stdout's reader went away (as for any Unix tool killed by SIGPIPE).
Progress and logs go to stderr, data to stdout.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from typing import Any

import mdrag
from mdrag import __version__
from mdrag.errors import ConfigError, MdragError
from mdrag.frontends.cli import completion, configuring, evaluating, indexing, knowledge, reading, serving
from mdrag.frontends.cli.output import safe_text, setup_logging
from mdrag.frontends.cli.parser import Parser, commands_list
from mdrag.version import DISTRIBUTION

# Each command is declared in its module, beside the function that runs it (`set_defaults(run=...)`). What a
# command needs beyond that (asyncio, the WebSocket client, the parsers, the index) its function imports:
# `mdrag search` loads nothing `ask`, `serve`, `mcp` or `index` needs.

__all__ = ["agentic_knowledge_main", "agentic_knowledge_mcp_main", "build_parser", "main"]

_EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away


def agentic_knowledge_main() -> int:
    """`agentic-knowledge init | refresh | status`: the spec's command names."""
    return main(["knowledge", *sys.argv[1:]])


def agentic_knowledge_mcp_main() -> int:
    """`agentic-knowledge-mcp`: the spec's MCP server command."""
    return main(["mcp", *sys.argv[1:]])


def main(argv: Sequence[str] | None = None) -> int:
    """The `mdrag` command; ``argv`` None means this process's own arguments (it exits next)."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe is found here, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (`mdrag search ... | head`): stop quietly, as Unix tools do,
        # with the status of a process killed by SIGPIPE. Python's own flush at exit
        # would fail again: stdout now points at /dev/null.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a file (tests capture it)
            pass
        return _EXIT_BROKEN_PIPE
    finally:
        if argv is None:
            # Everything was closed explicitly: spare the exit its full garbage collection
            # over every module loaded (pymilvus, pandas, pyarrow; RESULTS.md, "Figures that were in code comments").
            gc.freeze()


class _Version(argparse.Action):
    """``--version``: the distribution, its version and the package it runs (the index's other ``mdrag`` ships a
    package of that name too), on one line as written: argparse's own action wraps it to the terminal."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help=f"show the distribution ({DISTRIBUTION}), its version and where the package is, and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        sys.stdout.write(f"{DISTRIBUTION} {__version__} (import name mdrag, {os.path.dirname(mdrag.__file__)})\n")
        parser.exit()


class _Mdrag(Parser):
    """The `mdrag` command's own parser: its help names the extensions of the files mdrag reads, as the parser
    registry has them when the help is shown (third-party parsers too); a command that shows no help does not
    load the parsers' entry points for it."""

    def format_help(self) -> str:
        from mdrag.parsers import supported_extensions

        self.description = f"Local-first retrieval over documentation files: {', '.join(supported_extensions())}."
        return super().format_help()


def build_parser() -> Parser:
    """The `mdrag` command's parser: each command module declares its own commands (its ``register``), in
    the order `mdrag --help` lists them."""
    parser = _Mdrag(
        prog="mdrag",
        epilog="Settings: $MDRAG_HOME/config.yaml (default ~/.md-qa), MARKDOWN_QA_* variables, flags.",
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (indexing, reading, serving, evaluating, configuring, knowledge):
        module.register(commands)
    completion.register(commands, parser)
    return parser


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `mdrag`: what it can do, rather than argparse's "arguments are required"
        parser.print_usage(sys.stderr)
        print(safe_text(commands_list(parser)), file=sys.stderr)
        return 2
    setup_logging(args)
    if argv is None and getattr(args, "one_shot", False):
        # A one-shot command (search, get, status) in a process of its own: most of its time imports numpy,
        # faiss and the model's runtime, whose tens of thousands of objects make no garbage to speak of, and
        # the cyclic collector's passes over them were 6% of its CPU time (benchmarks/RESULTS.md, "One-shot
        # search"). The process ends with the command, which frees everything.
        gc.disable()
    try:
        code: int = args.run(args)
        return code
    except ConfigError as e:
        print(safe_text(f"mdrag: configuration error: {e}"), file=sys.stderr)
        return 2
    except MdragError as e:
        print(safe_text(f"mdrag: error: {e}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mdrag: interrupted (the next `mdrag index` repairs the index)", file=sys.stderr)
        return 130
