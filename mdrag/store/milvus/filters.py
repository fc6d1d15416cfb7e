"""Milvus filter expressions built from values, never by pasting user text.

:func:`to_expr` translates the neutral :class:`mdrag.store.base.Filter` that
search builds; the other functions are the pieces the Milvus store uses.

Milvus Lite rejects pymilvus filter templates (``path == {p}`` with
``filter_params``), so every literal goes through :func:`quote`, and every
``like`` pattern through :func:`like_prefix`. These are the only places where a
value enters an expression.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mdrag.errors import ConfigError
from mdrag.store.base import Filter

__all__ = ["and_", "eq", "in_", "json_contains", "json_contains_any", "like_prefix", "quote", "to_expr"]

_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Milvus's string literals end at a raw line break and know only these escapes (besides \t):
# every other character, control characters and all of Unicode, stands for itself.
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


def quote(value: str) -> str:
    """A Milvus string literal: double quotes, with ``\\``, ``"``, line feed and carriage return escaped."""
    if not isinstance(value, str):
        raise TypeError(f"filter values must be strings, not {type(value).__name__}")
    if "\x00" in value:
        raise ConfigError("filter values cannot contain NUL characters")
    return '"' + value.translate(_ESCAPES) + '"'


def _field(name: str) -> str:
    if not _FIELD.match(name):
        raise ValueError(f"invalid field name {name!r}")
    return name


def eq(field: str, value: str) -> str:
    return f"{_field(field)} == {quote(value)}"


def in_(field: str, values: Iterable[str]) -> str:
    return f"{_field(field)} in [{', '.join(quote(v) for v in values)}]"


def json_contains_any(field: str, key: str, values: Iterable[str]) -> str:
    """``json_contains_any(field["key"], [...])``: e.g. the chunks that name one of these sets of tags."""
    return f"json_contains_any({_field(field)}[{quote(key)}], [{', '.join(quote(v) for v in values)}])"


def like_prefix(field: str, prefix: str) -> str:
    """``field like "<prefix>%"`` with ``%`` and ``_`` in the prefix matched literally."""
    if "\\" in prefix:
        # Milvus's LIKE has no working escape for a literal backslash (measured in
        # Milvus Lite 3.2.2): refuse rather than match the wrong files.
        raise ConfigError(f"path prefixes cannot contain a backslash: {prefix!r}; use '/'")
    escaped = prefix.replace("%", "\\%").replace("_", "\\_")
    # quote() doubles the backslashes, which is what Milvus's string literal needs.
    return f"{_field(field)} like {quote(escaped + '%')}"


def json_contains(field: str, key: str, value: str) -> str:
    """``json_contains(field["key"], "value")``: e.g. a frontmatter tag."""
    return f"json_contains({_field(field)}[{quote(key)}], {quote(value)})"


def and_(*exprs: str) -> str:
    return " and ".join(f"({e})" for e in exprs if e)


def to_expr(where: Filter | None) -> str:
    """The Milvus expression of ``where`` ("" for no filter); ConfigError for a value Milvus cannot match
    literally (a NUL character; a backslash in a path prefix)."""
    if not where:
        return ""
    located: list[str] = []
    if where.path_prefix:
        field = "path" if where.path_prefix.startswith("/") else "rel_path"
        located.append(like_prefix(field, where.path_prefix))
    if where.root:
        located.append(eq("root", where.root))
    place = and_(*located)
    if place and where.paths:
        place = f"({place}) or ({in_('path', where.paths)})"
    return and_(place, *(json_contains("metadata", "tags", tag) for tag in where.tags))
