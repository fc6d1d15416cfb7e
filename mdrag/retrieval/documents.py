"""Whole documents for readers (agents through MCP, `mdrag get`, :meth:`mdrag.index.Index.get`): a
document the index holds, or part of it, by reference.

A reference (``ref``) is ``TARGET``, ``TARGET:LINES`` or ``TARGET#SECTION``:

- ``TARGET``: the file's path relative to one of the index's folders (a search result's ``rel_path``
  and ``ref``), its absolute path, the id of one of its chunks (a search result's ``chunk_id``), or a
  glob over the relative paths (``docs/api/*.md``: ``*`` and ``?`` stay within a folder, ``**``
  crosses folders);
- ``LINES``: ``10-40`` (both included), or ``10`` and ``10-`` (from line 10 to the end);
- ``SECTION``: a heading's text (``#Menus``) or a heading path (``#Configuration > Menus``), matched
  without regard to case or spacing: the section under the first such heading, subsections included;
  in a PDF, ``#page=3`` or ``#page=3-5`` too.

Only the files the index holds (its manifest) are read: a file of an indexed folder that was not
indexed (``.env``, a hidden, excluded or unsupported file) never is. A path that leaves the index's
folders (``..``, an absolute path elsewhere) is refused, and so is a file that now leads out of its
folder (a symbolic link put in its place).

The document is the file as it is on disk now, not the stored chunks: an agent reads it to quote or
edit it, and chunks are cut pieces with context headers. When the file's sha256 differs from the
manifest's, the part says so (``changed``): search results may point at lines that have moved
(`mdrag index` brings the index up to date). A format whose parser gives source lines (Markdown) is
returned as the file's text, so that its line numbers are the search results'; another (PDF, DOCX,
HTML) as the text its parser reads, headings written as Markdown headings and, in a PDF, each page's
start marked ``[page N]``: its line numbers count lines of that text (``source_lines`` False), and
so do the ``line_start``/``line_end`` of its chunks (mdrag.parsers.written).

One call returns at most :data:`~mdrag.knobs.GET_MAX_CHARS` characters of :data:`~mdrag.knobs.GET_MAX_FILES`
documents. One document over it is refused, the message saying how to ask for less (a line range, a
section); of several, those that do not fit are listed in ``omitted`` with the same advice, and so are
the references that name no document of the index (``rel_path`` None), while the others are returned.

What one call costs is bounded, however big the files: a Markdown or text file is not parsed for its
lines or the whole of it (its lines are the file's lines), only for a section; a document version
(its path and content hash) is parsed once and kept in a small LRU cache (:data:`_CACHE_ENTRIES`
documents, :data:`_CACHE_CHARS` characters), so that the references of one ``multi_get`` to one
file, or the gets of one file's lines one after another, parse it at most once; one call parses
at most :data:`_MAX_PARSE_BYTES` of files not in the cache (past it, a document is left out, saying
to ask for it again); and a call whose client has gone (its ``stop`` event set) stops before its
next document.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from mdrag.errors import MdragError, ParseError, UnsupportedFormatError
from mdrag.fileio import bytes_sha256
from mdrag.ingest.manifest import FileState, Manifest
from mdrag.knobs import GET_MAX_CHARS, GET_MAX_FILES
from mdrag.parsers import get_parser, keeps_source_lines, parse_file
from mdrag.parsers.text import decode_text
from mdrag.parsers.written import write_out
from mdrag.retrieval.links import notes_of
from mdrag.retrieval.lru import LRUCache
from mdrag.retrieval.shown import as_held
from mdrag.types import Document

__all__ = ["Fetched", "Part", "fetch"]

_CHUNK_ID = re.compile(r"[0-9a-f]{32}")  # mdrag.chunking.build.chunk_id
_LINES = re.compile(r"(\d+)(?:-(\d*))?")
_PAGES = re.compile(r"page=(\d+)(?:-(\d+))?", re.IGNORECASE)
_GLOB = re.compile(r"[*?[]")
_MAX_REF_CHARS = 4096  # a reference is a path and a suffix: PATH_MAX is 4096 on Linux
_NAMED_HEADINGS = 12  # headings a refusal for size names, to pick a section from
_BACK_LINES = 20  # lines above a section's first text searched for its own heading, when it had no text
_CACHE_ENTRIES = 8  # document texts kept, most recently used first
_CACHE_CHARS = 32_000_000  # characters they hold at most (a bigger one is not kept)
_MAX_PARSE_BYTES = 16 * 2**20  # bytes of files one call parses (not found in the cache): past it, left out
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))??(?:[ \t]+#+)?[ \t]*")  # a Markdown heading line
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")  # a code fence's opening or closing line


@dataclass
class Part:
    """One document the index holds, or the part of it a reference asked for (JSON: :meth:`to_dict`)."""

    ref: str  # the reference it answers, as given
    path: str  # absolute path of the file
    rel_path: str  # path relative to its indexed folder
    root: str  # the indexed folder
    text: str  # the document's text, or the part asked for
    line_start: int  # 1-based first line of ``text`` in the document's text
    line_end: int
    lines: int  # lines in the whole document's text
    source_lines: bool  # the lines are the file's own (as search results count them); False: of the parsed text
    section: list[str] | None = None  # heading path of the section asked for
    pages: list[int] | None = None  # first and last page of the text returned (PDF)
    changed: bool = False  # the file differs from what was indexed: search results may point at old lines
    links: list[dict[str, str | None]] | None = None  # asked for: the notes it links to (mdrag.retrieval.links)
    backlinks: list[str] | None = None  # asked for: the notes that link to it

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k not in ("links", "backlinks")}


@dataclass
class Fetched:
    """What one ``get`` returns: the parts, and the documents left out (each ``{ref, rel_path, reason}``; ``rel_path``
    None for a reference that names no document of the index)."""

    parts: list[Part]
    omitted: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"documents": [p.to_dict() for p in self.parts], "omitted": self.omitted}


@dataclass(frozen=True)
class _Ask:
    """One reference, taken apart."""

    ref: str  # as given
    target: str  # the path, chunk id or glob
    lines: tuple[int, int | None] | None = None  # first, last (None: to the end)
    section: str | None = None  # heading text or path
    pages: tuple[int, int] | None = None  # first, last (PDF)


@dataclass
class _Text:
    """A document's text, line by line, and where its sections are."""

    lines: list[str]
    spans: list[tuple[list[str], int, int, int | None]]  # each section: heading path, first and last line, page
    headings: dict[tuple[str, ...], int]  # heading path -> line of its heading
    source: bool  # the file's own lines (False: the text its parser read)
    end: str = ""  # after the last line: "\n" when the file ends with a line break
    parsed: bool = True  # False: the file's lines read without its parser (no spans nor headings)
    named: list[str] | None = None  # the headings a refusal names (:func:`_named`), once worked out

    def chars(self) -> int:
        """About the characters it holds, to bound the cache."""
        return sum(map(len, self.lines)) + len(self.lines)


_cache: LRUCache[_Text] = LRUCache(_CACHE_ENTRIES, _CACHE_CHARS, _Text.chars)


class _Budget:
    """What one call may still parse, and whether its client has gone."""

    def __init__(self, stop: threading.Event | None) -> None:
        self.stop = stop  # set when the client has gone: the call stops before its next document
        self.parsed = 0  # bytes of files parsed so far (not found in the cache)

    def check(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise _Stopped("the request was given up (its client has gone): nothing more is read")

    def spend(self, size: int, name: str) -> None:
        """Count ``size`` bytes to parse; refuse past :data:`_MAX_PARSE_BYTES` (the first file always passes)."""
        if self.parsed and self.parsed + size > _MAX_PARSE_BYTES:
            raise MdragError(
                f"{name} was not read: this call already parsed {self.parsed / 2**20:.1f} MiB of documents "
                f"(at most {_MAX_PARSE_BYTES // 2**20} MiB per call): ask for it in another call"
            )
        self.parsed += size


class _Stopped(MdragError):
    """The call was given up: its client has gone."""


def fetch(
    manifest: Manifest | None,
    index: str,
    refs: str | Sequence[str],
    max_chars: int = GET_MAX_CHARS,
    max_files: int = GET_MAX_FILES,
    stop: threading.Event | None = None,
) -> Fetched:
    """The documents (or parts) ``refs`` name among the files ``manifest`` holds (index ``index``).

    Raises MdragError, saying what to send instead, for a reference that names no file of the index or
    leaves its folders, for more than ``max_files`` documents, and for one document over ``max_chars``;
    and once ``stop`` is set (the caller's client has gone), before the next document.
    """
    if manifest is None or not manifest.files:
        raise MdragError(f"index {index!r} holds no files yet: run `mdrag index DIR` first")
    held = _Held(manifest)
    refs = [refs] if isinstance(refs, str) else list(refs)
    if not refs:
        raise MdragError("no reference given: name a file of the index (as search results give it in `ref`)")
    # Of several references, one that names no document of the index is left out with its reason: the
    # others are still returned. One reference alone fails the call.
    wanted: list[tuple[_Ask, str] | dict[str, Any]] = []
    for ref in refs:
        try:
            ask = held.parse(ref)
            wanted.extend((ask, path) for path in held.resolve(ask.target))
        except MdragError as e:
            if len(refs) == 1:
                raise
            wanted.append({"ref": ref, "rel_path": None, "reason": str(e)})
    found = sum(isinstance(w, tuple) for w in wanted)
    if found > max_files:
        raise MdragError(
            f"{found} documents asked for, more than the {max_files} one get returns: "
            "narrow the glob or name fewer files"
        )
    out = Fetched([])
    left = max_chars
    budget = _Budget(stop)
    for want in wanted:
        if isinstance(want, dict):
            out.omitted.append(want)
            continue
        ask, path = want
        fs = manifest.files[path]
        budget.check()
        try:
            part = _part(ask, path, fs, left, max_chars, found > 1, budget)
        except _Stopped:
            raise
        except MdragError as e:
            if len(wanted) == 1:
                raise
            out.omitted.append({"ref": ask.ref, "rel_path": fs.rel_path, "reason": str(e)})
            continue
        left -= len(part.text)
        out.parts.append(part)
    if not out.parts:
        what = "fits" if found == len(wanted) else "can be returned"
        raise MdragError(f"none of the documents asked for {what}: " + "; ".join(o["reason"] for o in out.omitted))
    return out


class _Held:
    """The files the manifest holds, looked up by relative path, absolute path and chunk id."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.by_rel: dict[str, list[str]] = {}  # relative path -> absolute paths (one per folder holding it)
        for path, fs in sorted(manifest.files.items()):
            self.by_rel.setdefault(fs.rel_path, []).append(path)
        self._by_chunk: dict[str, str] | None = None  # chunk id -> absolute path, made on first use

    def chunk(self, target: str) -> str | None:
        if self._by_chunk is None:
            self._by_chunk = {cid: p for p, fs in self.manifest.files.items() for cid in fs.chunks}
        return self._by_chunk.get(target)

    def known(self, target: str) -> bool:
        """Whether ``target`` names files: held, a glob, or a chunk id of the index."""
        return bool(
            _GLOB.search(target)
            or posixpath.normpath(target) in self.by_rel
            or os.path.normpath(target) in self.manifest.files
            or (_CHUNK_ID.fullmatch(target) and self.chunk(target))
        )

    def parse(self, ref: str) -> _Ask:
        """``ref`` taken apart: the whole of it when it names a file, else at a ``#`` or the last ``:``."""
        if not isinstance(ref, str) or not ref.strip():
            raise MdragError(f"empty reference {ref!r}: name a file of the index, e.g. docs/install.md")
        if len(ref) > _MAX_REF_CHARS or "\x00" in ref:
            raise MdragError(f"reference {ref[:80]!r}... is not a path: over {_MAX_REF_CHARS} characters or NUL")
        if self.known(ref):
            return _Ask(ref, ref)
        cuts = [i for i, c in enumerate(ref) if c == "#"]
        if cuts:
            i = next((i for i in cuts if self.known(ref[:i])), cuts[0])
            section = ref[i + 1 :].strip()
            if not section:
                raise MdragError(f"{ref!r}: name a section after '#', e.g. {ref[:i]}#Installation")
            pages = _PAGES.fullmatch(section)
            if pages:
                first, last = int(pages[1]), int(pages[2] or pages[1])
                if last < first:
                    raise MdragError(f"{ref!r}: the page range is backwards: ask for {ref[:i]}#page={last}-{first}")
                return _Ask(ref, ref[:i], pages=(first, last))
            return _Ask(ref, ref[:i], section=section)
        target, _, suffix = ref.rpartition(":")
        lines = _LINES.fullmatch(suffix) if target else None
        if lines:
            start, end = int(lines[1]), int(lines[2]) if lines[2] else None
            if end is not None and end < start:
                raise MdragError(f"{ref!r}: the line range is backwards: ask for {target}:{end}-{start}")
            return _Ask(ref, target, lines=(start, end))
        return _Ask(ref, ref)

    def resolve(self, target: str) -> list[str]:
        """The absolute paths of the held files ``target`` names (a glob: all it matches, sorted)."""
        roots = self.manifest.roots
        absolute = os.path.isabs(os.path.expanduser(target))
        norm = as_held(os.path.normpath(os.path.expanduser(target)), roots) if absolute else posixpath.normpath(target)
        if (absolute and not any(_inside(norm, r) for r in roots)) or norm == ".." or norm.startswith("../"):
            raise MdragError(
                f"{target!r} leaves the index's folders ({', '.join(roots)}): `get` reads only the files the "
                "index holds; give a path relative to one of them, as search results show it (rel_path)"
            )
        if _CHUNK_ID.fullmatch(target) and target not in self.by_rel:
            path = self.chunk(target)
            if path is None:
                raise MdragError(
                    f"no chunk {target} in the index: its file may have changed since that search "
                    "(search again, or give the file's path)"
                )
            return [path]
        if _GLOB.search(norm):
            pattern = norm.split("/")
            found = sorted(
                p for p, fs in self.manifest.files.items() if _glob((p if absolute else fs.rel_path), pattern)
            )
            if not found:
                raise MdragError(
                    f"the glob {target!r} matches no file of the index (its paths look like {self._some()})"
                )
            return found
        if absolute:
            paths = [norm] if norm in self.manifest.files else []
        else:
            paths = self.by_rel.get(norm, [])
        if len(paths) > 1:
            raise MdragError(f"{target!r} is in several of the index's folders: give its absolute path, one of {paths}")
        if not paths and not absolute:  # a path from the working folder, as a shell completes it: docs/install.md
            here = as_held(os.path.abspath(os.path.expanduser(target)), roots)
            paths = [here] if here in self.manifest.files else []
        if not paths and not absolute:  # a note's name or alias (notes vaults): "Filters", "Backlink"
            paths = notes_of(self.manifest).named(target)
            if len(paths) > 1:
                raise notes_of(self.manifest).ambiguous(target, paths)
        if not paths:
            raise MdragError(self._not_held(target, norm, absolute))
        return paths

    def _not_held(self, target: str, norm: str, absolute: bool) -> str:
        for path, skipped in self.manifest.skipped.items():
            if path == norm or (not absolute and path == os.path.join(skipped.root, norm)):
                return f"{target!r} is not in the index: it was left out when indexed ({skipped.reason})"
        named = "" if absolute else ", nor the name or an alias of one of its notes"
        return (
            f"{target!r} is not a file of the index{named}: `get` reads only the files the index holds (hidden, "
            f"excluded and unsupported files are never indexed; a new file is once `mdrag index` runs). Its paths "
            f"look like {self._some()}"
        )

    def _some(self) -> str:
        return ", ".join(list(self.by_rel)[:3])


def _glob(path: str, pattern: list[str]) -> bool:
    """Whether ``path`` matches ``pattern`` (split at "/"): ``*`` within a folder, ``**`` across folders."""
    return _match(path.split("/"), pattern)


def _match(parts: list[str], pattern: list[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(parts[i:], pattern[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pattern[0]) and _match(parts[1:], pattern[1:])


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _part(ask: _Ask, path: str, fs: FileState, left: int, max_chars: int, several: bool, budget: _Budget) -> Part:
    """The part of the file at ``path`` that ``ask`` names, if it fits in ``left`` characters."""
    data, digest = _read(path, fs)
    changed = digest != fs.hash
    try:
        text = _document(path, fs.rel_path, data, digest, ask.section is None and ask.pages is None, budget)
    except (ParseError, UnsupportedFormatError) as e:
        raise MdragError(f"{fs.rel_path} cannot be read as a document now: {e}") from e
    first, last, section = _select(text, ask, fs.rel_path)
    body = "\n".join(text.lines[first - 1 : last]) + (text.end if last == len(text.lines) else "")
    if len(body) > left:
        raise MdragError(_advice(ask, fs.rel_path, text, (first, last), len(body), left, max_chars, several))
    pages = sorted({p for _, a, b, p in text.spans if p is not None and a <= last and b >= first})
    return Part(
        ask.ref,
        path,
        fs.rel_path,
        fs.root,
        body,
        first,
        last,
        len(text.lines),
        text.source,
        section,
        [pages[0], pages[-1]] if pages else None,
        changed,
    )


def _read(path: str, fs: FileState) -> tuple[bytes, str]:
    """The file's bytes and their sha256 (hex); never a file outside its folder."""
    real = os.path.realpath(path)
    if not _inside(real, os.path.realpath(fs.root)):
        raise MdragError(f"{fs.rel_path} now leads out of its indexed folder {fs.root} (to {real}): it is not read")
    try:
        data = Path(real).read_bytes()
    except FileNotFoundError:
        raise MdragError(f"{fs.rel_path} is no longer in {fs.root}: run `mdrag index` to update the index") from None
    except OSError as e:
        raise MdragError(f"cannot read {path}: {e.strerror or e}") from e
    return data, bytes_sha256(data)


def _document(path: str, name: str, data: bytes, digest: str, lines_only: bool, budget: _Budget) -> _Text:
    """The text of the file at ``path`` (its bytes ``data``, their sha256 ``digest``), from the cache when
    this version was read before. ``lines_only``: no section nor page is asked for, so a format whose
    document is the file's own lines (Markdown, text) is not parsed."""
    parser = get_parser(path)
    # As the parser declares: another registered for the extension may read the file otherwise.
    if lines_only and keeps_source_lines(parser):
        lined = _cache.get((path, digest, "lines"), lambda: _file_lines(data))
        if any(lined.lines):  # else (a blank file) as its parser reads it: no lines
            return lined

    def parse() -> _Text:
        budget.spend(len(data), name)
        return _text(parse_file(path, data, parser=parser), data)

    return _cache.get((path, digest, parser), parse)


def _file_lines(data: bytes) -> _Text:
    """A Markdown or text file's own lines, as its parser counts them, without parsing it."""
    _, encoding = decode_text(data)  # the parser's own choice (ParseError for a binary file)
    return _source_text(data, encoding, [], {}, parsed=False)


def _source_text(
    data: bytes,
    encoding: str,
    spans: list[tuple[list[str], int, int, int | None]],
    heads: dict[tuple[str, ...], int],
    parsed: bool = True,
) -> _Text:
    raw = data.decode(encoding, "replace").removeprefix("\ufeff")
    lines = raw.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # as the Markdown parser counts lines
    end = "\n" if len(lines) > 1 and not lines[-1] else ""
    if end:
        lines.pop()
    return _Text(lines, spans, heads, True, end, parsed)


def _text(doc: Document, data: bytes) -> _Text:
    """The document's text: the file's own lines when its parser gives them, else its sections written out."""
    blocks = [b for s in doc.sections for b in s.blocks]
    if doc.encoding and blocks and not doc.text_lines and all(b.line_start and b.line_end for b in blocks):
        spans = [
            (
                s.heading_path,
                s.heading_line or min(b.line_start or 0 for b in s.blocks),
                max(b.line_end or 0 for b in s.blocks),
                s.page,
            )
            for s in doc.sections
            if s.blocks
        ]
        heads = {tuple(s.heading_path): s.heading_line for s in doc.sections if s.heading_line}
        return _source_text(data, doc.encoding, spans, heads)
    return _render(doc)


def _render(doc: Document) -> _Text:
    """A parsed document written out (mdrag.parsers.written): headings as Markdown headings, each PDF page's
    start marked; the lines its chunks carry where its parser gave none of the file's own."""
    written = write_out(doc)
    return _Text(written.lines, written.spans, written.headings, False)


def _select(text: _Text, ask: _Ask, name: str) -> tuple[int, int, list[str] | None]:
    """The first and last line ``ask`` names, and the heading path of the section it names."""
    count = len(text.lines)
    if ask.lines is not None:
        first, last = ask.lines[0], min(ask.lines[1] or count, count)
        if not 1 <= first <= last:
            raise MdragError(f"{ask.ref!r}: {name} has {count} lines: ask for lines 1 to {count}")
        return first, last, None
    if ask.pages is not None:
        spans = [(a, b) for _, a, b, p in text.spans if p is not None and ask.pages[0] <= p <= ask.pages[1]]
        if not spans:
            paged = [p for *_, p in text.spans if p is not None]
            has = f"its pages are {min(paged)} to {max(paged)}" if paged else "it has no pages: ask for lines"
            raise MdragError(f"{ask.ref!r}: no such page in {name}: {has}")
        return spans[0][0], spans[-1][1], None
    if ask.section is not None:
        return _section(text, ask, name)
    return 1, count, None


def _norm(heading: str) -> str:
    return " ".join(heading.casefold().split())


def _section(text: _Text, ask: _Ask, name: str) -> tuple[int, int, list[str]]:
    """The lines of the first section whose heading (path) is ``ask.section``, subsections included."""
    want = [_norm(h) for h in re.split(r"\s+>\s+", (ask.section or "").strip())]
    for i, (path, first, _, _) in enumerate(text.spans):
        normed = [_norm(h) for h in path]
        for depth in range(len(want), len(normed) + 1):
            if normed[depth - len(want) : depth] == want:
                found = path[:depth]
                end = next((j for j, s in enumerate(text.spans[i:]) if s[0][:depth] != found), len(text.spans) - i)
                run = text.spans[i : i + end]
                start = text.headings.get(tuple(found)) or _heading_above(text.lines, found[-1], first) or first
                return start, max(s[2] for s in run), found
    heads = _headings(text)
    raise MdragError(
        f"{ask.ref!r}: no section {ask.section!r} in {name}"
        + (f": its headings are {', '.join(heads)}" if heads else ": it has no headings (ask for lines)")
    )


def _heading_above(lines: list[str], heading: str, line: int) -> int | None:
    """The line of the Markdown heading ``heading`` just above ``line`` (blank lines and headings between):
    the heading of a section that had no text of its own before its first subsection."""
    for n in range(line - 1, max(line - 1 - _BACK_LINES, 0), -1):
        stripped = lines[n - 1].strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            return None
        if _norm(stripped.lstrip("#").rstrip("#")) == _norm(heading):
            return n
    return None


def _headings(text: _Text) -> list[str]:
    """Up to _NAMED_HEADINGS headings of the document, shallowest first, to pick a section from."""
    paths = list(dict.fromkeys(tuple(p) for p, *_ in text.spans if p))
    depth = min((len(p) for p in paths), default=0)
    names = list(dict.fromkeys(p[depth - 1] for p in paths if len(p) >= depth))
    if len(names) == 1:
        names = list(dict.fromkeys(" > ".join(p[: depth + 1]) for p in paths if len(p) > depth)) or names
    return names[:_NAMED_HEADINGS] + (["..."] if len(names) > _NAMED_HEADINGS else [])


def _named(text: _Text) -> list[str]:
    """The headings a refusal names: :func:`_headings`; of a file read without its parser, its Markdown
    headings as a scan of its lines finds them (outside front matter and code fences), worked out once."""
    if text.named is None:
        text.named = _headings(text if text.parsed else _Text(text.lines, _scanned(text.lines), {}, True))
    return text.named


def _scanned(lines: list[str]) -> list[tuple[list[str], int, int, int | None]]:
    """Sections by the ATX headings (``## Title``) of Markdown ``lines``: heading path and line, no parse."""
    spans: list[tuple[list[str], int, int, int | None]] = []
    path: list[tuple[int, str]] = []  # level, title of the headings above
    fence = ""
    start = 0
    if lines and lines[0].strip() == "---":  # front matter: up to its closing line
        start = next((i + 1 for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), 0)
    for n in range(start, len(lines)):
        line = lines[n]
        opening = _FENCE.match(line)
        if opening:
            mark = opening[1]
            if not fence:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark) :].strip():
                fence = ""
            continue
        heading = None if fence else _ATX.fullmatch(line)
        if heading and heading[2]:
            level = len(heading[1])
            path = [p for p in path if p[0] < level] + [(level, heading[2].strip())]
            spans.append(([t for _, t in path], n + 1, n + 1, None))
    return spans


def _advice(
    ask: _Ask, name: str, text: _Text, lines: tuple[int, int], chars: int, left: int, max_chars: int, several: bool
) -> str:
    """Why a part is refused for its size, and how to ask for less."""
    first, last = lines
    fit = max(1, int(left * (last - first + 1) / chars))  # lines that would fit, at this part's line length
    heads = _named(text)
    base = ask.target if os.path.isabs(ask.target) else name  # a glob's or chunk id's file by its path
    where = f"{base}:{first}-{first + fit - 1}"
    sections = f" or a section ({base}#HEADING; its headings: {', '.join(heads)})" if heads else ""
    limit = (
        f"the {max_chars:,} characters one get returns"
        if left == max_chars
        else f"the {left:,} characters left of the {max_chars:,} one get returns"
    )
    return (
        f"{name} (lines {first}-{last}) is {chars:,} characters, over {limit}: ask for part of it: a line range "
        f"({where}){sections}" + (", or fewer files" if several else "")
    )
