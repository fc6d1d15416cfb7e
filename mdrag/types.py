"""Plain data passed between the parts of mdrag: no I/O here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["Block", "Chunk", "Document", "SearchResult", "Section", "FRONTMATTER_FIELDS"]

#: Frontmatter fields that every chunk carries (markdown-rag-milvus.md FR-005).
FRONTMATTER_FIELDS = ("title", "description", "tags", "topics", "keywords", "summary", "llm_hints")

BlockKind = Literal["text", "code", "table"]


@dataclass
class Block:
    """A run of body text, a fenced code block or a table inside a section.

    Code blocks keep their fences (```lang ... ```) in ``text`` so that a chunk
    shows them as the source did; the chunker never cuts one that fits.
    """

    text: str
    kind: BlockKind = "text"
    language: str | None = None
    line_start: int | None = None  # 1-based first line in the source file (or the text written out), if known
    line_end: int | None = None  # 1-based last line in the source file (or the text written out), if known


@dataclass
class Section:
    """The content under one heading (or before the first heading: level 0)."""

    heading_path: list[str]  # titles from the top heading down to this one
    level: int  # heading level 1-6; 0 for text before any heading
    blocks: list[Block] = field(default_factory=list)
    page: int | None = None  # 1-based page number (PDF)
    heading_line: int | None = None  # 1-based source line of the heading that starts it, if known

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks)


@dataclass
class Document:
    """A parsed file: frontmatter/metadata plus its sections in reading order."""

    path: str  # absolute path of the source file
    sections: list[Section]
    metadata: dict[str, Any] = field(default_factory=dict)  # frontmatter or format metadata
    title: str | None = None
    warnings: list[str] = field(default_factory=list)  # non-fatal problems, logged by the indexer
    encoding: str | None = None  # what a text format was decoded with: "utf-8", "cp1252"...; None for PDF, DOCX
    # A notes vault's note only (mdrag.parsers.vault): its frontmatter aliases, and the (file line, note
    # as written) of each [[link]] and ![[embed]] in it; ``links`` None: not read as a vault note.
    aliases: list[str] = field(default_factory=list)
    links: list[tuple[int, str]] | None = None
    # True: its blocks' lines count lines of the document written out (mdrag.parsers.written: the text
    # `mdrag get` returns), not of the file, whose parser gave none (HTML, DOCX).
    text_lines: bool = False


@dataclass
class Chunk:
    """One indexed unit of text with everything needed to cite and filter it."""

    id: str  # from root, relative path, position and content_hash (chunking.chunk_id): an edit gives a new id
    text: str  # body text shown to users
    context: str  # header embedded with the text: "title > heading > subheading" (+ frontmatter topics)
    path: str  # absolute file path
    rel_path: str  # path relative to its root folder, with forward slashes
    root: str  # the indexed folder the file was found under
    heading_path: list[str]
    level: int
    position: int  # 0-based index of the chunk within its file
    content_hash: str  # sha256 of embed_text: equal text means equal vector
    page: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # the FRONTMATTER_FIELDS present

    @property
    def embed_text(self) -> str:
        """The text the embedder (and BM25) sees: the context header, then the body."""
        return f"{self.context}\n\n{self.text}" if self.context else self.text


@dataclass
class SearchResult:
    """One ranked hit. ``to_dict()`` gives its fields as JSON values; what the front ends show of it is
    :func:`mdrag.retrieval.shown.result_fields` (``score`` there is :attr:`order_score`)."""

    text: str
    path: str
    rel_path: str
    score: float  # cosine similarity clipped to 0..1, in every mode (the threshold applies to it); not the order
    heading_path: list[str]
    chunk_id: str
    page: int | None = None
    line_start: int | None = None
    line_end: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    rank_score: float | None = None  # what ranked it: cosine (dense), BM25, or the fused score (hybrid)
    dense_rank: int | None = None  # 1-based rank among the dense candidates; None: not among them, or bm25 mode
    bm25_rank: int | None = None  # 1-based rank among the BM25 candidates; None: not among them, or dense mode
    rerank_score: float | None = None  # the reranker's score (rerank.*), which ordered it; None: not reranked
    # The other files of the index with the same bytes, (path, path relative to its folder): indexed once, they
    # share its chunks (mdrag.ingest.copies).
    copies: list[tuple[str, str]] = field(default_factory=list)
    # The other HTML pages of its folder that hold a passage of this chunk, left out of their own chunks (kept
    # on this page only: mdrag.ingest.passages), (path, path relative to its folder).
    also: list[tuple[str, str]] = field(default_factory=list)
    # search.per_page: the other sections of its file that the search kept, best first, where the file had taken
    # its places in the list (they are not counted in k)
    sections: list[SearchResult] = field(default_factory=list)

    @property
    def heading(self) -> str:
        return " > ".join(self.heading_path)

    @property
    def order_score(self) -> float:
        """The score that put it in its place: the reranker's where it reranked it, else ``rank_score`` (the
        fused score in hybrid mode, BM25's in bm25 mode, the cosine in dense; raised where a vault's links
        lifted it), else the cosine. A search's results are in decreasing order of it, but in a reranked
        search: the rows it reranked come first, then any it did not (past ``rerank.top_n``) in fused order."""
        if self.rerank_score is not None:
            return self.rerank_score
        return self.rank_score if self.rank_score is not None else self.score

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["heading"] = self.heading
        return d
