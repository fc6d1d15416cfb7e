"""HTML parser (beautifulsoup4, stdlib "html.parser"): h1-h6 start sections.

Only the page's main content is read: readability-lxml (a port of Mozilla's
Readability) picks the article out of the site's chrome (menus, share bars,
"Next story", comment counters), and the walk below reads the article's HTML
with its headings, lists, tables and code blocks. A page where it finds no
text is read whole, and the reason is logged. Three widenings: when its pick
holds under 80% of the page's prose and has like siblings (a manual's
sections, a list's entries: same tag, same class), they are read too; an
index page (mostly link text) is read whole less its lines of links, so its
title and own prose are indexed and its link lists are not (this also holds
for a page nested deeper than readability-lxml reads); and a section before the pick shaped as the pick's
own (asciidoc's NAME line in the page header) is read as a section of its own. Title, description, keywords
and language come from the whole page's ``head``. The named items of a page
(definition lists, bold-led list items, FAQ questions...) head sections of
their own, short ones grouped under their names joined (mdrag.parsers.html_items).

Left out of the text, with everything inside them: script, style, noscript,
template, svg, canvas, iframe, object, embed, select (never prose), nav and
footer (site chrome: menus, copyright lines), anything ``hidden``,
``aria-hidden="true"`` or ``role="navigation"``. Kept on purpose: ``header``
(often holds the page's h1) and ``aside`` (documentation sites put notes and
warnings there); a heading inside an aside heads only the rest of the aside.

Data tables become "table" blocks (one line per row, cells joined by " | ");
a table holding headings or other tables is treated as layout and read like a
div. ``pre`` becomes a fenced "code" block.
"""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from bs4 import BeautifulSoup, Tag
from bs4.dammit import EncodingDetector
from bs4.element import CData, NavigableString, PageElement
from readability import Document as ReadabilityDocument

from mdrag.errors import ParseError
from mdrag.parsers.html_items import ItemHeadings, ItemPlan, ItemsEnd, plan_items
from mdrag.parsers.sections import Heading, SectionBuilder
from mdrag.parsers.text import decode_text
from mdrag.types import Block, Document, Section

__all__ = ["parse"]

logger = logging.getLogger(__name__)

_REMOVED = {"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object",
            "embed", "select", "nav", "footer", "head"}  # fmt: skip
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_LAYOUT_IN_TABLE = {"table", *_HEADINGS}  # a table holding one of these is read like a div
_ROW_PARTS = {"tr", "td", "th"}
_TEXT_TYPES = (NavigableString, CData)  # strings that are page text (what bs4's get_text() reads)
# Elements that end a paragraph (blank line) or a line of text.
_PARAGRAPH = {"p", "div", "section", "article", "main", "header", "aside", "blockquote", "ul",
              "ol", "dl", "figure", "details", "address", "hr", "form", "fieldset", "table",
              "center", "body"}  # fmt: skip
_LINE = {"li", "dt", "dd", "tr", "td", "th", "figcaption", "summary", "caption", "legend",
         "option", "label"}  # fmt: skip
# Deeper pages are read whole: libxml2 (under readability-lxml) stops reading at 256 levels,
# and readability-lxml's time grows with the square of the depth.
_MAX_DEPTH = 255
# The extractor's pick is widened when it holds under _WIDEN_BELOW of a page's prose (text outside links,
# at least _WIDEN_MIN_PROSE characters): to its like siblings whose text is that much prose (see _widened).
_WIDEN_BELOW, _WIDEN_PROSE_SHARE, _WIDEN_MIN_PROSE = 0.8, 0.75, 100
# An index page: link text is _LISTING_LINKS of its text or more, and the extractor's pick holds under
# _LISTING_KEPT of it (or it nests too deep for the extractor). It is read whole less its lines of links
# (_LINK_LINES whose text is _LISTING_LINE link text or more): its title and its own prose.
_LISTING_LINKS, _LISTING_KEPT, _LISTING_LINE = 0.6, 0.2, 0.8
_LINK_LINES = {"li", "tr", "dt", "dd", "p", "td", "th"}
_ID = "data-mdrag-id"  # numbers the tags in the page given to readability-lxml
_ID_NUMBER = re.compile(r'data-mdrag-id="(\d+)"')
_LANGUAGE = re.compile(r"^(?:language|lang)-([\w+#.-]+)$")
_SPACE = re.compile(r"\s+")
_PARA_BREAK = "\x00P"  # markers in the text buffer; real text never holds NUL
_LINE_BREAK = "\x00L"


def _clean(text: str) -> str:
    return " ".join(text.split())


def _declared_charset(data: bytes) -> str | None:
    """The charset a meta tag (or XML declaration) names, read as browsers read it.

    Latin-1 and ASCII mean windows-1252. UTF-16 or UTF-32 named in bytes that
    an ASCII search could read is never true, and means UTF-8 (the HTML
    standard's rule): decoded as UTF-16, such a page would be all CJK garbage.
    """
    declared = EncodingDetector.find_declared_encoding(data, is_html=True)
    try:
        name = codecs.lookup(declared).name if declared else None
    except LookupError:
        return declared  # decode_text skips a charset Python does not know
    if name in ("iso8859-1", "ascii"):
        return "windows-1252"
    if name is not None and name.startswith(("utf-16", "utf-32")):
        return "utf-8"
    return declared


def _is_hidden(tag: Tag) -> bool:
    attrs = tag.attrs or {}
    return (
        "hidden" in attrs
        or str(attrs.get("aria-hidden", "")).lower() == "true"
        or str(attrs.get("role", "")).lower() == "navigation"
    )


def _is_removed(tag: Tag) -> bool:
    """Whether ``tag``, and everything inside it, is left out of the text (see the module docstring)."""
    return tag.name in _REMOVED or _is_hidden(tag)


def _descendants(
    tag: Tag, skip: Callable[[Tag], bool] = _is_removed, stop: Collection[str] = ()
) -> Iterator[PageElement]:
    """``tag``'s descendants in document order, less the tags ``skip`` picks and all they hold.

    Tags named in ``stop`` are yielded but not entered. Iterative, and the tree
    is never changed: removing elements with bs4's ``decompose()`` cost a
    subtree search per element on deeply nested pages.
    """
    todo: list[PageElement] = list(reversed(tag.contents))
    while todo:
        node = todo.pop()
        if isinstance(node, Tag):
            if skip(node):
                continue
            if node.name not in stop:
                todo.extend(reversed(node.contents))
        yield node


def _tags(
    tag: Tag, names: Collection[str], skip: Callable[[Tag], bool] = _is_removed, stop: Collection[str] = ()
) -> Iterator[Tag]:
    """The tags named one of ``names`` among :func:`_descendants`, in document order."""
    found = _descendants(tag, skip, stop)
    return (node for node in found if isinstance(node, Tag) and node.name in names)


def _is_text(node: PageElement) -> bool:
    """Whether ``node`` is page text: not a comment, doctype, script or style string."""
    return type(node) in _TEXT_TYPES


def _text(tag: Tag, stop: Collection[str] = ()) -> str:
    """Tag text on one line: inline elements run together, block elements and br part words.

    The text of elements named in ``stop`` is left out.
    """
    parts: list[str] = []
    for node in _descendants(tag, stop=stop):
        if isinstance(node, Tag):
            if node.name in ("br", "img") or node.name in _PARAGRAPH or node.name in _LINE:
                parts.append(" ")
        elif _is_text(node):
            parts.append(str(node))
    return _clean("".join(parts))


def _is_data_table(table: Tag) -> bool:
    has_layout = any(isinstance(n, Tag) and n.name in _LAYOUT_IN_TABLE for n in _descendants(table))
    return not has_layout and str(table.get("role", "")) != "presentation"


def _table_text(table: Tag) -> str:
    """One line per row, its cells joined by " | ".

    html.parser nests an unclosed ``<tr>`` or ``<td>`` in the one before it
    (``<tr><td>a<td>b<tr>...``). As in a browser, a row's cells end where the
    next row starts and a cell's text where the next cell starts: nothing is
    read twice, and a long table of unclosed rows costs linear time, not cubic.
    """
    lines = []
    for row in _tags(table, {"tr"}):
        cells = [_text(cell, stop=_ROW_PARTS) for cell in _tags(row, {"td", "th"}, stop={"tr"})]
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)


def _code_block(pre: Tag) -> Block | None:
    code = "".join(str(node) for node in _descendants(pre) if _is_text(node)).strip("\n").rstrip()
    if not code.strip():
        return None
    language = None
    for tag in (pre, next(_tags(pre, {"code"}), None)):
        for cls in (tag.get("class") or []) if isinstance(tag, Tag) else []:
            match = _LANGUAGE.match(cls)
            if match and language is None:
                language = match.group(1)
    fence = "```"
    while fence in code:
        fence += "`"
    return Block(f"{fence}{language or ''}\n{code}\n{fence}", kind="code", language=language)


def _meta(metas: list[Tag], *names: str) -> str | None:
    """The first non-blank content for ``names``, in order: from the first meta with that name, else property."""
    for name in names:
        tag = next((m for m in metas if m.get("name") == name), None)
        if tag is None:
            tag = next((m for m in metas if m.get("property") == name), None)
        content = tag.get("content") if tag is not None else None
        if isinstance(content, str) and content.strip():
            return _clean(content)
    return None


class _Builder:
    """Collects sections while the tree is walked in document order."""

    def __init__(self, article: _Article | None = None, items: ItemPlan | None = None) -> None:
        self.article = article  # None: read the whole page
        self.sections = SectionBuilder()  # the heading tree and the blocks under each heading
        self.buf: list[str] = []  # text pieces and break markers since the last flush
        self.items = ItemHeadings(items or ItemPlan(), self, _text)  # the headings of a list's named items

    def flush(self) -> None:
        text = "".join(self.buf).replace(_LINE_BREAK, "\n")
        self.buf.clear()
        for para in text.split(_PARA_BREAK):
            lines = [_clean(line) for line in para.split("\n")]
            lines = [line for line in lines if line and line != "-"]
            if lines:
                self.sections.add(Block("\n".join(lines)))

    def add_block(self, block: Block | None) -> None:
        self.flush()
        if block is not None and block.text.strip():
            self.sections.add(block)

    def heading(self, level: int, title: str) -> None:
        self.flush()
        self.sections.heading(level, title)

    def restore(self, headings: tuple[Heading, ...]) -> None:
        """Close the headings opened since the open headings were ``headings`` (an aside's, at its end)."""
        if headings != self.sections.open_headings:
            self.flush()
            self.sections.restore(headings)

    def open_headings(self) -> tuple[Heading, ...]:
        return self.sections.open_headings

    def finish(self) -> list[Section]:
        self.flush()
        return self.sections.finish()

    def walk(self, root: Tag) -> None:
        """Iterative pre-order walk (deeply nested pages would exhaust recursion)."""
        todo: list[Any] = [root]  # nodes, or break markers to emit after a tag's children
        while todo:
            node = todo.pop()
            if isinstance(node, tuple):  # the end of an aside: its headings end with it
                self.restore(node)
            elif isinstance(node, ItemsEnd):
                self.items.end(node)
            elif isinstance(node, str) and not isinstance(node, NavigableString):
                self.buf.append(node)  # a break marker
            elif isinstance(node, NavigableString):
                if _is_text(node):
                    # NUL would clash with the break markers; comments and doctypes are skipped
                    self.buf.append(_SPACE.sub(" ", str(node).replace("\x00", "")))
            elif isinstance(node, Tag) and not _is_removed(node):
                read = self.article is None or id(node) in self.article.kept
                entered = self.article is not None and id(node) in self.article.entered
                if (read or entered) and self.items.enter(node, todo):
                    continue  # an item's name, read as its heading
                if read:
                    self.visit(node, todo)
                elif entered:  # holds article parts; its own text is not one
                    if self.article is not None and id(node) in self.article.bounded:
                        todo.append(self.sections.open_headings)  # a section outside the pick heads only itself
                    self.buf.append(_PARA_BREAK)
                    todo.append(_PARA_BREAK)
                    todo.extend(reversed([child for child in node.contents if isinstance(child, Tag)]))

    def visit(self, tag: Tag, todo: list[Any]) -> None:
        name = tag.name.lower()
        if name in _HEADINGS:
            self.heading(int(name[1]), _text(tag))
        elif name == "pre":
            self.add_block(_code_block(tag))
        elif name == "table" and _is_data_table(tag):
            text = _table_text(tag)
            self.add_block(Block(text, kind="table") if text else None)
        elif name == "br":
            self.buf.append(_LINE_BREAK)
        else:
            marker = _PARA_BREAK if name in _PARAGRAPH else _LINE_BREAK if name in _LINE else ""
            if marker:
                self.buf.append(marker)
                todo.append(marker)
            if name == "aside":  # a share bar's "Share this story" must not head the article after it
                todo.append(self.sections.open_headings)
            todo.extend(reversed(tag.contents))
            if name == "li":
                self.buf.append("- ")


def _first_h1(soup: BeautifulSoup) -> str | None:
    """The text of the page's first h1 that is not left out: the title of a page without one."""
    return next((text for h1 in _tags(soup, {"h1"}) if (text := _text(h1))), None)


@dataclass
class _Article:
    """The page's main content: the tags to read, by ``id()``, and the ancestors to walk through."""

    kept: set[int]  # read, with their text; children that are not kept are left out
    entered: set[int]  # ancestors of kept tags: walked through, their own text left out
    bounded: set[int] = field(default_factory=set)  # the headings opened inside close at their end


def _is_protected(tag: Tag) -> bool:
    """A heading, code block or data table: kept in the article even where the extractor's clean-up drops it."""
    return tag.name in _HEADINGS or tag.name == "pre" or (tag.name == "table" and _is_data_table(tag))


def _signature(tag: Tag) -> tuple[str, tuple[str, ...]]:
    """A tag's name and classes, as its like siblings share them. Asciidoc's ``div#preamble`` (the text before
    a page's first section, without a class) counts as one of the ``sect1`` sections after it."""
    if tag.name == "div" and tag.get("id") == "preamble" and not tag.get("class"):
        return ("div", ("sect1",))
    return (tag.name, tuple(tag.get("class") or ()))


def _widened(soup: BeautifulSoup, tags: list[Tag], kept: set[int]) -> set[int]:
    """The tags to add to ``kept`` when readability-lxml's pick holds under 80% of the page's prose.

    Prose: text outside links. The extractor keeps its best-scored block and the siblings that score
    near it; a manual page split into many sibling sections (asciidoc's ``sect1`` divs, one div per
    book entry) loses all but one. Then, from the pick up to the body, every sibling of the pick or
    of one of its ancestors that is a tag of the same name and the same (non-empty) class (the next
    section, the next entry; asciidoc's preamble counts as one of its sections, see _signature) is
    added whole, when its text is mostly outside links (menus are not).
    """
    in_link: dict[int, bool] = {id(soup): False}
    own: dict[int, int] = {}
    for tag in tags:
        linked = tag.name == "a" or in_link.get(id(tag.parent), False)
        in_link[id(tag)] = linked
        own[id(tag)] = 0 if linked else sum(len(str(c).strip()) for c in tag.contents if _is_text(c))
    total = dict(own)
    every = dict.fromkeys(total, 0)
    for tag in reversed(tags):  # children after their parent in document order: sums bottom-up
        every[id(tag)] += sum(len(str(c).strip()) for c in tag.contents if _is_text(c))
        if tag.parent is not None and id(tag.parent) in total:
            total[id(tag.parent)] += total[id(tag)]
            every[id(tag.parent)] += every[id(tag)]
    prose = sum(total[id(t)] for t in tags if t.parent is None or id(t.parent) not in total)
    if prose < _WIDEN_MIN_PROSE or sum(own[t] for t in kept if t in own) >= _WIDEN_BELOW * prose:
        return set()
    added: set[int] = set()
    tops = [t for t in tags if id(t) in kept and (t.parent is None or id(t.parent) not in kept)]
    seen: set[int] = set()
    for top in tops:
        node: Any = top
        while isinstance(node, Tag) and node.name not in ("body", "html") and id(node) not in seen:
            seen.add(id(node))
            signature = _signature(node)
            classed = bool(signature[1])  # a bare div is any block: the sidebar's as well as the article's
            for sibling in node.parent.contents if node.parent is not None and classed else ():
                if (
                    isinstance(sibling, Tag)
                    and sibling is not node
                    and _signature(sibling) == signature
                    and total.get(id(sibling), 0) > _WIDEN_PROSE_SHARE * every.get(id(sibling), 0)
                ):
                    for whole in (sibling, node):  # the pick's own section is read whole too (its heading)
                        added.add(id(whole))
                        added.update(id(inner) for inner in whole.find_all(True))
            node = node.parent
    return added


def _own_section(tags: list[Tag], kept: set[int]) -> set[int]:
    """The section around readability-lxml's pick when the pick holds no heading but is most of one section
    of a page of like sections: that section's body and heading, to add to ``kept``. A manual page whose
    longest part is one definition list (git-annotate's OPTIONS, gitglossary's terms) gets the list alone,
    its heading left out, and no section shape for :func:`_like_sections` to find the page's other sections
    by (its NAME line). The body: the nearest tag around the pick that has a class and comes right after a
    heading, at least half of its text the pick's, its text mostly outside links, and its shape (name and
    class) that of the tag right after another heading of the page (asciidoc's ``div.sectionbody``). An article
    picked without its title, its related stories beside it in the tag after the title, has no such shape."""
    if any(t.name in _HEADINGS for t in tags if id(t) in kept):
        return set()
    shapes: list[tuple[str, tuple[str, ...]]] = []
    for heading in (t for t in tags if t.name in _HEADINGS):
        after = heading.find_next_sibling()
        if isinstance(after, Tag) and after.get("class"):
            shapes.append(_signature(after))
    added: set[int] = set()
    for top in (t for t in tags if id(t) in kept and id(t.parent) not in kept):
        for body in top.parents:
            if body.name in ("body", "html"):
                break
            title = body.find_previous_sibling()
            if not isinstance(title, Tag) or title.name not in _HEADINGS or not body.get("class"):
                continue
            if (
                shapes.count(_signature(body)) > 1
                and not any(map(_is_removed, (title, body, *body.parents)))
                and 2 * len(_text(top)) >= len(_text(body))
                and _link_share([body, *body.find_all(True)]) < 1 - _WIDEN_PROSE_SHARE
            ):
                for whole in (title, body):
                    added.add(id(whole))
                    added.update(id(t) for t in whole.find_all(True))
            break
    return added


def _like_sections(tags: list[Tag], kept: set[int]) -> tuple[set[int], set[int]]:
    """Sections before readability-lxml's pick that have the shape of the pick's own: a heading, and the tag
    right after it whose name and (non-empty) class a tag right after a heading in the pick has, its text
    mostly outside links. Asciidoc writes a manual page's NAME section ("git-add - Add file contents to the
    index", the page's one-line summary) into the page header ``div#header`` beside the title, which the
    extractor leaves out with the header; its ``div.sectionbody`` is shaped as every section's body after it.
    A site header's tagline or menu is not: it has no heading followed by a section body. Only before the
    pick: after it come comments and related stories, each a heading over a block of one shape. Returns the
    tags to read and the blocks holding them, whose end closes the section (the text after the header, where
    the extractor kept it without its heading, does not go under NAME)."""

    def body(heading: Tag) -> Tag | None:
        after = heading.find_next_sibling()
        return after if isinstance(after, Tag) and after.get("class") else None

    order = {id(t): i for i, t in enumerate(tags)}
    start = next((i for i, t in enumerate(tags) if id(t) in kept), len(tags))
    headings = [t for t in tags if t.name in _HEADINGS and t.parent is not None]
    shapes = {_signature(b) for h in headings if id(h) in kept and (b := body(h)) is not None and id(b) in kept}
    added: set[int] = set()
    bounds: set[int] = set()
    for heading in headings:
        section = body(heading)
        if (
            section is None
            or id(heading) in kept
            or order[id(heading)] >= start
            or id(section) in kept
            or _signature(section) not in shapes
            or any(map(_is_removed, heading.parents))
        ):
            continue
        inner = [section, *section.find_all(True)]
        if _link_share(inner) < 1 - _WIDEN_PROSE_SHARE:
            bounds.add(id(heading.parent))
            for whole in (heading, section):
                added.add(id(whole))
                added.update(id(t) for t in whole.find_all(True))
    return added, bounds


def _link_share(tags: list[Tag]) -> float:
    """The share of the page's text (less what mdrag leaves out) that is link text."""
    left_out: set[int] = set()
    in_link: set[int] = set()
    total = linked = 0
    for tag in tags:
        if id(tag.parent) in left_out or _is_removed(tag):
            left_out.add(id(tag))
            continue
        if tag.name == "a" or id(tag.parent) in in_link:
            in_link.add(id(tag))
        size = sum(len(str(c).strip()) for c in tag.contents if _is_text(c))
        total += size
        linked += size if id(tag) in in_link else 0
    return linked / total if total else 0.0


def _without_link_lines(tags: list[Tag]) -> _Article:
    """The whole page less its lines of links: each list item, table row, term or paragraph whose
    text is mostly link text (an index page's entries), with all it holds."""
    out: set[int] = set()
    for tag in tags:
        if id(tag.parent) in out:
            out.add(id(tag))
        elif tag.name in _LINK_LINES:
            text = len(_text(tag).replace(" ", ""))
            linked = sum(len(_text(a).replace(" ", "")) for a in _tags(tag, {"a"}))
            if text and linked >= _LISTING_LINE * text:
                out.add(id(tag))
    return _Article({id(tag) for tag in tags if id(tag) not in out}, set())


def _main_content(soup: BeautifulSoup, path: str) -> _Article | None:
    """The tags of ``soup`` that readability-lxml reads as the article; None, with the reason logged, if it fails.

    Every tag gets a ``data-mdrag-id`` attribute, and the tags mdrag leaves out
    (script, nav, hidden...) are emptied, before the page goes to
    readability-lxml; the ids in its summary name the tags it kept. A heading,
    code block or data table that its clean-up drops while keeping the tag
    around it is kept too (a heading wrapped in a link, a table of links): the
    chunker needs the heading tree, and documentation pages need their code.
    One inside a block it drops stays out. ``min_text_length=1``: with the
    default (25) the clean-up drops every block under 25 characters that has no image, such as
    a short list; on the readability test pages 1 extracts the same text
    (benchmarks/html_extract.py).
    """
    tags = list(soup.find_all(True))
    depth = {id(soup): 0}
    for number, tag in enumerate(tags):
        tag.attrs[_ID] = str(number)
        depth[id(tag)] = depth[id(tag.parent)] + 1
    links = _link_share(tags)
    if max(depth.values()) > _MAX_DEPTH:
        # libxml2 (under readability-lxml) stops at 256 levels; the walk here is iterative and reads any depth
        listing = links >= _LISTING_LINKS
        logger.info(
            "%s: tags nest deeper than %d levels, more than the main-content extraction reads; reading the "
            "whole page%s",
            path,
            _MAX_DEPTH,
            " less its lines of links (an index page)" if listing else "",
        )
        return _without_link_lines(tags) if listing else None
    for tag in tags:
        if _is_removed(tag):
            # never read, and a script's text does not survive the round trip (a "<!--" in it hides the rest)
            tag.clear()
    try:
        summary = ReadabilityDocument(str(soup), min_text_length=1).summary(html_partial=True)
    except Exception as exc:  # a third-party heuristic: any failure means "read the whole page"
        logger.info("%s: main content not extracted (%s: %s); reading the whole page", path, type(exc).__name__, exc)
        return None
    kept = {id(tags[n]) for n in map(int, _ID_NUMBER.findall(summary)) if n < len(tags)}
    kept |= _widened(soup, tags, kept)
    kept |= _own_section(tags, kept)
    like, bounded = _like_sections(tags, kept)
    kept |= like
    for tag in tags:
        if id(tag) not in kept and _is_protected(tag) and id(tag.parent) in kept:
            kept.add(id(tag))
            kept.update(id(inner) for inner in tag.find_all(True))
    own = sum(len(str(c).strip()) for t in tags if id(t) in kept for c in t.contents if _is_text(c))
    every = sum(len(str(c).strip()) for t in tags for c in t.contents if _is_text(c))
    if links >= _LISTING_LINKS and own < _LISTING_KEPT * every:
        logger.info("%s: an index page (mostly links): its title and its own prose are read", path)
        return _without_link_lines(tags)
    entered: set[int] = set()
    for tag in tags:
        if id(tag) in kept:
            parent = tag.parent
            while parent is not None and id(parent) not in kept and id(parent) not in entered:
                entered.add(id(parent))
                parent = parent.parent
    return _Article(kept, entered, bounded - kept)


def parse(data: bytes, path: str, *, main_content: bool = True) -> Document:
    """Parse an HTML file's bytes: its main content, or with ``main_content=False`` the whole page."""
    text, encoding = decode_text(data, _declared_charset(data))
    try:
        soup = BeautifulSoup(text, "html.parser")
    except Exception as exc:  # html.parser is lenient; this is a last resort
        raise ParseError(f"not parseable as HTML: {type(exc).__name__}: {exc}") from exc
    # The first title outside svg (there, a title names a drawing).
    title_tag = next(_tags(soup, {"title"}, skip=lambda tag: tag.name == "svg"), None)
    title = _clean(title_tag.get_text()) if title_tag is not None else ""
    metadata: dict[str, Any] = {}
    metas = [tag for tag in soup.find_all("meta") if isinstance(tag, Tag)]
    if description := _meta(metas, "description", "og:description"):
        metadata["description"] = description
    if keywords := _meta(metas, "keywords"):
        metadata["keywords"] = [k.strip() for k in keywords.split(",") if k.strip()]
    html_tag = soup.find("html")
    if isinstance(html_tag, Tag) and isinstance(html_tag.get("lang"), str):
        metadata["lang"] = str(html_tag["lang"]).strip()
    title = title or _meta(metas, "og:title") or ""

    body = next((b for b in soup.find_all("body") if not any(map(_is_removed, (b, *b.parents)))), None)
    root = body if isinstance(body, Tag) else soup
    article = _main_content(soup, path) if main_content and _text(root) else None
    items = plan_items(root)
    builder = _Builder(article, items)
    builder.walk(root)
    sections = builder.finish()
    if article is not None and not sections:
        logger.info("%s: the main content found has no text; reading the whole page", path)
        builder = _Builder(items=items)
        builder.walk(root)
        sections = builder.finish()
    warnings = [] if sections else [f"{path}: the page has no text"]
    if title:
        metadata["title"] = title
    return Document(
        path=path,
        sections=sections,
        metadata=metadata,
        title=title or builder.sections.first_h1 or _first_h1(soup),
        warnings=warnings,
        encoding=encoding,
    )
