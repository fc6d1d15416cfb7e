"""What `mdrag config`, `index` and `status` say when a value is inherited, a file is given for a folder,
or the index was built with another embedder."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from mdrag.frontends.cli import main
from tests.test_embedding_openai import FakeOpenAI, make_handler


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_config_prints_inherited_values_and_where_they_come_from(
    mdrag_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MARKDOWN_QA_API_BASE_URL", "http://user:pw@127.0.0.1:9/v1")
    monkeypatch.setenv("MARKDOWN_QA_API_KEY", "sk-very-secret")
    code, out, _ = _run(capsys, "config")
    assert code == 0 and "sk-very-secret" not in out and "pw@" not in out
    lines = {line.split()[0]: line for line in out.splitlines() if not line.startswith("#")}
    assert lines["llm.base_url"].endswith('"http://***@127.0.0.1:9/v1"  # from api.base_url (MARKDOWN_QA_API_BASE_URL)')
    assert lines["embedding.api_key"].endswith('"***"  # from api.api_key (MARKDOWN_QA_API_KEY)')
    assert lines["embedding.model"].endswith(
        '"sentence-transformers/all-MiniLM-L6-v2"  # default for embedding.provider local'
    )
    assert lines["milvus_uri"].endswith(f'"{mdrag_home / "cache" / "milvus.db"}"  # default')
    monkeypatch.delenv("MARKDOWN_QA_API_BASE_URL")
    lines = {line.split()[0]: line for line in _run(capsys, "config")[1].splitlines() if not line.startswith("#")}
    assert lines["llm.base_url"].endswith("null  # from api.base_url")


def test_index_or_serve_of_a_file_says_that_a_folder_is_expected(
    tmp_path: Path, mdrag_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mdrag index FILE` on a file that exists said it "does not exist or is not a folder" and "Check the
    path": it now says that it is a file, that mdrag indexes folders, and which folder to give."""
    docs = tmp_path / "docs"
    docs.mkdir()
    note = docs / "note.md"
    note.write_text("# Note\n\nA file given where a folder is expected.\n")
    code, out, err = _run(capsys, "index", str(note), str(tmp_path / "nosuch"), "--json")
    assert code == 1, err
    expected = f"{note} is a file, not a folder (mdrag indexes folders: give its folder, {docs};"
    [line] = [line for line in err.splitlines() if line.startswith("mdrag: error: not indexed: ")]
    assert line.startswith(f"mdrag: error: not indexed: {expected}") and "does not exist" not in line
    assert f"not found, so not indexed: {tmp_path / 'nosuch'}. Check the path" in err
    assert any(w.startswith(expected) for w in json.loads(out)["warnings"]), out
    assert f"folder {tmp_path / 'nosuch'} does not exist: skipped" in json.loads(out)["warnings"]
    code, _, err = _run(capsys, "serve", str(note), "--port", "0")
    assert code == 1 and f"mdrag: error: {expected}" in err and "not found" not in err


@pytest.fixture
def embedding_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The OpenAI-compatible embedding stand-in of test_embedding_openai on loopback; yields its base URL."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(FakeOpenAI()))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.mark.parametrize("backend", ["faiss", "milvus"])
def test_status_describes_an_index_built_with_another_embedder(
    backend: str,
    tmp_path: Path,
    embedding_api: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`mdrag status` exited 1 with only "was built with openai:..." on an index built with another embedder;
    it now describes the index (files, chunks, the embedder that built it) and notes the mismatch, exit 0."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\nSome words about topic {i}.\n")
    monkeypatch.setenv("MDRAG_STORE", backend)
    monkeypatch.setenv("MARKDOWN_QA_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("MARKDOWN_QA_API_BASE_URL", embedding_api)
    code, out, err = _run(capsys, "index", str(docs), "--json", "-q")
    assert code == 0, err
    built = json.loads(out)
    monkeypatch.delenv("MARKDOWN_QA_EMBEDDING_PROVIDER")  # the default embedder now: the local MiniLM

    code, out, err = _run(capsys, "status", "--json")
    assert code == 0, err
    st = json.loads(out)
    assert st["model"]["model"] == "openai:text-embedding-3-small" and st["exists"] and not st["damaged"]
    assert (st["files"], st["chunks"], st["folders"]) == (3, built["chunks_total"], [str(docs)])
    assert "was built with openai:text-embedding-3-small" in st["model_mismatch"]
    assert "sentence-transformers/all-MiniLM-L6-v2" in st["model_mismatch"]
    assert "embedding.provider" in st["model_mismatch"] and "mdrag index --rebuild" in st["model_mismatch"]

    code, out, err = _run(capsys, "status")
    assert code == 0 and not err, err
    lines = dict(line.split(":", 1) for line in out.splitlines())
    assert lines["model"].strip().startswith("openai:text-embedding-3-small") and lines["files"].strip() == "3"
    assert lines["note"].strip() == st["model_mismatch"]

    code, _, err = _run(capsys, "search", "topic")  # a search still refuses it, with the same message
    assert code == 1 and st["model_mismatch"] in err


def test_index_on_a_milvus_server_too_old_says_so_not_that_it_is_unreachable(
    milvus_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mdrag index --milvus-uri` on a Milvus 2.3 server said "Cannot reach the Milvus store ... Start the Milvus
    server": the server was running. A minimum above the real server's version stands in for an old server."""
    from mdrag.store.milvus import check as milvus_check

    monkeypatch.setattr(milvus_check, "MIN_SERVER_VERSION", (99, 0))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nA note.\n")
    code, _, err = _run(capsys, "index", str(docs), "--milvus-uri", milvus_server, "-q")
    assert code == 1 and f"mdrag: error: The Milvus server at {milvus_server} is version " in err, err
    assert "mdrag needs Milvus 99.0 or later" in err and "Cannot reach" not in err and "Start the" not in err


def test_verbose_shows_mdrag_and_leaves_library_notes_to_debug(mdrag_home: Path) -> None:
    """`-v` printed faiss's loader notes ("Loading faiss with AVX512 support", "Could not load library ...
    ModuleNotFoundError") as mdrag's own INFO lines: a library's notes are -vv's, named by logger."""
    import subprocess
    import sys

    def status(*flags: str) -> str:
        argv = [sys.executable, "-m", "mdrag", "status", "--store", "faiss", *flags]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stderr

    err = status("-v")
    assert "index 'default': faiss store" in err  # mdrag's own account of what it does
    assert "Loading faiss" not in err and "ModuleNotFoundError" not in err, err
    err = status("-vv")
    assert "mdrag: INFO: faiss.loader: Loading faiss" in err, err


def test_a_mistyped_option_gets_the_commands_usage_and_the_option_meant(capsys: pytest.CaptureFixture[str]) -> None:
    """`mdrag search x --treshold 0` got the top-level usage and "unrecognized arguments": the
    command's usage, and the option meant, as a mistyped setting in the config file gets."""
    for argv, usage, typo, meant in (
        (["search", "x", "--treshold", "0"], "usage: mdrag search", "--treshold", "--threshold"),
        (["index", "--rebuld"], "usage: mdrag index", "--rebuld", "--rebuild"),
        (["knowledge", "status", "--jsno"], "usage: mdrag knowledge status", "--jsno", "--json"),
        (["search", "x", "--treshold=0"], "usage: mdrag search", "--treshold", "--threshold"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(usage), err
        assert f"error: unrecognized option {typo}: did you mean {meant}?" in err, err
    with pytest.raises(SystemExit) as exit_:  # nothing close: the command's usage still, and what it was given
        main(["search", "x", "--zzz"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: mdrag search") and "unrecognized arguments: --zzz" in err


def test_a_search_that_can_find_nothing_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A search of an index that holds no files said "no results above the threshold (try --threshold 0...)",
    and one filtered on a folder that is not indexed said nothing of it: each says why, exit 1."""
    monkeypatch.chdir(tmp_path)  # no ./markdown: `mdrag index` makes an empty index
    assert _run(capsys, "index", "-q")[0] == 0
    code, out, err = _run(capsys, "search", "install", "--threshold", "0")
    assert (code, out) == (1, "") and "index 'default' holds no files yet: run `mdrag index DIR`" in err, err
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "guide" / "install.md").write_text("# Install\n\nRun the installer, then restart.\n")
    assert _run(capsys, "index", str(docs), "-q")[0] == 0
    for path in ("/nowhere/", "api/", str(tmp_path / "other") + "/"):
        code, out, err = _run(capsys, "search", "install", "--path", path, "--json")
        assert (code, out) == (1, ""), err
        assert f"no indexed folder matches the path '{path}': it is under none of the index's folders ({docs})" in err
    for path in ("guide/", "./guide/in", str(docs / "guide")):  # a folder that is indexed: its results
        code, out, _ = _run(capsys, "search", "install", "--path", path, "--json")
        assert code == 0 and [r["rel_path"] for r in json.loads(out)] == ["guide/install.md"], path
    code, out, _ = _run(capsys, "search", "zebra crossing", "--path", "guide/", "--threshold", "0.99")
    assert code == 0 and out.startswith("no results: no passage of the files the filters let through scores above")
    assert "(search.threshold 0.99," in out and "--threshold" in out and "check --path and --tag" in out


def test_files_of_one_name_in_two_folders_are_told_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With two folders that both hold x.md, a result read `x.md:3` without its folder, and its ref `x.md`,
    which `mdrag get` refuses as ambiguous: results show as much of the folder as tells them apart,
    and the ref is the absolute path; rel_path stays as it is."""
    for folder, text in (("a", "The frobnicator settings live here."), ("b", "The frobnicator knob lives there.")):
        (tmp_path / folder / "docs").mkdir(parents=True)
        (tmp_path / folder / "docs" / "x.md").write_text(f"# {folder.upper()}\n\n{text}\n")
    (tmp_path / "a" / "docs" / "only.md").write_text("# Only\n\nThe frobnicator, said once.\n")
    a, b = tmp_path / "a" / "docs", tmp_path / "b" / "docs"
    assert _run(capsys, "index", str(a), str(b), "-q")[0] == 0
    code, out, _ = _run(capsys, "search", "frobnicator", "--threshold", "0", "--json")
    results = json.loads(out)
    assert code == 0 and {(r["rel_path"], r["ref"]) for r in results} == {
        ("x.md", str(a / "x.md")),
        ("x.md", str(b / "x.md")),
        ("only.md", "only.md"),
    }
    for r in results:
        assert _run(capsys, "get", r["ref"])[0] == 0  # each ref names one file for `get`
    code, out, _ = _run(capsys, "search", "frobnicator", "--threshold", "0")
    shown = {line.split()[2].rsplit(":", 1)[0] for line in out.splitlines() if line[:3].strip().rstrip(".").isdigit()}
    assert shown == {"a/docs/x.md", "b/docs/x.md", "only.md"}, out
    # one of the two alone among the results still shows its folder: the index holds the other
    code, out, _ = _run(capsys, "search", "knob", "--path", str(b) + "/")
    assert code == 0 and " b/docs/x.md:3" in out and " x.md:3" not in out, out


def test_distinct_names_take_as_little_of_the_folder_as_tells_it_apart() -> None:
    from mdrag.retrieval.shown import distinct_names

    roots = ["/h/a/docs", "/h/b/docs", "/h/notes"]
    got = distinct_names(
        [("/h/a/docs/x.md", "x.md"), ("/h/notes/y.md", "y.md"), ("/h/notes/x.md", "x.md")], roots, {"x.md"}
    )
    assert got == ["a/docs/x.md", "y.md", "notes/x.md"]
    # a folder whose path ends with another's: whole paths; results alone (through a server) tell of the clash
    assert distinct_names([("/x/docs/k.md", "k.md"), ("/y/x/docs/k.md", "k.md")]) == ["/x/docs/k.md", "/y/x/docs/k.md"]
