"""Sections to chunks: headings first, then size with overlap, then the model's window.

Pure functions, no I/O. A chunk never crosses a heading. Inside a section,
paragraphs, tables and fenced code blocks are packed greedily up to
``size``; consecutive chunks share up to ``overlap`` of trailing text, never
more than a third of either (no chunk is mostly a copy of its neighbour). A code
block or table that fits the model's window (or, without one, a chunk) is
never cut, even when it is larger than ``size``. A chunk whose embedded text
(heading context + body) is longer than the embedder's window is split again,
at a block's edge where it can be, because the model silently drops
everything past it. A remainder too small to stand alone joins its neighbour
(or the two share the text evenly), and no chunk is only the overlap of the one
before it. Every chunk is a slice of its section's text, so its line span is
the lines it holds. Text before a file's first heading is under the file's title.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Literal

from mdrag.chunking_langchain import Truncated, langchain_chunks, splitter_class
from mdrag.errors import ConfigError
from mdrag.types import FRONTMATTER_FIELDS, Block, Chunk, Document, Section

__all__ = ["ChunkSettings", "Truncated", "chunk_document", "chunk_id", "content_hash", "split_text"]

TokenCounter = Callable[[Sequence[str]], list[int]]
Sizes = Callable[[Sequence[str]], list[int]]  # the size of each text, in one call: lengths or token counts

# Separators tried in order when text must be cut: paragraph, line, sentence, word, character.
_SEPARATORS = ("\n\n", "\n", ". ", " ", "")
_MAX_CONTEXT_CHARS = 200  # a heading trail longer than this is shortened
_MAX_TOPICS_CHARS = 400  # so is the frontmatter line
_TOPIC_FIELDS = ("description", "summary", "tags", "topics", "keywords", "llm_hints")
_COUNT_BATCH = 256  # texts per count_tokens call
_SHARED = 3  # neighbouring chunks share at most a third of either one's text
_WORD_START = re.compile(r"(?<=\s)\S")
# Path parts that name no topic: site roots, the language folder, index files.
_PATH_NOISE = frozenset({"content", "contents", "docs", "doc", "documentation", "src", "en", "index", "readme"})


@dataclass(frozen=True)
class ChunkSettings:
    """How documents are cut. Stored in the manifest: a change means a re-chunk."""

    size: int = 1000
    overlap: int = 200
    unit: Literal["chars", "tokens"] = "chars"
    # What is embedded (and BM25-indexed) before each chunk's text: nothing, the
    # "title > heading path" trail, or the trail plus, on a file's first chunk,
    # its frontmatter topics (description, tags, keywords...).
    context: Literal["none", "headings", "frontmatter"] = "frontmatter"
    # The file's folder and file names, as words, lead that header (not with "none").
    # Off by default: it lowers hybrid nDCG@10 on the Hugo questions (benchmarks/RESULTS.md).
    path_words: bool = False
    # Who cuts: this module (by headings, fitted to the model's window) or LangChain's
    # MarkdownTextSplitter, as md-qa does (mdrag/chunking_langchain.py).
    strategy: Literal["headings", "langchain"] = "headings"

    def __post_init__(self) -> None:
        if self.size < 50:
            raise ConfigError(f"chunk.size must be at least 50, got {self.size}")
        if not 0 <= self.overlap < self.size // 2 + 1:
            raise ConfigError(
                f"chunk.overlap must be between 0 and half of chunk.size ({self.size}), got {self.overlap}"
            )
        if self.unit not in ("chars", "tokens"):
            raise ConfigError(f"chunk.unit must be 'chars' or 'tokens', got {self.unit!r}")
        if self.context not in ("none", "headings", "frontmatter"):
            raise ConfigError(f"chunk.context must be 'none', 'headings' or 'frontmatter', got {self.context!r}")
        if self.strategy not in ("headings", "langchain"):
            raise ConfigError(f"chunk.strategy must be 'headings' or 'langchain', got {self.strategy!r}")
        if self.strategy == "langchain":
            splitter_class()  # installed, or a ConfigError before any file is read

    def as_dict(self) -> dict[str, Any]:
        """The settings as the manifest records them; ``strategy`` only when not the default,
        so that indexes built before it existed are not chunked again."""
        d = asdict(self)
        if self.strategy == "headings":
            del d["strategy"]
        return d


def chunk_id(root: str, rel_path: str, position: int, text_hash: str) -> str:
    """Stable id of the ``position``-th chunk of a file: an unchanged file keeps its ids.

    The chunk's content hash is part of the id, so an edited chunk gets a new
    id: the old one stays searchable until the new state is committed, which
    lets a reload switch atomically (the indexer deletes replaced ids last).
    """
    return hashlib.sha256(f"{root}\x00{rel_path}\x00{position}\x00{text_hash}".encode()).hexdigest()[:32]


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class _Unit:
    text: str
    atomic: bool  # code block, table, or paragraphs around a fence: not cut if it fits, not used as overlap
    line_start: int | None  # the file line of the text's first line
    table: bool = False  # a table may be cut between rows to take in a remainder


# A fence line inside a list item or a quote ("  ```yaml", "> ~~~"): its blank lines do not end a paragraph.
_FENCE = re.compile(r"^[ \t]*(?:(?:[-*+]|\d+[.)])[ \t]+|>[ \t]?)*(`{3,}|~{3,})")


def _fence_after(para: str, fence: str | None) -> str | None:
    """The fence still open after ``para`` (its marker, e.g. "```"), given the one open before it."""
    for line in para.split("\n"):
        m = _FENCE.match(line)
        if not m:
            continue
        mark = m.group(1)
        if fence is None:
            fence = mark
        elif mark[0] == fence[0] and len(mark) >= len(fence) and not line[m.end() :].strip():
            fence = None
    return fence


def _units(blocks: Sequence[Block]) -> list[_Unit]:
    """Paragraphs of text blocks, and whole code blocks and tables.

    The paragraphs of a text block that hold a fence (in a list item, say) stay
    together as one atomic unit: a fence is not cut at its blank lines.
    """
    out: list[_Unit] = []
    for b in blocks:
        if b.kind != "text":
            out.append(_Unit(b.text, True, b.line_start, b.kind == "table"))
            continue
        line = b.line_start
        group: list[str] = []
        fence: str | None = None
        has_fence = False
        for para in b.text.split("\n\n"):
            group.append(para)
            after = _fence_after(para, fence)
            has_fence = has_fence or after is not None or fence is not None
            fence = after
            if fence is not None:
                continue
            text = "\n\n".join(group)
            if text.strip():
                lead = len(text) - len(text.lstrip("\n"))
                start = line + text[:lead].count("\n") if line is not None else None
                out.append(_Unit(text.strip("\n"), has_fence, start))
            if line is not None:
                line += text.count("\n") + 2
            group, has_fence = [], False
        if group and "\n\n".join(group).strip():  # a fence left open runs to the end of the block
            text = "\n\n".join(group)
            lead = len(text) - len(text.lstrip("\n"))
            out.append(_Unit(text.strip("\n"), True, line + lead if line is not None else None))
    return out


class _Text:
    """A section's units joined by blank lines: every piece of the section is a slice of ``text``."""

    def __init__(self, units: list[_Unit]) -> None:
        self.text = "\n\n".join(u.text for u in units)  # what the pieces are sliced from
        self.spans: list[tuple[int, int]] = []  # where each unit lies in ``text``
        pos = 0
        for u in units:
            self.spans.append((pos, pos + len(u.text)))
            pos += len(u.text) + 2
        self.units = units

    def line(self, pos: int) -> int | None:
        """The file line of the character at ``pos`` (which is not in a gap between units)."""
        k = max(bisect.bisect_right([a for a, _ in self.spans], pos) - 1, 0)
        first = self.units[k].line_start
        return None if first is None else first + self.text.count("\n", self.spans[k][0], pos)

    def atomic(self, lo: int, hi: int, tables: bool = True) -> list[tuple[int, int]]:
        """The spans of the atomic units inside ``lo..hi`` (tables too, or not)."""
        units = zip(self.spans, self.units)
        return [s for s, u in units if u.atomic and (tables or not u.table) and lo <= s[0] and s[1] <= hi]


def _strip(text: str, lo: int, hi: int) -> tuple[int, int]:
    """``lo..hi`` without the whitespace at its ends (``lo == hi`` when it is all whitespace)."""
    piece = text[lo:hi]
    start = len(piece) - len(piece.lstrip())
    return lo + start, lo + len(piece.rstrip()) if piece.strip() else lo


def _positions(text: str, lo: int, hi: int, sep: str, keep: Sequence[tuple[int, int]]) -> list[int]:
    """The places after each ``sep`` inside ``lo..hi`` (every place for ""), none inside a ``keep`` span."""
    if sep:
        found, i = [], text.find(sep, lo, hi)
        while i >= 0:
            found.append(i + len(sep))
            i = text.find(sep, i + len(sep), hi)
    else:
        found = list(range(lo + 1, hi))
    return [p for p in found if lo < p < hi and not any(a < p < b for a, b in keep)]


def _boundaries(text: str, lo: int, hi: int, keep: Sequence[tuple[int, int]]) -> list[int]:
    """Where ``lo..hi`` may be cut: after the coarsest separator found, never inside a ``keep`` span."""
    for sep in _SEPARATORS:
        cuts = _positions(text, lo, hi, sep, keep)
        if cuts:
            return cuts
    return _boundaries(text, lo, hi, ()) if keep else []


def split_text(text: str, limit: int, overlap: int = 0, measure: Callable[[str], int] = len) -> list[str]:
    """Cut ``text`` into pieces of at most ``limit`` (as ``measure`` counts),
    preferring paragraph, then line, sentence and word boundaries, with about
    ``overlap`` of shared text between neighbours."""
    if measure(text) <= limit:
        return [text]
    return [text[a:b] for a, b in _cut(text, 0, len(text), limit, overlap, lambda ts: [measure(t) for t in ts])]


def _cut(
    text: str, lo: int, hi: int, limit: int, overlap: int, sizes: Sizes, keep: Sequence[tuple[int, int]] = ()
) -> list[tuple[int, int]]:
    """:func:`split_text` of ``text[lo:hi]``, known to be over ``limit``, as spans of ``text``.

    Each piece is a slice of the text, so its lines are the source's lines; the
    overlap is the end of the previous piece. No cut falls inside a ``keep``
    span (a block that fits) while there is another place to cut. Every
    level's parts are sized in one call, and so are its pieces when they are
    checked: a tokenizer called once per word or character is what made a
    large file without paragraph breaks slow.
    """

    def kept(a: int, b: int) -> bool:
        a, b = _strip(text, a, b)
        return any(ka <= a and b <= kb for ka, kb in keep)

    edges = [lo, *_boundaries(text, lo, hi, keep), hi]
    parts = list(zip(edges, edges[1:]))
    pieces: list[tuple[int, int]] = []
    window: deque[tuple[int, int, int]] = deque()  # parts of the piece being built: start, end, size
    total = 0
    for (a, b), size in zip(parts, sizes([text[a:b] for a, b in parts])):
        if size > limit:  # a part too big for any piece: flush, then cut it finer (unless it is kept)
            if window:
                pieces.append((window[0][0], window[-1][1]))
                window.clear()
                total = 0
            pieces.extend([(a, b)] if kept(a, b) else _cut(text, a, b, limit, overlap, sizes, keep))
            continue
        if total + size > limit and window:
            prev = (window[0][0], window[-1][1])
            pieces.append(prev)
            while window and (total > overlap or total + size > limit):
                total -= window.popleft()[2]
            if not window and overlap:  # parts longer than the overlap: share the previous piece's last words
                start = _word_tail(text, *prev, min(overlap, limit - size), sizes)
                if start is not None:
                    window.append((start, a, sizes([text[start:a]])[0]))
                    total = window[0][2]
        window.append((a, b, size))
        total += size
    if window:
        pieces.append((window[0][0], window[-1][1]))
    # Measures that are not additive (tokens) can overshoot: check and cut again.
    stripped = [s for s in (_strip(text, a, b) for a, b in pieces) if s[0] < s[1]]
    out: list[tuple[int, int]] = []
    for (a, b), size in zip(stripped, sizes([text[a:b] for a, b in stripped])):
        fine = size <= limit or b - a <= 1 or kept(a, b)
        out.extend([(a, b)] if fine else _cut(text, a, b, limit, 0, sizes, keep))
    return out


def _word_tail(text: str, lo: int, hi: int, budget: int, sizes: Sizes) -> int | None:
    """Where the last words of ``text[lo:hi]`` that fit in ``budget`` (not all of them) start.

    Tails one word longer each are sized in growing groups, one call per group,
    up to the first that does not fit.
    """
    if budget <= 0:
        return None
    starts = [m.start() for m in re.finditer(r"\S+", text[lo:hi])]
    fit = 0  # words in the longest tail known to fit
    group = 8
    while fit < len(starts):
        lengths = range(fit + 1, min(len(starts), fit + group) + 1)
        tails = [text[lo + starts[-k] : hi].rstrip() for k in lengths]
        fits = [n <= budget for n in sizes(tails)]
        if not all(fits):
            fit += fits.index(False)
            break
        fit = lengths[-1]
        group *= 2
    return lo + starts[-fit] if 0 < fit < len(starts) else None


def _pack(
    sec: _Text, size: int, overlap: int, sizes: Sizes, fits: Callable[[int, int], bool] | None
) -> list[tuple[int, int]]:
    """Greedy packing of a section's units into chunk-sized spans, with text overlap.

    ``fits`` tells whether a span fits the model's window: an atomic unit that
    does is kept whole even when it is larger than ``size``.
    """
    flat: list[tuple[int, int, int, bool]] = []  # spans no larger than a chunk: start, end, size, atomic
    for (a, b), u, u_size in zip(sec.spans, sec.units, sizes([u.text for u in sec.units])):
        if u_size <= size or (u.atomic and fits is not None and fits(a, b)):
            flat.append((a, b, u_size, u.atomic))
        else:
            pieces = _cut(sec.text, a, b, size, 0 if u.atomic else overlap, sizes)
            flat.extend((p, q, n, False) for (p, q), n in zip(pieces, sizes([sec.text[p:q] for p, q in pieces])))
    chunks: list[tuple[int, int]] = []
    cur: list[tuple[int, int, int, bool]] = []
    cur_size = 0
    for a, b, u_size, atomic in flat:
        if cur and cur_size + 2 + u_size > size:
            chunks.append((cur[0][0], cur[-1][1]))
            la, lb, _, l_atomic = cur[-1]
            cur, cur_size = [], 0
            # The end of the last text unit, cut at a word boundary; a piece of a cut unit has its own.
            start = None if l_atomic or a < lb else _word_tail(sec.text, la, lb, min(overlap, size - u_size - 2), sizes)
            if start is not None:
                cur_size = sizes([sec.text[start:lb]])[0]
                cur = [(start, lb, cur_size, False)]
        cur.append((a, b, u_size, atomic))
        cur_size += u_size + (2 if len(cur) > 1 else 0)
    if cur:
        chunks.append((cur[0][0], cur[-1][1]))
    return chunks


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


def chunk_document(
    doc: Document,
    root: str,
    rel_path: str,
    settings: ChunkSettings | None = None,
    count_tokens: TokenCounter | None = None,
    max_tokens: int | None = None,
    truncated: Truncated | None = None,
) -> list[Chunk]:
    """Cut a parsed document into chunks.

    ``count_tokens``/``max_tokens`` come from the embedder: with them, no chunk's
    embedded text is longer than the model's window (strategy headings; with
    langchain, ``truncated`` counts those that are), a block that fits the
    window is never cut, and ``settings.unit == "tokens"`` counts sizes in the
    model's tokens.
    """
    settings = settings or ChunkSettings()
    if settings.unit == "tokens" and count_tokens is None:
        raise ConfigError("chunk.unit 'tokens' needs an embedder that can count tokens")
    if settings.strategy == "langchain":
        return _langchain(doc, root, rel_path, settings, count_tokens, max_tokens, truncated)

    sizes = _token_counts(count_tokens) if count_tokens is not None and settings.unit == "tokens" else _lengths
    meta = _frontmatter_fields(doc.metadata, doc.title)
    topics = _topics(meta)
    where = _path_words(rel_path) if settings.path_words else ""
    window = None
    if count_tokens is not None and max_tokens is not None:
        window = _Window(doc, count_tokens, max_tokens, settings.context, topics, where)
    texts = [_Text(_units(section.blocks)) for section in doc.sections]
    pieces: list[tuple[int, int, int]] = []  # (section index, start, end in its text)
    for si, sec in enumerate(texts):
        fits = None
        if window is not None:
            fits = partial(window.fits_span, sec, si, not pieces)
        pieces.extend((si, a, b) for a, b in _pack(sec, settings.size, settings.overlap, sizes, fits))
    pieces = [(si, *_strip(texts[si].text, a, b)) for si, a, b in pieces]
    pieces = [(si, a, b) for si, a, b in pieces if a < b]
    if window is not None:
        pieces = window.fit(pieces, texts)
    pieces = _trim_overlaps(pieces, texts)
    pieces = _merge_remainders(pieces, texts, settings.size, sizes, window)
    pieces = _trim_overlaps(pieces, texts)  # a boundary moved between two pieces can leave one mostly overlap

    chunks: list[Chunk] = []
    for n, (si, a, b) in enumerate(pieces):
        section, sec = doc.sections[si], texts[si]
        path = _heading_path(doc, section)
        ctx = _context(settings.context, doc.title, path, topics if n == 0 else "", where)
        position = len(chunks)
        text = sec.text[a:b]
        embed = f"{ctx}\n\n{text}" if ctx else text
        text_hash = content_hash(embed)
        chunks.append(
            Chunk(
                id=chunk_id(root, rel_path, position, text_hash),
                text=text,
                context=ctx,
                path=doc.path,
                rel_path=rel_path,
                root=root,
                heading_path=path,
                level=section.level,
                position=position,
                content_hash=text_hash,
                page=section.page,
                line_start=sec.line(a),
                line_end=sec.line(b - 1),
                metadata=dict(meta),
            )
        )
    return chunks


def _langchain(
    doc: Document,
    root: str,
    rel_path: str,
    settings: ChunkSettings,
    count_tokens: TokenCounter | None,
    max_tokens: int | None,
    truncated: Truncated | None,
) -> list[Chunk]:
    """``chunk.strategy: langchain``: MarkdownTextSplitter's chunks, with the headings strategy's metadata."""
    counter = count_tokens if settings.unit == "tokens" else None
    pieces = langchain_chunks(doc, settings.size, settings.overlap, counter)
    meta = _frontmatter_fields(doc.metadata, doc.title)
    topics = _topics(meta)
    where = _path_words(rel_path) if settings.path_words else ""
    chunks: list[Chunk] = []
    for position, (text, si, line_start, line_end) in enumerate(pieces):
        section = doc.sections[si]
        path = _heading_path(doc, section)
        ctx = _context(settings.context, doc.title, path, topics if position == 0 else "", where)
        embed = f"{ctx}\n\n{text}" if ctx else text
        text_hash = content_hash(embed)
        chunks.append(
            Chunk(
                id=chunk_id(root, rel_path, position, text_hash),
                text=text,
                context=ctx,
                path=doc.path,
                rel_path=rel_path,
                root=root,
                heading_path=path,
                level=section.level,
                position=position,
                content_hash=text_hash,
                page=section.page,
                line_start=line_start,
                line_end=line_end,
                metadata=dict(meta),
            )
        )
    if truncated is not None and count_tokens is not None and max_tokens is not None:
        counts = _token_counts(count_tokens)([c.embed_text for c in chunks])
        truncated.chunks += len(chunks)
        truncated.over += sum(n > max_tokens for n in counts)
        truncated.max_tokens = max_tokens
    return chunks


class _Window:
    """The embedder's window, and the room a chunk's text has in it after its header."""

    def __init__(
        self, doc: Document, count_tokens: TokenCounter, max_tokens: int, mode: str, topics: str, where: str = ""
    ) -> None:
        self.doc = doc  # for each section's heading path
        self.mode = mode  # chunk.context
        self.topics = topics  # the frontmatter line of the file's first chunk
        self.where = where  # the file's path words (chunk.path_words), or ""
        self.max_tokens = max_tokens
        self.count = _token_counts(count_tokens)
        self.body = _token_counts(count_tokens, -2)  # without the [CLS] and [SEP] of each text
        self.rooms: dict[tuple[int, bool], int] = {}  # (section, first chunk of the file) -> room

    def header(self, si: int, first: bool) -> str:
        d = self.doc
        return _context(self.mode, d.title, _heading_path(d, d.sections[si]), self.topics if first else "", self.where)

    def room(self, si: int, first: bool) -> int:
        """The window less the header and a margin for tokens that merge or split at the seam."""
        if (si, first) not in self.rooms:
            ctx = self.header(si, first)
            self.rooms[si, first] = max(16, self.max_tokens - 2 - (self.body([ctx])[0] if ctx else 0) - 4)
        return self.rooms[si, first]

    def fits(self, si: int, first: bool, texts: Sequence[str]) -> list[bool]:
        """Whether each text, under its header, is within the window (counted exactly, no margin)."""
        ctx = self.header(si, first)
        return [n <= self.max_tokens for n in self.count([f"{ctx}\n\n{t}" if ctx else t for t in texts])]

    def fits_span(self, sec: _Text, si: int, first: bool, a: int, b: int) -> bool:
        return self.fits(si, first, [sec.text[a:b]])[0]

    def fit(self, pieces: list[tuple[int, int, int]], texts: list[_Text]) -> list[tuple[int, int, int]]:
        """Split every piece whose embedded text exceeds the window, at a block's edge where one can."""
        embeds = []
        for n, (si, a, b) in enumerate(pieces):
            ctx = self.header(si, n == 0)
            embeds.append(f"{ctx}\n\n{texts[si].text[a:b]}" if ctx else texts[si].text[a:b])
        over = [n for n, count in enumerate(self.count(embeds)) if count > self.max_tokens]
        bodies = dict(zip(over, self.body([texts[pieces[n][0]].text[pieces[n][1] : pieces[n][2]] for n in over])))
        out: list[tuple[int, int, int]] = []
        for n, (si, a, b) in enumerate(pieces):
            sec, room = texts[si], self.room(si, n == 0)
            if bodies.get(n, 0) <= room:
                out.append((si, a, b))
                continue
            blocks = sec.atomic(a, b)
            keep = [s for s, ok in zip(blocks, self.fits(si, n == 0, [sec.text[p:q] for p, q in blocks])) if ok]
            out.extend((si, p, q) for p, q in _cut(sec.text, a, b, room, 0, self.body, keep))
        return out


def _trim_overlaps(pieces: list[tuple[int, int, int]], texts: list[_Text]) -> list[tuple[int, int, int]]:
    """Overlap cut back, at a word, so that neighbours share at most a third (``_SHARED``) of either one's text.

    The overlap repeats the end of the piece before for continuity; where the
    window had cut that piece short (a paragraph alone), its last 200
    characters made the next piece mostly a copy of it. A piece whose own text
    is tiny keeps only a little overlap, and joins a neighbour as a remainder.
    """
    out = list(pieces)
    for i in range(1, len(out)):
        (ps, pa, pb), (si, a, b) = out[i - 1], out[i]
        if ps != si or not pa < a < pb < b:
            continue
        # shared <= previous / _SHARED, and shared <= (own text + shared) / _SHARED
        room = min((pb - pa) // _SHARED, (b - pb) // (_SHARED - 1))
        if pb - a <= room:
            continue
        text = texts[si].text
        word = _WORD_START.search(text, pb - room, pb) if room > 0 else None
        out[i] = (si, *_strip(text, word.start() if word else pb, b))
    return out


def _merge_remainders(
    pieces: list[tuple[int, int, int]], texts: list[_Text], size: int, sizes: Sizes, window: _Window | None
) -> list[tuple[int, int, int]]:
    """Pieces under a tenth of ``size`` joined to a neighbour; pieces that are only overlap dropped.

    A remainder (the end of a paragraph cut for size, the last rows of a long
    table) joins the previous or next piece of its section when the two fit
    together in the model's window (without one: in ``size`` plus a tenth), so
    a chunk can pass ``size`` by a remainder; when they do not fit, the
    boundary between them moves to their middle. A piece lying inside a
    neighbour adds nothing and is dropped.
    """
    pieces = _drop_inside(pieces)
    minimum = size // 10
    known = dict(zip(pieces, sizes([texts[si].text[a:b] for si, a, b in pieces])))

    def size_of(p: tuple[int, int, int]) -> int:
        if p not in known:
            known[p] = sizes([texts[p[0]].text[p[1] : p[2]]])[0]
        return known[p]

    checked: dict[tuple[int, bool, int, int], bool] = {}  # (section, first, start, end) -> fits

    def fits(si: int, first: bool, spans: Sequence[tuple[int, int]]) -> list[bool]:
        todo = list(dict.fromkeys((a, b) for a, b in spans if (si, first, a, b) not in checked))
        parts = [texts[si].text[a:b] for a, b in todo]
        ok = window.fits(si, first, parts) if window is not None else [n <= size + minimum for n in sizes(parts)]
        checked.update(((si, first, a, b), f) for (a, b), f in zip(todo, ok))
        return [checked[si, first, a, b] for a, b in spans]

    # The joins to try, checked in one call per section and kind of header.
    joins: dict[tuple[int, bool], list[tuple[int, int]]] = {}
    for i, (si, a, b) in enumerate(pieces):
        if known[pieces[i]] < minimum:
            for j in (i - 1, i + 1):
                if 0 <= j < len(pieces) and pieces[j][0] == si:
                    span = (min(a, pieces[j][1]), max(b, pieces[j][2]))
                    joins.setdefault((si, min(i, j) == 0), []).append(span)
    for (si, first), spans in joins.items():
        fits(si, first, spans)

    out = list(pieces)
    i = 0
    while i < len(out):
        si, a, b = out[i]
        if size_of(out[i]) >= minimum:
            i += 1
            continue
        near = [j for j in (i - 1, i + 1) if 0 <= j < len(out) and out[j][0] == si]
        # Both joins, and the joins with the pieces after them, in one call: a run of remainders joins one by one.
        direct = {(min(i, j) == 0, min(a, out[j][1]), max(b, out[j][2])) for j in near}
        if any((si, *d) not in checked for d in direct):
            ends = [out[t][2] for t in range(i, min(i + 18, len(out))) if out[t][0] == si]
            for first, lo, _ in direct:
                fits(si, first, [(lo, max(b, hi)) for hi in ends])
        for j in near:
            k = min(i, j)
            lo, hi = min(a, out[j][1]), max(b, out[j][2])
            if fits(si, k == 0, [(lo, hi)])[0]:
                out[k : k + 2] = [(si, lo, hi)]
                i = k  # joined to another remainder, it may still be one
                break
        else:
            if near:
                k = min(i, near[0])
                lo, hi = out[k][1], out[k + 1][2]
                cut = _halve(texts[si], lo, hi, minimum, sizes, partial(fits, si, k == 0))
                if cut is not None:
                    out[k : k + 2] = [(si, lo, cut[0]), (si, cut[1], hi)]
            i += 1

    return _drop_inside(out)


def _drop_inside(pieces: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``pieces`` less those that lie inside a neighbour (only overlap), and less the second of two equal ones.

    Two pieces are equal where the window cut the same text off the end of one
    chunk and the start of the next (a list item that was all the overlap).
    """

    def inside(p: tuple[int, int, int], q: tuple[int, int, int]) -> bool:
        return p[0] == q[0] and q[1] <= p[1] and p[2] <= q[2]

    out: list[tuple[int, int, int]] = []
    for p, after in zip(pieces, [*pieces[1:], None]):
        if not (out and inside(p, out[-1])) and not (after is not None and after != p and inside(p, after)):
            out.append(p)
    return out


def _halve(
    sec: _Text,
    lo: int,
    hi: int,
    minimum: int,
    sizes: Sizes,
    fits: Callable[[Sequence[tuple[int, int]]], list[bool]],
) -> tuple[int, int] | None:
    """Where to cut ``lo..hi`` in two pieces that both fit: (end of the first, start of the second).

    The coarsest separator that allows it, nearest the middle; never inside a
    block that fits, but between the rows of a table (rather than leave a
    remainder alone).
    """
    blocks = sec.atomic(lo, hi, tables=False)
    keep = [s for s, ok in zip(blocks, fits(blocks)) if ok]
    mid = (lo + hi) / 2
    for sep in _SEPARATORS:
        cuts = sorted(_positions(sec.text, lo, hi, sep, keep), key=lambda p: abs(p - mid))[:32]
        pairs = [(_strip(sec.text, lo, p), _strip(sec.text, p, hi)) for p in cuts]
        spans = [s for pair in pairs for s in pair]
        ok = [f and n >= minimum for f, n in zip(fits(spans), sizes([sec.text[a:b] for a, b in spans]))]
        for c, (left, right) in enumerate(pairs):
            if ok[2 * c] and ok[2 * c + 1]:
                return left[1], right[0]
    return None


def _lengths(texts: Sequence[str]) -> list[int]:
    return [len(t) for t in texts]


def _token_counts(count_tokens: TokenCounter, offset: int = 0) -> Sizes:
    """``count_tokens`` (plus ``offset`` each), each distinct text counted once, at most
    ``_COUNT_BATCH`` texts per call.

    A text cut into characters or words repeats the same parts many times; and a
    tokenizer holds the encodings of all the texts of one call at once (one
    call for every chunk of a large file took hundreds of megabytes).
    """

    def sizes(texts: Sequence[str]) -> list[int]:
        distinct = list(dict.fromkeys(texts))
        counts: list[int] = []
        for i in range(0, len(distinct), _COUNT_BATCH):
            counts.extend(count_tokens(distinct[i : i + _COUNT_BATCH]))
        known = {t: n + offset for t, n in zip(distinct, counts)}
        return [known[t] for t in texts]

    return sizes
