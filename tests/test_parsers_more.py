"""reStructuredText, plain text and MDX: every file a docset copies is searchable.

The files are real: Sphinx's reStructuredText primer and MDX's "What is MDX?"
page (tests/data, with their licenses), the MIT license text beside the latter
and the CommonMark spec's text (../shared/data). The last tests index them
through `mdrag index` / `mdrag search` and through the MCP `search` tool.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from mdrag.chunking import chunk_document
from mdrag.frontends.cli import main
from mdrag.knowledge import KnowledgeBase
from mdrag.knowledge.files import unsearchable
from mdrag.parsers import parse_file, supported_extensions
from mdrag.types import Chunk, Document

DATA = Path(__file__).resolve().parent / "data"
RST = DATA / "rst" / "basics.rst"  # Sphinx's reStructuredText Primer (tests/data/README.md)
MDX = DATA / "mdx" / "what-is-mdx.mdx"  # MDX's own "What is MDX?" page
LICENSE_TXT = DATA / "mdx" / "LICENSE-mdx.txt"  # MDX's MIT license: a real plain-text file
ROOT = Path(__file__).resolve().parents[1]


def _lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8").removeprefix("\ufeff")
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _chunks(doc: Document, path: Path) -> list[Chunk]:
    return chunk_document(doc, str(path.parent), path.name)


def _assert_blocks_are_their_lines(doc: Document, lines: list[str]) -> None:
    """Each block is its source lines as written (trailing spaces dropped), and blocks come in order."""
    last = 0
    for section in doc.sections:
        for b in section.blocks:
            assert b.line_start is not None and b.line_end is not None and last < b.line_start <= b.line_end
            assert b.text == "\n".join(x.rstrip() for x in lines[b.line_start - 1 : b.line_end]), b.line_start
            last = b.line_end


def _assert_chunks_within_their_lines(chunks: list[Chunk], lines: list[str]) -> None:
    """Every line of a chunk's text is found, in order, in the file's lines ``line_start..line_end``."""
    assert chunks
    for c in chunks:
        assert c.line_start is not None and c.line_end is not None and c.line_start <= c.line_end
        span = [x.strip() for x in lines[c.line_start - 1 : c.line_end]]
        k = 0
        for line in (x.strip() for x in c.text.split("\n") if x.strip()):
            while k < len(span) and line not in span[k]:
                k += 1
            assert k < len(span), (c.line_start, c.line_end, line)


def _assert_headings_on_their_lines(doc: Document, lines: list[str]) -> None:
    for section in doc.sections:
        if section.level:
            assert section.heading_line is not None
            assert section.heading_path[-1] in lines[section.heading_line - 1], section.heading_path


def test_the_new_suffixes_have_parsers_and_docsets_count_them_searchable() -> None:
    assert {".rst", ".txt", ".mdx"} <= set(supported_extensions())
    copied = ["README.rst", "docs/intro.mdx", "docs/notes.txt", "docs/guide.md", "docs/logo.png"]
    assert unsearchable(copied) == {".png": 1}


def test_rst_sections_become_headings_and_blocks_keep_their_lines(capfd: pytest.CaptureFixture[str]) -> None:
    doc = parse_file(RST)
    assert capfd.readouterr() == ("", ""), "docutils printed nothing about Sphinx's roles and directives"
    lines = _lines(RST)
    assert doc.title == "reStructuredText Primer" and doc.encoding == "utf-8"
    paths = {tuple(s.heading_path): s for s in doc.sections}
    assert paths[("reStructuredText Primer",)].level == 1
    assert paths[("reStructuredText Primer", "Paragraphs")].level == 2
    assert paths[("reStructuredText Primer", "Hyperlinks", "External links")].level == 3
    assert len([s for s in doc.sections if s.level == 2]) > 15
    _assert_headings_on_their_lines(doc, lines)
    _assert_blocks_are_their_lines(doc, lines)

    blocks = [b for s in doc.sections for b in s.blocks]
    html = [b for b in blocks if b.text.startswith(".. code-block:: html")]
    assert len(html) == 1 and html[0].kind == "code" and html[0].language == "html"
    doctest = paths[("reStructuredText Primer", "Doctest blocks")].blocks
    assert [b.kind for b in doctest if ">>> 1 + 1" in b.text] == ["code"]
    # `.. highlight:: rst` (a Sphinx directive) sets the language of the `::` blocks after it, and carries no text
    assert all(b.language == "rst" for b in blocks if b.kind == "code" and not b.text.startswith(".."))
    assert not any("highlight::" in b.text or ".. _rst-primer:" in b.text for b in blocks)
    # Sphinx's roles stay readable in the text; Sphinx's directives keep their content
    assert any(":duref:`ref <paragraphs>`" in b.text for b in blocks)
    assert any(b.text.startswith(".. versionchanged:: 0.6\n   Image paths can now be absolute.") for b in blocks)

    _assert_chunks_within_their_lines(_chunks(doc, RST), lines)


def test_rst_includes_nothing_and_survives_what_only_sphinx_knows(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """No file is read through `.. include::`, no raw output passes, navigation carries no text, and roles in a
    title read as their text."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret ingredient is saffron\n")
    page = tmp_path / "api.rst"
    page.write_text(
        "Using the :mod:`mdrag` API\n"
        "==========================\n"
        "\n"
        ".. toctree::\n   :maxdepth: 2\n\n   install\n   usage\n"
        "\n"
        f".. include:: {secret}\n"
        "\n"
        f".. literalinclude:: {secret}\n"
        "\n"
        ".. raw:: html\n\n   <script>alert(1)</script>\n"
        "\n"
        "See :ref:`the guide <guide>` and :py:func:`mdrag.open_index`.\n"
        "\n"
        ".. code-block:: python\n   :linenos:\n   :emphasize-lines: 1\n\n   index = open_index()\n"
        "\n"
        ".. deprecated:: 1.2\n   Use the other one.\n"
        "\n"
        ".. automodule:: mdrag\n   :members:\n",
        encoding="utf-8",
    )
    doc = parse_file(page)
    assert capfd.readouterr() == ("", "")
    text = "\n".join(s.text for s in doc.sections)
    assert "saffron" not in text and "<script>" not in text and "secret.txt" not in text
    assert "toctree" not in text and "install" not in text
    assert doc.title == "Using the mdrag API" and [s.heading_path for s in doc.sections] == [["Using the mdrag API"]]
    kinds = [(b.kind, b.language, b.line_start, b.line_end) for b in doc.sections[0].blocks]
    assert kinds == [("text", None, 18, 18), ("code", "python", 20, 24), ("text", None, 26, 27), ("text", None, 29, 30)]
    _assert_blocks_are_their_lines(doc, _lines(page))


def test_plain_text_paragraphs_on_the_commonmark_spec(shared_data: Path) -> None:
    spec = shared_data / "commonmark" / "spec-0.31.2.txt"
    doc = parse_file(spec)
    lines = _lines(spec)
    assert doc.title == "spec-0.31.2", "its first line, '---', is no title: the file's name is"
    assert [(s.level, s.heading_path) for s in doc.sections] == [(0, [])]
    blocks = doc.sections[0].blocks
    _assert_blocks_are_their_lines(doc, lines)
    assert all(not lines[b.line_end].strip() for b in blocks[:-1]), "a paragraph ends at a blank line"
    assert sum(b.line_end - b.line_start + 1 for b in blocks) == sum(1 for x in lines if x.strip())
    assert blocks[1].text == "# Introduction" and blocks[1].line_start == 9
    _assert_chunks_within_their_lines(_chunks(doc, spec), lines)


def test_plain_text_title_from_its_first_line() -> None:
    doc = parse_file(LICENSE_TXT)
    assert doc.title == "The MIT License (MIT)"
    blocks = doc.sections[0].blocks
    assert [(b.line_start, b.line_end) for b in blocks] == [(1, 1), (3, 3), (5, 10), (12, 13), (15, 21)]
    assert blocks[2].text.startswith("Permission is hereby granted, free of charge")
    _assert_blocks_are_their_lines(doc, _lines(LICENSE_TXT))


def test_mdx_drops_esm_jsx_and_expressions_but_keeps_text_code_and_lines() -> None:
    doc = parse_file(MDX)
    lines = _lines(MDX)
    assert doc.title == "What is MDX?"
    paths = {tuple(s.heading_path): s for s in doc.sections}
    assert paths[("What is MDX?", "MDX syntax", "JSX")].level == 3
    _assert_headings_on_their_lines(doc, lines)
    chunks = _chunks(doc, MDX)
    _assert_chunks_within_their_lines(chunks, lines)
    prose = [c for c in chunks if "```" not in c.text]
    for c in prose:  # the ESM at the top (a multi-line `export const`), the <Note> tags, `{/* more */}`
        for markup in ("import {Note}", "export const", "navSortSelf", "John Otander", "<Note", "</Note>", "{/*"):
            assert markup not in c.text, (markup, c.line_start)
    first = paths[("What is MDX?",)].blocks[0]
    assert first.line_start == 15 and "in ESM can be used inside MDX." in first.text
    # the text inside <Note type="info">...</Note> is text of its section
    note = paths[("What is MDX?", "MDX syntax")].blocks[0]
    assert note.kind == "text" and "You don’t have to use this syntax with `@mdx-js/*` packages." in note.text
    assert (note.line_start, note.line_end) == (77, 82)
    # code fences are left as written, JSX and all
    code = [b for s in doc.sections for b in s.blocks if b.kind == "code"]
    assert any('<Welcome name="Venus" />' in b.text for b in code)
    assert any(b.text.startswith("```mdx\n{/* A comment! */}") for b in code)


MDX_COMPONENTS = """\
---
title: Tabs <b>demo</b>
---
import Tabs from '@theme/Tabs'

# Install {props.name}

<Callout type="warn">Back up first.</Callout> Then <br/> run it.

<Tabs
  values={[
    {label: 'Linux', value: 'linux'},
  ]}
  icon={<Icon />}>
    <TabItem value="linux">

        Open a terminal on the machine.

    ```sh
    echo "<b>{x}</b>"
    ```

    </TabItem>
</Tabs>

Keep `<Tabs>` and `{x}`, a < b and <https://example.com>.

<Chart data={[1, 2]} />
{/* a comment

over a blank line */}
After <></> the fragment.

export default function Layout({children}) {
  return <main>{children}</main>

}

Last words.
"""


def test_mdx_components_over_several_lines_and_code_inside_them(tmp_path: Path) -> None:
    """What the real page does not show: a tag over several lines, an expression in an attribute, a fence and
    prose indented inside a component, a fragment, a comment over a blank line, an `export default` function."""
    page = tmp_path / "install.mdx"
    page.write_text(MDX_COMPONENTS, encoding="utf-8")
    doc = parse_file(page)
    assert doc.title == "Tabs <b>demo</b>", "the frontmatter is read as it is"
    assert [(s.heading_path, s.heading_line) for s in doc.sections] == [(["Install"], 6)]
    blocks = [(b.kind, b.line_start, b.line_end, b.text.strip()) for b in doc.sections[0].blocks]
    assert blocks == [
        ("text", 8, 8, "Back up first. Then  run it."),
        ("text", 17, 17, "Open a terminal on the machine."),  # prose, not indented code
        ("code", 19, 21, '```sh\n    echo "<b>{x}</b>"\n   ```'),
        ("text", 26, 26, "Keep `<Tabs>` and `{x}`, a < b and <https://example.com>."),
        ("text", 32, 32, "After  the fragment."),
        ("text", 39, 39, "Last words."),
    ]


@pytest.fixture
def three_kinds(tmp_path: Path) -> Path:
    """A folder with one real file of each new kind, and one file no parser reads."""
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(RST, docs / "basics.rst")
    shutil.copy(MDX, docs / "what-is-mdx.mdx")
    shutil.copy(LICENSE_TXT, docs / "LICENSE.txt")
    (docs / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return docs


QUESTIONS = {
    "basics.rst": "how are doctest blocks written, interactive Python sessions cut and pasted",
    "what-is-mdx.mdx": "what is the MDX format that combines markdown with JSX",
    "LICENSE.txt": "permission granted free of charge to deal in the software without restriction",
}


@pytest.mark.slow
def test_index_and_search_each_kind_through_the_cli(three_kinds: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", str(three_kinds), "--json", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["added"] == 3 and summary["skipped"] == 0 and summary["unsupported"] == {".png": 1}
    for rel, question in QUESTIONS.items():
        assert main(["search", question, "-k", "3", "--json"]) == 0
        results = json.loads(capsys.readouterr().out)
        assert results[0]["rel_path"] == rel, (question, [r["rel_path"] for r in results])
        top = results[0]
        assert top["line_start"] <= top["line_end"]
    assert main(["search", "import Note from component note.jsx", "-k", "20", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert not any("import {Note}" in r["text"] for r in found if r["rel_path"] == "what-is-mdx.mdx")


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_mcp_search_tool_finds_each_kind_in_a_docset(
    tmp_path: Path, mdrag_home: Path, three_kinds: Path
) -> None:
    project = tmp_path / "project"
    (project / ".knowledge").mkdir(parents=True)
    (project / ".knowledge" / "config.yaml").write_text("docsets:\n  - id: guides\n    name: Guides\n")
    shutil.copytree(three_kinds, Path(KnowledgeBase(project).resolve("guides").local_path))
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {"MDRAG_HOME": str(mdrag_home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
    serve = "from mdrag.frontends.mcp import run_stdio; run_stdio()"
    params = StdioServerParameters(command=sys.executable, args=["-c", serve], cwd=project, env=env)
    answers: dict[str, list[str]] = {}
    with anyio.fail_after(600), open(tmp_path / "err.log", "w", encoding="utf-8") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for rel, question in QUESTIONS.items():
                while True:
                    result = await session.call_tool("search", {"query": question, "docset": "guides", "k": 3})
                    assert not result.is_error
                    found = json.loads(result.content[0].text)  # type: ignore[union-attr]
                    if "indexing" not in found and "partial" not in found:  # built whole
                        break
                    await anyio.sleep(0.5)
                answers[rel] = [r["rel_path"] for r in found["results"]]
    assert {rel: ranked[:1] for rel, ranked in answers.items()} == {rel: [rel] for rel in QUESTIONS}, answers


def _shifted(doc: Document, lines: int) -> list:
    """``doc``'s sections with every line number ``lines`` further down."""
    import dataclasses

    def block(b):  # type: ignore[no-untyped-def]
        return dataclasses.replace(b, line_start=b.line_start + lines, line_end=b.line_end + lines)

    return [
        dataclasses.replace(s, blocks=[block(b) for b in s.blocks], heading_line=s.heading_line + lines)
        for s in doc.sections
    ]


def test_a_big_rst_file_is_read_in_parts_with_the_whole_file_s_sections_and_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Docutils' time and memory grew faster than the file (a 5 MB manual was skipped
    after 120 s, and needed 2 GB). A big file is read in parts cut at section titles; its sections and
    line numbers are the whole file's."""
    from docutils.parsers.rst import Parser

    text = RST.read_text(encoding="utf-8")
    copies = 14  # 300 KB: the primer again and again
    big = tmp_path / "manual.rst"
    big.write_text((text + "\n") * copies, encoding="utf-8")
    read: list[int] = []  # the length of each text docutils parsed
    parse = Parser.parse

    def recorded(self: Parser, inputstring: str, document: object) -> None:
        read.append(len(inputstring))
        parse(self, inputstring, document)  # type: ignore[arg-type]

    monkeypatch.setattr(Parser, "parse", recorded)
    one = parse_file(RST)
    read.clear()
    doc = parse_file(big)
    assert len(read) > 1 and max(read) < 100_000 and sum(read) > 290_000  # in parts, all of it
    step = text.count("\n") + 1
    assert doc.sections == [s for k in range(copies) for s in _shifted(one, k * step)]
    assert doc.title == one.title


def test_rst_cut_before_every_title_reads_as_the_whole_file(monkeypatch: pytest.MonkeyPatch) -> None:
    from mdrag.parsers import rst

    whole = parse_file(RST)
    monkeypatch.setattr(rst, "_SPLIT_CHARS", 0)
    monkeypatch.setattr(rst, "_PART_CHARS", 1)  # a part per title, wherever a part may start
    assert len(rst._parts(_lines(RST))) > 20
    assert parse_file(RST) == whole


def test_rst_nested_too_deeply_is_a_parse_error_that_names_the_nesting(tmp_path: Path) -> None:
    """A bullet list nested 200 deep made docutils recurse past Python's limit: a ParserCrashError,
    "a parser bug". It is the file's problem, said as such."""
    from mdrag.errors import ParseError, ParserCrashError

    deep = tmp_path / "deep.rst"
    deep.write_text("".join("  " * i + "- item\n\n" for i in range(200)), encoding="utf-8")
    with pytest.raises(ParseError) as info:
        parse_file(deep)
    assert not isinstance(info.value, ParserCrashError)
    assert str(info.value) == (
        f"{deep}: its blocks (lists, block quotes, directives) are nested too deeply for docutils to read "
        "(the deepest is indented 398 columns, at line 399): flatten the nesting to index it"
    )
