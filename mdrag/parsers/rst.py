"""reStructuredText parser: docutils reads the structure, the source lines are the text.

docutils parses the file (no Sphinx: its directives and roles are unknown
here), with reports silenced and, for safety, no file inclusion and no raw
passthrough. Sections become headings (level = nesting depth, the title's
line is the heading line); each top-level body element is sliced from the
source lines, as the Markdown parser slices its blocks, so that a chunk's
``line_start..line_end`` holds its text:

- literal blocks (``::``), doctest blocks and ``code``/``code-block``/
  ``sourcecode`` directives are code blocks (the language from the
  directive's argument, else from the last ``.. highlight::``);
- comments, targets, substitution definitions, transitions and the
  directives listed in ``_DROPPED`` (navigation, inclusion, raw output) carry
  no text;
- any other directive, Sphinx's ones (``versionadded``, ``py:function``...)
  included, is kept as its source text; an unknown role (``:ref:`...```)
  stays in the text as written, and is read as its title in a heading.

docutils' own line numbers are exact for most elements but point past the
start of some directives and comments; :func:`_start` finds the real first
line from them.

docutils takes more time and memory per line the longer the file (a 5 MB
manual needed 2 GB), so a file over ``_SPLIT_CHARS`` is read in parts of
about ``_PART_CHARS``, each cut just before a section title and parsed on
its own (:func:`_parts`): a part never holds a title above its first one, so
its levels are the file's less a constant, and its line numbers are offset
by the lines before it. A file nested deeper than docutils can recurse (a
list inside a list, 200 deep) is a ParseError that says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document

from mdrag.errors import ParseError
from mdrag.parsers.sections import SectionBuilder
from mdrag.parsers.text import decode_text
from mdrag.types import Block, Document

__all__ = ["parse"]

# Reports silenced (nothing printed, nothing raised); no file read, no raw HTML/LaTeX passed through.
_OVERRIDES = {
    "report_level": 5,
    "halt_level": 5,
    "warning_stream": False,
    "file_insertion_enabled": False,
    "raw_enabled": False,
    "syntax_highlight": "none",  # the text is sliced from the source: no Pygments pass over code
}
_CODE_DIRECTIVES = frozenset({"code", "code-block", "sourcecode"})
# Directives that hold no prose: navigation, what a build generates or includes, raw output.
_DROPPED = frozenset(
    {"toctree", "contents", "sectnum", "highlight", "include", "literalinclude", "raw", "index", "default-role"}
)
_NO_TEXT = (nodes.comment, nodes.target, nodes.substitution_definition, nodes.transition, nodes.pending)
_DIRECTIVE = re.compile(r"^\.\.\s+([\w.:+-]+)::(.*)$")
_EXPLICIT = re.compile(r"^\.\.(\s|$)")
# An interpreted-text role as written ("ref:`Title <target>`"), as docutils leaves an unknown one.
_ROLE = re.compile(r":[\w.:+-]+:`([^`]*)`")
_ROLE_TARGET = re.compile(r"^[~!]?(.*?)\s*<[^<>]*>$")
_SPLIT_CHARS = 256 * 1024  # a file longer than this is parsed in parts
_PART_CHARS = 64 * 1024  # about how long each part is (it ends before a section title)


@dataclass
class _Event:
    """A heading or a top-level body element, at the source line where it starts."""

    node: nodes.Node | None  # the docutils node; None once read (a part's tree is let go)
    start: int  # 1-based first source line (a heading's overline, if it has one)
    level: int = 0  # a heading's level (its depth, not capped at 6); 0 for a body element
    head: int = 0  # the last line of a heading (its underline); for a body element, its start
    title_line: int | None = None  # a heading's title line (its text), when docutils gave one
    title: str = ""  # a heading's text
    kind: str = ""  # a body element's: "none" (no text), "doctest", "literal" or "other"


def parse(data: bytes, path: str) -> Document:
    """Parse a reStructuredText file's bytes; :func:`~mdrag.parsers.text.decode_text` reads the encoding."""
    text, encoding = decode_text(data)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    settings: Any = get_default_settings(Parser)
    for name, value in _OVERRIDES.items():
        setattr(settings, name, value)
    parts = _parts(lines) if len(text) > _SPLIT_CHARS else [(0, len(lines), 0)]
    events: list[_Event] = []
    for lo, hi, shift in parts:
        events.extend(_part_events(lines, lo, hi, shift, path, settings))

    builder = SectionBuilder()
    highlight: str | None = None  # the language `.. highlight::` set for literal blocks
    for i, event in enumerate(events):
        end = events[i + 1].start - 1 if i + 1 < len(events) else len(lines)
        if event.level:
            builder.heading(min(event.level, 6), event.title, event.title_line)
            continue
        block, highlight = _body_block(event, lines, end, highlight)
        if block is not None:
            builder.add(block)
    return Document(path=path, sections=builder.finish(), title=builder.first_h1, encoding=encoding)


def _part_events(lines: list[str], lo: int, hi: int, shift: int, path: str, settings: Any) -> list[_Event]:
    """The events of source lines ``lo..hi`` (0-based, ``hi`` excluded) parsed on their own, at the file's
    line numbers and heading levels (``shift`` levels deeper than the part's own)."""
    part = lines[lo:hi]
    document = new_document(path, settings)
    events: list[_Event] = []
    try:
        Parser().parse("\n".join(part), document)
        _collect(document, 0, part, events)
    except RecursionError:
        raise ParseError(_too_deep(lines)) from None
    for e in events:
        if e.level:
            line = _title_line(e.node)
            e.title_line = line + lo if line is not None else None
            e.title = _title(e.node)
            e.level += shift
        else:
            e.kind = _kind(e.node)
        e.node = None  # what the events need is read: the part's tree can go
        e.start += lo
        e.head += lo
    return events


def _kind(node: nodes.Node | None) -> str:
    """What a body element is, as :func:`_body_block` needs it."""
    if isinstance(node, _NO_TEXT):
        return "none"
    if isinstance(node, nodes.doctest_block):
        return "doctest"
    return "literal" if isinstance(node, nodes.literal_block) else "other"


def _too_deep(lines: list[str]) -> str:
    """Why docutils ran out of recursion: the file's deepest indentation, and what to do."""
    depth, where = max((len(line) - len(line.lstrip()), n) for n, line in enumerate(lines, 1) if line.strip())
    return (
        "its blocks (lists, block quotes, directives) are nested too deeply for docutils to read "
        f"(the deepest is indented {depth} columns, at line {where}): flatten the nesting to index it"
    )


def _parts(lines: list[str]) -> list[tuple[int, int, int]]:
    """Where to cut a big file: (first line, end line, levels to add) of parts of about ``_PART_CHARS``.

    Each part but the first starts at a section title (found by :func:`_titles`)
    and holds no title above its first one, so that docutils, which numbers
    levels in the order it meets title styles, numbers the part's titles as the
    whole file's less the first one's depth (the levels to add).
    """
    parts: list[tuple[int, int, int]] = []
    start, first, size = 0, 1, 0  # the part being made: its first line, its first title's level, its length
    titles = dict(_titles(lines))
    for n, line in enumerate(lines):
        level = titles.get(n)
        if level is not None and n > start and (level < first or size >= _PART_CHARS):
            parts.append((start, n, first - 1))
            start, size = n, 0
        if level is not None and n == start:
            first = level
        size += len(line) + 1
    parts.append((start, len(lines), first - 1))
    return parts


def _titles(lines: list[str]) -> list[tuple[int, int]]:
    """The section titles of a file, as (0-based first line, level): where a part may start.

    A title follows a blank line (or starts the file): a line of text at the
    margin underlined with one punctuation character at least as long, or a
    line of text between an over- and an underline of the same length; its
    level is the order in which its style (character, overlined or not) first
    appears, as docutils numbers them. A file with no title has no place to cut.
    """
    styles: dict[tuple[str, bool], int] = {}
    found: list[tuple[int, int]] = []
    n = 0
    while n + 1 < len(lines):
        if n and lines[n - 1].strip():
            n += 1
            continue
        line, below = lines[n].rstrip(), lines[n + 1].rstrip()
        style: tuple[str, bool] | None = None
        if _adornment(line) and n + 2 < len(lines) and lines[n + 2].rstrip() == line and below.strip():
            style, span = (line[0], True), 3
        elif line[:1].strip() and not _adornment(line) and _adornment(below) and len(below) >= len(line):
            style, span = (below[0], False), 2
        if style is None:
            n += 1
            continue
        found.append((n, styles.setdefault(style, len(styles) + 1)))
        n += span
    return found


def _collect(parent: nodes.Element, depth: int, lines: list[str], events: list[_Event]) -> None:
    """The headings and top-level body elements under ``parent``, in reading order, into ``events``."""
    for child in parent.children:
        if isinstance(child, nodes.title):
            continue  # its section's event
        if isinstance(child, nodes.section):
            title = child.children[0]
            line = _title_line(title)
            if line is not None:
                above = lines[line - 2] if line >= 2 else ""
                start = line - 1 if _adornment(above) else line
                if not events or start > events[-1].start:
                    events.append(_Event(title, start, depth + 1, line + 1))
            _collect(child, depth + 1, lines, events)
            continue
        if isinstance(child, nodes.system_message) and not _failed_directive(child):
            continue  # a report about inline markup, or a copy of a malformed title: no text of its own
        lo = max(events[-1].start, events[-1].head) + 1 if events else 1
        first = _start(child, lines, lo)
        if first is not None:
            events.append(_Event(child, first, 0, first))


def _body_block(event: _Event, lines: list[str], end: int, highlight: str | None) -> tuple[Block | None, str | None]:
    """The block of a body element spanning source lines ``event.start..end``, and the highlight language after it."""
    if event.kind == "none":
        return None, highlight
    directive = _DIRECTIVE.match(lines[event.start - 1])
    name, argument = (directive.group(1).lower(), directive.group(2).split()) if directive else ("", [])
    if name == "highlight":
        return None, argument[0] if argument else highlight
    if name in _DROPPED:
        return None, highlight
    if name in _CODE_DIRECTIVES:
        return _slice(lines, event.start, end, "code", argument[0] if argument else highlight), highlight
    if event.kind == "doctest":
        return _slice(lines, event.start, end, "code", "pycon"), highlight
    if event.kind == "literal":
        return _slice(lines, event.start, end, "code", highlight), highlight
    return _slice(lines, event.start, end, "text", None), highlight


def _slice(lines: list[str], start: int, end: int, kind: Any, language: str | None) -> Block | None:
    """A Block of source lines ``start..end`` (1-based), blank edge lines trimmed; None when all are blank."""
    while start <= end and not lines[start - 1].strip():
        start += 1
    while end >= start and not lines[end - 1].strip():
        end -= 1
    if start > end:
        return None
    text = "\n".join(line.rstrip() for line in lines[start - 1 : end])
    return Block(text, kind=kind, language=language, line_start=start, line_end=end)


def _start(node: nodes.Node, lines: list[str], lo: int) -> int | None:
    """The first source line of a top-level body element, not before ``lo``; None when docutils gave no line.

    A failed directive's report names its first line. Otherwise docutils' line
    is the element's first line, or a line inside the explicit markup
    (``.. name::``) it came from, whose first line is then searched for
    upwards; elsewhere the start of the paragraph of lines holding it is.
    """
    if isinstance(node, nodes.system_message):
        line = node.get("line")
        return line if isinstance(line, int) and lo <= line <= len(lines) else None
    hint = _line(node)
    if hint is None:
        return None
    hint = min(hint, len(lines))
    if hint < lo:
        return None  # docutils placed it before the element read last: it stays part of that one
    at_margin = lines[hint - 1][:1].strip()
    for k in range(hint, lo - 1, -1):
        text = lines[k - 1]
        if _EXPLICIT.match(text):
            return k
        if text[:1].strip() and (at_margin or k != hint):
            break  # a line at the margin that is not explicit markup: the element is not inside one
    while hint > lo and lines[hint - 2].strip():
        hint -= 1
    return hint


def _line(node: nodes.Node) -> int | None:
    """docutils' line for ``node``, or for the first of its descendants that has one."""
    for n in node.findall():
        line = getattr(n, "line", None)
        if isinstance(line, int) and line > 0:
            return line
    return None


def _failed_directive(message: nodes.system_message) -> bool:
    """Whether ``message`` reports a directive docutils could not run (unknown, bad option, disabled)."""
    if message.get("level", 0) < 2:
        return False
    block = next(iter(message.findall(nodes.literal_block)), None)
    return block is not None and bool(_DIRECTIVE.match(block.astext().split("\n", 1)[0]))


def _title_line(title: nodes.Node) -> int | None:
    """The source line of a section title's text (docutils gives its underline's)."""
    line = getattr(title, "line", None)
    return line - 1 if isinstance(line, int) and line >= 2 else None


def _adornment(line: str) -> bool:
    """Whether ``line`` is a title's over- or underline: one punctuation character repeated."""
    s = line.rstrip()
    return len(s) >= 2 and not s[0].isalnum() and not s[0].isspace() and s == s[0] * len(s)


def _title(title: nodes.Node) -> str:
    """A heading's text, an unknown role in it read as its title (":mod:`json`" -> "json")."""

    def role(m: re.Match[str]) -> str:
        content = m.group(1)
        target = _ROLE_TARGET.match(content)
        return target.group(1) if target and target.group(1) else content.lstrip("~!")

    return " ".join(_ROLE.sub(role, title.astext()).split())
