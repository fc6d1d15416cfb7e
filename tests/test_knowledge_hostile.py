"""Hostile docsets: nothing outside the clone is copied, nothing outside the project is read or written.

A git repository committed with symbolic links to /etc, to a folder outside it and into its own .git, and a
config asking for absolute and ``..`` paths, is served from a local bare repository (a file:// URL, and git://
from ``git daemon`` on 127.0.0.1 where it starts) and loaded with ``mdrag knowledge refresh``. A project config
pointing a docset outside the project, opt-out key included, is refused by the library, the knowledge command and
``mdrag mcp``; only the user's ``knowledge.allowed_paths`` lets a folder outside be read. The hostile repository's
counts are printed at the end of the pytest run and written to benchmarks/out/hostile_git.json.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mdrag.errors import DocsetError
from mdrag.frontends import cli
from mdrag.frontends.mcp import KnowledgeTools
from mdrag.knowledge import (
    METADATA_FILE,
    GitRepoLoader,
    KnowledgeBase,
    Selection,
    WebSource,
    init_docset,
    load_knowledge_config,
    refresh,
)
from mdrag.knowledge.docsets import docset_index
from mdrag.knowledge.files import sync
from mdrag.knowledge.metadata import FAILURES_FILE
from tests.conftest import listening
from tests.figures import report
from tests.test_knowledge import git, make_repo, push_commit, write_config, write_files
from tests.test_mcp import connect
from tests.test_mcp import error as mcp_error
from tests.test_mcp import ok as mcp_ok

SECRET = "TOP-SECRET-7f3a9c"  # the content of every file outside the repository that its links reach

# Committed as regular files: what a docset may hold.
LEGIT = {"README.md": "# Hostile\n", "docs/guide.md": "# Guide\n", "docs/intro.md": "# Intro\n"}

# Committed as symbolic links (name -> target); "{outside}" is a folder beside the repository.
LINKS = {
    "docs/etcdir": "/etc",
    "etc": "/etc",
    "docs/secretdir": "{outside}",
    "docs/leak.md": "{outside}/secret.md",
    "docs/gitdir": "../.git",
    "docs/loop": "loop",
    "docs/same.md": "guide.md",  # stays inside the repository: skipped by the walk, not refused
}
# The links above that a walk over the whole repository (or over docs/) meets and must refuse.
OUT_LINKS = ["docs/etcdir", "docs/gitdir", "docs/leak.md", "docs/loop", "docs/secretdir", "etc"]

# Explicit `paths` that must be refused, each with a word its message must contain.
HOSTILE_PATHS = {
    "docs/etcdir/passwd": "outside the repository",
    "docs/etcdir": "outside the repository",
    "etc/ssl": "outside the repository",
    "etc": "outside the repository",
    "docs/secretdir": "outside the repository",
    "docs/secretdir/secret.md": "outside the repository",
    "docs/secretdir/sub": "outside the repository",
    "docs/leak.md": "outside the repository",
    "docs/gitdir/config": "outside the repository",
    "docs/loop/x": "outside the repository",
    "/README.md": "absolute",
    "/etc/passwd": "absolute",
    "\\etc\\passwd": "absolute",
    "../x": "'..'",
    "docs/../../x": "'..'",
    "docs/../README.md": "'..'",
    ".git/config": ".git",
}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the repository and the project, every file holding SECRET."""
    folder = tmp_path / "outside"
    write_files(folder, {"secret.md": f"# {SECRET}\n", "sub/deeper.md": f"# {SECRET}\n"})
    return folder


def hostile_bare(tmp_path: Path, outside: Path) -> Path:
    """The hostile repository as a bare repository; its symbolic links are committed as links."""
    work, bare = make_repo(tmp_path, LEGIT, name="hostile")
    for name, target in LINKS.items():
        (work / name).symlink_to(target.format(outside=outside))
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "links")
    git(work, "push", "-q", str(bare), "main")
    listed = git(bare, "ls-tree", "-r", "main").splitlines()
    assert sum(line.startswith("120000 ") for line in listed) == len(LINKS)  # stored as links, not copies
    return bare


@pytest.fixture
def git_daemon(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """``git daemon`` on 127.0.0.1 exporting tmp_path/served; yields that folder and its git:// base URL."""
    served = tmp_path / "served"
    served.mkdir()

    def argv(port: int) -> list[str]:
        return [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            f"--base-path={served}",
            "--listen=127.0.0.1",
            f"--port={port}",
            str(served),
        ]

    def exited(tail: str) -> None:
        pytest.skip(f"git daemon is not available: {tail[-500:]}")

    with listening(argv, tmp_path / "git-daemon.log", 30, exited) as port:
        yield served, f"git://127.0.0.1:{port}"


def _docset(ident: str, url: str, paths: list[str] | None) -> str:
    listed = "" if paths is None else f"        paths: {json.dumps(paths)}\n"
    return f"  - id: {ident}\n    web_sources:\n      - type: git_repo\n        url: {url}\n{listed}"


@pytest.mark.parametrize("transport", ["file", "git"])
def test_hostile_repository_copies_nothing_from_outside(
    transport: str,
    tmp_path: Path,
    outside: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    bare = hostile_bare(tmp_path, outside)
    if transport == "git":
        served, base = request.getfixturevalue("git_daemon")
        shutil.move(bare, served / bare.name)
        url, allow_local = f"{base}/{bare.name}", "false"  # as reproduced: no allow_local_git needed
    else:
        url, allow_local = bare.as_uri(), "true"
    hostile = {f"h{i:02d}": p for i, p in enumerate(HOSTILE_PATHS)}
    config = f"allow_local_git: {allow_local}\ndocsets:\n"
    config += _docset("smart", url, None) + _docset("folders", url, ["docs/", "README.md"])
    config += "".join(_docset(ident, url, [p]) for ident, p in hostile.items())
    project = tmp_path / "project"
    write_config(project, config)
    monkeypatch.chdir(project)

    t0 = time.monotonic()
    code = cli.main(["knowledge", "refresh", "--quiet"])
    wall = time.monotonic() - t0
    out = capsys.readouterr().out
    assert code == 1, out  # the sources with a hostile path fail

    docsets = project / ".knowledge" / "docsets"
    lines = {line.split(":", 1)[0]: line for line in out.splitlines() if ": failed: " in line}
    refused = 0
    for ident, path in hostile.items():
        line = lines.get(ident, "")
        assert f"path {path!r}" in line and HOSTILE_PATHS[path] in line, out
        assert not (docsets / ident).exists() or not any((docsets / ident).iterdir()), ident
        refused += 1
    for ident in ("smart", "folders"):
        warning = next(line for line in out.splitlines() if line.startswith(f"{ident}: ") and "warning:" in line)
        refused += sum(link in warning for link in OUT_LINKS)
        assert all(link in warning for link in OUT_LINKS), warning
        assert "docs/same.md" not in warning  # a link inside the repository is no hostile path
        meta = json.loads((docsets / ident / METADATA_FILE).read_text())
        assert meta["sources"][url]["files"] == sorted(LEGIT)

    escaped = 0
    copied = []
    for p in sorted(docsets.rglob("*")):
        if p.is_dir() and not p.is_symlink() or p.name in (METADATA_FILE, FAILURES_FILE):
            continue
        rel = p.relative_to(docsets).as_posix()
        copied.append(rel)
        body = p.read_bytes() if p.is_file() else b""
        ident, inner = rel.split("/", 1)
        if p.is_symlink() or inner not in LEGIT or body != LEGIT[inner].encode() or SECRET.encode() in body:
            escaped += 1
    tried = len(HOSTILE_PATHS) + 2 * len(OUT_LINKS)
    figures = {
        "paths_tried": tried,
        "explicit_paths": len(HOSTILE_PATHS),  # each in a docset's `paths` of its own
        "links_walked": 2 * len(OUT_LINKS),  # links leading out, met by the smart filter and by `docs/`
        "refused": refused,
        "escaped": escaped,
        "files_copied": len(copied),  # below: the repository's own files, in the two docsets without a hostile path
        "wall_s": round(wall, 1),  # `mdrag knowledge refresh` of every docset
    }
    report(
        request.config,
        "hostile_git",
        {transport: figures},
        f"hostile git ({transport}://): {tried} paths tried, {refused} refused, {escaped} escaped",
    )
    assert sorted(copied) == sorted(f"{d}/{f}" for d in ("smart", "folders") for f in LEGIT)
    assert (refused, escaped) == (tried, 0)
    assert (outside / "secret.md").read_text() == f"# {SECRET}\n"  # nothing written back either


# --------------------------------------------------------------------------- selection rules


def test_a_link_inside_the_repository_is_still_followed_by_an_explicit_path(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_files(repo, {"v2/a.md": "a", "v2/b.md": "b"})
    (repo / "latest").symlink_to("v2")
    assert GitRepoLoader().select_files(repo, ["latest/a.md", "latest"]).files == ["latest/a.md", "latest/b.md"]


def test_copy_step_refuses_a_source_file_outside_the_clone(tmp_path: Path, outside: Path) -> None:
    repo, dest = tmp_path / "repo", tmp_path / "project" / ".knowledge" / "docsets" / "x"
    write_files(repo, {"a.md": "a"})
    (repo / "out").symlink_to(outside)
    with pytest.raises(DocsetError, match="outside the repository"):
        sync(WebSource("git_repo", "u"), repo, Selection(["a.md", "out/secret.md"]), dest, None)
    assert not (dest / "out").exists()


# --------------------------------------------------------------------------- the docset folder side


def _loaded(tmp_path: Path) -> tuple[Path, Path, KnowledgeBase, Path]:
    work, bare = make_repo(tmp_path, LEGIT)
    project = tmp_path / "project"
    write_config(project, f"allow_local_git: true\ndocsets:\n{_docset('lib', str(bare), None)}")
    kb = KnowledgeBase(start=project)
    (first,) = init_docset(kb, "lib")
    assert first.ok, first.error
    return work, bare, kb, project / ".knowledge" / "docsets" / "lib"


def test_refresh_never_writes_through_links_in_the_docset_folder(tmp_path: Path, outside: Path) -> None:
    work, bare, kb, dest = _loaded(tmp_path)
    victim = outside / "secret.md"
    (dest / "docs" / ".guide.md.mdrag-tmp").symlink_to(victim)  # the old fixed temp name
    (dest / "docs" / "intro.md").unlink()
    (dest / "docs" / "intro.md").symlink_to(outside / "sub" / "deeper.md")  # a link where a copied file was
    push_commit(work, bare, {"docs/guide.md": "# Guide v2\n"})
    (result,) = refresh(kb, "lib")["lib"]
    assert result.ok, result.error
    assert victim.read_text() == f"# {SECRET}\n"
    assert (dest / "docs" / "guide.md").read_text() == "# Guide v2\n"
    intro = dest / "docs" / "intro.md"
    assert not intro.is_symlink() and intro.read_text() == "# Intro\n"  # the unchanged file is restored
    assert (outside / "sub" / "deeper.md").read_text() == f"# {SECRET}\n"


def test_a_folder_link_in_the_docset_folder_stops_the_source(tmp_path: Path, outside: Path) -> None:
    work, bare, kb, dest = _loaded(tmp_path)
    shutil.rmtree(dest / "docs")
    (dest / "docs").symlink_to(outside)
    shutil.copy(outside / "secret.md", outside / "intro.md")  # a file the refresh would remove or replace
    push_commit(work, bare, {"docs/new.md": "# New\n"}, delete=("docs/intro.md",))
    (result,) = refresh(kb, "lib")["lib"]
    assert not result.ok and "symbolic link" in (result.error or "") and str(dest / "docs") in (result.error or "")
    assert sorted(p.name for p in outside.iterdir()) == ["intro.md", "secret.md", "sub"]  # nothing added, removed


def test_gitignore_link_is_not_written_through(tmp_path: Path, outside: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, bare = make_repo(tmp_path, LEGIT)
    project = tmp_path / "project"
    write_config(project, f"allow_local_git: true\ndocsets:\n{_docset('lib', str(bare), None)}")
    (project / ".knowledge" / ".gitignore").symlink_to(outside / "secret.md")
    with caplog.at_level(logging.WARNING, logger="mdrag.knowledge"):
        (result,) = init_docset(KnowledgeBase(start=project), "lib")
    assert result.ok, result.error
    assert (outside / "secret.md").read_text() == f"# {SECRET}\n"
    assert ".gitignore" in caplog.text


# --------------------------------------------------------------------------- local_path confinement


@pytest.mark.parametrize("where", ["absolute", "relative", "home", "docs_root", "loop"])
def test_local_path_outside_the_project_is_refused(tmp_path: Path, outside: Path, where: str) -> None:
    project = tmp_path / "project"
    line = {
        "absolute": f"docsets:\n  - id: a\n    local_path: {outside}\n",
        "relative": "docsets:\n  - id: a\n    local_path: ../../outside\n",
        "home": "docsets:\n  - id: a\n    local_path: '~'\n",
        "docs_root": f"docs_root: {outside}\ndocsets:\n  - id: a\n",
        "loop": "docsets:\n  - id: a\n    local_path: loop\n",
    }[where]
    path = write_config(project, line)
    (path.parent / "loop").symlink_to("loop")
    with pytest.raises(DocsetError, match="outside the project folder") as e:
        load_knowledge_config(path)
    assert "knowledge.allowed_paths" in str(e.value) and str(path) in str(e.value)
    with pytest.raises(DocsetError, match="outside the project folder"):
        KnowledgeBase(start=project).resolve("a")


def test_a_link_out_of_the_project_is_refused_at_load_and_at_use(tmp_path: Path, outside: Path) -> None:
    project = tmp_path / "project"
    write_config(project, "docsets:\n  - id: a\n  - id: b\n")
    docs = project / ".knowledge" / "docs"
    docs.mkdir()
    (docs / "a").symlink_to(outside)
    kb = KnowledgeBase(start=project)
    with pytest.raises(DocsetError, match="outside the project folder"):
        kb.resolve("b")
    (docs / "a").unlink()
    os.utime(project / ".knowledge" / "config.yaml", ns=(1, 1))  # seen as changed: loaded again
    assert kb.resolve("a").id == "a"
    (docs / "b").symlink_to(outside)  # appears after the config was loaded
    with pytest.raises(DocsetError, match=r"resolves to .*outside the project folder"):
        kb.resolve("b")
    with pytest.raises(DocsetError, match="outside the project folder"):
        kb.instructions("b", ["x"], ["y"])


HOSTILE_OPT_OUT = {  # a cloned project's config that tries to let itself out with a key of its own
    "docset": "docsets:\n  - id: a\n    local_path: {outside}\n    allow_outside_project: true\n",
    "top": "allow_outside_project: true\ndocsets:\n  - id: a\n    local_path: {outside}\n",
}


@pytest.mark.parametrize("scope", sorted(HOSTILE_OPT_OUT))
def test_a_project_cannot_let_itself_out(tmp_path: Path, outside: Path, scope: str) -> None:
    project = tmp_path / "project"
    path = write_config(project, HOSTILE_OPT_OUT[scope].format(outside=outside))
    with pytest.raises(DocsetError, match="outside the project folder") as e:
        load_knowledge_config(path)
    with pytest.raises(DocsetError, match="outside the project folder"):
        KnowledgeBase(start=project).resolve("a")
    assert "knowledge.allowed_paths" in str(e.value)


@pytest.mark.parametrize("allowed", ["folder", "parent", "link", "home"])
def test_the_users_allowed_paths_let_a_docset_out_and_are_logged(
    tmp_path: Path, outside: Path, allowed: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "link").symlink_to(outside)
    monkeypatch.setenv("HOME", str(tmp_path))
    folder = {"folder": outside, "parent": tmp_path, "link": tmp_path / "link", "home": "~/outside"}[allowed]
    project = tmp_path / "project"
    write_config(project, f"docsets:\n  - id: a\n    local_path: {outside}\n  - id: b\n  - id: c\n")
    with caplog.at_level(logging.WARNING, logger="mdrag.knowledge"):
        kb = KnowledgeBase(start=project, allowed_outside=[folder])
        assert kb.resolve("a").local_path == outside.as_posix() + "/"
        assert kb.resolve("b").local_path.startswith(project.as_posix())
        (project / ".knowledge" / "docs").mkdir()
        (project / ".knowledge" / "docs" / "c").symlink_to(outside / "sub")  # after the load: checked at use
        assert kb.resolve("c").id == "c"
    logged = [r.getMessage() for r in caplog.records if "knowledge.allowed_paths" in r.getMessage()]
    assert len(logged) == 1 and str(outside) in logged[0] and "docset a" in logged[0], caplog.text
    other = tmp_path / "other"
    for beside in ([other], str(other)):  # a folder beside the allowed one; one string is one folder, not "/", ...
        with pytest.raises(DocsetError, match="outside the project folder"):
            KnowledgeBase(start=project, allowed_outside=beside).resolve("a")


def test_the_knowledge_command_passes_the_users_allowed_paths(
    tmp_path: Path, outside: Path, mdrag_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    write_config(project, HOSTILE_OPT_OUT["docset"].format(outside=outside))
    monkeypatch.chdir(project)
    assert cli.main(["knowledge", "status"]) == 2  # a configuration error
    assert "knowledge.allowed_paths" in capsys.readouterr().err
    (mdrag_home / "config.yaml").write_text(f"knowledge:\n  allowed_paths: [{json.dumps(str(outside))}]\n")
    assert cli.main(["knowledge", "status"]) == 0, capsys.readouterr().err


@pytest.mark.anyio
async def test_mcp_server_reads_outside_only_what_the_user_allows(
    tmp_path: Path, outside: Path, mdrag_home: Path
) -> None:
    """``mdrag mcp`` over stdio: the project's opt-out is refused, the user's ``knowledge.allowed_paths`` is used."""
    allowed = tmp_path / "allowed"
    write_files(allowed, {"guide.md": "# Guide\n"})
    (mdrag_home / "config.yaml").write_text(f"knowledge:\n  allowed_paths: [{json.dumps(str(allowed))}]\n")
    project = tmp_path / "project"
    config = write_config(project, HOSTILE_OPT_OUT["top"].format(outside=outside))
    args = {"docset": "a", "keywords": ["secret"], "generalized_keywords": ["token"]}
    err = tmp_path / "err.log"
    with anyio.fail_after(60):
        async with connect(project, mdrag_home, err) as s:
            refused = mcp_error(await s.call_tool("search_docs", args))
            config.write_text(f"docsets:\n  - id: a\n    local_path: {allowed}\n", encoding="utf-8")
            instructions = mcp_ok(await s.call_tool("search_docs", args))
    assert "outside the project folder" in refused and "knowledge.allowed_paths" in refused
    assert str(outside) not in instructions and f"{allowed.as_posix()}/" in instructions
    logged = err.read_text()
    assert f"reads {allowed.resolve()}" in logged and "because knowledge.allowed_paths" in logged


@pytest.mark.anyio
async def test_search_over_every_docset_checks_each_folder_again(
    tmp_path: Path, outside: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A docset folder that became a link out of the project after the config was loaded is skipped, not read."""
    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")  # any passage counts
    (outside / "notes.md").write_text(f"# Notes\n\nThe password is {SECRET}.\n")
    project = tmp_path / "project"
    write_config(project, "docsets:\n  - id: a\n  - id: b\n")
    docs = project / ".knowledge" / "docs"
    write_files(docs / "a", {"guide.md": "# Guide\n\nThe guide to the public parts.\n"})
    kb = KnowledgeBase(start=project)
    kb.config()
    (docs / "b").symlink_to(outside)
    tools = KnowledgeTools(kb, refresh_interval=0, search_wait=60)
    with anyio.fail_after(120):
        async with tools.running():
            found = await tools.search({"query": f"password {SECRET}"})
            for entry in tools.indexes.opened():  # the background updates started with the server
                assert await anyio.to_thread.run_sync(entry.wait, 60)
    assert SECRET not in json.dumps(found["results"]) and found["results"], found
    assert "outside the project folder" in found["skipped"]["b"] and "b" not in found["indexed"]
    with docset_index("b", project) as index:  # nor read into an index by the updates started with the server
        assert index.folders == [] and index.status().chunks == 0
