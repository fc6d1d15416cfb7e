"""A passage as a reader sees it quoted in an answer without an LLM: its HTML comments left out.

A Markdown document's ``<!-- ... -->`` is not shown when it is rendered, so an answer that quotes
the document leaves it out too; a comment in a code block or a code span is code, and stays. The
index keeps the text as it was read (its chunks, and so every search, are unchanged): comments are
only left out where a passage is shown.
"""

from __future__ import annotations

import re

__all__ = ["visible_text"]

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")  # a code fence's opening or closing line
# a code span (kept as it is), or a comment: to its "-->", or to the end of the passage that was cut inside it
_CODE_OR_COMMENT = re.compile(r"(`+)(?:[^`]|[^`][\s\S]*?[^`])\1(?!`)|<!--[\s\S]*?(?:-->|\Z)")
_BLANKS = re.compile(r"\n[ \t]*(?:\n[ \t]*)+\n")  # blank lines a comment leaves behind, more than one


def _prose(text: str) -> str:
    """Text outside code blocks without its comments; the lines a comment held do not stay behind as blanks."""
    kept = _CODE_OR_COMMENT.sub(lambda m: m.group() if m.group(1) else "", text)
    return _BLANKS.sub("\n\n", f"\n{kept}\n")[1:-1]  # with the line breaks that join it to the code around it


def visible_text(text: str) -> str:
    """``text`` (Markdown) without its HTML comments, outside code blocks and code spans; trimmed."""
    if "<!--" not in text:
        return text.strip()
    out: list[str] = []
    prose: list[str] = []
    fence = ""  # the open code block's fence, or ""
    for line in text.split("\n"):
        if fence:
            out.append(line)
            if line.strip().startswith(fence):
                fence = ""
            continue
        opening = _FENCE.match(line)
        if opening:
            if prose:
                out.append(_prose("\n".join(prose)))
            prose, fence = [], opening.group(1)
            out.append(line)
        else:
            prose.append(line)
    if prose:
        out.append(_prose("\n".join(prose)))
    return "\n".join(out).strip()
