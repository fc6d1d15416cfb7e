"""What a chunk is given whatever cut it: its id and hash, heading path, header and metadata.

Both strategies cut a document into :data:`Cut` pieces (a text, the index of
the section it is under, its first and last file line); :class:`ChunkBuilder`
makes them chunks. The header embedded before each chunk's text
(``chunk.context``) is "path words > title > headings", then, on a file's
first chunk, its frontmatter topics. Text before a file's first heading is
under the file's title.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable
from typing import Any

from mdrag.types import FRONTMATTER_FIELDS, Chunk, Document, Section

__all__ = ["ChunkBuilder", "Cut", "chunk_id", "content_hash"]

Cut = tuple[str, int, int | None, int | None]  # a chunk's text, its section's index, its first and last line

_MAX_CONTEXT_CHARS = 200  # a heading trail longer than this is shortened
_MAX_TOPICS_CHARS = 400  # so is the frontmatter line
_TOPIC_FIELDS = ("description", "summary", "aliases", "tags", "topics", "keywords", "llm_hints")

# Path parts that name no topic: site roots, the language folder, index files.
_PATH_NOISE = frozenset({"content", "contents", "docs", "doc", "documentation", "src", "en", "index", "readme"})


def chunk_id(root: str, rel_path: str, position: int, text_hash: str) -> str:
    """Stable id of the ``position``-th chunk of a file: an unchanged file keeps its ids.

    The chunk's content hash is part of the id, so an edited chunk gets a new
    id: the old one stays searchable until the new state is committed, which
    lets a reload switch atomically (the indexer deletes replaced ids last).
    """
    return hashlib.sha256(f"{root}\x00{rel_path}\x00{position}\x00{text_hash}".encode()).hexdigest()[:32]


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _heading_path(doc: Document, section: Section) -> list[str]:
    """A section's heading path; text before the file's first heading is under the file's title.

    A PDF page outside the outline keeps no heading: its page says where it is,
    and search collapses by page where there is no heading.
    """
    if section.heading_path or section.page is not None or not (doc.title and doc.title.strip()):
        return list(section.heading_path)
    return [doc.title.strip()]


def _context(mode: str, title: str | None, heading_path: list[str], topics: str, where: str = "") -> str:
    """The header embedded before a chunk: "path words > title > headings", then the frontmatter topics."""
    if mode == "none":
        return ""
    trail = list(heading_path)
    if title and (not trail or trail[0].strip().lower() != title.strip().lower()):
        trail.insert(0, title)
    if where:
        trail.insert(0, where)
    ctx = _clip(" > ".join(t.strip() for t in trail if t and t.strip()), _MAX_CONTEXT_CHARS)
    if mode == "frontmatter" and topics:
        ctx = f"{ctx}\n{topics}" if ctx else topics
    return ctx


def _path_words(rel_path: str) -> str:
    """What a file's place says about it: its folder names and file name, as words.

    ``content/en/docs/zero-code/java/agent/disable.md`` -> "zero code java agent disable".
    Left out: the extension, folders that every page shares (_PATH_NOISE), index
    file names, and names that are only digits (ids, years).
    """
    parts = rel_path.replace("\\", "/").split("/")
    parts[-1] = parts[-1].rsplit(".", 1)[0]
    words = []
    for part in parts:
        name = part.strip("_.").lower()
        if name and name not in _PATH_NOISE and not name.isdigit():
            words.append(" ".join(name.replace("-", " ").replace("_", " ").split()))
    return " ".join(words)


def _topics(meta: dict[str, Any]) -> str:
    """One line from the frontmatter fields that say what a file is about."""
    parts: list[str] = []
    for k in _TOPIC_FIELDS:
        v = meta.get(k)
        if isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        elif isinstance(v, dict):
            v = ", ".join(f"{a}: {b}" for a, b in v.items())
        v = " ".join(str(v or "").split()).rstrip(". ")
        if v and v not in parts:
            parts.append(v if k in ("description", "summary") else f"{k.replace('_', ' ')}: {v}")
    return _clip(". ".join(parts), _MAX_TOPICS_CHARS)


def _frontmatter_fields(metadata: dict[str, Any], title: str | None) -> dict[str, Any]:
    out = {k: metadata[k] for k in FRONTMATTER_FIELDS if metadata.get(k) not in (None, "", [], {})}
    for k in ("tags", "topics", "keywords"):
        v = out.get(k)
        if isinstance(v, str):
            out[k] = [s.strip() for s in v.split(",") if s.strip()]
        elif isinstance(v, list):
            out[k] = [str(s).strip() for s in v if str(s).strip()]
    if title and "title" not in out:
        out["title"] = title
    return out


class ChunkBuilder:
    """The chunks of one file from its cuts: the one place a :class:`Chunk` is made, whatever the strategy."""

    def __init__(self, doc: Document, root: str, rel_path: str, context: str, path_words: bool) -> None:
        self.doc = doc  # the parsed file: its sections, title and path
        self.root = root  # the indexed folder, part of each chunk's id
        self.rel_path = rel_path  # the file's path under root, part of each chunk's id
        self.mode = context  # chunk.context: what the header holds
        self.meta = _frontmatter_fields(doc.metadata, doc.title)  # every chunk's metadata
        if doc.aliases:  # a vault note's: searchable, and shown with its topics
            self.meta["aliases"] = list(doc.aliases)
        self.topics = _topics(self.meta)  # the frontmatter line of the file's first chunk
        self.where = _path_words(rel_path) if path_words else ""  # the file's path words (chunk.path_words), or ""
        links = doc.links or []
        self.by_line = sorted(range(len(links)), key=lambda i: links[i][0])  # a vault note's links, by their line
        self.lines = [links[i][0] for i in self.by_line]  # their lines, in that order: a chunk's are found by bisection

    def header(self, si: int, first: bool) -> str:
        """The header of a chunk of section ``si``; ``first``: the file's first chunk."""
        d = self.doc
        return _context(self.mode, d.title, _heading_path(d, d.sections[si]), self.topics if first else "", self.where)

    def chunks(self, cuts: Iterable[Cut]) -> list[Chunk]:
        """One chunk per cut, in order: a chunk's position is its index."""
        doc = self.doc
        chunks: list[Chunk] = []
        for position, (text, si, line_start, line_end) in enumerate(cuts):
            section = doc.sections[si]
            path = _heading_path(doc, section)
            ctx = _context(self.mode, doc.title, path, self.topics if position == 0 else "", self.where)
            embed = f"{ctx}\n\n{text}" if ctx else text
            text_hash = content_hash(embed)
            chunks.append(
                Chunk(
                    id=chunk_id(self.root, self.rel_path, position, text_hash),
                    text=text,
                    context=ctx,
                    path=doc.path,
                    rel_path=self.rel_path,
                    root=self.root,
                    heading_path=path,
                    level=section.level,
                    position=position,
                    content_hash=text_hash,
                    page=section.page,
                    line_start=line_start,
                    line_end=line_end,
                    metadata=self._metadata(si, line_start, line_end),
                )
            )
        return chunks

    def _metadata(self, si: int, line_start: int | None, line_end: int | None) -> dict[str, Any]:
        """A chunk's metadata: the file's, and for a vault note the notes its lines (or its heading) link to."""
        meta = dict(self.meta)
        links = self.doc.links
        if links is not None:
            held = set(self._on_lines(line_start, line_end) if line_start is not None and line_end is not None else ())
            heading = self.doc.sections[si].heading_line
            if heading is not None:
                held.update(self._on_lines(heading, heading))
            meta["links"] = list(dict.fromkeys(links[i][1] for i in sorted(held)))  # in the note's order
        return meta

    def _on_lines(self, first: int, last: int) -> list[int]:
        """The indexes (in ``doc.links``) of the links on lines ``first`` to ``last``."""
        return self.by_line[bisect.bisect_left(self.lines, first) : bisect.bisect_right(self.lines, last)]
