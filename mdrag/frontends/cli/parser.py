"""The command line's parser, and the flags its commands share: each command module declares its own
commands with them (its ``register``), beside the code that runs them.

A flag that sets a setting is made from the setting's declaration (:mod:`mdrag.settings`): its
type, choices, default and help are written there once.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

if TYPE_CHECKING:
    from typing import TypeAlias

    #: Where a command module adds its commands: ``add_parser(name, ...)``, then ``set_defaults(run=...)``
    #: with the function that runs the command (``args`` in, an exit code out).
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

_N = TypeVar("_N")  # the namespace a caller passes to parse_args

SERVER_HELP = (
    "ask this `mdrag serve` (ws://HOST:PORT, or the http:// address it prints) instead of opening the local "
    "index; without it, the server on "
    "server.port is asked only while it owns the local index"
)

#: The flags that set a setting, by that setting, with their metavar: their type, choices, default and help
#: come from the setting's declaration (mdrag/settings.py), and the value lands in ``args`` under its key. A
#: store backend's setting that declares a flag (``flag``, ``metavar``) has it too: :func:`setting_flags`.
SETTING_FLAGS: dict[str, tuple[str, str | None]] = {
    "index": ("--index", "NAME"),
    "store.backend": ("--store", None),
    "chunk.size": ("--chunk-size", "N"),
    "chunk.overlap": ("--chunk-overlap", "N"),
    "embedding.precision": ("--precision", None),
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

RERANK_FLAGS = ("rerank.url", "rerank.path", "rerank.model", "rerank.top_n")  # on `search` and `eval`


def setting_flags() -> dict[str, tuple[str, str | None]]:
    """:data:`SETTING_FLAGS`, and the flags that store backends' settings declare, by setting."""
    from mdrag.settings import FIELDS

    extras = {key: f.json_schema_extra for key, f in FIELDS.items()}
    return {**{key: (e["flag"], e.get("metavar")) for key, e in extras.items() if "flag" in e}, **SETTING_FLAGS}


def backend_flags() -> list[str]:
    """The settings of store backends that declare a flag, in their order (on every command that opens an index)."""
    return [key for key in setting_flags() if key not in SETTING_FLAGS]


def setting_flag(p: argparse.ArgumentParser, key: str) -> None:
    """Add the flag of setting ``key`` (:func:`setting_flags`), made from the setting's declaration."""
    from mdrag.settings import FIELDS, choices, doc_references, shown_default

    flag, metavar = setting_flags()[key]
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


def common_flags(p: argparse.ArgumentParser) -> None:
    """Add the flags most commands share: which index, which store, and how much to log."""
    setting_flag(p, "index")
    for key in backend_flags():  # a store backend's (Milvus: --milvus-uri)
        setting_flag(p, key)
    setting_flag(p, "store.backend")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose error for an option it does not know names the command's usage, and the
    option meant when one is close (``--treshold``: did you mean ``--threshold``?)."""

    # argparse's own overloads, so that the override takes every call the base class takes
    @overload
    def parse_args(self, args: Iterable[str] | None = None, namespace: None = None) -> argparse.Namespace: ...
    @overload
    def parse_args(self, args: Iterable[str] | None, namespace: _N) -> _N: ...
    @overload
    def parse_args(self, *, namespace: _N) -> _N: ...

    def parse_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> Any:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._unknown(parsed, extras)
        return parsed

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's check of a value with choices, naming the one meant when one is close (``serch``)."""
        if action.choices is not None and value not in action.choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in action.choices], n=1, cutoff=0.6)
            if close:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}: did you mean {close[0]!r}?")
        super()._check_value(action, value)

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


def commands_list(parser: argparse.ArgumentParser) -> str:
    """The commands of ``parser``, each with its one-line description, and where to read more."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    width = max(len(c.dest) for c in subs._choices_actions)
    lines = [f"  {c.dest:<{width}}  {c.help}" for c in subs._choices_actions]
    return "\n".join(["commands:", *lines, f"\n`{parser.prog} COMMAND --help` says more of each."])


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings that the command line's flags set (:func:`setting_flags`)."""
    return {key: v for key in setting_flags() if (v := getattr(args, key, None)) is not None}
