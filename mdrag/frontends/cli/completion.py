"""`mdrag completion SHELL`: a completion script for bash, zsh or fish, written from the command line's own
parser: its commands, each command's flags, the values of flags with choices, and paths where a command
takes folders (metavar ``DIR``) or files (``FILE``, ``REF``, ``PREFIX``).

Each script holds its tables as the shell's own code (no Python runs at completion time); docs/cli.md says
how to install each.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SHELLS", "register", "script"]

SHELLS = ("bash", "zsh", "fish")
_DIRS, _FILES = "@dirs", "@files"  # what a word completes to, where it is not one of a list of words
_DIR_METAVARS = ("DIR",)
_FILE_METAVARS = ("FILE", "REF", "PREFIX", "PATH")


def register(commands: argparse._SubParsersAction[Any], root: argparse.ArgumentParser) -> None:
    """Declare `mdrag completion`; ``root`` is the parser whose commands it completes."""
    p = commands.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, fish)",
        epilog="example: mdrag completion bash > ~/.local/share/bash-completion/completions/mdrag",
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(run=lambda args: _print(script(root, args.shell)), verbose=0, quiet=False)  # no logging flags


def _print(text: str) -> int:
    sys.stdout.write(text)
    return 0


@dataclass
class _Node:
    """A command (or the top level, or a command's action) as the scripts complete it."""

    path: str  # "" for the top level, "search", "knowledge init"
    help: str = ""  # the one-line description of the command
    subs: dict[str, _Node] = field(default_factory=dict)  # its own commands, by name
    flags: list[str] = field(default_factory=list)  # every option string
    values: dict[str, str] = field(default_factory=dict)  # option string -> what its value completes to
    positional: str = ""  # what its positional arguments complete to ("" nothing)


def _completes(action: argparse.Action) -> str:
    """What ``action``'s value completes to: its choices (space-separated), _DIRS, _FILES, or ""."""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return " ".join(str(c) for c in action.choices)
    metavar = str(action.metavar or "")
    if metavar in _DIR_METAVARS:
        return _DIRS
    return _FILES if metavar in _FILE_METAVARS else ""


def _tree(parser: argparse.ArgumentParser, path: str = "", text: str = "") -> _Node:
    node = _Node(path, text)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                node.subs[name] = _tree(sub, f"{path} {name}".strip(), helps.get(name, ""))
        elif action.option_strings:
            node.flags += action.option_strings
            if action.nargs != 0:
                for flag in action.option_strings:
                    node.values[flag] = _completes(action)
        elif not node.positional:
            node.positional = _completes(action)
    return node


def _nodes(node: _Node) -> list[_Node]:
    return [node, *(n for sub in node.subs.values() for n in _nodes(sub))]


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser``'s program for ``shell`` (one of :data:`SHELLS`)."""
    root = _tree(parser)
    prog = parser.prog
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](root, prog)


def _sh(word: str) -> str:
    """``word`` in single quotes, for any of the three shells."""
    return "'" + word.replace("'", "'\\''") + "'"


def _bash(root: _Node, prog: str) -> str:
    nodes = _nodes(root)
    subs = "".join(f"        {_sh(n.path)}) echo {_sh(' '.join(n.subs))} ;;\n" for n in nodes if n.subs)
    flags = "".join(f"        {_sh(n.path)}) echo {_sh(' '.join(n.flags))} ;;\n" for n in nodes if n.flags)
    values = "".join(
        f"        {_sh(f'{n.path} {flag}')}) echo {_sh(v)} ;;\n" for n in nodes for flag, v in n.values.items()
    )
    positional = "".join(f"        {_sh(n.path)}) echo {_sh(n.positional)} ;;\n" for n in nodes if n.positional)
    fn = f"_{prog}_complete"
    return f"""# bash completion for {prog} (written by `{prog} completion bash`)
{fn}_subs() {{
    case "$1" in
{subs}    esac
}}
{fn}_flags() {{
    case "$1" in
{flags}    esac
}}
{fn}_values() {{
    case "$1 $2" in
{values}        *) return 1 ;;
    esac
}}
{fn}_positional() {{
    case "$1" in
{positional}    esac
}}
{fn}_words() {{
    # COMPREPLY: the words of "$1" (a list, {_DIRS} or {_FILES}) that start with "$2"
    local IFS=$'\\n'
    case "$1" in
        {_DIRS}) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- "$2")) ;;
        {_FILES}) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$2")) ;;
        *) IFS=' '; COMPREPLY=($(compgen -W "$1" -- "$2")) ;;
    esac
}}
{fn}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" node="" word i value="" expects=0
    COMPREPLY=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        if [ "$expects" = 1 ]; then expects=0; continue; fi
        case "$word" in
            -*=*) ;;
            -*) value="$({fn}_values "$node" "$word")" && expects=1 ;;
            *) if [[ " $({fn}_subs "$node") " == *" $word "* ]]; then node="${{node:+$node }}$word"; fi ;;
        esac
    done
    if [ "$expects" = 1 ]; then
        [ -n "$value" ] && {fn}_words "$value" "$cur"
    elif [[ "$cur" == -* ]]; then
        {fn}_words "$({fn}_flags "$node")" "$cur"
    elif [ -n "$({fn}_subs "$node")" ]; then
        {fn}_words "$({fn}_subs "$node")" "$cur"
    else
        value="$({fn}_positional "$node")"
        [ -n "$value" ] && {fn}_words "$value" "$cur"
    fi
    return 0
}}
complete -F {fn} {prog}
"""


def _zsh_escape(text: str) -> str:
    """``text`` inside an _arguments or _describe spec: its brackets and colons escaped."""
    return text.replace("\\", "\\\\").replace(":", "\\:").replace("[", "\\[").replace("]", "\\]")


def _zsh_action(value: str) -> str:
    if value == _DIRS:
        return "_files -/"
    if value == _FILES:
        return "_files"
    return f"({value})" if value else " "


def _zsh_specs(node: _Node) -> list[str]:
    specs = []
    for flag in node.flags:
        value = node.values.get(flag)
        specs.append(f"*{flag}" if value is None else f"*{flag}:value:{_zsh_action(value)}")
    if node.positional:
        specs.append(f"*:argument:{_zsh_action(node.positional)}")
    return specs


def _zsh(root: _Node, prog: str) -> str:
    lines = [f"#compdef {prog}", f"# zsh completion for {prog} (written by `{prog} completion zsh`)", ""]
    for node in _nodes(root):
        fn = "_" + "_".join([prog, *node.path.split()])
        lines.append(f"{fn}() {{")
        if node.subs:
            described = " ".join(_sh(f"{name}:{_zsh_escape(sub.help)}") for name, sub in node.subs.items())
            specs = " ".join(_sh(s) for s in _zsh_specs(node) if not s.startswith("*:"))
            lines += [
                "    local curcontext=$curcontext state line",
                "    local -a commands",
                f"    commands=({described})",
                f"    _arguments -C {specs} ': :->command' '*:: :->argument'",
                "    case $state in",
                "        command) _describe -t commands command commands ;;",
                "        argument)",
                "            case $words[1] in",
            ]
            lines += [f"                {name}) {fn}_{name} ;;" for name in node.subs]
            lines += ["            esac ;;", "    esac", "}"]
        else:
            lines += [f"    _arguments {' '.join(_sh(s) for s in _zsh_specs(node))}", "}"]
    lines += ["", f'_{prog} "$@"', ""]
    return "\n".join(lines)


def _fish_option(flag: str) -> str:
    return f"-l {_sh(flag[2:])}" if flag.startswith("--") else f"-s {_sh(flag[1:])}"


def _fish(root: _Node, prog: str) -> str:
    lines = [f"# fish completion for {prog} (written by `{prog} completion fish`)", f"complete -c {prog} -f"]
    for node in _nodes(root):
        words = node.path.split()
        if not words:
            condition = "__fish_use_subcommand"
        else:
            parent = " ".join(words[:-1])
            condition = f"__fish_seen_subcommand_from {words[-1]}"
            if parent:
                condition = f"__fish_seen_subcommand_from {parent}; and {condition}"
            if node.subs:
                condition += f"; and not __fish_seen_subcommand_from {' '.join(node.subs)}"
        for name, sub in node.subs.items():
            lines.append(f"complete -c {prog} -n {_sh(condition)} -a {_sh(name)} -d {_sh(sub.help)}")
        for flag in node.flags:
            value = node.values.get(flag)
            how = ""
            if value == _DIRS:
                how = " -r -a '(__fish_complete_directories)'"
            elif value == _FILES:
                how = " -r -F"
            elif value:
                how = f" -x -a {_sh(value)}"
            elif value is not None:
                how = " -x"
            lines.append(f"complete -c {prog} -n {_sh(condition)} {_fish_option(flag)}{how}")
        if node.positional and not node.subs:
            if node.positional == _DIRS:
                lines.append(f"complete -c {prog} -n {_sh(condition)} -a '(__fish_complete_directories)'")
            elif node.positional == _FILES:
                lines.append(f"complete -c {prog} -n {_sh(condition)} -F")
            else:
                lines.append(f"complete -c {prog} -n {_sh(condition)} -a {_sh(node.positional)}")
    return "\n".join(lines) + "\n"
