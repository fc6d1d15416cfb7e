"""Markdown parser: frontmatter -> metadata, heading tree -> sections.

Each top-level block is sliced from the original source lines (so it stays
readable Markdown) using markdown-it's line maps; headings are not part of any
block. Frontmatter that YAML (or TOML) rejects is dropped with a warning and
the body is still parsed.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import sys
from typing import Any

from frontmatter.default_handlers import BaseHandler, TOMLHandler, YAMLHandler
from markdown_it import MarkdownIt
from markdown_it.token import Token

from mdrag.parsers.sections import SectionBuilder
from mdrag.parsers.text import decode_text
from mdrag.types import Block, Document

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["parse"]

logger = logging.getLogger(__name__)

# Blocks only: a block's text is sliced from the source, so inline markup is parsed
# (by _inline_md) for headings alone, not for every paragraph of a large file.
_md = MarkdownIt("commonmark").enable("table").disable("inline")
_inline_md = MarkdownIt("commonmark")

# A trailing heading attribute such as "{#my-anchor}" (Hugo, Pandoc) is markup, not title.
_HEADING_ATTRS = re.compile(r"\s*\{#[^{}]*\}\s*$")


class _TOMLHandler(BaseHandler):
    """``+++``-delimited TOML frontmatter (Hugo), read with the standard tomllib."""

    FM_BOUNDARY = re.compile(r"^\+{3,}\s*$", re.MULTILINE)
    START_DELIMITER = END_DELIMITER = "+++"

    def load(self, fm: str, **kwargs: object) -> Any:
        return tomllib.loads(fm)


_HANDLERS: list[BaseHandler] = [
    YAMLHandler(),
    TOMLHandler() if TOMLHandler is not None else _TOMLHandler(),
]


def _jsonable(value: Any) -> Any:
    """``value`` with dates as ISO strings, sets/tuples as lists and keys as strings."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _split_frontmatter(text: str, path: str) -> tuple[dict[str, Any], str, int, list[str]]:
    """Returns (metadata, body, line offset of body, warnings).

    The body is a suffix of ``text``; its first line is the rest of the closing
    delimiter line, so body line ``i`` (0-based) is file line ``offset + i + 1``.
    """
    handler = next((h for h in _HANDLERS if h.detect(text)), None)
    if handler is None:
        return {}, text, 0, []
    try:
        fm, body = handler.split(text)
    except ValueError:  # an opening "---" with no closing one: a thematic break
        return {}, text, 0, []
    offset = text[: len(text) - len(body)].count("\n")
    try:
        meta = handler.load(fm)
    except Exception as exc:  # yaml.YAMLError, tomllib.TOMLDecodeError, ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return {}, body, offset, [f"{path}: frontmatter ignored, it is not valid: {first}"]
    if not isinstance(meta, dict):
        kind = "empty" if meta is None else f"a {type(meta).__name__}"
        return {}, body, offset, [f"{path}: frontmatter ignored, it is {kind}, not a mapping"]
    return _jsonable(meta), body, offset, []


def _frontmatter_title(metadata: dict[str, Any]) -> str | None:
    """The frontmatter's ``title``; a key spelled ``Title`` (some CNCF glossary terms) counts too."""
    keys = sorted((k for k in metadata if k.lower() == "title"), key=lambda k: k != "title")
    title = metadata[keys[0]] if keys else None
    return title.strip() if isinstance(title, str) and title.strip() else None


def _inline_text(token: Token) -> str:
    """Plain text of an inline token: markup dropped, code spans and image alt kept."""
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(_inline_text(child))
    text = " ".join("".join(parts).split())
    return _HEADING_ATTRS.sub("", text)


def _block(lines: list[str], start: int, end: int, offset: int, **kw: Any) -> Block | None:
    """A Block from body lines ``start:end`` (0-based), blank edge lines trimmed."""
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    if start >= end:
        return None
    text = "\n".join(line.rstrip() for line in lines[start:end])
    return Block(text, line_start=offset + start + 1, line_end=offset + end, **kw)


def parse(data: bytes, path: str) -> Document:
    """Parse a Markdown file's bytes; :func:`~mdrag.parsers.text.decode_text` reads the encoding."""
    text, encoding = decode_text(data)
    # markdown-it counts "\r\n" and a lone "\r" as one line break; so do we.
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")  # as CommonMark does
    metadata, body, offset, warnings = _split_frontmatter(text, path)
    lines = body.split("\n")
    env: dict[str, Any] = {}  # link reference definitions, for links in headings
    tokens = _md.parse(body, env)

    builder = SectionBuilder()
    for i, tok in enumerate(tokens):
        if tok.level != 0 or tok.nesting == -1 or tok.map is None:
            continue  # only top-level opening or self-contained tokens
        start, end = tok.map
        if tok.type == "heading_open":
            title = _inline_text(_inline_md.parseInline(tokens[i + 1].content, env)[0])
            builder.heading(int(tok.tag[1]), title, offset + start + 1)
            continue
        if tok.type == "hr":
            continue  # a thematic break carries no text
        if tok.type in ("fence", "code_block"):
            info = tok.info.strip().split()
            language = info[0] if tok.type == "fence" and info else None
            block = _block(lines, start, end, offset, kind="code", language=language)
        else:
            kind = "table" if tok.type == "table_open" else "text"
            block = _block(lines, start, end, offset, kind=kind)
        if block is not None:
            builder.add(block)
    sections = builder.finish()

    doc_title = _frontmatter_title(metadata) or builder.first_h1
    return Document(
        path=path, sections=sections, metadata=metadata, title=doc_title, warnings=warnings, encoding=encoding
    )
