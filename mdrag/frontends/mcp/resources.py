"""The documents of the served indexes and docsets as MCP resources, for clients that browse and attach them.

A document's URI is ``mdrag://index/NAME/REF`` (an index made by `mdrag index`) or ``mdrag://docset/ID/REF``
(a docset), where REF is the reference ``get`` takes (the path relative to the document's folder),
percent-encoded; ``resources/templates/list`` gives both templates. ``resources/list`` pages through the
documents of every served index and docset, ``resources/read`` returns the text ``get`` returns for the
document: the file as it is on disk now, for the files the index holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, unquote

import anyio.to_thread
from mcp import types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError

from mdrag.errors import MdragError
from mdrag.index.served import ServedIndex
from mdrag.ingest.manifest import Manifest

__all__ = ["PAGE_SIZE", "Resources", "Target", "Tools", "document_uri"]

PAGE_SIZE = 200  # resources per resources/list page: a client pages on with nextCursor
_SCHEME = "mdrag://"
RESOURCE_NOT_FOUND = -32002  # the MCP specification's code for a resource that does not exist


@dataclass(frozen=True)
class Target:
    """One index a call runs on: a docset's (``kind`` "docset", ``id`` its id) or a named index's (``kind``
    "index", ``id`` its name)."""

    kind: str
    id: str
    entry: ServedIndex


class Tools(Protocol):
    """What the resources need of the tools (:class:`~mdrag.frontends.mcp.tools.KnowledgeTools`)."""

    @property
    def index_names(self) -> Sequence[str]: ...  # the served indexes' names ([]: none)

    @property
    def has_docsets(self) -> bool: ...  # a project's docsets are served

    def targets(self) -> list[Target]: ...

    def target(self, kind: str, name: str, current: bool = False) -> Target: ...

    async def read(self, t: Target, refs: str | list[str], links: bool = False) -> dict[str, Any]: ...


def document_uri(kind: str, name: str, ref: str) -> str:
    """The URI of document ``ref`` of the index or docset ``name`` (``kind``: "index" or "docset")."""
    return f"{_SCHEME}{kind}/{quote(name, safe='')}/{quote(ref, safe='/')}"


def _refs(t: Target) -> list[str]:
    """The references of the documents ``t``'s index holds, as committed (blocks: it reads the manifest)."""
    m = Manifest.load(t.entry.index.manifest_path)
    if m is None:
        return []
    names = [f.rel_path for f in m.files.values()]
    shared = {n for n in names if names.count(n) > 1} if len(m.roots) > 1 else set()
    return sorted(path if f.rel_path in shared else f.rel_path for path, f in m.files.items())


class Resources:
    """The resources handlers of the MCP server over ``tools``' indexes and docsets."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools

    async def list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        listed = []
        if self.tools.index_names:
            listed.append(
                types.ResourceTemplate(
                    name="document of an index",
                    uri_template=_SCHEME + "index/{index}/{+path}",
                    description="A document of an index served here ("
                    + ", ".join(self.tools.index_names)
                    + "), by its path relative to its folder, as get takes it.",
                )
            )
        if self.tools.has_docsets:
            listed.append(
                types.ResourceTemplate(
                    name="document of a docset",
                    uri_template=_SCHEME + "docset/{docset}/{+path}",
                    description="A document of a docset of this project, by its path relative to the docset's "
                    "folder, as get takes it.",
                )
            )
        return types.ListResourceTemplatesResult(resource_templates=listed)

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        cursor = params.cursor if params is not None else None
        try:
            start = int(cursor) if cursor else 0
        except ValueError:
            raise MCPError(
                code=types.INVALID_PARAMS, message=f"unknown cursor {cursor!r}: list from the start"
            ) from None
        every = await anyio.to_thread.run_sync(self._all)
        page = every[start : start + PAGE_SIZE]
        following = start + PAGE_SIZE if start + PAGE_SIZE < len(every) else None
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=document_uri(t.kind, t.id, ref),
                    name=ref,
                    title=f"{ref} ({t.kind} {t.id})",
                    mime_type=_mime(ref),
                )
                for t, ref in page
            ],
            next_cursor=str(following) if following is not None else None,
        )

    def _all(self) -> list[tuple[Target, str]]:
        try:
            targets = self.tools.targets()
        except MdragError:  # no project config: only the indexes, if any
            targets = []
        return [(t, ref) for t in targets for ref in _refs(t)]

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        kind, _, rest = uri.removeprefix(_SCHEME).partition("/")
        name, _, ref = rest.partition("/")
        if not uri.startswith(_SCHEME) or kind not in ("index", "docset") or not name or not ref:
            raise MCPError(
                code=RESOURCE_NOT_FOUND,
                message=f"not an mdrag document URI: {uri[:200]} (mdrag://index/NAME/PATH or mdrag://docset/ID/PATH)",
                data={"uri": uri[:200]},
            )
        try:
            target = self.tools.target(kind, unquote(name))
            got = await self.tools.read(target, unquote(ref))
        except MdragError as e:
            raise MCPError(code=RESOURCE_NOT_FOUND, message=str(e), data={"uri": uri[:200]}) from None
        docs = got["documents"]
        if not docs:
            reason = got["omitted"][0]["reason"] if got.get("omitted") else "no such document"
            raise MCPError(code=RESOURCE_NOT_FOUND, message=f"{uri[:200]}: {reason}", data={"uri": uri[:200]})
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=_mime(d["rel_path"]), text=d["text"]) for d in docs]
        )


def _mime(ref: str) -> str:
    """Markdown for Markdown files; the text mdrag reads from any other kind (PDF, DOCX, HTML, ...) is plain."""
    return "text/markdown" if ref.lower().endswith((".md", ".mdx", ".markdown")) else "text/plain"
