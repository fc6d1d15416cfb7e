"""The MCP tools as a client sees them: names, descriptions and input schemas, and the checks of a call's arguments.

No I/O: :mod:`mdrag.frontends.mcp.tools` runs the tools, :mod:`mdrag.frontends.mcp.wire` checks the
JSON-RPC lines that carry their calls. The tools check each argument with the
functions here (a call made in process brings no JSON to check), and a wrong
one is a :class:`~mdrag.errors.ProtocolError` whose text says what to send
instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp import types

from mdrag.errors import ProtocolError
from mdrag.frontends.protocol import has_visible
from mdrag.frontends.received import LONE_SURROGATE, describe
from mdrag.knobs import GET_MAX_CHARS, GET_MAX_FILES, MAX_QUESTION_CHARS, MCP_DEFAULT_K, MCP_MAX_K
from mdrag.knowledge import MAX_KEYWORDS

__all__ = [
    "SERVER_INSTRUCTIONS",
    "SERVER_NAME",
    "TOOLS",
    "TOOL_NAMES",
    "k_arg",
    "query_arg",
    "refs_arg",
    "string_arg",
    "terms_arg",
]

SERVER_NAME = "agentic-knowledge"
SERVER_INSTRUCTIONS = (
    "Local documentation sets (docsets) for this project. Call list_docsets first to learn their names. "
    "Use search_docs to get the folder and terms for searching a docset's files with your own tools "
    "(grep, file reading); use search for ranked passages when a semantic lookup in natural language "
    "is the better fit, and get (multi_get for several) to read a whole document, a section or lines of it."
)

_TERMS_SCHEMA = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": MAX_KEYWORDS}
_DOCSET = {"type": "string", "description": "Docset id or alias, as listed by list_docsets (e.g. 'react')."}
_REF = (
    "a file's path relative to the docset's folder (a search result's ref), a chunk_id from search, or in a "
    "notes vault a note's name or alias; add :10-40 for those lines, #Heading (or #Parent > Heading) for that "
    "section, #page=3 for a PDF's page"
)
_GOT = (
    'as JSON {"docset", "documents": [{ref, path, rel_path, text, line_start, line_end, lines, section, pages, '
    'changed, links?, backlinks?}], "omitted": [{ref, rel_path, reason}]}. The text is the file as it is on disk '
    "now (Markdown: its own lines, as search counts them; PDF, DOCX, HTML: the text mdrag reads from it, a "
    "PDF's pages marked [page N]); "
    "changed: true when the file changed since it was indexed. Only the files the docset's index holds can be "
    f"read. At most {GET_MAX_CHARS:,} characters in all: past that, the answer says how to ask for less "
    "(lines, a section)."
)
_LINKS = {
    "type": "boolean",
    "default": False,
    "description": "Notes vaults: list each document's links (the notes it links to) and backlinks (the notes "
    "that link to it), beside its text.",
}
_READ_ONLY = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)

TOOLS: tuple[types.Tool, ...] = (
    types.Tool(
        name="search_docs",
        title="Search documentation (navigation instructions)",
        description=(
            "Get instructions for finding something in a local documentation set (docset) with your own "
            "file search tools (grep, ripgrep, reading files): the docset's folder and the terms to try, in "
            "order. Use it when you can read files and want to search the docs yourself, e.g. for exact "
            "names, API symbols, options or error messages. Call list_docsets first to learn the docset "
            "names. When mdrag's index of the docset is ready, a few ranked sections are appended as "
            "starting points."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "docset": {
                    "type": "string",
                    "description": "Docset id or alias, as listed by list_docsets (e.g. 'react').",
                },
                "keywords": {
                    **_TERMS_SCHEMA,
                    "description": "Specific terms to search for first, e.g. ['useEffect', 'cleanup function'].",
                },
                "generalized_keywords": {
                    **_TERMS_SCHEMA,
                    "description": "Broader terms to try when the specific ones find nothing, "
                    "e.g. ['hooks', 'side effects'].",
                },
            },
            "required": ["docset", "keywords", "generalized_keywords"],
        },
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="list_docsets",
        title="List documentation sets",
        description=(
            "List the documentation sets (docsets) configured for this project in .knowledge/config.yaml: "
            "id, name, version, aliases and local_path (the folder holding its files) of each, as JSON "
            '{"docsets": [...]}. Call this first to discover the docset names that search_docs and '
            "search accept."
        ),
        input_schema={"type": "object", "properties": {}},
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="search",
        title="Semantic search in documentation",
        description=(
            "Semantic search over the docsets' content with mdrag's local embedding index: returns the most "
            'relevant sections as JSON {"results": [{docset, text, path, rel_path, ref, heading_path, score}]}, '
            "best first, score 0-1, with line_start and line_end for text files, page for PDFs, url for pages "
            "of a website, and in a notes vault links and backlinks (the notes a passage links to, and those "
            "that link to its note); pass a "
            "result's ref to get (with the docset) to read its whole document. Use it for "
            "questions in natural language, or when you do not know the "
            "words the docs use; use search_docs instead to grep the files yourself. Searches one docset, or "
            "all of them when docset is omitted. The server indexes the docsets in the background; while a "
            'docset\'s first index is being built, the answer says so under "indexing" (files done / '
            "total) and has no results from it yet: use search_docs meanwhile."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUESTION_CHARS,
                    "description": "What to look for, in natural language, e.g. 'How do I create a custom shortcode?'.",
                },
                "docset": {
                    "type": "string",
                    "description": "Docset id or alias from list_docsets; omit it to search every docset.",
                },
                "k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MCP_MAX_K,
                    "default": MCP_DEFAULT_K,
                    "description": f"How many passages to return (1-{MCP_MAX_K}).",
                },
            },
            "required": ["query"],
        },
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="get",
        title="Read a document of a docset",
        description=(
            "Read one document of a docset whole, or a section or lines of it, by reference: " + _REF + ". "
            "Returns it " + _GOT + " Use it after search, to read around a result."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "docset": _DOCSET,
                "ref": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The document, e.g. 'guides/config.md', 'guides/config.md:10-40' or "
                    "'guides/config.md#Menus'.",
                },
                "links": _LINKS,
            },
            "required": ["docset", "ref"],
        },
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="multi_get",
        title="Read several documents of a docset",
        description=(
            f"Read up to {GET_MAX_FILES} documents of a docset at once: a list of references (each as get takes "
            "it: " + _REF + ") or a glob over the paths ('api/*.md'; * stays in a folder, ** crosses folders). "
            "Returns them " + _GOT + " A reference that names no document of the docset (rel_path null) and a "
            "document that does not fit are listed in omitted, with the reason; the other documents are returned."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "docset": _DOCSET,
                "refs": {
                    "anyOf": [
                        {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                        {"type": "string", "minLength": 1},
                    ],
                    "description": "References, e.g. ['intro.md', 'config.md#Menus'], or a glob such as 'api/*.md'.",
                },
                "links": _LINKS,
            },
            "required": ["docset", "refs"],
        },
        annotations=_READ_ONLY,
    ),
)
TOOL_NAMES = tuple(t.name for t in TOOLS)


# -- arguments ---------------------------------------------------------------


def _check_text(key: str, value: str) -> str:
    found = LONE_SURROGATE.search(value)
    if found:
        raise ProtocolError(
            f"argument {key!r} holds a lone surrogate ({json.dumps(found.group())}, half of a UTF-16 pair): "
            "send valid Unicode text"
        )
    return value


def string_arg(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if value is None:
        raise ProtocolError(f"missing argument {key!r}: give it as a string")
    if not isinstance(value, str):
        raise ProtocolError(f"argument {key!r} must be a string, got {describe(value)}")
    return _check_text(key, value)


def query_arg(args: Mapping[str, Any]) -> str:
    query = string_arg(args, "query")
    if not has_visible(query):  # white space, or invisible format characters (U+200B, U+00AD, U+202E) only
        raise ProtocolError("argument 'query' is empty: say what to look for")
    if len(query) > MAX_QUESTION_CHARS:
        raise ProtocolError(
            f"argument 'query' is too long ({len(query)} characters, at most {MAX_QUESTION_CHARS}): "
            "shorten it to the question itself"
        )
    return query


def terms_arg(args: Mapping[str, Any], key: str) -> list[str] | str:
    """An array of strings (a single string is accepted too); the knowledge base checks the rest."""
    value = args.get(key)
    if value is None:
        raise ProtocolError(f'missing argument {key!r}: give an array of search terms, e.g. ["install"]')
    if isinstance(value, str):
        return _check_text(key, value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f"argument {key!r} must be an array of strings, got {describe(value)}")
    for i, v in enumerate(value):
        _check_text(f"{key}[{i}]", v)
    return value


def refs_arg(args: Mapping[str, Any]) -> list[str] | str:
    """multi_get's ``refs``: an array of references, or one string (a glob, or a single reference)."""
    value = args.get("refs")
    if value is None:
        raise ProtocolError("missing argument 'refs': give an array of references, e.g. [\"intro.md\"], or a glob")
    if isinstance(value, str):
        return _check_text("refs", value)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f"argument 'refs' must be a non-empty array of strings or a glob, got {describe(value)}")
    for i, v in enumerate(value):
        _check_text(f"refs[{i}]", v)
    return value


def links_arg(args: Mapping[str, Any]) -> bool:
    """get's and multi_get's ``links``: false when not given."""
    value = args.get("links", False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ProtocolError(f"argument 'links' must be true or false, got {describe(value)}")
    return value


def k_arg(args: Mapping[str, Any]) -> int:
    value = args.get("k", MCP_DEFAULT_K)
    if value is None:
        return MCP_DEFAULT_K
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MCP_MAX_K:
        raise ProtocolError(f"argument 'k' must be an integer from 1 to {MCP_MAX_K}, got {describe(value)}")
    return value
