"""Whole documents for agents: `mdrag get`, ``Index.get`` and the MCP ``get`` and
``multi_get`` tools, on real documents (the CNCF glossary, OpenTelemetry's Java SDK page, a pdflatex PDF)
with the real MiniLM model."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mdrag.config import load_config
from mdrag.embedding.base import Embedder
from mdrag.errors import MdragError
from mdrag.frontends.cli import main
from mdrag.index import Index
from mdrag.knobs import GET_MAX_CHARS, GET_MAX_FILES
from tests.test_mcp import connect, docsets, error, make_project, ok, react_docs, search_when_indexed

pytestmark = pytest.mark.slow

GLOSSARY = "markdown_cncf_glossary"
JAVA = "markdown_otel_docs/content/en/docs/languages/java"  # sdk.md: 82,741 bytes, over GET_MAX_CHARS
# Part of the glossary (a*.md and c*.md), and the one big page of the Java folder: a short build.
INCLUDE = 'index:\n  include: ["content/en/a*.md", "content/en/c*.md", "sdk.md"]\n'


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[Path]:
    """An mdrag home whose default index holds the glossary's a*.md and c*.md, and sdk.md (read in place)."""
    home = tmp_path_factory.mktemp("get-home")
    (home / "config.yaml").write_text(INCLUDE, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MDRAG_HOME", str(home))
        assert main(["index", str(shared_data / GLOSSARY), str(shared_data / JAVA), "-q"]) == 0
    yield home


def run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], home: Path, *argv: str
) -> tuple[int, str, str]:
    monkeypatch.setenv("MDRAG_HOME", str(home))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# -- the command line ------------------------------------------------------------------------------


def test_get_a_document_its_lines_and_a_section(
    corpus: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = shared_data / GLOSSARY / "content/en/container.md"
    code, out, _ = run(monkeypatch, capsys, corpus, "get", "content/en/container.md")
    assert code == 0 and out == source.read_text(encoding="utf-8") + "\n"  # the file itself, frontmatter included

    code, out, _ = run(monkeypatch, capsys, corpus, "get", "content/en/container.md:8-10")
    assert code == 0 and out.split("\n")[:-1] == lines_of(source)[7:10]

    code, out, _ = run(monkeypatch, capsys, corpus, "get", "content/en/container.md#problem it  ADDRESSES", "--json")
    assert code == 0
    (part,) = json.loads(out)["documents"]
    wanted = lines_of(source)
    start = wanted.index("## Problem it addresses") + 1  # 1-based lines
    following = wanted.index("## How it helps") + 1
    assert (part["line_start"], part["section"], part["source_lines"]) == (start, ["Problem it addresses"], True)
    assert part["line_end"] == following - 2  # its last line of text: the blank line before the next is left out
    assert part["text"].split("\n") == wanted[start - 1 : following - 2]
    # Recorded with its links resolved (../shared may be a symbolic link to the data)
    assert part["path"] == str(source.resolve()) and part["root"] == str((shared_data / GLOSSARY).resolve())
    assert part["changed"] is False and part["lines"] == len(wanted)

    code, _, err = run(monkeypatch, capsys, corpus, "get", "content/en/container.md:50-60")
    assert code == 1 and f"has {len(wanted)} lines: ask for lines 1 to {len(wanted)}" in err
    # a range written backwards is said to be so, with the range meant (not "has N lines")
    code, _, err = run(monkeypatch, capsys, corpus, "get", "content/en/container.md:20-10")
    assert code == 1 and "the line range is backwards: ask for content/en/container.md:10-20" in err, err
    code, _, err = run(monkeypatch, capsys, corpus, "get", "content/en/container.md#page=3-2")
    assert code == 1 and "the page range is backwards: ask for content/en/container.md#page=2-3" in err, err
    code, _, err = run(monkeypatch, capsys, corpus, "get", "content/en/container.md#Installation")
    assert code == 1 and "no section 'Installation'" in err and "Problem it addresses" in err


def test_get_a_path_from_the_working_folder(
    corpus: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A path as the shell completes it from where the user stands (the index's folder named in it) finds the
    file; one that names a file the index does not hold is still refused."""
    source = shared_data / GLOSSARY / "content/en/container.md"
    monkeypatch.chdir(shared_data)
    code, out, err = run(monkeypatch, capsys, corpus, "get", f"{GLOSSARY}/content/en/container.md:8-10")
    assert code == 0, err
    assert out.split("\n")[:-1] == lines_of(source)[7:10]
    monkeypatch.chdir(shared_data / GLOSSARY / "content")
    code, out, err = run(monkeypatch, capsys, corpus, "get", "./en/container.md")
    assert code == 0 and out == source.read_text(encoding="utf-8") + "\n", err
    code, _, err = run(monkeypatch, capsys, corpus, "get", "en/_index.md")  # there, but not indexed (a*, c*)
    assert code == 1 and "is not a file of the index" in err, err


def test_get_the_document_of_a_search_result_by_its_chunk_id(
    corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(monkeypatch, capsys, corpus, "search", "canary deployment traffic", "--json", "-k", "3")
    assert code == 0
    hit = json.loads(out)[0]
    assert hit["ref"] == hit["rel_path"] and Path(hit["path"]).is_absolute()  # what opens it
    code, out, _ = run(monkeypatch, capsys, corpus, "get", hit["chunk_id"], "--json")
    assert code == 0
    (whole,) = json.loads(out)["documents"]
    assert (whole["rel_path"], whole["path"], whole["line_start"]) == (hit["rel_path"], hit["path"], 1)
    assert whole["text"] == Path(hit["path"]).read_text(encoding="utf-8")

    lines = f"{hit['chunk_id']}:{hit['line_start']}-{hit['line_end']}"  # the result's own lines
    code, out, _ = run(monkeypatch, capsys, corpus, "get", lines, "--json")
    (part,) = json.loads(out)["documents"]
    assert (part["line_start"], part["line_end"]) == (hit["line_start"], hit["line_end"])
    assert hit["text"].split("\n")[0].strip() in part["text"]

    code, _, err = run(monkeypatch, capsys, corpus, "get", "0" * 32)
    assert code == 1 and "no chunk" in err and "search again" in err


def test_get_a_glob_and_a_list(
    corpus: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    held = sorted(
        p.relative_to(shared_data / GLOSSARY).as_posix() for p in (shared_data / GLOSSARY).glob("content/en/c*.md")
    )
    code, out, _ = run(monkeypatch, capsys, corpus, "get", "content/en/c*.md", "--json")
    assert code == 0
    got = json.loads(out)
    assert [d["rel_path"] for d in got["documents"]] == held and got["omitted"] == []
    code, out, _ = run(monkeypatch, capsys, corpus, "get", "**/ca*.md", "--json")
    assert [d["rel_path"] for d in json.loads(out)["documents"]] == [p for p in held if "/ca" in p]

    code, out, _ = run(
        monkeypatch, capsys, corpus, "get", "content/en/container.md:1-1", "content/en/abstraction.md:1-1"
    )
    assert code == 0
    sizes = [len(lines_of(shared_data / GLOSSARY / "content/en" / name)) for name in ("container.md", "abstraction.md")]
    assert out.splitlines() == [
        f"==> content/en/container.md (lines 1-1 of {sizes[0]}) <==",
        "---",
        f"==> content/en/abstraction.md (lines 1-1 of {sizes[1]}) <==",
        "---",
    ]
    code, _, err = run(monkeypatch, capsys, corpus, "get", "docs/*.md")
    assert code == 1 and "matches no file of the index" in err


def test_paths_that_leave_the_folders_or_the_index_are_refused(
    corpus: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for ref in (
        "../README.md",
        "content/../../markdown_hugo_docs/README.md",
        "/etc/passwd",
        str(shared_data / "README.md"),
    ):
        code, out, err = run(monkeypatch, capsys, corpus, "get", ref)
        assert (code, out) == (1, ""), ref
        assert "leaves the index's folders" in err, err
    # in the folder, on disk, but not a file of the index: never read
    excluded = "content/en/zero-trust-architecture.md"
    assert (shared_data / GLOSSARY / excluded).is_file()
    for ref in (excluded, "LICENSE", str(shared_data / GLOSSARY / "LICENSE")):
        code, out, err = run(monkeypatch, capsys, corpus, "get", ref)
        assert (code, out) == (1, "") and "is not a file of the index" in err, err


def test_a_document_over_the_limit_is_refused_with_how_to_ask_for_less(
    corpus: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sdk = shared_data / JAVA / "sdk.md"
    assert len(sdk.read_text(encoding="utf-8")) > GET_MAX_CHARS
    code, out, err = run(monkeypatch, capsys, corpus, "get", "sdk.md")
    assert (code, out) == (1, "")
    assert f"over the {GET_MAX_CHARS:,} characters one get returns" in err and "sdk.md#HEADING" in err
    advised = re.search(r"\((sdk\.md:\d+-\d+)\)", err)
    assert advised, err
    heading = re.search(r"its headings: ([^,)]+)", err)
    assert heading, err
    code, out, _ = run(monkeypatch, capsys, corpus, "get", advised[1], "--json")  # the range it advises fits
    assert code == 0 and len(json.loads(out)["documents"][0]["text"]) <= GET_MAX_CHARS
    code, out, _ = run(monkeypatch, capsys, corpus, "get", f"sdk.md#{heading[1]}", "--json")
    assert code == 0 and json.loads(out)["documents"][0]["text"].startswith("#")

    # of several, the one that does not fit is left out, said so, and the others are returned
    code, out, err = run(monkeypatch, capsys, corpus, "get", "sdk.md", "content/en/container.md", "--json")
    got = json.loads(out)
    assert code == 0 and [d["rel_path"] for d in got["documents"]] == ["content/en/container.md"]
    (left,) = got["omitted"]
    assert left["ref"] == "sdk.md" and "sdk.md:1-" in left["reason"] and "fewer files" in left["reason"]
    code, out, _ = run(monkeypatch, capsys, corpus, "get", "**/*.md", "--json")  # a glob's advice names the file
    assert "(sdk.md:1-" in json.loads(out)["omitted"][0]["reason"]

    code, _, err = run(monkeypatch, capsys, corpus, "get", *["content/en/container.md:1-1"] * (GET_MAX_FILES + 1))
    assert code == 1 and f"more than the {GET_MAX_FILES} one get returns" in err


# -- Python ----------------------------------------------------------------------------------------


def docs_index(name: str, minilm: Embedder) -> Index:
    """Index ``name`` in the test's own home, embedding with the session's MiniLM."""
    return Index(load_config({"index": name}), embedder=minilm)


def test_index_get_reads_the_file_on_disk_and_never_outside_its_folder(
    tmp_path: Path, shared_data: Path, minilm: Embedder
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("container.md", "canary-deployment.md"):
        shutil.copy(shared_data / GLOSSARY / "content/en" / name, docs / name)
    (docs / ".env").write_text("API_KEY=secret\n")
    secret = tmp_path / "secret.md"
    secret.write_text("# Secret\n\nnot in the folder\n")
    with docs_index("docs", minilm) as index:
        index.update([docs])
        assert index.get("container.md").parts[0].changed is False

        with open(docs / "container.md", "a", encoding="utf-8") as f:
            f.write("\nA line added after indexing.\n")
        (part,) = index.get(["container.md"]).parts
        assert part.changed is True and part.text.endswith("A line added after indexing.\n")

        for ref in (".env", "../secret.md", str(secret)):
            with pytest.raises(MdragError) as e:
                index.get(ref)
            assert "leaves the index's folders" in str(e.value) or "is not a file of the index" in str(e.value)

        (docs / "canary-deployment.md").unlink()
        os.symlink(secret, docs / "canary-deployment.md")  # put in its place after indexing: leads out
        with pytest.raises(MdragError, match="leads out of its indexed folder"):
            index.get("canary-deployment.md")


def test_index_get_a_pdf_by_page_and_section(shared_data: Path, minilm: Embedder) -> None:
    folder = shared_data / "pdf_py-pdf_sample-files" / "006-pdflatex-outline"
    with docs_index("pdf", minilm) as index:
        index.update([folder])
        (whole,) = index.get("pdflatex-outline.pdf").parts
        assert whole.source_lines is False and whole.text.startswith("[page 1]")
        assert whole.pages is not None and whole.pages[0] == 1 and whole.pages[1] > 1
        (page,) = index.get("pdflatex-outline.pdf#page=2").parts
        assert page.pages == [2, 2] and page.text.startswith("[page 2]") and page.text in whole.text
        heading = next(line[2:] for line in whole.text.split("\n") if line.startswith("# "))
        (section,) = index.get(f"pdflatex-outline.pdf#{heading}").parts
        assert section.section == [heading] and section.text.startswith(f"# {heading}")
        with pytest.raises(MdragError, match="its pages are 1 to"):
            index.get("pdflatex-outline.pdf#page=99")


def test_an_html_result_has_the_lines_of_its_passage_that_get_and_the_viewer_mark(
    tmp_path: Path, minilm: Embedder
) -> None:
    # A cited HTML passage had line_start null: "open" showed the page from the top, nothing marked.
    from mdrag.frontends.web.source import SourceAsk, read

    site = tmp_path / "site"
    site.mkdir()
    intro = "".join(f"<p>General remark {i} about the tool and its many uses in daily work.</p>\n" for i in range(30))
    rows = "".join(f"<tr><td>knob-{i}</td><td>Sets part {i} of the engine.</td></tr>\n" for i in range(60))
    (site / "manual.html").write_text(
        "<!DOCTYPE html>\n<html><head><title>Manual</title></head>\n<body><main>\n<h1>Manual</h1>\n"
        f"<section><h2>Overview</h2>\n{intro}</section>\n<section><h2>Garbage collection</h2>\n<p>The collector "
        "frees unreachable packfiles every seventh night, unless gc.auto is zero.</p></section>\n<section>"
        f"<h2>Knobs</h2>\n<table><tr><th>Knob</th><th>Effect</th></tr>\n{rows}</table></section>\n</main></body></html>\n",
        encoding="utf-8",
    )
    with docs_index("html", minilm) as index:
        index.update([site])
        (hit,) = index.search("collector frees unreachable packfiles every seventh night", k=1)
        assert hit.line_start is not None and hit.line_end is not None, "an HTML result has lines"
        (part,) = index.get(f"manual.html:{hit.line_start}-{hit.line_end}").parts
        assert part.source_lines is False, "the lines of the text mdrag reads, not of the markup"
        assert part.text.startswith("The collector frees unreachable packfiles") and hit.text in part.text
        (whole,) = index.get("manual.html").parts
        heading = whole.text.split("\n")[hit.line_start - 3]
        assert heading == "## Garbage collection", "two lines above the passage: its heading"
        shown = read(index, SourceAsk("manual.html", lines=(hit.line_start, hit.line_end)))
        assert shown["highlight"] == {"line_start": hit.line_start, "line_end": hit.line_end}
        (row,) = index.search("knob-57 Sets part 57 of the engine", k=1)
        assert row.line_start is not None and row.line_end is not None
        (rows_part,) = index.get(f"manual.html:{row.line_start}-{row.line_end}").parts
        assert "knob-57 | Sets part 57 of the engine." in rows_part.text.split("\n")
        assert row.text.startswith("Knob | Effect\n"), "a piece of a cut table under its header"
        assert row.text.split("\n", 1)[1] == rows_part.text, "its lines are its rows"


# -- MCP, with the SDK's client over stdio ---------------------------------------------------------------


@pytest.mark.anyio
async def test_mcp_get_and_multi_get(tmp_path: Path, mdrag_home: Path, shared_data: Path) -> None:
    project = make_project(tmp_path)
    (tmp_path / "outside.md").write_text("# Outside\n\nnot in the docset\n")
    async with connect(project, mdrag_home, tmp_path / "err.log") as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        local = Path((await docsets(s))["react"]["local_path"])
        local.mkdir(parents=True)
        for name in ("container.md", "canary-deployment.md", "abstraction.md"):
            shutil.copy(shared_data / GLOSSARY / "content/en" / name, local / name)
        (local / ".env").write_text("API_KEY=secret\n")
        with anyio.fail_after(300):
            found, _ = await search_when_indexed(s, {"query": "canary deployment traffic", "docset": "react"})
        top = found["results"][0]
        got: dict[str, Any] = json.loads(ok(await s.call_tool("get", {"docset": "react", "ref": top["ref"]})))
        lines = f"{top['ref']}:{top['line_start']}-{top['line_end']}"
        part = json.loads(ok(await s.call_tool("get", {"docset": "reactjs", "ref": lines})))["documents"][0]
        many = json.loads(ok(await s.call_tool("multi_get", {"docset": "react", "refs": "c*.md"})))
        listed = json.loads(
            ok(
                await s.call_tool(
                    "multi_get",
                    {
                        "docset": "react",
                        "refs": ["container.md#How it helps", "abstraction.md:1-3", "abstraction.md#Usage"],
                    },
                )
            )
        )
        refused = {
            ref: error(await s.call_tool("get", {"docset": "react", "ref": ref}))
            for ref in ("../../outside.md", str(tmp_path / "outside.md"), ".env", "missing.md")
        }
        bad = error(await s.call_tool("multi_get", {"docset": "react", "refs": []}))
        # a reference that names nothing does not fail the call: the others come, it is listed with its reason
        mixed = json.loads(
            ok(
                await s.call_tool(
                    "multi_get", {"docset": "react", "refs": ["missing.md", "container.md:1-1", "../../outside.md"]}
                )
            )
        )
        nothing = error(await s.call_tool("multi_get", {"docset": "react", "refs": ["missing.md", "gone.md"]}))

    assert {"get", "multi_get"} <= set(tools) and "ref" in tools["search"].description
    assert tools["get"].input_schema["required"] == ["docset", "ref"]
    assert "get" in found["hint"] and top["ref"] == top["rel_path"] == "canary-deployment.md"
    (whole,) = got["documents"]
    assert got["docset"] == "react" and whole["text"] == (local / "canary-deployment.md").read_text(encoding="utf-8")
    assert (part["line_start"], part["line_end"]) == (top["line_start"], top["line_end"])
    assert [d["rel_path"] for d in many["documents"]] == ["canary-deployment.md", "container.md"]
    assert [d["section"] for d in listed["documents"]] == [["How it helps"], None]
    assert listed["documents"][1]["text"].startswith("---\ntitle: Abstraction")
    (left,) = listed["omitted"]  # a part that cannot be had is left out, with the reason; the others come
    assert left["ref"] == "abstraction.md#Usage" and "no section 'Usage'" in left["reason"]
    for ref in ("../../outside.md", str(tmp_path / "outside.md")):
        assert "leaves the index's folders" in refused[ref], refused
    assert "is not a file of the index" in refused[".env"] and "is not a file of the index" in refused["missing.md"]
    assert "refs" in bad
    assert [d["ref"] for d in mixed["documents"]] == ["container.md:1-1"]
    assert [(o["ref"], o["rel_path"]) for o in mixed["omitted"]] == [("missing.md", None), ("../../outside.md", None)]
    assert "is not a file of the index" in mixed["omitted"][0]["reason"]
    assert "leaves the index's folders" in mixed["omitted"][1]["reason"]
    assert nothing.startswith("none of the documents asked for can be returned: ") and "'gone.md'" in nothing


# -- what reading a big document costs --------------------------------------------------------------------
BIG_LINE = "The same line about the installer, again and again."


def big_docs(tmp_path: Path, lines: int = 20_000) -> Path:
    """A folder with biglines.md (``# Big`` and ``lines`` identical lines: over GET_MAX_CHARS) and a small page."""
    root = tmp_path / "big"
    root.mkdir()
    (root / "biglines.md").write_text("# Big\n\n" + (BIG_LINE + "\n") * lines, encoding="utf-8")
    (root / "small.md").write_text("# Small\n\nIntro.\n\n## Part\n\nText of the part.\n", encoding="utf-8")
    return root


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files the Markdown parser parses from now on (the built-in parser, counted)."""
    import mdrag.parsers.markdown as markdown

    seen: list[str] = []
    parse = markdown.parse

    def counted(data: bytes, path: str) -> Any:
        seen.append(Path(path).name)
        return parse(data, path)

    monkeypatch.setattr(markdown, "parse", counted)
    return seen


def test_lines_of_a_big_file_are_read_without_parsing_it_and_a_version_is_parsed_once(
    tmp_path: Path, hash_embedder: Embedder, parsed: list[str]
) -> None:
    root = big_docs(tmp_path)
    with Index(load_config({"index": "big"}), embedder=hash_embedder) as index:
        index.update([root])
        parsed.clear()  # what indexing parsed
        (part,) = index.get("biglines.md:5-6").parts
        assert part.text == f"{BIG_LINE}\n{BIG_LINE}" and (part.line_start, part.line_end, part.lines) == (5, 6, 20_002)
        assert part.source_lines is True
        (again,) = index.get(["biglines.md:100-101"]).parts
        assert again.text == part.text
        # the whole of it: refused for its size, saying how to ask for less (its headings found without a parse)
        with pytest.raises(MdragError, match=r"ask for part of it: a line range \(biglines.md:1-\d+\) or a section"):
            index.get("biglines.md")
        assert parsed == [], "a line range, or the whole, of a Markdown file needs no parse"
        # a section needs the parse: one per version of the file, however many gets ask for it
        for _ in range(3):
            (section,) = index.get("small.md#Part").parts
            assert section.text == "## Part\n\nText of the part.\n" and section.section == ["Small", "Part"]
            with pytest.raises(MdragError, match="is .* characters, over"):
                index.get("biglines.md#Big")
        assert sorted(parsed) == ["biglines.md", "small.md"]
        (root / "small.md").write_text("# Small\n\nIntro.\n\n## Part\n\nNew text.\n", encoding="utf-8")
        (section,) = index.get("small.md#Part").parts
        assert section.text == "## Part\n\nNew text.\n" and section.changed is True
        assert sorted(parsed) == ["biglines.md", "small.md", "small.md"], "a new version is parsed again"


class NotesParser:
    """A third party's parser of ``.notes`` files (plain text), counting what it parses; ``keeps_source_lines``
    as given: whether it declares that its document is the file's own lines."""

    extensions = [".notes"]

    def __init__(self, keeps_source_lines: bool) -> None:
        self.keeps_source_lines = keeps_source_lines
        self.parsed: list[str] = []

    def __call__(self, data: bytes, path: str) -> Any:
        from mdrag.types import Block, Document, Section

        self.parsed.append(Path(path).name)
        return Document(path=path, sections=[Section(["Notes"], 1, [Block(data.decode())])])


@pytest.mark.parametrize("declared", [True, False])
def test_a_parser_that_declares_it_keeps_the_source_lines_is_not_asked_for_a_line_range(
    tmp_path: Path, hash_embedder: Embedder, registry: None, declared: bool
) -> None:
    from mdrag.parsers import register_parser

    parser = NotesParser(declared)
    register_parser(parser.extensions, parser)
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.notes").write_text("".join(f"note {i}\n" for i in range(1, 41)), encoding="utf-8")
    with Index(load_config({"index": "notes"}), embedder=hash_embedder) as index:
        index.update([root])
        parser.parsed.clear()  # what indexing parsed
        (part,) = index.get("a.notes:5-6").parts
        if declared:  # the file's own lines 5 and 6, not parsed
            assert part.text == "note 5\nnote 6" and part.source_lines is True and parser.parsed == []
        else:  # lines of the document the parser made (its heading first), parsed for them
            assert part.text == "note 3\nnote 4" and part.source_lines is False and parser.parsed == ["a.notes"]


def test_a_get_stops_when_its_client_has_gone(tmp_path: Path, hash_embedder: Embedder) -> None:
    root = big_docs(tmp_path, 10)
    with Index(load_config({"index": "gone"}), embedder=hash_embedder) as index:
        index.update([root])
        stop = threading.Event()
        assert len(index.get(["small.md", "biglines.md"], stop).parts) == 2
        stop.set()
        with pytest.raises(MdragError, match="its client has gone"):
            index.get(["small.md", "biglines.md"], stop)


@pytest.mark.anyio
async def test_multi_get_of_50_refs_to_one_big_file_parses_it_at_most_once(
    tmp_path: Path, hash_embedder: Embedder, parsed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcp import Client

    from mdrag.frontends.mcp import KnowledgeTools

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    kb, local = react_docs(tmp_path)
    (local / "biglines.md").write_text("# Big\n\n" + (BIG_LINE + "\n") * 20_000, encoding="utf-8")
    tools = KnowledgeTools(kb, refresh_interval=0, search_wait=60)
    with anyio.fail_after(120):
        async with Client(tools.server()) as client:
            await search_when_indexed(client, {"query": "installer", "docset": "react"})
            parsed.clear()
            for refs in (["biglines.md:1-999999999"] * 50, ["biglines.md#Big"] * 50):
                refused = error(await client.call_tool("multi_get", {"docset": "react", "refs": refs}))
                assert "none of the documents asked for fits" in refused and "ask for part of it" in refused
            lines = json.loads(
                ok(await client.call_tool("multi_get", {"docset": "react", "refs": ["biglines.md:3-4"] * 50}))
            )
    assert [d["text"] for d in lines["documents"]] == [f"{BIG_LINE}\n{BIG_LINE}"] * 50
    assert parsed == ["biglines.md"], "the sections' refs parse it once; the line ranges not at all"
