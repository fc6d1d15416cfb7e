"""The `mdrag` command end to end: real MiniLM, the default store (FAISS for a new index), real Hugo docs."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mdrag.frontends.cli import main

REPO = Path(__file__).resolve().parents[1]

HUGO_PICK = [
    "configuration/output-formats.md",
    "configuration/outputs.md",
    "configuration/media-types.md",
    "templates/lookup-order.md",
    "templates/introduction.md",
    "templates/shortcode.md",
    "content-management/front-matter.md",
    "content-management/urls.md",
    "getting-started/quick-start.md",
    "installation/linux.md",
    "functions/strings/Replace.md",
    "hugo-pipes/minification.md",
]


@pytest.fixture(scope="module")
def hugo_docs(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    src = shared_data / "markdown_hugo_docs" / "content" / "en"
    root = tmp_path_factory.mktemp("hugo") / "docs"
    for rel in HUGO_PICK:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, root / rel)
    return root


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_index_search_status_and_incremental_runs(
    hugo_docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(hugo_docs, docs)
    code, out, _ = _run(capsys, "index", str(docs), "--json", "-q")
    assert code == 0
    first = json.loads(out)
    assert first["added"] == len(HUGO_PICK) and first["chunks_embedded"] > 50 and first["skipped"] == 0

    code, out, _ = _run(capsys, "search", "how do I define a custom output format", "--json")
    assert code == 0
    results = json.loads(out)
    assert 0 < len(results) <= 10
    ranks = [r["rank_score"] for r in results]
    assert ranks == sorted(ranks, reverse=True), "ranked by the mode's own score (hybrid: fused)"
    assert all(0 <= r["score"] <= 1 and r["path"] and "heading_path" in r for r in results)
    assert any(r["rel_path"] == "configuration/output-formats.md" for r in results[:5])

    code, out, _ = _run(capsys, "search", "output format", "-k", "3", "--path", "templates/", "--json")
    assert code == 0 and json.loads(out) and all(r["rel_path"].startswith("templates/") for r in json.loads(out))

    for mode in ("bm25", "hybrid"):
        code, out, _ = _run(capsys, "search", "custom output format", "--mode", mode, "--json")
        assert code == 0 and any(r["rel_path"] == "configuration/output-formats.md" for r in json.loads(out)), mode

    code, out, _ = _run(capsys, "index", str(docs), "--json", "-q")  # nothing changed
    s = json.loads(out)
    assert s["chunks_embedded"] == 0 and s["unchanged"] == len(HUGO_PICK)

    target = docs / "installation" / "linux.md"
    os.utime(target)  # touched, same content
    assert json.loads(_run(capsys, "index", str(docs), "--json", "-q")[1])["chunks_embedded"] == 0

    text = target.read_text()
    target.write_text(text + "\n## Nix flakes\n\nHugo ships as a flake: `nix profile install nixpkgs#hugo` adds it.\n")
    s = json.loads(_run(capsys, "index", str(docs), "--json", "-q")[1])
    assert s["modified"] == 1 and s["chunks_embedded"] == 1
    out = _run(capsys, "search", "does hugo ship as a nix flake", "-k", "3", "--json")[1]
    assert "Nix flakes" in [r["heading_path"][-1] for r in json.loads(out)], "the new section is searchable"

    code, out, _ = _run(capsys, "status", "--json")
    st = json.loads(out)
    assert code == 0 and st["files"] == len(HUGO_PICK) and st["chunks"] == s["chunks_total"]
    assert st["model"]["model"] == "sentence-transformers/all-MiniLM-L6-v2" and st["model"]["dimension"] == 384

    (docs / "templates" / "shortcode.md").unlink()
    s = json.loads(_run(capsys, "index", str(docs), "--json", "-q")[1])
    assert s["deleted"] == 1 and s["chunks_deleted"] > 0
    out = _run(capsys, "search", "shortcode", "-k", "50", "--threshold", "0", "--json")[1]
    assert not [r for r in json.loads(out) if r["rel_path"] == "templates/shortcode.md"]
    assert json.loads(_run(capsys, "status", "--json")[1])["chunks"] == s["chunks_total"]

    code, out, _ = _run(capsys, "status")
    assert "sentence-transformers/all-MiniLM-L6-v2" in out and "files:" in out


def test_exit_codes_and_messages(tmp_path: Path, mdrag_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "search", "anything")
    assert code == 1 and "does not exist" in err and "mdrag index" in err
    (mdrag_home / "config.yaml").write_text("chunk:\n  size: huge\n")
    code, _, err = _run(capsys, "index", str(tmp_path))
    assert code == 2 and "chunk.size" in err
    with pytest.raises(SystemExit) as e:
        main(["search"])
    assert e.value.code == 2


def test_unreachable_milvus_server_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "status", "--milvus-uri", "http://127.0.0.1:9")
    assert code == 1 and "127.0.0.1:9" in err and "Traceback" not in err


def test_python_dash_m_and_help_examples() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mdrag", "index", "--help"], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout
    assert "example: mdrag index" in out
    for cmd in ("search", "status"):
        out = subprocess.run([sys.executable, "-m", "mdrag", cmd, "--help"], capture_output=True, text=True).stdout
        assert f"example: mdrag {cmd}" in out


def test_help_names_the_extensions_the_parser_registry_reads(
    registry: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mdrag --help` says which files mdrag reads as the parser registry has them: every built-in format
    (MDX, reStructuredText, plain text too) and a parser registered now, not a list written by hand."""
    from mdrag.parsers import register_parser, supported_extensions

    register_parser([".adoc"], lambda data, path: None)  # type: ignore[arg-type, return-value]
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert exited.value.code == 0
    for ext in (".md", ".mdx", ".rst", ".txt", ".pdf", ".docx", ".html", ".adoc"):
        assert ext in supported_extensions()
    assert f"documentation files: {', '.join(supported_extensions())}." in out


def test_core_imports_stay_light() -> None:
    """Importing the library loads neither torch nor pymilvus nor any front end."""
    code = (
        "import sys, mdrag, mdrag.retrieval.search, mdrag.index, mdrag.ingest.pipeline, mdrag.parsers;"
        "heavy = [m for m in ('torch', 'sentence_transformers', 'pymilvus', 'websockets', 'mcp')"
        " if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow
def test_default_folder_is_markdown_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, _ = _run(capsys, "index", "--json")
    assert code == 0 and any("markdown" in w and "does not exist" in w for w in json.loads(out)["warnings"])
    (tmp_path / "markdown").mkdir()
    (tmp_path / "markdown" / "note.md").write_text("# Note\n\nThe default folder is ./markdown.\n")
    code, out, _ = _run(capsys, "index", "--json", "-q")
    assert code == 0 and json.loads(out)["added"] == 1


def test_config_shows_each_value_and_where_it_came_from(
    mdrag_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MARKDOWN_QA_LLM_MODEL", "from-env")
    monkeypatch.setenv("MARKDOWN_QA_API_KEY", "sk-very-secret")
    (mdrag_home / "config.yaml").write_text("chunk:\n  size: 800\n")
    code, out, err = _run(capsys, "config", "--json", "--index", "notes")
    shown = json.loads(out)
    assert code == 0 and shown["file"] == str(mdrag_home / "config.yaml")
    rows = shown["settings"]
    assert rows["chunk.size"]["value"] == 800 and rows["chunk.size"]["source"] == "file"
    assert rows["llm.model"] == {"value": "from-env", "source": "environment", "variable": "MARKDOWN_QA_LLM_MODEL"}
    assert rows["index"] == {"value": "notes", "source": "flag"}
    assert rows["search.k"] == {"value": 10, "source": "default"}
    code, out, _ = _run(capsys, "config")
    assert code == 0 and "sk-very-secret" not in out
    lines = {line.split()[0]: line for line in out.splitlines() if not line.startswith("#")}
    assert lines["chunk.size"].endswith("800  # file") and lines["llm.model"].endswith("# MARKDOWN_QA_LLM_MODEL")
    (mdrag_home / "config.yaml").write_text("chunk:\n  size: huge\n")
    code, _, err = _run(capsys, "config")
    assert code == 2 and "chunk.size must be an integer" in err
    code, out, _ = _run(capsys, "config", "--markdown")  # needs no valid config: it is the schema
    assert code == 0 and "| `chunk.size` | `1000` |" in out


def test_search_and_log_lines_cannot_drive_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Texts and file names come from documents: escape sequences in them are not printed (`mdrag ask`
    already cleaned them; `search`, `index` and the log did not)."""
    from tests.conftest import HashEmbedder

    monkeypatch.setattr("mdrag.index.Index.__init__.__defaults__", (None, HashEmbedder()))
    docs = tmp_path / "docs"
    docs.mkdir()
    page = "<h1>Esc &#27;[31mred</h1><p>escnameqq &#27;[2J cleared &#27;]0;PWNED&#7; title end</p>"
    (docs / "esc.html").write_text(f"<html><body>{page}</body></html>")  # a text file with ESC is binary
    (docs / "a\x1b[2Jb.md").write_bytes(b"\x00\x01binary")  # skipped, and its name printed
    (docs / "x.txt\x1b[2J").mkdir()
    assert main(["index", str(docs)]) == 0
    out, err = capsys.readouterr()
    assert "skipped " in out and "ab.md: binary content" in out
    assert main(["search", "escnameqq", "--threshold", "0"]) == 0
    found, _ = capsys.readouterr()
    assert "escnameqq cleared title end" in found and "esc.html:3  [Esc red]" in found  # line 3 of its text
    printed = out + err + found
    assert not any(c in printed for c in "\x1b\x07\x9b"), ascii(printed)
    assert main(["index", str(tmp_path / "no\x1b[2Jsuch")]) == 1
    _, err = capsys.readouterr()
    assert "not found, so not indexed: " in err and "no[2Jsuch" not in err and "nosuch" in err
    fake = docs / "real.md\n 2. 0.990  fake.md"  # a name that would print as a result line of its own
    fake.write_text("# Newline\n\nnewlinenameqq page.\n")
    (docs / "bad\nname.md").write_bytes(b"\x00binary")
    assert main(["index", str(docs)]) == 0
    out, _ = capsys.readouterr()
    assert "/bad\\nname.md: binary content" in out, out  # on one line, its line break shown
    assert main(["search", "newlinenameqq", "--threshold", "0", "-k", "1"]) == 0
    found, _ = capsys.readouterr()
    assert found.splitlines()[0] == " 1. " + found.splitlines()[0][4:9] + "  real.md\\n 2. 0.990  fake.md:3  [Newline]"
    assert len(found.splitlines()) == 2, found  # one result: its line and its snippet
    from mdrag.frontends.cli.output import _TerminalSafe

    record = logging.LogRecord(
        "mdrag.ingest.scan", logging.WARNING, __file__, 1, "folder %s: skipped", ("a\x1b]0;X\x07b",), None
    )
    assert _TerminalSafe("%(message)s").format(record) == "folder ab: skipped", "log lines are cleaned too"


def test_a_snippet_leaves_out_html_comments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`<!-- prettier-ignore -->` and the like are not what a result's snippet shows; --json keeps the text."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Logo\n\n<!-- prettier-ignore -->\nThe zebracorn logo sits on the front page.\n")
    assert _run(capsys, "index", str(docs), "-q")[0] == 0
    code, out, _ = _run(capsys, "search", "zebracorn logo", "--threshold", "0")
    assert code == 0 and "The zebracorn logo sits on the front page." in out and "prettier" not in out
    code, out, _ = _run(capsys, "search", "zebracorn logo", "--threshold", "0", "--json")
    assert "<!-- prettier-ignore -->" in json.loads(out)[0]["text"]
