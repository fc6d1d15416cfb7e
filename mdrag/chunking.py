"""Sections to chunks: headings first, then size with overlap, then the model's window.

Pure functions, no I/O. A chunk never crosses a heading. Inside a section,
paragraphs, tables and fenced code blocks are packed greedily up to
``size``; consecutive chunks share up to ``overlap`` of trailing text. A code
block or table that fits in one chunk is never cut. Finally, a chunk whose
embedded text (heading context + body) is longer than the embedder's window is
split again, because the model silently drops everything past it.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from mdrag.errors import ConfigError
from mdrag.types import FRONTMATTER_FIELDS, Block, Chunk, Document

__all__ = ["ChunkSettings", "chunk_document", "chunk_id", "content_hash", "split_text"]

TokenCounter = Callable[[Sequence[str]], list[int]]
Sizes = Callable[[Sequence[str]], list[int]]  # the size of each text, in one call: lengths or token counts

# Separators tried in order when text must be cut: paragraph, line, sentence, word, character.
_SEPARATORS = ("\n\n", "\n", ". ", " ", "")
_MAX_CONTEXT_CHARS = 200  # a heading trail longer than this is shortened
_MAX_TOPICS_CHARS = 400  # so is the frontmatter line
_TOPIC_FIELDS = ("description", "summary", "tags", "topics", "keywords", "llm_hints")
_COUNT_BATCH = 256  # texts per count_tokens call
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
    # Off by default: measured, it lowers hybrid nDCG@10 on the Hugo questions.
    path_words: bool = False

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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    atomic: bool  # code block or table: not cut if it fits, not used as overlap
    line_start: int | None
    line_end: int | None


def _units(blocks: Sequence[Block]) -> list[_Unit]:
    """Paragraphs of text blocks, and whole code blocks and tables."""
    out: list[_Unit] = []
    for b in blocks:
        if b.kind != "text":
            out.append(_Unit(b.text, True, b.line_start, b.line_end))
            continue
        line = b.line_start
        for para in b.text.split("\n\n"):
            n_lines = para.count("\n") + 1
            if para.strip():
                end = line + n_lines - 1 if line is not None else None
                out.append(_Unit(para.strip("\n"), False, line, end))
            if line is not None:
                line += n_lines + 1
    return out


def split_text(text: str, limit: int, overlap: int = 0, measure: Callable[[str], int] = len) -> list[str]:
    """Cut ``text`` into pieces of at most ``limit`` (as ``measure`` counts),
    preferring paragraph, then line, sentence and word boundaries, with about
    ``overlap`` of shared text between neighbours."""
    if measure(text) <= limit:
        return [text]
    return _cut(text, limit, overlap, lambda texts: [measure(t) for t in texts])


def _cut(text: str, limit: int, overlap: int, sizes: Sizes) -> list[str]:
    """:func:`split_text` of a text known to be over ``limit``, sized by ``sizes``.

    Every level's parts are sized in one call, and so are its pieces when they
    are checked: a tokenizer called once per word or character is what made a
    large file without paragraph breaks slow.
    """
    for sep in _SEPARATORS:
        parts = text.split(sep) if sep else list(text)
        parts = [p + sep for p in parts[:-1]] + [parts[-1]] if sep else parts
        parts = [p for p in parts if p]
        if len(parts) > 1:
            break
    pieces: list[str] = []
    window: deque[tuple[str, int]] = deque()  # parts of the piece being built, with their sizes
    total = 0
    for part, size in zip(parts, sizes(parts)):
        if size > limit:  # a part too big for any piece: flush, then cut it finer
            if window:
                pieces.append("".join(p for p, _ in window))
                window.clear()
                total = 0
            pieces.extend(_cut(part, limit, overlap, sizes))
            continue
        if total + size > limit and window:
            pieces.append("".join(p for p, _ in window))
            while window and (total > overlap or total + size > limit):
                total -= window.popleft()[1]
            if not window and overlap:  # parts longer than the overlap: share its last words
                tail = _word_tail(pieces[-1], min(overlap, limit - size), sizes)
                if tail:
                    window.append((tail + " ", sizes([tail + " "])[0]))
                    total = window[0][1]
        window.append((part, size))
        total += size
    if window:
        pieces.append("".join(p for p, _ in window))
    # Measures that are not additive (tokens) can overshoot: check and cut again.
    stripped = [p for p in (p.strip() for p in pieces) if p]
    out: list[str] = []
    for p, size in zip(stripped, sizes(stripped)):
        out.extend([p] if size <= limit or len(p) <= 1 else _cut(p, limit, 0, sizes))
    return out


def _pack(units: list[_Unit], size: int, overlap: int, sizes: Sizes) -> list[_Unit]:
    """Greedy packing of units into chunk-sized units, with text overlap."""
    flat: list[tuple[_Unit, int]] = []  # units no larger than a chunk, with their sizes
    for u, u_size in zip(units, sizes([u.text for u in units])):
        if u_size <= size:
            flat.append((u, u_size))
        else:
            pieces = _cut(u.text, size, 0 if u.atomic else overlap, sizes)
            flat.extend((_Unit(p, False, u.line_start, u.line_end), n) for p, n in zip(pieces, sizes(pieces)))
    chunks: list[_Unit] = []
    cur: list[_Unit] = []
    cur_size = 0
    for u, u_size in flat:
        if cur and cur_size + 2 + u_size > size:
            chunks.append(_join(cur))
            tail = _overlap_tail(cur, overlap, size - u_size - 2, sizes)
            cur = [tail] if tail else []
            cur_size = sizes([tail.text])[0] if tail else 0
        cur.append(u)
        cur_size += u_size + (2 if len(cur) > 1 else 0)
    if cur:
        chunks.append(_join(cur))
    return chunks


def _word_tail(text: str, budget: int, sizes: Sizes) -> str:
    """The last words of ``text`` that fit in ``budget`` (not all of them).

    Tails one word longer each are sized in growing groups, one call per group,
    up to the first that does not fit.
    """
    words = text.split()
    fit = 0  # words in the longest tail known to fit
    group = 8
    while fit < len(words):
        lengths = range(fit + 1, min(len(words), fit + group) + 1)
        fits = [n <= budget for n in sizes([" ".join(words[-k:]) for k in lengths])]
        if not all(fits):
            fit += fits.index(False)
            break
        fit = lengths[-1]
        group *= 2
    return " ".join(words[-fit:]) if 0 < fit < len(words) else ""


def _overlap_tail(units: list[_Unit], overlap: int, room: int, sizes: Sizes) -> _Unit | None:
    """The end of the previous chunk's last text unit, cut at a word boundary."""
    budget = min(overlap, room)
    last = units[-1]
    if budget <= 0 or last.atomic:
        return None
    text = _word_tail(last.text, budget, sizes)  # a whole paragraph is not repeated
    if not text:
        return None
    return _Unit(text, False, last.line_end, last.line_end)


def _join(units: list[_Unit]) -> _Unit:
    starts = [u.line_start for u in units if u.line_start is not None]
    ends = [u.line_end for u in units if u.line_end is not None]
    return _Unit(
        "\n\n".join(u.text for u in units),
        False,
        min(starts) if starts else None,
        max(ends) if ends else None,
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
) -> list[Chunk]:
    """Cut a parsed document into chunks.

    ``count_tokens``/``max_tokens`` come from the embedder: with them, no chunk's
    embedded text is longer than the model's window, and ``settings.unit ==
    "tokens"`` counts sizes in the model's tokens.
    """
    settings = settings or ChunkSettings()
    if settings.unit == "tokens" and count_tokens is None:
        raise ConfigError("chunk.unit 'tokens' needs an embedder that can count tokens")

    sizes = _token_counts(count_tokens) if count_tokens is not None and settings.unit == "tokens" else _lengths
    meta = _frontmatter_fields(doc.metadata, doc.title)
    topics = _topics(meta)
    where = _path_words(rel_path) if settings.path_words else ""
    pieces: list[tuple[int, _Unit]] = []  # (section index, unit)
    for si, section in enumerate(doc.sections):
        for u in _pack(_units(section.blocks), settings.size, settings.overlap, sizes):
            if u.text.strip():
                pieces.append((si, u))

    if count_tokens is not None and max_tokens is not None:
        pieces = _fit_window(doc, pieces, count_tokens, max_tokens, settings.context, topics, where)

    chunks: list[Chunk] = []
    for n, (si, u) in enumerate(pieces):
        section = doc.sections[si]
        ctx = _context(settings.context, doc.title, section.heading_path, topics if n == 0 else "", where)
        position = len(chunks)
        embed = f"{ctx}\n\n{u.text}" if ctx else u.text
        text_hash = content_hash(embed)
        chunks.append(
            Chunk(
                id=chunk_id(root, rel_path, position, text_hash),
                text=u.text,
                context=ctx,
                path=doc.path,
                rel_path=rel_path,
                root=root,
                heading_path=list(section.heading_path),
                level=section.level,
                position=position,
                content_hash=text_hash,
                page=section.page,
                line_start=u.line_start,
                line_end=u.line_end,
                metadata=dict(meta),
            )
        )
    return chunks


def _fit_window(
    doc: Document,
    pieces: list[tuple[int, _Unit]],
    count_tokens: TokenCounter,
    max_tokens: int,
    mode: str,
    topics: str,
    where: str,
) -> list[tuple[int, _Unit]]:
    """Split every piece whose embedded text exceeds the model's window."""
    contexts = [
        _context(mode, doc.title, doc.sections[si].heading_path, topics if n == 0 else "", where)
        for n, (si, _) in enumerate(pieces)
    ]
    embeds = [f"{c}\n\n{u.text}" if c else u.text for c, (_, u) in zip(contexts, pieces)]
    counts = _token_counts(count_tokens)(embeds)
    # The bodies and contexts of the pieces over the window, counted together.
    body_tokens = _token_counts(count_tokens, -2)  # without the [CLS] and [SEP] of each text
    over = [i for i, n in enumerate(counts) if n > max_tokens]
    body_counts = dict(zip(over, body_tokens([pieces[i][1].text for i in over])))
    ctx_counts = dict(zip(over, body_tokens([contexts[i] for i in over])))
    out: list[tuple[int, _Unit]] = []
    for i, ((si, u), ctx) in enumerate(zip(pieces, contexts)):
        if i not in body_counts:
            out.append((si, u))
            continue
        # Room left for the body: the window less the context line and a margin
        # for tokens that merge or split at the seam.
        room = max(16, max_tokens - 2 - (ctx_counts[i] if ctx else 0) - 4)
        parts = [u.text] if body_counts[i] <= room else _cut(u.text, room, 0, body_tokens)
        out.extend((si, _Unit(part, False, u.line_start, u.line_end)) for part in parts)
    return out


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
