"""The MCP tools as a client sees them: names, descriptions and input schemas, and the checks of a call's arguments.

No I/O: :mod:`mdrag.frontends.mcp.tools` runs the tools, :mod:`mdrag.frontends.mcp.wire` checks the
JSON-RPC lines that carry their calls. The tools check each argument with the
functions here (a call made in process brings no JSON to check), and a wrong
one is a :class:`~mdrag.errors.ProtocolError` whose text says what to send
instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mcp import types

from mdrag.errors import ProtocolError
from mdrag.frontends.protocol import has_visible
from mdrag.frontends.received import LONE_SURROGATE, describe
from mdrag.knobs import GET_MAX_CHARS, GET_MAX_FILES, MAX_QUESTION_CHARS, MCP_DEFAULT_K, MCP_MAX_K
from mdrag.knowledge import MAX_KEYWORDS

__all__ = [
    "MODES",
    "SERVER_NAME",
    "TOOL_NAMES",
    "filters_arg",
    "instructions",
    "k_arg",
    "mode_arg",
    "query_arg",
    "refs_arg",
    "string_arg",
    "terms_arg",
    "tools",
]

SERVER_NAME = "agentic-knowledge"
MODES = ("hybrid", "dense", "bm25")  # the search modes a call may choose (mdrag.settings search.mode)
_DOCSETS_INSTRUCTIONS = (
    "Local documentation sets (docsets) for this project. Call list_docsets first to learn their names. "
    "Use search_docs to get the folder and terms for searching a docset's files with your own tools "
    "(grep, file reading); use search for ranked passages when a semantic lookup in natural language "
    "is the better fit, and get (multi_get for several) to read a whole document, a section or lines of it."
)


def instructions(docsets: bool, indexes: Sequence[str]) -> str:
    """What the server tells a client it serves: docsets, the user's own indexes, or both."""
    if not indexes:
        return _DOCSETS_INSTRUCTIONS
    mine = (
        f"The user's own document indexes, made with mdrag: {', '.join(indexes)}. Use search for ranked "
        "passages (filter by path prefix or tags, choose hybrid, dense or bm25), get (multi_get for several) "
        "to read a whole document, a section or lines of it, and status for what each index holds."
    )
    return mine + (" Also: " + _DOCSETS_INSTRUCTIONS if docsets else "")


_TERMS_SCHEMA = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": MAX_KEYWORDS}
_DOCSET = {"type": "string", "description": "Docset id or alias, as listed by list_docsets (e.g. 'react')."}
_REF = (
    "a file's path relative to its folder (a search result's ref), a chunk_id from search, or in a "
    "notes vault a note's name or alias; add :10-40 for those lines, #Heading (or #Parent > Heading) for that "
    "section, #page=3 for a PDF's page"
)
_GOT = (
    'as JSON {"docset" or "index", "documents": [{ref, path, rel_path, text, line_start, line_end, lines, section, '
    'pages, changed, links?, backlinks?}], "omitted": [{ref, rel_path, reason}]}. The text is the file as it is on '
    "disk now (Markdown: its own lines, as search counts them; PDF, DOCX, HTML: the text mdrag reads from it, a "
    "PDF's pages marked [page N]); "
    "changed: true when the file changed since it was indexed. Only the files the index holds can be "
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

_SEARCH_DOCS = types.Tool(
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
            "docset": _DOCSET,
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
)
_LIST_DOCSETS = types.Tool(
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
)
TOOL_NAMES = ("search_docs", "list_docsets", "search", "get", "multi_get", "status")  # every tool a server may have


def _where(docsets: bool, indexes: Sequence[str], verb: str) -> tuple[dict[str, Any], list[str]]:
    """The ``docset`` and ``index`` arguments of a tool, and which of them are required, for what is served."""
    props: dict[str, Any] = {}
    if indexes:
        props["index"] = {
            "type": "string",
            "enum": list(indexes),
            "description": f"The index to {verb}: one of {', '.join(indexes)}"
            + (" (the only one: may be omitted)." if len(indexes) == 1 else "."),
        }
    if docsets:
        props["docset"] = dict(_DOCSET)
    required = ["docset"] if docsets and not indexes else []
    return props, required


def _search_tool(docsets: bool, indexes: Sequence[str]) -> types.Tool:
    where, _ = _where(docsets, indexes, "search; omit it to search every one")
    if "docset" in where:
        where["docset"] = {
            "type": "string",
            "description": "Docset id or alias from list_docsets; omit it to search every docset.",
        }
    served = "the docsets' content" if not indexes else "the served indexes" + (" and docsets" if docsets else "")
    return types.Tool(
        name="search",
        title="Semantic search in documentation",
        description=(
            f"Search {served} with mdrag's local index: returns the most relevant sections as JSON "
            '{"results": [{docset or index, text, path, rel_path, ref, heading_path, heading, score, cosine}]}, best '
            "first (score is what orders them; cosine is the semantic similarity, 0-1), with line_start and "
            "line_end for text files, page for PDFs, url for pages of a website, and in a notes vault links and "
            "backlinks; pass a result's ref to get (with its docset or index) to read its whole document. Use it "
            "for questions in natural language, or when you do not know the words the docs use; filter by path "
            "prefix or tags; mode bm25 for exact words (names, options, error messages), dense for meaning, "
            "hybrid (the default) for both. While an index's first build runs, the answer says how far it is "
            'under "indexing".'
            + (" For a docset, search_docs gives its folder to grep the files yourself meanwhile." if docsets else "")
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
                **where,
                "k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MCP_MAX_K,
                    "default": MCP_DEFAULT_K,
                    "description": f"How many passages to return (1-{MCP_MAX_K}).",
                },
                "mode": {
                    "type": "string",
                    "enum": list(MODES),
                    "description": "hybrid (default: both), dense (meaning) or bm25 (exact words).",
                },
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Only files under this path prefix, relative to the folder, e.g. 'guides/'.",
                },
                "tags": {
                    "anyOf": [
                        {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                        {"type": "string", "minLength": 1},
                    ],
                    "description": "Only files with one of these tags (frontmatter tags, a notes vault's #tags).",
                },
            },
            "required": ["query"],
        },
        annotations=_READ_ONLY,
    )


def _get_tools(docsets: bool, indexes: Sequence[str]) -> tuple[types.Tool, types.Tool]:
    where, required = _where(docsets, indexes, "read from")
    of = "a docset" if not indexes else ("an index" if not docsets else "an index or docset")
    get = types.Tool(
        name="get",
        title=f"Read a document of {of}",
        description=(
            f"Read one document of {of} whole, or a section or lines of it, by reference: " + _REF + ". "
            "Returns it " + _GOT + " Use it after search, to read around a result."
        ),
        input_schema={
            "type": "object",
            "properties": {
                **where,
                "ref": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The document, e.g. 'guides/config.md', 'guides/config.md:10-40' or "
                    "'guides/config.md#Menus'.",
                },
                "links": _LINKS,
            },
            "required": [*required, "ref"],
        },
        annotations=_READ_ONLY,
    )
    multi = types.Tool(
        name="multi_get",
        title=f"Read several documents of {of}",
        description=(
            f"Read up to {GET_MAX_FILES} documents of {of} at once: a list of references (each as get takes "
            "it: " + _REF + ") or a glob over the paths ('api/*.md'; * stays in a folder, ** crosses folders). "
            "Returns them " + _GOT + " A reference that names no document (rel_path null) and a "
            "document that does not fit are listed in omitted, with the reason; the other documents are returned."
        ),
        input_schema={
            "type": "object",
            "properties": {
                **where,
                "refs": {
                    "anyOf": [
                        {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
                        {"type": "string", "minLength": 1},
                    ],
                    "description": "References, e.g. ['intro.md', 'config.md#Menus'], or a glob such as 'api/*.md'.",
                },
                "links": _LINKS,
            },
            "required": [*required, "refs"],
        },
        annotations=_READ_ONLY,
    )
    return get, multi


def _status_tool(docsets: bool, indexes: Sequence[str]) -> types.Tool:
    where, _ = _where(docsets, indexes, "describe; omit it for every one")
    return types.Tool(
        name="status",
        title="What the indexes hold",
        description=(
            'What each served index holds, as JSON {"indexes": [{index, docset?, state, files, chunks, '
            "last_indexed, folders, indexing?, backend, model, error?}]}: state is ready, indexing (files "
            "done / total under indexing), empty or failed; last_indexed is an ISO 8601 time (null: never)."
        ),
        input_schema={"type": "object", "properties": where},
        annotations=_READ_ONLY,
    )


def tools(docsets: bool, indexes: Sequence[str] = ()) -> list[types.Tool]:
    """The tools of a server of a project's docsets (``docsets``), of the user's own ``indexes``, or both."""
    listed = [_SEARCH_DOCS, _LIST_DOCSETS] if docsets else []
    return [*listed, _search_tool(docsets, indexes), *_get_tools(docsets, indexes), _status_tool(docsets, indexes)]


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


def mode_arg(args: Mapping[str, Any]) -> str | None:
    """search's ``mode``: None when not given (the index's setting applies)."""
    value = args.get("mode")
    if value is None:
        return None
    if not isinstance(value, str) or value not in MODES:
        raise ProtocolError(f"argument 'mode' must be one of {', '.join(MODES)}, got {describe(value)}")
    return value


def filters_arg(args: Mapping[str, Any]) -> dict[str, Any]:
    """search's ``path`` and ``tags`` as the core's search filters (``path_prefix``, ``tags``); {} for none."""
    filters: dict[str, Any] = {}
    path = args.get("path")
    if path is not None:
        if not isinstance(path, str) or not path.strip():
            raise ProtocolError(f"argument 'path' must be a path prefix such as 'guides/', got {describe(path)}")
        filters["path_prefix"] = _check_text("path", path)
    tags = args.get("tags")
    if tags is not None:
        listed = [tags] if isinstance(tags, str) else tags
        if not isinstance(listed, list) or not listed or not all(isinstance(t, str) and t for t in listed):
            raise ProtocolError(f"argument 'tags' must be a tag or an array of tags, got {describe(tags)}")
        filters["tags"] = [_check_text("tags", t) for t in listed]
    return filters
