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


def test_an_aside_with_no_text_does_not_split_the_section_it_interrupts() -> None:
    # ars-1: a photo credit ("Kevin"), then a share bar whose only text is its heading, then the article
    b = SectionBuilder()
    b.heading(2, "Intro")
    b.add(Block("Kevin"))
    saved = b.open_headings
    b.heading(4, "Share this story")  # no blocks
    b.restore(saved)
    b.add(Block("A flaw in the wildly popular online game Minecraft"))
    b.heading(2, "Next")
    b.add(Block("more"))
    assert [(s.heading_path, s.text) for s in b.finish()] == [
        (["Intro"], "Kevin\n\nA flaw in the wildly popular online game Minecraft"),
        (["Next"], "more"),
    ]


def test_a_markdown_section_knows_the_line_of_its_heading() -> None:
    from mdrag.parsers.markdown import parse

    # Where the langchain strategy's chunks that hold a heading start (or end).
    text = "---\ntitle: Guide\n---\n\nIntro.\n\n## How it helps {#how}\n\nText.\n\nSetext\n------\n\nMore.\n"
    doc = parse(text.encode(), "/d/guide.md")
    assert [(s.heading_path, s.heading_line) for s in doc.sections] == [
        ([], None),
        (["How it helps"], 7),
        (["Setext"], 11),
    ]


def test_a_frontmatter_title_key_spelled_title_is_the_title() -> None:
    from mdrag.parsers.markdown import parse

    # CNCF glossary serverless.md: "Title: Serverless"; its intro chunk had no title as heading.
    assert parse(b"---\nTitle: Serverless\n---\n\nText.\n", "/d/serverless.md").title == "Serverless"
    both = parse(b"---\ntitle: lower\nTitle: Upper\n---\n\nText.\n", "/d/t.md")
    assert both.title == "lower", "the usual spelling first"
