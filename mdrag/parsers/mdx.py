"""MDX parser: the Markdown parser over the file with its JavaScript taken out, every line kept in place.

Outside fenced code (which is left as written) and inline code spans:

- ESM (``import``/``export`` at the start of a block, up to the next blank
  line where its brackets are closed: a multi-line ``export const``) becomes
  blank lines;
- JSX tags (``<Note type="info">``, ``</Note>``, ``<Chart />``, fragments,
  attributes over several lines) and ``{expressions}`` (``{/* comment */}``
  too) are removed: the text between an opening and a closing tag stays;
- indentation is capped at three spaces, as MDX has no indented code: text
  nested in components is prose, not a code block.

Removed markup keeps its line breaks, so line numbers (and citations) are
those of the ``.mdx`` file. An ``<`` or ``{`` that does not open a tag or a
closed expression is left as text.
"""

from __future__ import annotations

import re

from mdrag.parsers import markdown
from mdrag.parsers.text import decode_text
from mdrag.types import Document

__all__ = ["parse", "to_markdown"]

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_ESM = re.compile(r"^(?:import|export)(?:[\s{*]|$)")
_FRONTMATTER = re.compile(r"^(?:---|\+\+\+)[ \t]*$")
_NAME = re.compile(r"[A-Za-z_$][\w.:$-]*")
_INDENT = re.compile(r"^[ \t]+")
_MAX_INDENT = 3  # four columns would make an indented code block, which MDX does not have
_OPEN = {"(": ")", "[": "]", "{": "}"}
_SPECIAL = "\\`<{\n"  # what may open markup in text (and the line break, where a line's start is read)
_SPECIAL_RE = re.compile(r"[\\`<{\n]")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def parse(data: bytes, path: str) -> Document:
    """Parse an MDX file's bytes: :func:`to_markdown`, then :func:`mdrag.parsers.markdown.parse`."""
    text, encoding = decode_text(data)
    doc = markdown.parse(to_markdown(text).encode("utf-8"), path)
    doc.encoding = encoding
    return doc


def to_markdown(text: str) -> str:
    """``text`` (MDX) without its ESM, JSX tags and expressions, with the same lines."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    head = _frontmatter_lines(lines)
    body = "\n".join(lines[head:])
    return "\n".join([*lines[:head], _Stripper(body).run()])


def _frontmatter_lines(lines: list[str]) -> int:
    """How many lines the frontmatter block at the top takes (0: none); the Markdown parser reads it."""
    if not lines or not _FRONTMATTER.match(lines[0]):
        return 0
    for i in range(1, len(lines)):
        if lines[i].strip() == lines[0].strip():
            return i + 1
    return 0


class _Stripper:
    """One pass over an MDX body, copying what is Markdown and dropping the rest but its line breaks."""

    def __init__(self, text: str) -> None:
        self.text = text  # the MDX body
        self.out: list[str] = []  # what is kept, in pieces
        self.i = 0  # the position read up to
        self.fence: str | None = None  # the marker of the code fence open ("```"), if any
        self.line_read = -1  # the start of the last line whose start was read (fence, ESM, indentation)
        self.blank = -1  # where the next blank line after the position read starts (markup does not cross it)
        self.unclosed: dict[int, int] = {}  # backtick runs of this length open no code span before this blank line
        self.braces = _Braces(text)  # the ends of the expressions found so far

    def run(self) -> str:
        text = self.text
        while self.i < len(text):
            if (self.i == 0 or text[self.i - 1] == "\n") and self.line_read != self.i:
                self.line_read = self.i
                if self._line_start():
                    continue
            self._token()
        return "".join(self.out)

    def _line_start(self) -> bool:
        """Read the start of a line: True when that was the whole line (fenced code) or more (ESM)."""
        text, i = self.text, self.i
        eol = _eol(text, i)
        line = text[i:eol]
        fence = _FENCE.match(line)
        marker, rest = (fence.group(1), line[fence.end() :]) if fence else (None, "")
        if marker and marker[0] == "`" and "`" in rest:
            marker = None  # an inline code span at the start of a line, not a fence
        if self.fence is not None or marker:
            if self.fence is None:
                self.fence, kept = marker, _cap_indent(line)
            elif marker and marker[0] == self.fence[0] and len(marker) >= len(self.fence) and not rest.strip():
                self.fence, kept = None, _cap_indent(line)
            else:
                kept = line  # a line of code: as written
            self.out.append(kept + text[eol : eol + 1])
            self.i = eol + 1
            return True
        previous = text[text.rfind("\n", 0, max(i - 1, 0)) + 1 : max(i - 1, 0)]
        if _ESM.match(line) and (i == 0 or not previous.strip()):
            self._drop(_esm_end(text, i))
            return True
        indent = _INDENT.match(line)
        if indent:
            self.out.append(_cap_indent(indent.group()))
            self.i += indent.end()
        return False

    def _token(self) -> None:
        """Read a run of plain text up to the line's end, or one escape, code span, tag or expression."""
        text, i, ch = self.text, self.i, self.text[self.i]
        if ch not in _SPECIAL:
            plain = _SPECIAL_RE.search(text, i)
            end = plain.start() if plain else len(text)
            self.out.append(text[i:end])
            self.i = end
            return
        if ch in "\\`\n":
            if ch == "`":
                end = self._code_span_end()
            else:
                end = min(i + (2 if ch == "\\" else 1), len(text))  # an escape, or a line break
            self.out.append(text[i:end])
            self.i = end
            return
        stop = self._stop()
        drop = _tag_end(self.braces, i, stop) if ch == "<" else self.braces.end(i)
        if drop is None:
            self.out.append(ch)
            self.i += 1
        else:
            self._drop(drop)

    def _code_span_end(self) -> int:
        """The end of the code span opening here, or of its run of backticks when none closes it."""
        text, i, stop = self.text, self.i, self._stop()
        run = i
        while run < len(text) and text[run] == "`":
            run += 1
        if self.unclosed.get(run - i) == stop:
            return run  # a run as long was not closed before this blank line: nor is this one
        end = _code_span_end(text, i, run, stop)
        if end == run:
            self.unclosed[run - i] = stop
        return end

    def _stop(self) -> int:
        """Where the next blank line starts (or the end of the text)."""
        if self.blank < self.i:
            blank = _BLANK_LINE.search(self.text, self.i)
            self.blank = blank.start() if blank else len(self.text)
        return self.blank

    def _drop(self, end: int) -> None:
        """Leave out ``text[i:end]`` but its line breaks; a space where it stood between two words."""
        breaks = self.text.count("\n", self.i, end)
        before = self.out[-1][-1:] if self.out else ""
        after = self.text[end : end + 1]
        if breaks or (before.strip() and after.strip()):
            self.out.append("\n" * breaks or " ")
        self.i = end


def _cap_indent(line: str) -> str:
    """``line`` with at most _MAX_INDENT columns of leading whitespace (a tab counts four)."""
    indent = _INDENT.match(line)
    if not indent:
        return line
    width = len(indent.group().expandtabs(4))
    return " " * min(width, _MAX_INDENT) + line[indent.end() :]


def _code_span_end(text: str, i: int, run: int, stop: int) -> int:
    """The end of the inline code span whose backticks are ``text[i:run]``, or ``run`` when none closes it before
    ``stop`` (a blank line: CommonMark's code spans may go over line breaks, not over a blank line)."""
    ticks, j = text[i:run], run
    while True:
        j = text.find(ticks, j, stop)
        if j < 0:
            return run
        k = j + len(ticks)
        if k >= len(text) or text[k] != "`":
            return k
        while k < len(text) and text[k] == "`":
            k += 1
        j = k


def _tag_end(braces: _Braces, i: int, stop: int) -> int | None:
    """The end of the JSX tag (or HTML comment) opening at ``i``, or None when ``<`` opens none before ``stop``."""
    text = braces.text
    if text.startswith("<!--", i):
        close = text.find("-->", i + 4)
        return None if close < 0 else close + 3
    j = i + 1
    if text.startswith("/", j):
        j += 1
    name = _NAME.match(text, j)
    if name is None:
        k = _skip_space(text, j)
        return k + 1 if k is not None and k < len(text) and text[k] == ">" else None  # a fragment, <> or </>
    j = name.end()
    while True:
        k = _skip_space(text, j)
        if k is None:
            return None
        if text.startswith("/>", k):
            return k + 2
        if k < len(text) and text[k] == ">":
            return k + 1
        if k == j and k < len(text) and text[k] not in "{":
            return None  # "<a:b/c" or "<https://...": not a tag
        if k < len(text) and text[k] == "{":
            j = braces.end(k) or -1
        else:
            attribute = _NAME.match(text, k)
            if attribute is None:
                return None
            j = _attribute_value_end(braces, attribute.end(), stop)
        if j < 0:
            return None


def _skip_space(text: str, j: int) -> int | None:
    """The first position from ``j`` that is not whitespace; None at a blank line (a tag does not cross one)."""
    while j < len(text) and text[j] in " \t\n":
        if text.startswith("\n\n", j) or text.startswith("\n \n", j):
            return None
        j += 1
    return j


def _attribute_value_end(braces: _Braces, j: int, stop: int) -> int:
    """After an attribute's name at ``j``: the end of its ``="..."`` or ``={...}``, ``j`` if it has no value,
    -1 if the value is not closed before ``stop``."""
    text = braces.text
    k = _skip_space(text, j)
    if k is None or k >= len(text) or text[k] != "=":
        return j
    k = _skip_space(text, k + 1)
    if k is None or k >= len(text):
        return -1
    if text[k] in "\"'":
        close = text.find(text[k], k + 1, stop)
        return -1 if close < 0 else close + 1
    if text[k] == "{":
        return braces.end(k) or -1
    return -1


class _Braces:
    """The ends of braced JavaScript expressions in a text, each read once.

    Reading one expression reads those nested in it, and the same characters
    read from a nested brace give the same result, so every brace met is
    remembered: text with many braces that never close costs one pass, not
    one per brace.
    """

    def __init__(self, text: str) -> None:
        self.text = text  # the MDX body
        self.known: dict[int, int | None] = {}  # brace position -> the end of its expression, None: not closed

    def end(self, i: int) -> int | None:
        """The end of the expression whose brace is at ``i``, or None when a blank line comes before its end (a
        comment in it may hold one)."""
        if i not in self.known:
            _balanced_end(self.text, i, known=self.known)
        return self.known.get(i)


def _balanced_end(text: str, i: int, at_blank: bool = False, known: dict[int, int | None] | None = None) -> int | None:
    """From ``i``: past the bracket opened there, strings and comments skipped, or None at a blank line; with
    ``at_blank``, up to the first blank line where every bracket is closed (None: there is none). The ends of the
    braces read on the way go to ``known`` (None for those left open)."""
    stack: list[tuple[str, int]] = []  # (the closing bracket awaited, where its opening one is)
    record = known if known is not None else {}
    j = i
    while j < len(text):
        ch = text[j]
        if ch == "\n" and not text[j + 1 : _eol(text, j + 1)].strip():
            if not at_blank:
                break  # a blank line: the bracket is not closed in its paragraph
            if not stack:
                return j + 1
        if ch in "\"'`":
            j = _string_end(text, j)
            continue
        if text.startswith("//", j):
            j = _eol(text, j)
            continue
        if text.startswith("/*", j):
            close = text.find("*/", j + 2)
            j = len(text) if close < 0 else close + 2
            continue
        if ch in _OPEN:
            stack.append((_OPEN[ch], j))
        elif stack and ch == stack[-1][0]:
            _, opened = stack.pop()
            if ch == "}":
                record[opened] = j + 1
            if not stack and not at_blank:
                return j + 1
        j += 1
    for closer, opened in stack:
        if closer == "}":
            record[opened] = None
    return len(text) if at_blank and not stack else None


def _esm_end(text: str, i: int) -> int:
    """The end of the ESM block starting at ``i``: the start of the first blank line where its brackets are closed,
    or of the first blank line when they never are."""
    end = _balanced_end(text, i, at_blank=True)
    if end is None:
        blank = _BLANK_LINE.search(text, i)
        end = blank.start() + 1 if blank else len(text)
    return end


def _string_end(text: str, j: int) -> int:
    """Past the JavaScript string (or template literal) opening at ``j``; a quote string ends at its line's end."""
    quote, k = text[j], j + 1
    while k < len(text):
        ch = text[k]
        if ch == "\\":
            k += 2
            continue
        if ch == quote:
            return k + 1
        if ch == "\n" and quote != "`":
            return k
        k += 1
    return k


def _eol(text: str, j: int) -> int:
    """The position of the line break ending the line at ``j`` (or the end of ``text``)."""
    k = text.find("\n", j)
    return len(text) if k < 0 else k
