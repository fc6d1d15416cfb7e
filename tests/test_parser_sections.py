"""The heading tree shared by the Markdown, DOCX and HTML parsers."""

from __future__ import annotations

from mdrag.parsers.sections import SectionBuilder
from mdrag.types import Block


def test_headings_nest_close_and_restore() -> None:
    b = SectionBuilder()
    b.add(Block("preface"))
    b.heading(1, "Guide")  # no blocks: dropped
    b.heading(2, "")  # an empty title closes deeper headings but is not in paths
    b.heading(3, "Install")
    b.add(Block("pip install mdrag"))
    saved = b.open_headings
    b.heading(2, "Aside")
    b.add(Block("a note"))
    b.restore(saved)
    b.add(Block("after the aside"))
    b.heading(1, "Usage")
    b.add(Block("mdrag ask"))
    sections = b.finish()
    assert [(s.heading_path, s.level, s.text) for s in sections] == [
        ([], 0, "preface"),
        (["Guide", "Install"], 3, "pip install mdrag"),
        (["Guide", "Aside"], 2, "a note"),
        (["Guide", "Install"], 3, "after the aside"),
        (["Usage"], 1, "mdrag ask"),
    ]
    assert b.first_h1 == "Guide"
