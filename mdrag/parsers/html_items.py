"""Named items of an HTML page, found by the page's structure: each gets a heading of its own.

A reference page lists many named items: a definition list of settings or
options (``<dl><dt>name</dt><dd>...``), list items led by a bold name
(``<li><b>name</b> ...``), paragraphs led by one (``<p><strong>name</strong>:
...``), an element the page uses as a heading instead of h1-h6 (``<div
class="title">``, a paragraph all in bold, repeated with short text), FAQ
questions (short paragraphs ending in "?", each followed by its answer). Read
as plain text, such a page is one long section whose chunks all carry the
page's heading; here each item's name becomes a heading one level under the
headings open where its list starts, so the name joins the heading path of the
chunks of its text.

Decided by shape, never by site: a list counts when it holds at least
``_MIN_LIST`` items (``_MIN_RUN`` for runs of siblings, which are guessed
from less) whose names are short and whose text is more than their names.
Items under ``_OWN_ITEM`` characters do not each become a section (and a
chunk): adjacent ones share one, up to ``_GROUP`` characters and
``_GROUP_NAMES`` of names, headed by their names joined ("TMPPREFIX,
TMPSUFFIX, WORDCHARS"), so a query naming a short item finds its group as it
finds a long item's section; a short item alone between longer ones is a
group of one. A name that stands alone (a term, a question, a title element)
is the heading of its item and leaves the body; a bold name that leads its
sentence, and the names in a group of several, stay in it too.

The parser (:mod:`mdrag.parsers.html`) asks :func:`plan_items` once per page
and, while it walks, opens each item's heading where the item starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from bs4.element import NavigableString, Tag

from mdrag.parsers.sections import Heading

__all__ = ["HeadingSink", "ItemHeadings", "ItemPlan", "ItemsEnd", "plan_items"]

_MIN_LIST, _MIN_RUN = 3, 4  # items a list (dl, ul, ol) or a run of siblings needs to count
_OWN_ITEM = 400  # characters: an item this long or longer is a section of its own
_GROUP, _GROUP_NAMES = 800, 120  # characters: the most text, and names, that shorter items share a section with
_TERM_MAX, _LEAD_MAX, _TITLE_MAX, _QUESTION_MAX = 150, 80, 100, 200  # the longest name of each kind
_DISTINCT = 0.8  # share of the names that must differ
_QUESTIONS = 1 / 6  # share of a FAQ's blocks that are questions (its answers are a few paragraphs each)
_SHORT_TERMS = 0.8  # share of a definition list's terms that must be short (names, not paragraphs)
_BOLD = {"b", "strong"}
_LISTS = {"ul", "ol"}
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
_BLOCKS = {"p", "div", "ul", "ol", "dl", "table", "pre", "blockquote", "section", "article", "li", "dt", "dd",
           "figure", "form", "details", *_HEADINGS}  # fmt: skip
_SKIP = {"script", "style", "noscript", "template", "svg", "head"}
_SENTENCE_END = re.compile(r"[.,;:!]$")
_NAME_TRIM = re.compile(r"[\s:\u2013\u2014]+$")  # "name:" and "name \u2014" lead their text: the name is "name"


class HeadingSink(Protocol):
    """What :class:`ItemHeadings` needs of the parser's section builder."""

    def heading(self, level: int, title: str) -> None: ...
    def restore(self, headings: tuple[Heading, ...]) -> None: ...
    def open_headings(self) -> tuple[Heading, ...]: ...


@dataclass
class Item:
    """Where a named item (or a group of short ones) starts, and the tags its heading is read from."""

    container: int  # id() of the list (or of the run's parent): its end closes the item headings opened in it
    names: list[Tag]  # the tags whose text is the heading (joined with ", "): the item's name, or its group's


@dataclass
class ItemPlan:
    """The named items of one page, by ``id()`` of the tags the walk meets."""

    starts: dict[int, Item] = field(default_factory=dict)  # the tag an item (or a group) starts at
    names: set[int] = field(default_factory=set)  # tags that are an item's heading and leave the body
    containers: set[int] = field(default_factory=set)  # lists and parents that hold items
    closers: dict[int, int] = field(default_factory=dict)  # a tag where a list's items end (a heading) -> the list


def item_level(open_levels: Iterable[int]) -> int:
    """The level of an item heading: one under the deepest heading open (at least 2, at most 6)."""
    return min(6, max(2, max(open_levels, default=0) + 1))


def _size(tag: Tag) -> int:
    return len("".join(tag.get_text().split()))


def _name(tag: Tag) -> str:
    return " ".join(tag.get_text(" ").split())


def _children(tag: Tag) -> list[Tag]:
    return [c for c in tag.contents if isinstance(c, Tag) and c.name not in _SKIP]


def _has_text(node: object) -> bool:
    return isinstance(node, NavigableString) and bool(str(node).strip())


def _first_content(tag: Tag) -> Tag | NavigableString | None:
    """The first child of ``tag`` that holds text (a tag or a non-blank string)."""
    for child in tag.contents:
        if _has_text(child) or (isinstance(child, Tag) and child.name not in _SKIP and child.get_text().strip()):
            return child  # type: ignore[return-value]
    return None


def _bold_lead(tag: Tag) -> Tag | None:
    """The bold element ``tag``'s text starts with (through one wrapping paragraph), if its name is short."""
    first = _first_content(tag)
    if isinstance(first, Tag) and first.name == "p":
        first = _first_content(first)
    if isinstance(first, Tag) and first.name in _BOLD and 0 < len(_name(first)) <= _LEAD_MAX:
        return first
    return None


def _plan_dl(dl: Tag, plan: ItemPlan) -> None:
    """A definition list: a run of terms and the definitions after them is one item."""
    parts = []  # the terms and definitions, also those a div wraps (HTML allows <div><dt>..<dd>..</div>)
    for child in _children(dl):
        parts.extend([child] if child.name in ("dt", "dd") else _children(child) if child.name == "div" else [])
    groups: list[list[Tag]] = []  # each item's terms, then its definitions
    defined = False  # the last item has a definition: a term after it starts the next item
    for part in parts:
        if part.name == "dt" and (defined or not groups):
            groups.append([part])
        elif groups:
            groups[-1].append(part)
        defined = part.name == "dd" and bool(groups)
    items = [(group[0], [t for t in group if t.name == "dt"], sum(map(_size, group))) for group in groups]
    terms = [t for _, names, _ in items for t in names]
    short = sum(1 for t in terms if 0 < len(_name(t)) <= _TERM_MAX)
    term_text = sum(map(_size, terms))
    total = sum(size for _, _, size in items)
    if len(items) >= _MIN_LIST and short >= _SHORT_TERMS * len(terms) and total - term_text > term_text:
        _add(plan, dl, items, name_is_body=False)


def _plan_list(lst: Tag, plan: ItemPlan) -> None:
    """A list whose items (most of them) are led by a bold name."""
    items = [li for li in _children(lst) if li.name == "li"]
    led = [(li, lead) for li in items if (lead := _bold_lead(li)) is not None and _size(li) > _size(lead)]
    if len(led) < _MIN_LIST or len(led) < 0.6 * len(items):
        return
    _add(plan, lst, [(li, [lead], _size(li)) for li, lead in led], name_is_body=True)


def _leader(tag: Tag) -> tuple[str, Tag] | None:
    """What kind of item name a paragraph is ("question", "title", "lead"), and the tag holding the name."""
    if tag.name != "p":
        return None
    text = _name(tag)
    if not text or any(t.name in _BLOCKS for t in tag.find_all(True)):
        return None
    if len(text) <= _QUESTION_MAX and text.endswith("?"):
        return ("question", tag)
    lead = _bold_lead(tag)
    if lead is None:
        return None
    if len(_name(lead)) >= len(text) - 1:  # all of it bold: a heading the page draws by hand
        return None if _SENTENCE_END.search(text) else ("title", tag)
    return ("lead", lead)


def _signature(tag: Tag) -> tuple[str, tuple[str, ...]]:
    return tag.name, tuple(tag.get("class") or ())


def _leaders(children: list[Tag]) -> list[tuple[str, Tag] | None]:
    """Each child's kind of name, if it is one: a question, a bold paragraph, or a classed block that is always
    short, never a sentence and holds no block (the page's own heading element: ``<div class="title">``)."""
    kinds = [_leader(c) for c in children]
    by_class: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for i, child in enumerate(children):
        if child.get("class") and child.name in ("div", "p"):
            by_class.setdefault(_signature(child), []).append(i)
    for positions in by_class.values():
        texts = (_name(children[i]) for i in positions)  # lazily: a long one ends the test
        if all(0 < len(t) <= _TITLE_MAX and not _SENTENCE_END.search(t) for t in texts) and not any(
            t.name in _BLOCKS for i in positions for t in children[i].find_all(True)
        ):
            for i in positions:
                kinds[i] = ("title", children[i])
    return kinds


def _plan_runs(parent: Tag, plan: ItemPlan) -> None:
    """Siblings where every few a name leads: each name with what follows it, up to the next, is one item.

    A bold lead's item is its own paragraph and those after it up to the next lead; the run ends with its
    last lead's paragraph. Another item ends where the next starts or at a heading among the siblings.
    """
    children = _children(parent)
    if len(children) < 2 * _MIN_RUN:
        return  # too few blocks
    direct = sum(len(str(c).strip()) for c in parent.contents if isinstance(c, NavigableString))
    if direct and direct > 0.1 * _size(parent):
        return  # too few blocks, or running text with inline tags (a paragraph's links are not items)
    kinds = _leaders(children)
    for kind in ("question", "title", "lead"):
        starts = [i for i, k in enumerate(kinds) if k is not None and k[0] == kind]
        after_heading = sum(1 for i in starts if i and children[i - 1].name in _HEADINGS)
        if len(starts) < _MIN_RUN or after_heading * 2 >= len(starts):
            continue  # a note under each heading ("Main article: ...") is not a name: the heading names its part
        if kind == "question" and len(starts) < _QUESTIONS * len(children):
            continue  # questions a writer asks in passing, not a FAQ's
        ends = [*starts[1:], starts[-1] + 1 if kind == "lead" else len(children)]
        items: list[tuple[Tag, list[Tag], int]] = []
        closers: list[Tag] = []
        for start, end in zip(starts, ends):
            stop = next((j for j in range(start + 1, end) if children[j].name in _HEADINGS), end)
            closers.extend(children[j] for j in range(stop, end) if children[j].name in _HEADINGS)
            size = sum(_size(children[j]) for j in range(start, stop))
            name_tag = kinds[start][1]  # type: ignore[index]
            if size > _size(name_tag):
                items.append((children[start], [name_tag], size))
        if ends[-1] < len(children):
            closers.append(children[ends[-1]])
        if len(items) >= 0.8 * len(starts) and _add(plan, parent, items, name_is_body=kind == "lead"):
            plan.closers.update((id(c), id(parent)) for c in closers)
            return


def _groups(items: list[tuple[Tag, list[Tag], int]]) -> list[list[int]]:
    """The sections of ``items`` (start tag, name tags, size), as their indexes: a long item alone; adjacent
    short ones together, a new group where the text would pass ``_GROUP`` or the names ``_GROUP_NAMES``."""
    groups: list[list[int]] = []
    size = names = 0
    for i, (_, tags, item_size) in enumerate(items):
        name = sum(len(_name(t)) + 2 for t in tags)
        if (
            not groups
            or item_size >= _OWN_ITEM
            or items[groups[-1][-1]][2] >= _OWN_ITEM
            or size + item_size > _GROUP
            or names + name > _GROUP_NAMES
        ):
            groups.append([i])
            size, names = item_size, name
        else:
            groups[-1].append(i)
            size, names = size + item_size, names + name
    return groups


def _add(plan: ItemPlan, container: Tag, items: list[tuple[Tag, list[Tag], int]], *, name_is_body: bool) -> bool:
    """Record ``items`` (start tag, name tags, size), if there are enough and their names differ ("Note", "Note"
    are not named items): each long one heads a section, and the short ones between share sections by
    :func:`_groups`, headed by their names."""
    names = [" ".join(_name(n) for n in tags).lower() for _, tags, _ in items]
    least = _MIN_LIST if container.name in ("dl", *_LISTS) else _MIN_RUN
    if len(items) < least or len(set(names)) < _DISTINCT * len(names):
        return False
    plan.containers.add(id(container))
    for group in _groups(items):
        tags = [t for i in group for t in items[i][1]]
        plan.starts[id(items[group[0]][0])] = Item(id(container), tags)
        if len(group) == 1 and not name_is_body:
            plan.names.update(id(n) for n in tags)
    return True


def _walk(root: Tag) -> Iterator[Tag]:
    todo = [root]
    while todo:
        tag = todo.pop()
        yield tag
        todo.extend(reversed(_children(tag)))


def plan_items(root: Tag) -> ItemPlan:
    """The named items under ``root`` (see the module docstring)."""
    plan = ItemPlan()
    for tag in _walk(root):
        if tag.name == "dl":
            _plan_dl(tag, plan)
        elif tag.name in _LISTS:
            _plan_list(tag, plan)
        elif tag.name not in ("p", "pre", "table", *_HEADINGS):
            _plan_runs(tag, plan)
    return plan


@dataclass(frozen=True)
class ItemsEnd:
    """A marker the walk meets after the last child of a list of items: the item headings opened in it close."""

    container: int


class ItemHeadings:
    """Opens and closes the item headings of :class:`ItemPlan` as the parser's walk meets its tags.

    ``sink`` is the parser's section builder: its ``heading(level, title)`` and ``restore(headings)`` flush
    the text read so far first; ``open_headings`` returns the headings open now; ``text`` reads a name.
    """

    def __init__(self, plan: ItemPlan, sink: HeadingSink, text: Callable[[Tag], str]) -> None:
        self.plan = plan
        self.sink = sink
        self.text = text
        self.lists: dict[int, tuple[tuple[Heading, ...], int]] = {}  # container -> (headings at its start, level)
        self.opened: set[Heading] = set()  # item headings opened so far

    def enter(self, tag: Tag, todo: list[Any]) -> bool:
        """Before the walk reads ``tag``: open or close item headings; True when ``tag`` is a heading now
        (the term or question of an item alone), to be left out of the text."""
        key = id(tag)
        if key in self.plan.containers:
            todo.append(ItemsEnd(key))
        if key in self.plan.closers:  # a heading among the items: the next item is one level under it
            self.end(ItemsEnd(self.plan.closers[key]))
            self.lists.pop(self.plan.closers[key], None)
        item = self.plan.starts.get(key)
        if item is not None:
            _, level = self._list(item.container)
            title = ", ".join(t for t in (_NAME_TRIM.sub("", self.text(n)).strip() for n in item.names) if t)
            self.sink.heading(level, title)
            self.opened.add((level, title))
        return key in self.plan.names

    def end(self, marker: ItemsEnd) -> None:
        """Close the item headings opened in ``marker``'s list, unless another heading opened since."""
        headings, _ = self.lists.get(marker.container, ((), 0))
        now = self.sink.open_headings()
        if marker.container in self.lists and now[: len(headings)] == headings and now != headings:
            if all(h in self.opened for h in now[len(headings) :]):
                self.sink.restore(headings)

    def _list(self, container: int) -> tuple[tuple[Heading, ...], int]:
        if container not in self.lists:
            now = self.sink.open_headings()
            self.lists[container] = (now, item_level(level for level, _ in now))
        return self.lists[container]
