"""Notes vaults (Obsidian, Foam): a parsed Markdown note read as the vault's app shows it.

:func:`applies` tells a vault note (a folder holding ``.obsidian/`` above it, or ``[[wikilinks]]`` in its
text); :func:`read_note` rewrites its :class:`~mdrag.types.Document`:

- ``[[Note]]`` reads ``Note``, ``[[Note|shown]]`` ``shown``, ``[[Note#Heading]]`` ``Note > Heading``,
  ``[[Note^block]]`` ``Note``; each link is recorded (:attr:`~mdrag.types.Document.links`: its line and
  the note it names, as written);
- ``![[embeds]]`` are left out of the text, and recorded as links (their text stays in their own note);
- callouts ``> [!note] Title`` read ``> Title`` (the type where there is no title);
- ``%%comments%%`` are left out;
- inline ``#tags`` (and nested ``#a/b``) join the frontmatter ``tags``; frontmatter ``aliases`` (a list
  or a string) become :attr:`~mdrag.types.Document.aliases`.

Code blocks and inline code are left as they are, and nothing in them is a link, tag or comment; a
``#`` counts as a tag only at the start of a line, after white space or right after an HTML tag
(``<span>#css</span>``), so headings (not blocks), URLs and anchors (``(#id)``, ``/#id``) are not tags.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from mdrag.types import Block, Document, Section

__all__ = ["applies", "has_wikilinks", "in_vault", "note_aliases", "read_note", "render_link"]

_APP_FOLDER = ".obsidian"  # what marks a folder as an Obsidian vault
_LINK = re.compile(r"(!?)\[\[([^\[\]\n]+?)\]\]")  # a wikilink or, with "!", an embed
# A wikilink or inline code (a run of backticks closed by a run as long), whichever starts first.
_LINK_OR_CODE = re.compile(_LINK.pattern + r"|(?<!`)(`+)(?!`).+?(?<!`)\3(?!`)", re.DOTALL)
# TOML (in Hugo's shortcodes), not links: a "[[cascade]]" table header alone on its line (a "# comment" after
# it), and nested arrays of strings ("[['@@', '@@']]").
_TOML = re.compile(r"^[ \t]*\[\[[\w.-]+\]\][ \t]*(?:#.*)?$|\[\[\s*['\"]", re.MULTILINE)
_COMMENT = re.compile(r"%%.*?%%", re.DOTALL)
# A callout's first line: "> [!type]" with an optional fold sign and title (nested quotes too).
_CALLOUT = re.compile(r"^(\s*(?:>\s*)+)\[!([^\]\n]+)\][+-]?[ \t]*(.*)$", re.MULTILINE)
# A tag: "#" at a line start, after white space or an HTML tag's ">", then letters, digits, "_", "-", "/";
# not digits alone (Obsidian's rule: "#1984" is no tag).
_TAG = re.compile(r"(?:^|(?<=[\s>]))#([\w/-]*[^\W\d][\w/-]*)", re.MULTILINE)
_NOTE_SUFFIX = re.compile(r"\.md$", re.IGNORECASE)


def in_vault(path: str) -> bool:
    """Whether a folder above ``path`` holds ``.obsidian/``: the file is a note of an Obsidian vault."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        if os.path.isdir(os.path.join(folder, _APP_FOLDER)):
            return True
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent


def _prose(text: str) -> Iterator[tuple[int, str]]:
    """The parts of ``text`` outside inline code, each with its offset; a wikilink is prose even where it
    holds backticks (``[[Tasks Api#`id`|id]]``), as the vault's app reads it."""
    at = 0
    for m in _LINK_OR_CODE.finditer(text):
        if m.group(3) is not None:  # inline code
            yield at, text[at : m.start()]
            at = m.end()
    yield at, text[at:]


def has_wikilinks(doc: Document) -> bool:
    """Whether a text block of ``doc`` (not code, not inline code) holds a ``[[wikilink]]`` (TOML's
    ``[[table]]`` headers and ``[['a', 'b']]`` arrays do not count)."""
    return any(
        _LINK.search(_TOML.sub("", part))
        for s in doc.sections
        for b in s.blocks
        if b.kind != "code"
        for _, part in _prose(b.text)
    )


def applies(doc: Document) -> bool:
    """Whether ``doc`` (a parsed Markdown file) is a vault note: in a vault, or holding wikilinks."""
    return in_vault(doc.path) or has_wikilinks(doc)


def _target(inner: str) -> tuple[str, str | None, str]:
    """A link's inside taken apart: (note as written, shown text or None, heading trail after ``#``)."""
    target, shown = re.split(r"\\?\|", inner, maxsplit=1) if "|" in inner else (inner, None)
    note, _, rest = target.partition("#")
    note = note.split("^", 1)[0].strip()
    headings = [h.strip() for h in rest.split("#") if h.strip() and not h.strip().startswith("^")]
    return note, (shown.strip() if shown is not None else None), " > ".join(headings)


def render_link(inner: str) -> str:
    """How a wikilink's inside (``Note#Heading|shown``) reads in the text."""
    note, shown, heading = _target(inner)
    if shown:
        return shown
    return " > ".join(p for p in (note, heading) if p)


def _note_name(note: str) -> str:
    """A link's note as it names it: ``Folder/Note``, ``Note`` (a ``.md`` suffix dropped)."""
    return _NOTE_SUFFIX.sub("", note.strip())


class _Reader:
    """Rewrites one note's blocks in order, collecting its links and tags.

    Linear in the note's size: a line number is counted on from the one before it, never from a block's
    start, and a tag is looked up in a set (a paragraph with a link on every line, or thousands of tags,
    took quadratic time)."""

    def __init__(self) -> None:
        self.links: list[tuple[int, str]] = []  # (file line, note as written) of each link and embed
        self.tags: list[str] = []  # inline tags, in order of first use
        self._seen: set[str] = set()  # the inline tags lowered: a tag differing only in case is the same
        self.commented = False  # inside a %% comment that a block before opened

    def text(self, text: str, first_line: int | None, tags: bool = True) -> str:
        """``text`` (one block or a heading, starting on file line ``first_line``) as the vault shows it."""
        text = self._uncomment(text)
        out: list[str] = []
        end = 0
        line = first_line
        for at, part in _prose(text):
            if line is not None:
                line += text.count("\n", end, at)  # the inline code before it
            out.append(text[end:at])  # the inline code before it, as it is
            out.append(self._part(part, line, tags))
            end = at + len(part)
            if line is not None:
                line += part.count("\n")
        return _CALLOUT.sub(_callout, "".join(out))

    def _uncomment(self, text: str) -> str:
        """``text`` without ``%%comments%%``, one that opens here and closes in a later block included."""
        if self.commented:
            end = text.find("%%")
            if end < 0:
                return ""
            self.commented = False
            text = text[end + 2 :]
        if "%%" not in text:
            return text
        text = _COMMENT.sub("", text)
        start = text.find("%%")
        if start >= 0:
            self.commented = True
            text = text[:start]
        return text

    def _part(self, part: str, line: int | None, tags: bool) -> str:
        counted = [0, line]  # the offset in ``part`` up to which newlines are counted, and the line there

        def link(m: re.Match[str]) -> str:
            note = _note_name(_target(m.group(2))[0])
            if note and counted[1] is not None:
                counted[1] += part.count("\n", counted[0], m.start())
                counted[0] = m.start()
                self.links.append((counted[1], note))
            return "" if m.group(1) else render_link(m.group(2))

        if tags:
            for m in _TAG.finditer(_LINK.sub(" ", part)):
                tag = m.group(1).strip("/")
                if tag and tag.lower() not in self._seen:
                    self._seen.add(tag.lower())
                    self.tags.append(tag)
        return _LINK.sub(link, part)


def _callout(m: re.Match[str]) -> str:
    kind = m.group(2).strip()
    return m.group(1) + (m.group(3).strip() or kind[:1].upper() + kind[1:].lower())  # "[!NOTE]": "Note"


def note_aliases(metadata: dict[str, Any]) -> list[str]:
    """A note's frontmatter ``aliases`` (or ``alias``): a list, or one string."""
    value = metadata.get("aliases", metadata.get("alias"))
    values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    out: list[str] = []
    for v in values:
        v = " ".join(str(v).split()) if v is not None else ""
        if v and v not in out:
            out.append(v)
    return out


def _tags(metadata: dict[str, Any], inline: list[str]) -> list[str]:
    """The frontmatter ``tags`` (a list, or a string of comma-separated tags) with the inline ones after them."""
    value = metadata.get("tags")
    values = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else []
    tags: list[str] = []
    seen: set[str] = set()  # the tags lowered
    for t in [*values, *inline]:
        t = str(t).strip().lstrip("#") if t is not None else ""
        if t and t.lower() not in seen:
            seen.add(t.lower())
            tags.append(t)
    return tags


def read_note(doc: Document, check: Callable[[], None] | None = None) -> Document:
    """``doc`` (a parsed Markdown note) as its vault's app shows it; see the module's docstring. ``check``
    is called before each section and block: a time limit (:meth:`mdrag.chunking.Deadline.check`) raises
    there to stop a note that takes too long."""
    reader = _Reader()
    sections: list[Section] = []
    seen_headings: set[int] = set()
    for s in doc.sections:
        if check is not None:
            check()
        path = [reader.text(h, None, tags=False) for h in s.heading_path]
        if s.heading_line is not None and s.heading_line not in seen_headings and s.heading_path:
            seen_headings.add(s.heading_line)
            reader.text(s.heading_path[-1], s.heading_line, tags=False)  # its links count
        blocks: list[Block] = []
        for b in s.blocks:
            if check is not None:
                check()
            if b.kind == "code":
                if not reader.commented:
                    blocks.append(b)
                continue
            text = reader.text(b.text, b.line_start).strip("\n").rstrip()
            if text.strip():
                blocks.append(replace(b, text=text))
        if blocks:
            sections.append(replace(s, heading_path=path, blocks=blocks))
    metadata = dict(doc.metadata)
    tags = _tags(metadata, reader.tags)
    if tags:
        metadata["tags"] = tags
    title = _LINK.sub(lambda m: "" if m.group(1) else render_link(m.group(2)), doc.title) if doc.title else None
    return replace(
        doc,
        sections=sections,
        metadata=metadata,
        title=title,
        aliases=note_aliases(doc.metadata),
        links=reader.links,
    )
