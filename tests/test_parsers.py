"""Tests for mdrag.parsers: the registry and the Markdown, PDF, DOCX and HTML parsers.

Small inputs written here pin exact behaviour; the real files in
../shared/data (fixture ``shared_data``) check robustness.
"""

from __future__ import annotations

import io
import json
import logging
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bs4 import BeautifulSoup

import mdrag.parsers as parsers
from mdrag.errors import ParseError, ParserCrashError, UnsupportedFormatError
from mdrag.parsers import get_parser, parse_file, register_parser, supported_extensions
from mdrag.types import Block, Document, Section

REPO = Path(__file__).resolve().parents[1]


def md(text: str | bytes, path: str = "/docs/page.md") -> Document:
    data = text.encode() if isinstance(text, str) else text
    return get_parser(path)(data, path)


def paths(doc: Document) -> list[tuple[list[str], int]]:
    return [(s.heading_path, s.level) for s in doc.sections]


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give a test its own copy of the registry; entry points not loaded yet."""
    monkeypatch.setattr(parsers, "_registry", dict(parsers._registry))
    monkeypatch.setattr(parsers, "_entry_points_loaded", False)
    monkeypatch.setattr(parsers.importlib.metadata, "entry_points", lambda **kw: [])


# --- Markdown ---------------------------------------------------------------

MD_DOC = """\
---
title: Front Title
date: 2024-01-02
updated: 2024-01-02T03:04:05Z
tags: [a, b]
nested: {when: 2020-05-06, n: 1}
---
Intro line one
intro line two.

# **Bold** title with `code` and [link](x) {#anchor}

First paragraph.

Second paragraph.

### Skipped to three

```python title="x"
def f():

    return 1
```

Setext two
----------

| a | b |
|---|---|
| 1 | 2 |

## Empty heading

#### Child of empty

- item
- item

Para after list.

    indented code

# Second top
text
"""


def test_markdown_frontmatter_becomes_json_metadata() -> None:
    doc = md(MD_DOC)
    assert doc.metadata == {
        "title": "Front Title",
        "date": "2024-01-02",
        "updated": "2024-01-02T03:04:05+00:00",
        "tags": ["a", "b"],
        "nested": {"when": "2020-05-06", "n": 1},
    }
    json.dumps(doc.metadata)
    assert doc.title == "Front Title"
    assert doc.warnings == []


def test_markdown_heading_tree() -> None:
    doc = md(MD_DOC)
    h1 = "Bold title with code and link"
    assert paths(doc) == [
        ([], 0),
        ([h1], 1),
        ([h1, "Skipped to three"], 3),
        ([h1, "Setext two"], 2),  # a new h2 pops the h3
        ([h1, "Empty heading", "Child of empty"], 4),  # the empty h2 stays in the path
        (["Second top"], 1),
    ]


def test_markdown_heading_titles_resolve_reference_links_escapes_and_images() -> None:
    # Only headings are parsed for inline markup: links defined anywhere still resolve.
    doc = md("# [Foo *bar*][ref] and [baz]\n\nt\n\n## Esc \\# &amp; ![alt *e*](i.png)\n\nt\n\n[ref]: /u\n[baz]: /b\n")
    assert paths(doc) == [(["Foo bar and baz"], 1), (["Foo bar and baz", "Esc # & alt e"], 2)]
    assert [b.text for s in doc.sections for b in s.blocks] == ["t", "t"]


def test_markdown_blocks_and_line_numbers_count_frontmatter() -> None:
    doc = md(MD_DOC)
    lines = MD_DOC.split("\n")
    got = [(b.kind, b.language, b.line_start, b.line_end) for s in doc.sections for b in s.blocks]
    assert got == [
        ("text", None, 8, 9),
        ("text", None, 13, 13),
        ("text", None, 15, 15),
        ("code", "python", 19, 23),
        ("table", None, 28, 30),
        ("text", None, 36, 37),
        ("text", None, 39, 39),
        ("code", None, 41, 41),
        ("text", None, 44, 44),
    ]
    for section in doc.sections:
        for b in section.blocks:  # each block is the source text of its lines
            assert b.text == "\n".join(lines[b.line_start - 1 : b.line_end])
    code = doc.sections[2].blocks[0].text
    assert code.startswith('```python title="x"\n') and code.endswith("\n```")
    assert "\n\n    return 1" in code  # the blank line inside stays: one block
    assert not any(b.text.lstrip().startswith("#") for s in doc.sections for b in s.blocks)


def test_markdown_pre_heading_text_and_title_fallbacks() -> None:
    doc = md("Just text.\n\n## Sub\n\nmore\n\n# Real title\n")
    assert paths(doc) == [([], 0), (["Sub"], 2)]  # "Real title" has no blocks
    assert doc.title == "Real title"
    assert md("no headings at all\n").title is None
    assert md("---\ntitle: [not, a, string]\n---\n# H\nx\n").title == "H"
    assert md(b"").sections == []


def test_markdown_bom_crlf_and_bad_utf8() -> None:
    doc = md(b"\xef\xbb\xbf---\r\ntitle: T\r\n---\r\n# Head\r\n\r\nbody \xff text\r\n")
    assert doc.metadata == {"title": "T"}
    assert paths(doc) == [(["Head"], 1)]
    block = doc.sections[0].blocks[0]
    assert block.text == "body \ufffd text"  # the byte-order mark says UTF-8: a bad byte is damage
    assert (block.line_start, block.line_end) == (6, 6)
    assert doc.encoding == "utf_8_sig"
    assert md("# plain\n").encoding == "utf-8"


def test_markdown_invalid_yaml_keeps_body_and_warns() -> None:
    text = "---\ntitle: [unclosed\nx: y\n---\n\n# Body\n\ncontent\n"
    doc = md(text, "/docs/bad.md")
    assert doc.metadata == {}
    assert paths(doc) == [(["Body"], 1)]
    assert doc.sections[0].blocks[0].line_start == 8
    (warning,) = doc.warnings
    assert "/docs/bad.md" in warning and "not valid" in warning
    assert "\n" not in warning  # only the YAML error's first line


def test_markdown_non_mapping_frontmatter_warns() -> None:
    doc = md("---\n- a\n- b\n---\ntext\n", "/docs/list.md")
    assert doc.metadata == {} and "not a mapping" in doc.warnings[0]
    assert doc.sections[0].blocks[0].text == "text"


def test_markdown_toml_frontmatter_and_unclosed_delimiter() -> None:
    doc = md('+++\ntitle = "Toml"\nweight = 3\n+++\n\nbody\n')
    assert doc.metadata == {"title": "Toml", "weight": 3}
    assert doc.sections[0].blocks[0].line_start == 6
    doc = md("---\n\nnot frontmatter, no closing line\n")  # a thematic break, then text
    assert doc.metadata == {} and doc.warnings == []
    assert doc.sections[0].blocks[0].text == "not frontmatter, no closing line"


def test_markdown_shortcodes_stay_as_text() -> None:
    doc = md("# H\n\n{{< note >}}\nBe careful.\n{{< /note >}}\n")
    assert doc.sections[0].blocks[0].text == "{{< note >}}\nBe careful.\n{{< /note >}}"


# The OpenTelemetry files whose frontmatter block is empty ("---\n---"): YAML
# reads it as null, not a mapping (shared/data/README.md counts them as rejected).
OTEL_EMPTY_FRONTMATTER = [
    "_includes/otel-does-not-validate-3rd-pty-distros.md",
    "_includes/page-drifted-msg.md",
    "_includes/page-not-translated-msg.md",
    "docs/collector/components/_includes/unmaintained-components-msg.md",
    "docs/languages/_includes/index-intro.md",
    "docs/languages/_includes/instrumentation-intro.md",
    "docs/languages/_includes/native-lib-alert.md",
    "docs/languages/_includes/propagation.md",
    "docs/languages/js/_includes/browser-instrumentation-warning.md",
    "docs/languages/js/_includes/esm-support-note.md",
    "ecosystem/_includes/keep-up-to-date.md",
]


def test_otel_files_with_unusable_frontmatter_keep_their_body(shared_data: Path) -> None:
    root = shared_data / "markdown_otel_docs" / "content" / "en"
    warned = set()
    for path in root.rglob("*.md"):
        if any("frontmatter" in w for w in parse_file(path).warnings):
            warned.add(path.relative_to(root).as_posix())
    assert warned == set(OTEL_EMPTY_FRONTMATTER)
    for rel in OTEL_EMPTY_FRONTMATTER:
        doc = parse_file(root / rel)
        assert doc.metadata == {}
        assert doc.sections and all(s.blocks for s in doc.sections)
        assert str(root / rel) in doc.warnings[0]


def test_every_shared_markdown_file_parses(shared_data: Path) -> None:
    files = [
        p
        for folder in ("markdown_hugo_docs", "markdown_otel_docs", "markdown_cncf_glossary")
        for p in sorted((shared_data / folder).rglob("*.md"))
    ]
    assert len(files) > 1800
    for path in files:
        doc = parse_file(path)
        json.dumps(doc.metadata)
        lines = path.read_bytes().decode("utf-8", "replace").removeprefix("\ufeff")
        lines = lines.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        for section in doc.sections:
            assert section.blocks and 0 <= section.level <= 6
            for b in section.blocks:
                assert b.text.strip()
                expected = "\n".join(x.rstrip() for x in lines[b.line_start - 1 : b.line_end])
                assert b.text == expected, (path, b.line_start)


# --- registry ---------------------------------------------------------------


def _fake_parser(data: bytes, path: str) -> Document:
    return Document(path=path, sections=[Section([], 0, [Block(data.decode())])], title="fake")


def test_builtin_extensions_registered() -> None:
    assert {".md", ".markdown", ".pdf", ".docx", ".html", ".htm"} <= set(supported_extensions())
    assert supported_extensions() == sorted(supported_extensions())
    assert get_parser("/x/README.MD") is get_parser("a.md")


@pytest.mark.usefixtures("registry")
def test_register_custom_extension_and_parse(tmp_path: Path) -> None:
    register_parser([".TXT", "rst"], _fake_parser)
    assert {".txt", ".rst"} <= set(supported_extensions())
    file = tmp_path / "notes.Txt"
    file.write_text("hello")
    doc = parse_file(file)
    assert doc.title == "fake" and doc.sections[0].text == "hello"
    assert doc.path == str(file.resolve())
    assert parse_file(tmp_path / "other.rst", data=b"given").sections[0].text == "given"


@pytest.mark.usefixtures("registry")
def test_later_registration_overrides_and_longest_suffix_wins() -> None:
    register_parser([".md"], _fake_parser)
    assert get_parser("a.md") is _fake_parser
    other = _lazy_named("other")
    register_parser([".tar.md"], other)
    assert get_parser("x.tar.md") is other and get_parser("x.md") is _fake_parser


def _lazy_named(name: str) -> Any:
    def parse(data: bytes, path: str) -> Document:
        return Document(path=path, sections=[], title=name)

    return parse


def test_unsupported_extension_names_file_and_supported() -> None:
    with pytest.raises(UnsupportedFormatError) as info:
        get_parser("/data/archive.xyz")
    message = str(info.value)
    assert "/data/archive.xyz" in message and ".md" in message and ".pdf" in message
    with pytest.raises(UnsupportedFormatError):
        parse_file("/data/Makefile")


@pytest.mark.usefixtures("registry")
def test_parse_file_turns_every_failure_into_parse_error(tmp_path: Path) -> None:
    def boom(data: bytes, path: str) -> Document:
        raise RuntimeError("kaputt")

    register_parser([".boom"], boom)
    with pytest.raises(ParserCrashError, match=r"x\.boom: unexpected RuntimeError in the parser: kaputt"):
        parse_file(tmp_path / "x.boom", data=b"")
    register_parser([".none"], lambda data, path: None)  # type: ignore[arg-type, return-value]
    with pytest.raises(ParserCrashError, match="not a Document"):
        parse_file(tmp_path / "x.none", data=b"")
    with pytest.raises(ParseError, match="cannot read file") as info:
        parse_file(tmp_path / "missing.md")
    assert not isinstance(info.value, ParserCrashError)  # bad input, not a bug


class _EntryPoint:
    def __init__(self, name: str, target: Any) -> None:
        self.name, self.value, self.group = name, f"fake:{name}", "mdrag.parsers"
        self._target = target

    def load(self) -> Any:
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


class _RstParser:
    extensions = [".rst", ".rest"]

    def __call__(self, data: bytes, path: str) -> Document:
        return Document(path=path, sections=[], title="rst")


@pytest.mark.usefixtures("registry")
def test_entry_points_load_lazily_once_and_skip_broken(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[dict[str, Any]] = []

    def entry_points(**kwargs: Any) -> list[_EntryPoint]:
        calls.append(kwargs)
        return [
            _EntryPoint("broken", ImportError("no module named mdrag_broken")),
            _EntryPoint("no_extensions", lambda data, path: None),
            _EntryPoint("rst", _RstParser()),
        ]

    monkeypatch.setattr(parsers.importlib.metadata, "entry_points", entry_points)
    assert calls == []  # nothing loaded until the first lookup
    with caplog.at_level(logging.WARNING, logger="mdrag.parsers"):
        assert get_parser("a.rst")(b"", "/a.rst").title == "rst"
    assert calls == [{"group": "mdrag.parsers"}]
    assert ".rest" in supported_extensions() and ".md" in supported_extensions()
    assert len(calls) == 1  # loaded once
    skipped = [r.getMessage() for r in caplog.records]
    assert any("broken" in m and "ImportError" in m for m in skipped)
    assert any("no_extensions" in m and "AttributeError" in m for m in skipped)


@pytest.mark.usefixtures("registry")
def test_entry_points_override_builtins_but_not_explicit_registrations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class MdParser(_RstParser):
        extensions = [".md"]

    monkeypatch.setattr(parsers.importlib.metadata, "entry_points", lambda **kw: [_EntryPoint("md", MdParser())])
    register_parser([".html"], _fake_parser)  # loads the entry points first
    assert isinstance(get_parser("a.md"), MdParser)
    assert get_parser("a.html") is _fake_parser


def test_import_is_cheap() -> None:
    code = (
        "import sys, mdrag.parsers\n"
        "heavy = {'pypdf', 'docx', 'bs4', 'markdown_it', 'frontmatter'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


# --- PDF --------------------------------------------------------------------


def _all_pdfs(shared_data: Path) -> list[Path]:
    files = sorted(shared_data.glob("pdf_*/**/*.pdf"))
    assert len(files) > 90
    return files


def test_every_shared_pdf_parses_or_raises_parse_error(shared_data: Path) -> None:
    parsed = failed = 0
    level = logging.getLogger("pypdf").level
    for path in _all_pdfs(shared_data):
        try:
            doc = parse_file(path)
        except ParseError as exc:
            assert str(path) in str(exc)
            failed += 1
        else:
            parsed += 1
            pages = [s.page for s in doc.sections]  # a page is cut where an outline entry starts
            assert pages == sorted(pages) and all(s.text.strip() for s in doc.sections)
    assert parsed >= 60 and failed >= 1
    assert logging.getLogger("pypdf").level == level  # quieted only while parsing


def test_encrypted_pdfs_without_password_raise(shared_data: Path) -> None:
    folder = shared_data / "pdf_py-pdf_sample-files"
    listed = json.loads((folder / "files.json").read_text())["data"]
    encrypted = [folder / e["path"] for e in listed if e["encrypted"]]
    encrypted += sorted((shared_data / "pdf_pypdf_resources").rglob("*-user-password.pdf"))
    assert len(encrypted) >= 5
    from pypdf import PdfReader

    refused = 0
    for path in encrypted:
        try:
            parse_file(path)
        except ParseError as exc:
            assert "encrypted" in str(exc)
            refused += 1
        else:  # opened: only because its user password is empty (AES needs `cryptography`)
            assert PdfReader(path).decrypt("") != 0, path
    assert refused >= 3, "files with a real user password are skipped with that reason"
    # RC4 with an empty user password opens without one
    resources = shared_data / "pdf_pypdf_resources" / "resources" / "encryption"
    assert "pdf encryption test" in parse_file(resources / "r3-empty-password.pdf").sections[0].text


def test_multipage_pdf_has_one_section_per_page(shared_data: Path) -> None:
    doc = parse_file(shared_data / "pdf_py-pdf_sample-files/004-pdflatex-4-pages/pdflatex-4-pages.pdf")
    assert [s.page for s in doc.sections] == [1, 2, 3, 4]
    assert all(s.heading_path == [] and s.level == 0 for s in doc.sections)
    assert doc.metadata["pages"] == 4
    assert all(line == line.rstrip() for s in doc.sections for line in s.text.split("\n"))


def test_pdf_outline_entries_are_sections_with_heading_paths(shared_data: Path) -> None:
    """Nested outline entries give heading paths; pages keep their numbers."""
    path = shared_data / "pdf_py-pdf_sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"
    doc = parse_file(path)
    by_page: dict[int, list[Section]] = {}
    for s in doc.sections:
        by_page.setdefault(s.page or 0, []).append(s)
    chapter = "3 Fundamentalgruppe und Überlagerungen"
    assert [s.heading_path for s in by_page[51]] == [
        [chapter, "3.1 Homotopie von Wegen"],
        [chapter, "3.2 Fundamentalgruppe"],
    ]
    assert by_page[51][1].text.startswith("3.2 Fundamentalgruppe\n") and by_page[51][1].level == 2
    assert [(s.heading_path, s.level) for s in by_page[4]] == [([], 0)], "the contents page comes before the outline"
    # A chapter heading right above its first subsection is not a section of its own.
    first = by_page[6]
    assert [s.heading_path for s in first] == [["1 Topologische Grundbegriffe", "1.1 Topologische Räume"]]
    assert first[0].text.startswith("1 Topologische Grundbegriﬀe\n1.1 Topologische Räume\n")
    assert ["4 Euklidische und nichteuklidische Geometrie", "4.2 Weitere Eigenschaften einer euklidischen Ebene",
            "4.2.1 Flächeninhalt"] in [s.heading_path for s in by_page[78]]  # fmt: skip
    # Nothing lost, nothing moved: each page's sections hold exactly that page's text, less a running
    # header ("48 3.2. FUNDAMENTALGRUPPE": the first line of the section's pages, page number aside).
    from pypdf import PdfReader

    pages = PdfReader(path).pages
    for number, header in [(4, False), (6, False), (50, False), (51, True), (52, True), (78, True), (114, False)]:
        lines = pages[number - 1].extract_text().replace("\x00", "").split("\n")
        expected = " ".join(" ".join(lines[1:] if header else lines).split())
        assert " ".join(" ".join(s.text for s in by_page.get(number, [])).split()) == expected, number


def test_pdf_running_headers_and_footers_are_left_out(shared_data: Path) -> None:
    """GeoTopo starts every page with "<page> <section number>. <SECTION>": it began each page's chunk,
    and on page 26, where a new section starts below it, "23 1.6. WEGE UND KNOTEN" was a chunk alone."""
    import re

    doc = parse_file(shared_data / "pdf_py-pdf_sample-files/009-pdflatex-geotopo/GeoTopo-komprimiert.pdf")
    header = re.compile(r"^\d+ \d+\.\d+\. [A-ZÄÖÜ ]+$")
    page26 = [s for s in doc.sections if s.page == 26]
    assert [s.heading_path[-1] for s in page26] == ["Übungsaufgaben"]
    assert not [s.page for s in doc.sections if s.text.split("\n")[0] == "23 1.6. WEGE UND KNOTEN"]
    # A section of three pages or more loses its running header on each of them.
    pages = {s.page: s.text.split("\n")[0] for s in doc.sections if s.heading_path[-1:] == ["1.6 Wege und Knoten"]}
    assert sorted(pages) == [21, 22, 23, 24, 25, 26][: len(pages)] and len(pages) >= 5
    assert not [line for line in pages.values() if header.match(line)]
    # Page-number footers go (pdflatex numbers each page at its foot); a page that is one line keeps it.
    four = parse_file(shared_data / "pdf_py-pdf_sample-files/004-pdflatex-4-pages/pdflatex-4-pages.pdf")
    assert [s.text.split("\n")[-1] for s in four.sections] != ["1", "2", "3", "4"]
    assert not [s for s in four.sections if s.text.split("\n")[-1].strip().isdigit()]
    habibi = parse_file(shared_data / "pdf_py-pdf_sample-files/015-arabic/habibi-rotated.pdf")
    assert len(habibi.sections) >= 3 and all("habibi" in s.text for s in habibi.sections)


def test_pdf_outline_titles_match_after_a_section_number(shared_data: Path) -> None:
    doc = parse_file(shared_data / "pdf_py-pdf_sample-files/006-pdflatex-outline/pdflatex-outline.pdf")
    page2 = [(s.heading_path, s.text.split("\n")[0]) for s in doc.sections if s.page == 2]
    assert page2 == [(["Foo"], "1 Foo"), (["Bar"], "2 Bar"), (["Baz"], "3 Baz"), (["Foo"], "4 Foo")]
    assert doc.sections[0].page == 1 and doc.sections[0].heading_path == []  # "Contents", before any entry


def test_pdf_text_matches_pypdf_expected_output(shared_data: Path) -> None:
    resources = shared_data / "pdf_pypdf_resources" / "resources"
    expected = (resources / "crazyones.txt").read_text(encoding="utf-8")
    doc = parse_file(resources / "crazyones.pdf")

    def norm(text: str) -> str:
        return " ".join(text.split())

    assert norm(expected) in norm(doc.sections[0].text) or norm(doc.sections[0].text) in norm(expected)
    assert "The Crazy Ones" in doc.sections[0].text


def test_pdf_titles_and_failures(shared_data: Path) -> None:
    samples = shared_data / "pdf_py-pdf_sample-files"
    doc = parse_file(samples / "011-google-doc-document/google-doc-document.pdf")
    assert doc.title == "PDF Example Document"
    assert parse_file(samples / "007-imagemagick-images/imagemagick-images.pdf").title == "imagemagick-images"
    assert parse_file(samples / "008-reportlab-inline-image/inline-image.pdf").title is None  # "untitled"
    with pytest.raises(ParseError, match="no extractable text"):
        parse_file(samples / "019-grayscale-image/grayscale-image.pdf")


def test_pdf_garbage_raises_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_file("/nowhere/x.pdf", data=b"this is not a PDF at all")
    with pytest.raises(ParseError):
        parse_file("/nowhere/x.pdf", data=b"")


# --- DOCX -------------------------------------------------------------------


def _built_docx() -> bytes:
    import docx

    d = docx.Document()
    d.core_properties.title = ""
    d.add_heading("Doc Title", 0)
    d.add_paragraph("Intro para.")
    d.add_heading("Chapter", 1)
    d.add_paragraph("Body one.")
    d.add_paragraph("")
    d.add_paragraph("item a", style="List Bullet")
    d.add_paragraph("item b", style="List Bullet")
    d.add_heading("Deep", 3)
    table = d.add_table(rows=2, cols=3)
    for r, row in enumerate([["key", "value", "note"], ["a", "1", ""]]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    d.add_paragraph("After table.")
    d.add_heading("Empty", 2)
    d.add_heading("Child", 3)
    d.add_paragraph("child text")
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def test_docx_sections_paths_and_table() -> None:
    doc = get_parser("x.docx")(_built_docx(), "/x.docx")
    assert doc.title == "Doc Title"
    assert paths(doc) == [
        (["Doc Title"], 1),
        (["Chapter"], 1),
        (["Chapter", "Deep"], 3),
        (["Chapter", "Empty", "Child"], 3),
    ]
    assert [(b.kind, b.text) for b in doc.sections[1].blocks] == [
        ("text", "Body one."),
        ("text", "- item a\n- item b"),
    ]
    assert [(b.kind, b.text) for b in doc.sections[2].blocks] == [
        ("table", "key | value | note\na | 1 | "),
        ("text", "After table."),
    ]


def test_docx_every_shared_file_parses_or_raises(shared_data: Path) -> None:
    files = sorted(shared_data.glob("docx_*/**/*.docx"))
    assert len(files) >= 60
    failed = []
    for path in files:
        try:
            parse_file(path)
        except ParseError:
            failed.append(path.name)
    assert failed == []  # strict-format.docx (ISO Strict OOXML) included


def test_docx_empty_document_has_no_sections(shared_data: Path) -> None:
    doc = parse_file(shared_data / "docx_mammoth/tests/test-data/empty.docx")
    assert doc.sections == [] and "no text" in doc.warnings[0]


def test_docx_shared_files_content(shared_data: Path) -> None:
    base = shared_data / "docx_python-docx"
    doc = parse_file(base / "tests/test_files/blk-inner-content.docx")
    assert [b.kind for s in doc.sections for b in s.blocks] == ["text", "table", "text"]
    doc = parse_file(base / "features/steps/test_files/doc-coreprops.docx")
    assert doc.title == "Title" and doc.metadata["author"]


def _docx_sections(path: Path) -> list[tuple[list[str], list[str]]]:
    return [(s.heading_path, [b.text for b in s.blocks]) for s in parse_file(path).sections]


def test_docx_text_boxes_notes_comments_headers_and_footers(shared_data: Path) -> None:
    """What python-docx's paragraphs leave out is read, each in a stated place."""
    mammoth = shared_data / "docx_mammoth/tests/test-data"
    steps = shared_data / "docx_python-docx/features/steps/test_files"
    # The text box once (Word writes a VML copy of it for older readers).
    assert _docx_sections(mammoth / "text-box.docx") == [([], ["Datum plane"])]
    # Notes: a mark where they are referenced, the notes in a section at the end.
    assert _docx_sections(mammoth / "footnotes.docx") == [
        ([], ["Ouch[1].[2]"]),
        (["Footnotes"], ["[1] A tachyon walks into a bar.", "[2] Fin."]),
    ]
    assert _docx_sections(mammoth / "endnotes.docx") == [
        ([], ["Ouch[i].[ii]"]),
        (["Endnotes"], ["[i] A tachyon walks into a bar.", "[ii] Fin."]),
    ]
    assert _docx_sections(mammoth / "footnote-hyperlink.docx") == [(["Footnotes"], ["[1] Example"])]
    assert _docx_sections(mammoth / "comments.docx") == [
        ([], ["Ouch."]),
        (["Comments"], ["Michael Williamson: A tachyon walks into a bar.", "Michael Williamson: Fin."]),
    ]
    # Each distinct header and footer once; a section that links to the previous one repeats nothing.
    assert _docx_sections(steps / "hdr-header-footer.docx")[-1] == (
        ["Headers and footers"],
        ["Header for section-1", "Footer for section 1"],
    )
    assert _docx_sections(steps / "blk-paras-and-tables.docx")[-1] == (
        ["Headers and footers"],
        ["Left-side | Right-side", "Copyright | Page-number"],
    )


def test_docx_strict_ooxml_is_read_or_refused_in_words(shared_data: Path, tmp_path: Path) -> None:
    """Strict OOXML (purl.oclc.org namespaces) was skipped with KeyError: "no relationship of type ..."."""
    import zipfile

    from mdrag.parsers.worker import ParseWorker

    strict = shared_data / "docx_mammoth/tests/test-data/strict-format.docx"
    broken = tmp_path / "strict-without-body.docx"  # the same file without its document part
    with zipfile.ZipFile(strict) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            if info.filename != "word/document.xml":
                dst.writestr(info, src.read(info))
    headless = tmp_path / "no-main-part.docx"  # a regular file whose package names no main document
    with zipfile.ZipFile(shared_data / "docx_mammoth/tests/test-data/single-paragraph.docx") as src:
        with zipfile.ZipFile(headless, "w") as dst:
            for info in src.infolist():
                data = src.read(info)
                if info.filename == "_rels/.rels":
                    data = re.sub(rb'<Relationship Id="rId1"[^>]*/>', b"", data)
                dst.writestr(info, data)
    with ParseWorker(max_mb=1024) as worker:  # the indexer's path: the message users see
        doc = worker.parse(strict, timeout=60)
        assert [(s.heading_path, s.text) for s in doc.sections] == [([], "Test")] and doc.warnings == []
        with pytest.raises(ParseError) as caught:
            worker.parse(broken, timeout=60)
        with pytest.raises(ParseError) as no_main:
            worker.parse(headless, timeout=60)
    assert str(caught.value).startswith(f"{broken}: Strict Office Open XML that could not be read")
    assert str(caught.value).endswith("save it as a regular .docx (Word Document)")
    assert str(no_main.value) == (
        f"{headless}: not a readable DOCX file: the package has no main document part; "
        "save it again as a Word .docx document"
    )


def test_docx_garbage_raises_parse_error() -> None:
    with pytest.raises(ParseError, match=r"not a readable DOCX file: not a ZIP package \(.*\); save it as a Word"):
        parse_file("/nowhere/x.docx", data=b"PK\x03\x04 not really a zip")


# --- HTML -------------------------------------------------------------------

HTML_PAGE = """<!DOCTYPE html>
<html lang="en"><head>
<title>  Page
 Title </title>
<meta name="description" content="About things.">
<style>body { color: red }</style>
<script>var secret = "script text";</script>
</head>
<body>
<nav><a href="/">Home</a> <a href="/x">Menu item</a></nav>
<p>Before any <b>heading</b>,
   text.</p>
<!-- a comment -->
<h1>Main <code>title</code></h1>
<p>Intro paragraph.</p>
<div hidden>hidden text</div>
<h3>Skipped level</h3>
<ul><li>one</li><li>two</li></ul>
<h2>Second</h2>
<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td><a href="#">1</a></td></tr></table>
<pre><code class="language-python">def f():
    return 1
</code></pre>
<noscript>enable js</noscript>
<footer>Copyright</footer>
</body></html>
"""


def test_html_structure_and_removed_elements() -> None:
    doc = get_parser("p.html")(HTML_PAGE.encode(), "/p.html")
    assert doc.title == "Page Title"
    assert doc.metadata == {"description": "About things.", "lang": "en", "title": "Page Title"}
    assert paths(doc) == [
        ([], 0),
        (["Main title"], 1),
        (["Main title", "Skipped level"], 3),
        (["Main title", "Second"], 2),
    ]
    texts = [(b.kind, b.text) for s in doc.sections for b in s.blocks]
    assert texts == [
        ("text", "Before any heading, text."),
        ("text", "Intro paragraph."),
        ("text", "- one\n- two"),
        ("table", "k | v\na | 1"),
        ("code", "```python\ndef f():\n    return 1\n```"),
    ]
    assert doc.sections[3].blocks[1].language == "python"
    everything = " ".join(t for _, t in texts)
    for gone in ("secret", "color", "Menu item", "hidden text", "comment", "enable js", "Copyright"):
        assert gone not in everything


def test_html_charset_and_title_fallback() -> None:
    page = '<html><head><meta charset="iso-8859-1"></head><body><h1>Caf\xe9</h1><p>x</p></body></html>'
    doc = get_parser("a.htm")(page.encode("latin-1"), "/a.htm")
    assert doc.title == "Café" and doc.sections[0].heading_path == ["Café"]
    assert doc.encoding == "cp1252"  # latin-1 means windows-1252, as in browsers
    doc = get_parser("a.htm")(b"<p>\xe2\x82\xac 5</p>", "/a.htm")  # undeclared: UTF-8
    assert doc.sections[0].blocks[0].text == "€ 5" and doc.title is None and doc.encoding == "utf-8"
    # A UTF-16 label in bytes an ASCII search could read is false: UTF-8, not CJK garbage.
    page = '<html><head><meta charset="utf-16"></head><body><p>Gen\u00e8ve</p></body></html>'
    doc = get_parser("a.htm")(page.encode(), "/a.htm")
    assert doc.sections[0].blocks[0].text == "Genève" and doc.encoding == "utf-8"
    assert get_parser("a.htm")(b"", "/a.htm").sections == []


def test_html_layout_table_is_read_as_text() -> None:
    page = "<table><tr><td><h1>Inside</h1><p>para one</p></td></tr></table>"
    doc = get_parser("a.html")(page.encode(), "/a.html")
    assert paths(doc) == [(["Inside"], 1)]
    assert doc.sections[0].blocks[0] == Block("para one")


def test_html_readability_pages(shared_data: Path) -> None:
    pages = sorted((shared_data / "html_readability_pages").glob("*/source.html"))
    assert len(pages) == 130
    with_title = matching = without_text = 0
    for page in pages:
        doc = parse_file(page)  # ParseError would fail the test: none is expected
        expected = json.loads((page.parent / "expected-metadata.json").read_text())["title"]
        if not doc.sections:  # e.g. lazy-image-3: headings and images only
            assert "no text" in doc.warnings[0]
            without_text += 1
        if expected:
            assert doc.title, page
            with_title += 1
            matching += " ".join(expected.split()) in doc.title
    assert with_title >= 120 and without_text <= 3
    assert matching >= 0.8 * with_title  # readability sometimes prefers other metadata


def test_html_wikipedia_page(shared_data: Path) -> None:
    doc = parse_file(shared_data / "html_readability_pages/wikipedia/source.html")
    assert doc.title == "Mozilla - Wikipedia"
    # The h1 is the page's title, outside the article that readability-lxml picks: h2s head the tree.
    assert any(s.heading_path == ["History[edit]"] and s.level == 2 for s in doc.sections)
    tables = [b.text for s in doc.sections for b in s.blocks if b.kind == "table"]
    assert any(re.search(r"^Founded \| February 28, 1998", t, re.M) for t in tables)


def test_html_deeply_nested_page_parses_and_leaves_out_removed_elements() -> None:
    # 5,000 levels: past Python's recursion limit, and a minute or more to parse while
    # removed elements were decomposed (bs4's tag.decomposed searched each subtree).
    # Each level's text comes first: text after a child costs bs4's own tree builder
    # a walk up the open elements, quadratic in depth whatever mdrag does.
    depth = 5000
    level = '<div>level {i}<nav>menu {i}</nav><span aria-hidden="true">icon</span>'
    inner = (
        "<h2>Deep <span hidden>secret</span>heading</h2>"
        "<table><tr><th>k</th><th>v<span hidden>secret</span></th></tr>"
        "<tr hidden><td>secret</td><td>row</td></tr><tr><td>a</td><td>1</td></tr></table>"
        '<pre><code class="language-sh">ls<span hidden>secret</span> -l</code></pre>'
    )
    page = "<html><body><h1>Top</h1>" + "".join(level.format(i=i) for i in range(depth)) + inner
    page += "</div>" * depth + "<p>after</p></body></html>"
    doc = get_parser("deep.html")(page.encode(), "/deep.html")
    assert paths(doc) == [(["Top"], 1), (["Top", "Deep heading"], 2)]
    top, deep = doc.sections
    assert [b.text for b in top.blocks] == [f"level {i}" for i in range(depth)]
    assert [(b.kind, b.text) for b in deep.blocks] == [
        ("table", "k | v\na | 1"),
        ("code", "```sh\nls -l\n```"),
        ("text", "after"),
    ]


def test_html_unclosed_table_rows_and_cells_are_read_once() -> None:
    # html.parser nests each unclosed <tr>/<td> in the one before; a browser closes them.
    page = "<table><tr><th>k<th>v<tr><td>a<td>1<tr><td>b <b>bold</b><td>2</table><p>after</p>"
    doc = get_parser("t.html")(page.encode(), "/t.html")
    assert [(b.kind, b.text) for b in doc.sections[0].blocks] == [
        ("table", "k | v\na | 1\nb bold | 2"),
        ("text", "after"),
    ]
    rows = 2000  # cubic while each row read all the rows nested in it: it did not finish
    page = "<table>" + "".join(f"<tr><td>r{i}<td>{i}" for i in range(rows)) + "</table>"
    (table,) = get_parser("t.html")(page.encode(), "/t.html").sections[0].blocks
    assert table.text.split("\n") == [f"r{i} | {i}" for i in range(rows)]


def test_html_svg_titles_are_not_the_page_title() -> None:
    # 3,000 nested icon titles: each was checked for an svg ancestor, quadratic in depth.
    icons = "<svg>" + "<g><title>icon</title>" * 3000 + "</g>" * 3000 + "</svg>"
    page = f"<html><body>{icons}<h1>Heading</h1><p>text</p></body></html>"
    doc = get_parser("s.html")(page.encode(), "/s.html")
    assert doc.title == "Heading"
    assert paths(doc) == [(["Heading"], 1)] and doc.sections[0].blocks == [Block("text")]


def _indexed_text(doc: Document) -> str:
    """Each section's heading and blocks, whitespace collapsed: what a page's chunks hold."""
    parts = [(s.heading_path[-1] if s.level else "") + " " + s.text for s in doc.sections]
    return " ".join(" ".join(parts).split())


ARS_BOILERPLATE = ("75 with 51 posters participating", "← Previous story Next story →", "Skip to main content")


def test_html_reads_the_article_not_the_site_chrome(shared_data: Path) -> None:
    page = shared_data / "html_readability_pages/ars-1"
    doc = parse_file(page / "source.html")
    text = _indexed_text(doc)
    for boilerplate in (*ARS_BOILERPLATE, "Subscribe Close"):
        assert boilerplate not in text
    expected = BeautifulSoup((page / "expected.html").read_text(), "html.parser")
    sentences = [" ".join(p.get_text().split()) for p in expected.find_all("p")]
    assert len(sentences) >= 10 and all(s in text for s in sentences)
    # "Share this story", a heading in the share bar's aside, does not head the article.
    assert all("Share this story" not in s.heading_path for s in doc.sections)
    # Nor does it cut the article from the photo credit before it: "Kevin" is no section of its own.
    assert all(s.text.strip() != "Kevin" for s in doc.sections)
    assert doc.title == "Just-released Minecraft exploit makes it easy to crash game servers | Ars Technica"
    assert doc.metadata["description"] == "Two-year-old bug exposes thousands of servers to crippling attack."


@pytest.mark.slow
def test_html_search_ranks_the_article_above_the_site_chrome(shared_data: Path, tmp_path: Path, minilm) -> None:
    from mdrag.config import load_config
    from mdrag.index import Index

    pages = shared_data / "html_readability_pages"
    root = tmp_path / "pages"
    root.mkdir()
    for name in ("ars-1", "guardian-1", "theverge", "tumblr"):  # the ars page and others with site chrome
        (root / f"{name}.html").write_bytes((pages / name / "source.html").read_bytes())
    # the page's own chunks against each other: each takes a place (search.per_page 0)
    with Index(load_config({"index": "html", "search.per_page": 0}), embedder=minilm) as idx:
        idx.update([root])
        # collapse "none": the article shares its (empty) heading path with the credit chunk
        hits = idx.search("Minecraft servers crash bug", k=5, threshold=0, collapse="none")
    assert hits[0].rel_path == "ars-1.html"
    article = " ".join(BeautifulSoup((pages / "ars-1/expected.html").read_text(), "html.parser").get_text().split())
    # The article first (a one-word image credit, "Kevin", was a chunk of its own and came first),
    # and no site chrome in the first five.
    assert "A flaw in the wildly popular online game Minecraft" in hits[0].text
    assert any(len(h.text) > 200 and " ".join(h.text.split()) in article for h in hits[:3])
    assert not [h for h in hits if any(b in " ".join(h.text.split()) for b in ARS_BOILERPLATE)]


DOCS_PAGE = """<!doctype html>
<html lang="en"><head><title>Exporters | OpenTelemetry</title>
<meta property="og:description" content="Process and export your telemetry data"></head>
<body>
<header><nav><a href="/">OpenTelemetry</a> <a href="/docs/">Docs</a></nav></header>
<div class="td-outer"><div class="row">
<aside class="td-sidebar"><form><input type="search" placeholder="Search this site"></form>
<ul><li><a href="/docs/getting-started/">Getting started</a></li><li><a href="/docs/concepts/">Concepts</a></li>
<li><a href="/docs/collector/">Collector</a></li></ul></aside>
<aside class="td-sidebar-toc"><div class="td-page-meta"><a href="/edit/x.md">View page source</a>
<a href="/edit/y.md">Edit this page</a> <a href="/issues/new">Create documentation issue</a></div></aside>
<main role="main"><div class="td-content">
<h1>Exporters</h1>
<p>Send telemetry to the OpenTelemetry Collector to make sure it is exported correctly. Using the Collector in
production environments is a best practice, and exporters send the data your application produces to it.</p>
<h2 id="otlp"><a href="#otlp">OTLP endpoint</a></h2>
<p>Set the endpoint of the exporter with an environment variable, as in this example, before the application starts.</p>
<div class="highlight"><pre class="chroma"><code class="language-sh">
<span class="line">pip install opentelemetry-exporter-otlp</span>
<span class="line">export OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317</span></code></pre></div>
<p>Then list the files:</p>
<div class="highlight"><pre><code class="language-sh">ls -l</code></pre></div>
<ul><li>gRPC</li><li>HTTP</li></ul>
<table><tr><th>Exporter</th><th>Package</th></tr>
<tr><td><a href="/x">OTLP</a></td><td><a href="/y">opentelemetry-exporter-otlp</a></td></tr></table>
</div></main></div></div>
<footer><p>Copyright The OpenTelemetry Authors</p></footer>
</body></html>
"""


def test_html_documentation_page_keeps_its_content_and_drops_its_sidebars() -> None:
    doc = get_parser("p.html")(DOCS_PAGE.encode(), "/p.html")
    text = _indexed_text(doc)
    for chrome in ("Getting started", "Concepts", "Edit this page", "Create documentation issue", "Copyright"):
        assert chrome not in text
    # Headings (one wrapped in a link), short code blocks, a short list and a table of links all stay.
    assert paths(doc) == [(["Exporters"], 1), (["Exporters", "OTLP endpoint"], 2)]
    assert [(b.kind, b.text) for b in doc.sections[1].blocks] == [
        ("text", "Set the endpoint of the exporter with an environment variable, as in this example, before the "
         "application starts."),
        ("code", "```sh\npip install opentelemetry-exporter-otlp\nexport OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317\n```"),
        ("text", "Then list the files:"),
        ("code", "```sh\nls -l\n```"),
        ("text", "- gRPC\n- HTTP"),
        ("table", "Exporter | Package\nOTLP | opentelemetry-exporter-otlp"),
    ]  # fmt: skip
    assert doc.title == "Exporters | OpenTelemetry"
    assert doc.metadata["description"] == "Process and export your telemetry data"
    # A plain page with no chrome at all is read whole.
    plain = b"<h1>Intro</h1><p>Short text.</p><h2>Usage</h2><p>Run it.</p><pre>x</pre>"
    doc = get_parser("p.html")(plain, "/p.html")
    assert [(s.heading_path, s.text) for s in doc.sections] == [
        (["Intro"], "Short text."),
        (["Intro", "Usage"], "Run it.\n\n```\nx\n```"),
    ]


def test_html_page_without_main_content_is_read_whole(caplog: pytest.LogCaptureFixture) -> None:
    # Past 255 levels of nesting the extraction is not tried (lxml stops reading there); the page is
    # read whole and the reason logged. The boilerplate-free page above is the other side of this rule.
    depth = 300
    page = "<html><body>" + "<div>" * depth + "<h1>Deep</h1><p>deep text</p>" + "</div>" * depth
    page += '<div class="sidebar"><a href="/a">link one</a></div></body></html>'
    with caplog.at_level(logging.INFO, logger="mdrag.parsers.html"):
        doc = get_parser("d.html")(page.encode(), "/d.html")
    assert "link one" in _indexed_text(doc) and "deep text" in _indexed_text(doc)
    assert "/d.html: tags nest deeper than 255 levels" in caplog.text


# --- text encodings (Markdown and HTML) -------------------------------------

GENEVA = "Genève est une ville suisse située à l'extrémité sud-ouest du lac Léman. Ça coûte cher, déjà."


def _text_file(tmp_path: Path, ext: str, title: str, body: str, encoding: str) -> Path:
    path = tmp_path / f"page{ext}"
    page = f"# {title}\n\n{body}\n" if ext == ".md" else f"<html><body><h1>{title}</h1><p>{body}</p></body></html>"
    path.write_bytes(page.encode(encoding))
    return path


@pytest.mark.parametrize("ext", [".md", ".html"])
@pytest.mark.parametrize(
    ("written", "reported"),
    [
        ("utf-8", "utf-8"),
        ("utf-8-sig", "utf_8_sig"),
        ("utf-16", "utf_16"),  # little-endian, with a byte-order mark
        ("utf-32", "utf_32"),
        ("latin-1", "cp1252"),  # read as windows-1252, as browsers read latin-1
        ("cp1252", "cp1252"),
    ],
)
def test_text_formats_decode_by_bom_utf8_or_detection(tmp_path: Path, ext: str, written: str, reported: str) -> None:
    doc = parse_file(_text_file(tmp_path, ext, "Genève", GENEVA, written))
    assert paths(doc) == [(["Genève"], 1)]
    assert doc.sections[0].blocks[0].text == GENEVA
    assert doc.encoding == reported


def test_utf16_big_endian_and_curly_quotes_in_windows_1252(tmp_path: Path) -> None:
    path = tmp_path / "be.md"
    path.write_bytes(b"\xfe\xff" + f"# Genève\n\n{GENEVA}\n".encode("utf-16-be"))
    doc = parse_file(path)
    assert doc.sections[0].blocks[0].text == GENEVA and doc.encoding == "utf_16"
    # Detectors pick DOS and Baltic code pages for this ("It\u013as"); windows-1252 reads it as written.
    quotes = "It’s a “smart” quote — and an ellipsis… The café’s crème brûlée costs €5."
    doc = parse_file(_text_file(tmp_path, ".md", "Quotes", quotes, "cp1252"))
    assert doc.sections[0].blocks[0].text == quotes and doc.encoding == "cp1252"


@pytest.mark.parametrize("ext", [".md", ".html"])
@pytest.mark.parametrize(
    ("title", "body", "written", "reported"),
    [
        (
            "Москва",
            "Съешь же ещё этих мягких французских булок, да выпей чаю. В Москве прошла выставка.",
            "cp1251",
            {"cp1251"},
        ),
        (
            "東京",
            "日本語のテキストです。これはテストです。東京は日本の首都です。" * 3,
            "shift_jis",
            {"shift_jis", "cp932"},  # cp932 is Microsoft's Shift_JIS, a superset
        ),
    ],
    ids=["cp1251", "shift_jis"],
)
def test_other_scripts_in_legacy_code_pages(
    tmp_path: Path, ext: str, title: str, body: str, written: str, reported: set[str]
) -> None:
    doc = parse_file(_text_file(tmp_path, ext, title, body, written))
    assert paths(doc) == [([title], 1)] and doc.sections[0].blocks[0].text == body
    assert doc.encoding in reported


@pytest.mark.parametrize("ext", [".md", ".html"])
def test_binary_files_are_refused(tmp_path: Path, ext: str) -> None:
    rng = random.Random(ext)
    noise = rng.randbytes(200_000)
    files = {
        "ls": (Path("/bin/ls").read_bytes(), "NUL bytes"),  # an ELF (or Mach-O) executable
        "random": (noise, "NUL bytes"),
        "random-no-nul": (noise.replace(b"\x00", b"\x01"), "control characters"),
    }
    for name, (data, reason) in files.items():
        path = tmp_path / f"{name}{ext}"
        path.write_bytes(data)
        with pytest.raises(ParseError) as caught:
            parse_file(path)
        assert str(caught.value) == f"{path}: binary content ({reason}): not a text file"


@pytest.mark.parametrize("ext", [".md", ".html"])
def test_text_in_no_known_encoding_is_refused(tmp_path: Path, ext: str) -> None:
    # Printable and high bytes only: no NUL, no control characters, and no code page reads it as text.
    path = tmp_path / f"noise{ext}"
    rng = random.Random(1)
    path.write_bytes(bytes(rng.randrange(0x20, 0x100) for _ in range(5000)).replace(b"\x7f", b" "))
    with pytest.raises(ParseError, match=r"noise\.\w+: unknown text encoding: .*save the file as UTF-8"):
        parse_file(path)


def test_pdf_pages_without_text_are_named_not_skipped_silently(shared_data: Path) -> None:
    doc = parse_file(shared_data / "pdf_pypdf_resources/resources/imagemagick-images.pdf")
    assert [s.page for s in doc.sections] == [1, 2, 3, 6]
    assert doc.warnings == [
        f"{doc.path}: 2 of 6 pages have no extractable text (pages 4-5: images or scans?) and are not indexed"
    ]
