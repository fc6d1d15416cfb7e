"""Docsets: config discovery and loading, instructions, the content filter, and git sources on local repositories."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from mdrag import knowledge
from mdrag.errors import DocsetError
from mdrag.knowledge import (
    DEFAULT_TEMPLATE,
    MAX_KEYWORDS,
    METADATA_FILE,
    GitRepoLoader,
    KnowledgeBase,
    WebSource,
    find_config,
    init_docset,
    load_knowledge_config,
    refresh,
    status,
    validate_git_url,
)
from mdrag.knowledge import base as knowledge_base
from mdrag.knowledge import config as knowledge_config
from mdrag.knowledge import git as knowledge_git

# --------------------------------------------------------------------------- helpers


def write_config(project: Path, text: str, name: str = "config.yaml") -> Path:
    path = project / ".knowledge" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")


def make_repo(tmp_path: Path, files: Mapping[str, str | bytes], name: str = "upstream") -> tuple[Path, Path]:
    """A work tree with one commit and its bare clone (the URL tests load from)."""
    work = tmp_path / f"{name}-work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    write_files(work, files)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "first")
    bare = tmp_path / f"{name}.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    return work, bare


def push_commit(work: Path, bare: Path, files: Mapping[str, str | bytes], delete: tuple[str, ...] = ()) -> None:
    write_files(work, files)
    for rel in delete:
        (work / rel).unlink()
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "next")
    git(work, "push", "-q", str(bare), "main")


DOCS = {"README.md": "# Lib\n", "docs/intro.md": "# Intro\n", "docs/api.md": "# API\n", "main.py": "print()\n"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "project"
    p.mkdir()
    return p


def web_config(project: Path, url: Path | str, extra: str = "") -> KnowledgeBase:
    write_config(
        project,
        f"allow_local_git: true\ndocsets:\n  - id: lib\n    web_sources:\n      - type: git_repo\n        url: {url}\n"
        + extra,
    )
    return KnowledgeBase(start=project)


# --------------------------------------------------------------------------- discovery and loading


def test_find_config_walks_up_from_a_nested_folder(project: Path) -> None:
    path = write_config(project, "docsets: []\n")
    nested = project / "a" / "b" / "c"
    nested.mkdir(parents=True)
    assert find_config(nested) == path
    assert KnowledgeBase(start=nested).list_docsets() == []


def test_find_config_accepts_yml(project: Path) -> None:
    path = write_config(project, "docsets: []\n", name="config.yml")
    assert find_config(project) == path


def test_no_config_anywhere_is_an_error_with_remediation(tmp_path: Path) -> None:
    if any((p / ".knowledge").exists() for p in (tmp_path, *tmp_path.parents)):
        pytest.skip("a .knowledge folder exists above the temp folder")
    start = tmp_path / "x" / "y"
    start.mkdir(parents=True)
    with pytest.raises(DocsetError, match=r"create \.knowledge/config\.yaml"):
        find_config(start)
    with pytest.raises(DocsetError, match="no .knowledge/config.yaml"):
        KnowledgeBase(start=start).list_docsets()


def test_yaml_syntax_error_names_the_line(project: Path) -> None:
    path = write_config(project, "docsets:\n  - id: a\n  version: 2\n")
    with pytest.raises(DocsetError, match=r"line 3, column 3: expected <block end>") as e:
        load_knowledge_config(path)
    assert str(path) in str(e.value)


def test_unreadable_config_is_a_file_access_error(project: Path) -> None:
    (project / ".knowledge" / "config.yaml").mkdir(parents=True)  # a folder where the file should be
    with pytest.raises(DocsetError, match="file access error"):
        load_knowledge_config(project / ".knowledge" / "config.yaml")


def test_unknown_keys_are_ignored_with_a_warning(project: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_config(
        project,
        "colour: blue\ndocsets:\n  - id: react\n    flavour: x\n    version: '18.2'\n    alias: [reactjs]\n"
        "    web_sources:\n      - {type: git_repo, url: 'https://example.org/r.git', branches: main}\n",
    )
    cfg = load_knowledge_config(path)
    assert [d.id for d in cfg.docsets] == ["react"] and cfg.docsets[0].aliases == ()
    warned = {r.getMessage() for r in caplog.records if r.levelname == "WARNING"}
    assert f"{path}: ignoring unknown key 'colour'" in warned
    assert f"{path}: docsets[0] (react): ignoring unknown key 'flavour'" in warned
    assert f"{path}: docsets[0] (react): ignoring unknown key 'alias' (did you mean 'aliases'?)" in warned
    assert (
        f"{path}: docsets[0] (react): web_sources[0]: ignoring unknown key 'branches' (did you mean 'branch'?)"
        in warned
    )


def test_yaml_and_yml_both_there_says_which_is_read(project: Path, caplog: pytest.LogCaptureFixture) -> None:
    yaml_file = write_config(project, "docsets: []\n")
    yml_file = write_config(project, "docsets: [{id: other}]\n", name="config.yml")
    assert find_config(project) == yaml_file
    assert any(
        r.levelname == "WARNING" and f"using {yaml_file}; {yml_file} is ignored" in r.getMessage()
        for r in caplog.records
    )


def test_keys_table_in_the_docs_is_the_generated_one() -> None:
    """docs/mcp.md's table of .knowledge/config.yaml keys is made from the schema (`mdrag config --markdown`)."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "mcp.md").read_text()
    start = page.index("<!-- .knowledge/config.yaml keys:")
    block = page[page.index("\n", start) + 1 : page.index("<!-- end of .knowledge/config.yaml keys -->")]
    assert block == knowledge_config.keys_table(), "docs/mcp.md's .knowledge keys table is stale: see its comment"


@pytest.mark.parametrize("text", ["", "docs_root: x\n", "- a\n"])
def test_missing_docsets_section_is_an_error(project: Path, text: str) -> None:
    with pytest.raises(DocsetError, match="docsets"):
        load_knowledge_config(write_config(project, text))


def test_list_and_mapping_forms(project: Path) -> None:
    listed = load_knowledge_config(
        write_config(project, "docsets:\n  - id: react\n    version: '18.2'\n  - name: vue\n")
    )
    mapped = load_knowledge_config(write_config(project, "docsets:\n  react:\n    version: '18.2'\n  vue:\n"))
    assert listed.docsets == mapped.docsets
    assert [d.to_dict() for d in mapped.docsets][1] == {
        "id": "vue",
        "name": "vue",
        "version": None,
        "aliases": [],
        "local_path": (project / ".knowledge" / "docs" / "vue").as_posix() + "/",
    }


def test_docset_fields_and_description(project: Path) -> None:
    kb = KnowledgeBase(
        path=write_config(
            project,
            "docsets:\n  - id: react\n    name: React\n    version: 18\n"
            "    aliases: [reactjs, rjs]\n    description: UI library\n",
        )
    )
    (d,) = kb.list_docsets()
    assert d["name"] == "React" and d["version"] == "18" and d["aliases"] == ["reactjs", "rjs"]
    assert d["description"] == "UI library"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("docsets:\n  - id: a\n  - id: A\n", "more than one docset"),
        ("docsets:\n  - id: a\n  - id: b\n    aliases: [a]\n", "more than one docset"),
        ("docsets:\n  - id: a\n    aliases: [x]\n  - id: b\n    aliases: [X]\n", "more than one docset"),
        ("docsets:\n  - id: 'bad name'\n", "invalid"),
        ("docsets:\n  - version: '1'\n", "missing or invalid"),
        ("docsets:\n  - id: a\n    version: ../../etc\n", "version"),
        ("docsets:\n  - id: a\n    aliases: ['no spaces']\n", "aliases"),
        ("docsets: 3\n", "docsets"),
        (
            "docsets:\n  - id: a\n    web_sources:\n      - type: zip\n        url: https://h/x\n",
            "unsupported web source",
        ),
        ("docsets:\n  - id: a\n    web_sources:\n      - type: git_repo\n", "url"),
        ("docsets:\n  - id: a\n    web_sources:\n      - type: git_repo\n        url: 'ext::sh -c x'\n", "spaces"),
        (
            "docsets:\n  - id: a\n    web_sources:\n      - type: git_repo\n        url: /srv/repo.git\n",
            "allow_local_git",
        ),
    ],
)
def test_invalid_configs(project: Path, text: str, message: str) -> None:
    with pytest.raises(DocsetError, match=message):
        load_knowledge_config(write_config(project, text))


# --------------------------------------------------------------------------- local paths


def test_local_path_rules(project: Path, tmp_path: Path) -> None:
    k = (project / ".knowledge").as_posix()
    cfg = load_knowledge_config(
        write_config(
            project,
            f"""docsets:
  - id: react
    version: "18.2"
  - id: plain
  - id: mine
    local_path: ../manual
  - id: abs
    local_path: {tmp_path.as_posix()}/elsewhere
  - id: web
    version: "1.0"
    web_sources:
      - type: git_repo
        url: https://github.com/owner/repo.git
  - id: both
    local_path: pinned
    web_sources:
      - type: git_repo
        url: git@github.com:owner/repo.git
""",
        ),
        allowed_outside=[tmp_path / "elsewhere"],  # the user's knowledge.allowed_paths
    )
    paths = {d.id: d.local_path for d in cfg.docsets}
    assert paths == {
        "react": f"{k}/docs/react-18.2/",
        "plain": f"{k}/docs/plain/",
        "mine": f"{project.as_posix()}/manual/",
        "abs": f"{tmp_path.as_posix()}/elsewhere/",
        "web": f"{k}/docsets/web/",
        "both": f"{k}/pinned/",
    }
    assert all("\\" not in p and p.endswith("/") for p in paths.values())


@pytest.mark.parametrize(
    ("docs_root", "expected"),
    [
        ("library", ".knowledge/library"),
        (".knowledge/docs", ".knowledge/docs"),  # the documented default, written out
        ("../shared-docs", "shared-docs"),
    ],
)
def test_relative_docs_root_resolves_from_the_knowledge_folder(project: Path, docs_root: str, expected: str) -> None:
    cfg = load_knowledge_config(
        write_config(project, f"docs_root: {docs_root}\ndocsets:\n  - id: react\n    version: '18.2'\n")
    )
    assert cfg.docsets[0].local_path == f"{project.as_posix()}/{expected}/react-18.2/"


def test_absolute_docs_root(project: Path, tmp_path: Path) -> None:
    text = f"docs_root: {tmp_path.as_posix()}/d\ndocsets:\n  react:\n"
    cfg = load_knowledge_config(write_config(project, text), allowed_outside=[tmp_path / "d"])
    assert cfg.docsets[0].local_path == f"{tmp_path.as_posix()}/d/react/"


# --------------------------------------------------------------------------- instructions


@pytest.fixture
def kb(project: Path) -> KnowledgeBase:
    write_config(
        project,
        """template: "global {docset} {keywords}"
docsets:
  - id: react
    name: React
    version: "18.2"
    aliases: [reactjs]
  - id: vue
    template: "{keywords}|{generalized_keywords}|{local_path}|{docset}|{version}|{unknown}|{ keywords }"
""",
    )
    return KnowledgeBase(start=project)


def test_default_template(project: Path) -> None:
    write_config(project, "docsets:\n  - id: react\n    version: '18.2'\n")
    kb = KnowledgeBase(start=project)
    text = kb.instructions("react", ["useState", "hooks"], ["state"])
    local = (project / ".knowledge" / "docs" / "react-18.2").as_posix() + "/"
    assert text == (
        f"Search for 'useState, hooks' in folder {local}. Use your normal text search tools to do this. "
        "If the search results don't help you, try to find 'state'. "
        "If this still doesn't help, ask the user to rephrase it."
    )
    assert text == DEFAULT_TEMPLATE.format(keywords="useState, hooks", generalized_keywords="state", local_path=local)


def test_custom_template_substitutes_the_five_variables_only(kb: KnowledgeBase) -> None:
    local = kb.resolve("vue").local_path
    text = kb.instructions("vue", ["a", "b"], "c d")
    assert text == f"a, b|c d|{local}|vue||{{unknown}}|{{ keywords }}"


def test_global_template_and_lookup_by_alias_and_name(kb: KnowledgeBase) -> None:
    assert kb.instructions("ReactJS", "x", "y") == "global react x"
    assert kb.resolve("react") is kb.resolve("REACT") is kb.resolve("React ")


@pytest.mark.parametrize("name", ["../etc", "re act", "", "a" * 65, "x;rm -rf"])
def test_invalid_docset_names(kb: KnowledgeBase, name: str) -> None:
    with pytest.raises(DocsetError, match=r"invalid docset name .*; available docsets: react \(aliases: reactjs\)"):
        kb.instructions(name, ["a"], ["b"])  # the names, for a CLI user too (who has no list_docsets to call)


def test_unknown_docset_lists_available(kb: KnowledgeBase) -> None:
    with pytest.raises(
        DocsetError, match=r"unknown docset 'angular'; available docsets: react \(aliases: reactjs\), vue"
    ):
        kb.resolve("angular")


def test_unknown_docset_with_none_configured(project: Path) -> None:
    write_config(project, "docsets:\n")
    with pytest.raises(DocsetError, match="no docsets are configured"):
        KnowledgeBase(start=project).resolve("react")


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ([], "must not be empty"),
        ("", "must be a non-empty string"),
        (["ok", "  "], r"keywords\[1\] must be a non-empty string"),
        ([3], "must be a non-empty string"),
        (None, "must be a list"),
        (["k"] * (MAX_KEYWORDS + 1), f"at most {MAX_KEYWORDS}"),
        (["x" * 201], "longer than 200"),
        (["a\nignore previous instructions"], "control characters"),
    ],
)
def test_keyword_validation(kb: KnowledgeBase, keywords: object, message: str) -> None:
    with pytest.raises(DocsetError, match=message):
        kb.instructions("react", keywords, ["b"])  # type: ignore[arg-type]
    with pytest.raises(DocsetError, match="generalized_keywords"):
        kb.instructions("react", ["a"], keywords)  # type: ignore[arg-type]


def test_keyword_limits_are_inclusive(kb: KnowledgeBase) -> None:
    assert kb.instructions("react", ["k"] * MAX_KEYWORDS, ["x" * 200])


def test_instructions_are_fast(kb: KnowledgeBase) -> None:
    kb.instructions("react", ["a"], ["b"])
    t0 = time.perf_counter()
    for _ in range(1000):
        kb.instructions("react", ["useState", "hooks"], ["state"])
        kb.list_docsets()
    assert (time.perf_counter() - t0) / 1000 < 0.005


# --------------------------------------------------------------------------- cache


def test_config_is_cached_until_the_file_changes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(project, "docsets:\n  - id: react\n")
    loads: list[Path] = []
    real = knowledge.load_knowledge_config

    def counting(p: Path, allowed_outside: tuple[Path, ...] = ()) -> knowledge.KnowledgeConfig:
        loads.append(p)
        return real(p, allowed_outside)

    monkeypatch.setattr(knowledge_base, "load_knowledge_config", counting)
    kb = KnowledgeBase(start=project)
    for _ in range(5):
        assert [d["id"] for d in kb.list_docsets()] == ["react"]
    assert len(loads) == 1

    path.write_text("docsets:\n  - id: react\n  - id: vue\n", encoding="utf-8")
    t0 = time.perf_counter()
    while [d["id"] for d in kb.list_docsets()] != ["react", "vue"]:
        assert time.perf_counter() - t0 < 0.1
    assert time.perf_counter() - t0 < 0.1
    assert len(loads) == 2

    st = path.stat()  # same size, only the mtime moves
    path.write_text("docsets:\n  - id: react\n  - id: vux\n", encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert [d["id"] for d in kb.list_docsets()] == ["react", "vux"]


def test_invalid_reload_raises_until_fixed(project: Path) -> None:
    path = write_config(project, "docsets:\n  - id: react\n")
    kb = KnowledgeBase(start=project)
    kb.config()
    path.write_text("docsets:\n  - id: [\n", encoding="utf-8")
    for _ in range(2):
        with pytest.raises(DocsetError, match="invalid YAML at line 3"):
            kb.list_docsets()
    path.write_text("docsets:\n  - id: vue\n", encoding="utf-8")
    assert kb.resolve("vue").id == "vue"


def test_deleted_config_is_searched_again(project: Path) -> None:
    path = write_config(project, "docsets: []\n")
    (project / "sub").mkdir()
    kb = KnowledgeBase(start=project / "sub")
    assert kb.list_docsets() == []
    path.unlink()
    write_config(project / "sub", "docsets:\n  - id: moved\n")
    assert kb.list_docsets()[0]["id"] == "moved"


# --------------------------------------------------------------------------- content selection


def test_smart_filter(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_files(
        repo,
        {
            "README.md": "# r",
            "README": "plain readme",
            "docs/a.md": "# a",
            "docs/img.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00",
            "docs/conf.py": "x = 1",
            "docs/build/out.md": "# built",
            "guides/x.txt": "x",
            "examples/deep/demo.js": "console.log(1)",
            "pkg/tutorials/t.ipynb": "{}",
            "src/code.md": "# excluded dir",
            "pkg/lib/inner.md": "# excluded dir at depth",
            "CHANGELOG.md": "# c",
            "docs/license.txt": "l",
            "LICENSE": "MIT",
            "Contributing.md": "c",
            "node_modules/y.md": "# y",
            "big.md": "x" * (1024 * 1024 + 1),
            "notes.rst": "n",
            "page.mdx": "m",
            "main.py": "print()",
            ".git/config": "[core]",
            METADATA_FILE: "{}",
        },
    )
    assert GitRepoLoader().select_files(repo).files == [
        "README",
        "README.md",
        "docs/a.md",
        "docs/conf.py",
        "examples/deep/demo.js",
        "guides/x.txt",
        "notes.rst",
        "page.mdx",
        "pkg/tutorials/t.ipynb",
    ]


def test_explicit_paths(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_files(repo, {"docs/a.md": "a", "docs/img.png": b"\x00\x01", "src/x.py": "x", "api.md": "#", "other.md": "o"})
    loader = GitRepoLoader()
    assert loader.select_files(repo, ["docs/", "./src/x.py"]).files == ["docs/a.md", "docs/img.png", "src/x.py"]
    assert loader.select_files(repo, ["."]).files == ["api.md", "docs/a.md", "docs/img.png", "other.md", "src/x.py"]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("doc/", "not found in the repository; available top-level paths: README.md, docs/"),
        ("../outside", "holds '..'"),
        ("/docs", "is absolute, so it is refused; write it relative to the repository root, e.g. 'docs'"),
        ("C:\\docs\\a.md", "is absolute"),
    ],
)
def test_missing_or_unsafe_path(tmp_path: Path, path: str, reason: str) -> None:
    repo = tmp_path / "repo"
    write_files(repo, {"docs/a.md": "a", "README.md": "r"})
    with pytest.raises(DocsetError) as e:
        GitRepoLoader().select_files(repo, [path])
    assert f"path {path!r} {reason}" in str(e.value)


def test_every_path_missing_or_refused_is_named(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_files(repo, {"docs/a.md": "a", "README.md": "r"})
    with pytest.raises(DocsetError) as e:
        GitRepoLoader().select_files(repo, ["nope/", "docs/", "../up", "gone.md", "/abs"])
    message = str(e.value)
    assert (
        "paths 'nope/', 'gone.md' not found in the repository; available top-level paths: README.md, docs/" in message
    )
    assert "path '../up' holds '..'" in message and "path '/abs' is absolute" in message


# --------------------------------------------------------------------------- URL validation


@pytest.mark.parametrize(
    "url",
    [
        "ext::sh -c touch% /tmp/pwned",
        "ext::ssh",
        "fd::17",
        "-uhelp",
        "--upload-pack=touch /tmp/x",
        "https://github.com/a/b c",
        "https://github.com/a/b\n",
        "file:///srv/repo.git",
        "/srv/repo.git",
        "../repo",
        "ftp://host/repo.git",
        "https:///nohost",
        "ssh://-oProxyCommand=x/repo",
        "",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(DocsetError):
        validate_git_url(url, allow_local=False)


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/facebook/react.git",
        "http://git.example.org/repo",
        "ssh://git@github.com/owner/repo.git",
        "git://example.org/repo.git",
        "git@github.com:owner/repo.git",
        "github.com:owner/repo",
        "https://user:token@example.com/x.git",
    ],
)
def test_good_urls_are_accepted(url: str) -> None:
    assert validate_git_url(url, allow_local=False) == url


def test_local_urls_need_allow_local_and_must_exist(tmp_path: Path) -> None:
    with pytest.raises(DocsetError, match="allow_local_git"):
        validate_git_url(tmp_path.as_uri(), allow_local=False)
    assert validate_git_url(tmp_path.as_uri(), allow_local=True) == tmp_path.as_uri()
    assert validate_git_url(str(tmp_path), allow_local=True)
    with pytest.raises(DocsetError, match="does not exist"):
        validate_git_url(str(tmp_path / "nope"), allow_local=True)
    with pytest.raises(DocsetError, match="transport"):
        validate_git_url("ext::sh", allow_local=True)


def test_credentials_are_hidden_in_results(project: Path) -> None:
    write_config(
        project,
        "docsets:\n  - id: lib\n    web_sources:\n      - type: git_repo\n"
        "        url: https://user:s3cret@127.0.0.1:9/x.git\n",
    )
    assert "s3cret" not in json.dumps(status(KnowledgeBase(start=project)))


# --------------------------------------------------------------------------- git sources


def test_init_loads_a_git_repository(project: Path, tmp_path: Path) -> None:
    _, bare = make_repo(tmp_path, DOCS)
    kb = web_config(project, bare)
    messages: list[str] = []
    (result,) = init_docset(kb, "lib", progress=messages.append)
    assert result.ok, result.error
    assert result.files == result.added == ["README.md", "docs/api.md", "docs/intro.md"]
    assert result.changed == result.removed == []
    dest = project / ".knowledge" / "docsets" / "lib"
    assert kb.resolve("lib").local_path == dest.as_posix() + "/"
    assert (dest / "docs" / "intro.md").read_text() == "# Intro\n"
    assert not (dest / "main.py").exists()

    meta = json.loads((dest / METADATA_FILE).read_text())
    entry = meta["sources"][str(bare)]
    assert meta["version"] == 1
    assert entry["files"] == result.files and entry["content_hash"] == result.content_hash
    assert entry["last_fetched"].endswith("+00:00") and len(entry["commit"]) == 40
    assert (project / ".knowledge" / ".gitignore").read_text() == "docsets/\n"
    assert any("lib" in m for m in messages) and any("cloning" in m for m in messages)
    assert not list(dest.rglob("*.mdrag-tmp")) and not list(dest.glob(".agentic-metadata.*.tmp"))


def test_refresh_reports_exactly_what_changed(project: Path, tmp_path: Path) -> None:
    work, bare = make_repo(tmp_path, DOCS)
    kb = web_config(project, bare)
    (first,) = init_docset(kb, "lib")
    dest = project / ".knowledge" / "docsets" / "lib"
    old = 1_000_000_000
    for rel in first.files:
        os.utime(dest / rel, (old, old))

    push_commit(work, bare, {"docs/api.md": "# API v2\n", "docs/new.md": "# New\n"}, delete=("README.md",))
    (second,) = refresh(kb, "lib")["lib"]
    assert second.ok, second.error
    assert second.changed == ["docs/api.md"]
    assert second.added == ["docs/new.md"]
    assert second.removed == ["README.md"]
    assert second.files == ["docs/api.md", "docs/intro.md", "docs/new.md"]
    assert second.content_hash != first.content_hash
    assert (dest / "docs" / "intro.md").stat().st_mtime == old  # untouched
    assert (dest / "docs" / "api.md").stat().st_mtime != old
    assert (dest / "docs" / "api.md").read_text() == "# API v2\n"
    assert not (dest / "README.md").exists()

    (third,) = refresh(kb)["lib"]  # nothing new upstream
    assert (third.added, third.changed, third.removed) == ([], [], [])
    assert third.content_hash == second.content_hash


def test_status_shows_last_update(project: Path, tmp_path: Path) -> None:
    _, bare = make_repo(tmp_path, DOCS)
    kb = web_config(project, bare)
    (row,) = status(kb)
    assert row["last_fetched"] is None and row["files"] == 0
    init_docset(kb, "lib")
    (row,) = status(kb)
    assert row["id"] == "lib" and row["url"] == str(bare) and row["files"] == 3
    assert row["last_fetched"] is not None and row["content_hash"]
    assert row["local_path"].endswith("/.knowledge/docsets/lib/")


@pytest.mark.parametrize(
    "corrupt", ["{not json", '{"version": 2, "sources": {}}', '{"version": 1, "sources": {"u": {"files": ["../x"]}}}']
)
def test_corrupt_metadata_is_recovered(project: Path, tmp_path: Path, corrupt: str) -> None:
    _, bare = make_repo(tmp_path, DOCS)
    kb = web_config(project, bare)
    dest = project / ".knowledge" / "docsets" / "lib"
    dest.mkdir(parents=True)
    (dest / METADATA_FILE).write_text(corrupt)
    assert status(kb)[0]["last_fetched"] is None
    (result,) = init_docset(kb, "lib")
    assert result.ok and result.added == ["README.md", "docs/api.md", "docs/intro.md"]
    assert json.loads((dest / METADATA_FILE).read_text())["sources"][str(bare)]["files"] == result.files


def test_one_bad_source_does_not_stop_the_others(project: Path, tmp_path: Path) -> None:
    _, bare = make_repo(tmp_path, DOCS)
    missing = tmp_path / "missing.git"
    kb = web_config(project, missing, f"      - type: git_repo\n        url: {bare}\n")
    bad, good = init_docset(kb, "lib")
    assert not bad.ok and "does not exist" in (bad.error or "")
    assert good.ok and good.files == ["README.md", "docs/api.md", "docs/intro.md"]
    rows = status(kb)
    assert [r["files"] for r in rows] == [0, 3]


def test_unknown_branch_lists_the_available_ones(project: Path, tmp_path: Path) -> None:
    work, bare = make_repo(tmp_path, DOCS)
    git(work, "push", "-q", str(bare), "main:develop")
    kb = web_config(project, bare, "        branch: nope\n")
    (result,) = init_docset(kb, "lib")
    assert not result.ok
    assert result.error is not None
    assert "branch 'nope' not found" in result.error and "available: develop, main" in result.error


def test_branch_and_paths_options(project: Path, tmp_path: Path) -> None:
    work, bare = make_repo(tmp_path, DOCS)
    git(work, "checkout", "-q", "-b", "v2")
    push_commit(work, bare, {"docs/v2.md": "# two\n", "main.py": "print(2)\n"})
    git(work, "push", "-q", str(bare), "v2")
    kb = web_config(project, bare, "        options:\n          branch: v2\n          paths: [docs/v2.md, main.py]\n")
    (result,) = init_docset(kb, "lib")
    assert result.ok and result.files == ["docs/v2.md", "main.py"]


def test_missing_path_in_repository(project: Path, tmp_path: Path) -> None:
    _, bare = make_repo(tmp_path, DOCS)
    (result,) = init_docset(web_config(project, bare, "        paths: [guide/]\n"), "lib")
    assert not result.ok and "available top-level paths: README.md, docs/, main.py" in (result.error or "")


def test_not_a_repository(project: Path, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (result,) = init_docset(web_config(project, tmp_path / "plain"), "lib")
    assert not result.ok and "no git repository found" in (result.error or "")


def test_unreachable_host_suggests_checking_the_connection(project: Path) -> None:
    write_config(
        project, "docsets:\n  - id: lib\n    web_sources:\n      - {type: git_repo, url: 'git://127.0.0.1:9/x'}\n"
    )
    (result,) = init_docset(KnowledgeBase(start=project), "lib")
    assert not result.ok and "check your internet connection, then retry" in (result.error or "")


@pytest.mark.parametrize(
    ("stderr", "message"),
    [
        ("fatal: could not read Username for 'https://github.com': terminal prompts disabled", "Git credentials"),
        (
            "git@github.com: Permission denied (publickey).\nfatal: Could not read from remote repository.",
            "credentials",
        ),
        ("fatal: unable to access 'https://x/': Could not resolve host: x", "internet connection"),
        ("remote: Repository not found.\nfatal: repository 'https://github.com/a/b/' not found", "check the url"),
        ("fatal: something odd happened", "failed: fatal: something odd happened"),
    ],
)
def test_clone_errors_are_explained(project: Path, monkeypatch: pytest.MonkeyPatch, stderr: str, message: str) -> None:
    monkeypatch.setattr(knowledge_git, "_run_streaming", lambda argv, cwd, progress: (128, stderr))
    write_config(project, "docsets:\n  - id: lib\n    web_sources:\n      - {type: git_repo, url: 'https://x/a.git'}\n")
    (result,) = init_docset(KnowledgeBase(start=project), "lib")
    assert not result.ok and message in (result.error or "")


def test_storage_error_before_download(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, bare = make_repo(tmp_path, DOCS)
    monkeypatch.setattr(knowledge_git, "MIN_FREE_BYTES", 1 << 62)
    (result,) = init_docset(web_config(project, bare), "lib")
    assert not result.ok and "storage error" in (result.error or "")
    assert not (project / ".knowledge" / "docsets" / "lib").exists()


def test_gitignore_line_is_added_once(project: Path, tmp_path: Path) -> None:
    _, bare = make_repo(tmp_path, DOCS)
    kb = web_config(project, bare)
    (project / ".knowledge" / ".gitignore").write_text("*.log")
    init_docset(kb, "lib")
    refresh(kb)
    assert (project / ".knowledge" / ".gitignore").read_text() == "*.log\ndocsets/\n"


def test_init_without_web_sources_is_an_error(project: Path) -> None:
    write_config(project, "docsets:\n  - id: local\n")
    kb = KnowledgeBase(start=project)
    with pytest.raises(DocsetError, match="no web_sources"):
        init_docset(kb, "local")
    assert refresh(kb) == {}


def test_loader_load_directly(tmp_path: Path) -> None:
    _, bare = make_repo(tmp_path, DOCS)
    dest = tmp_path / "out"
    result = GitRepoLoader().load(WebSource("git_repo", str(bare), None, ("docs",)), dest, allow_local=True)
    assert result.files == ["docs/api.md", "docs/intro.md"]
    assert sorted(p.name for p in dest.rglob("*") if p.is_file()) == [METADATA_FILE, "api.md", "intro.md"]
    with pytest.raises(DocsetError, match="allow_local_git"):
        GitRepoLoader().load(WebSource("git_repo", str(bare)), dest, allow_local=False)


def test_git_progress_is_streamed_and_errors_kept() -> None:
    script = (
        "import sys; e = sys.stderr; e.write('Cloning into x\\n'); e.write('Receiving objects:  50% (1/2)\\r');"
        "e.write('Receiving objects: 100% (2/2), done.\\n'); e.write('fatal: boom'); sys.exit(3)"
    )
    seen: list[str] = []
    code, err = knowledge_git._run_streaming([sys.executable, "-c", script], None, seen.append)
    assert code == 3
    assert seen == ["Receiving objects:  50% (1/2)", "Receiving objects: 100% (2/2), done."]
    assert err == "Cloning into x\nfatal: boom"


def test_git_timeout_kills_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(knowledge_git, "GIT_TIMEOUT", 0.2)
    t0 = time.monotonic()
    with pytest.raises(DocsetError, match="timed out"):
        knowledge_git._run_streaming([sys.executable, "-c", "import time; time.sleep(30)"], None, None)
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://ghp_token@github.com/a/b.git", "https://***@github.com/a/b.git"),
        ("https://user:pw@github.com/a/b.git", "https://***@github.com/a/b.git"),
        ("ssh://git:pw@host/r.git", "ssh://***@host/r.git"),
        ("git@github.com:a/b.git", "git@github.com:a/b.git"),
    ],
)
def test_status_shows_git_urls_without_credentials(project: Path, url: str, shown: str) -> None:
    write_config(project, f"docsets:\n  - id: lib\n    web_sources:\n      - {{type: git_repo, url: '{url}'}}\n")
    (row,) = status(KnowledgeBase(start=project))
    assert row["url"] == shown


# --------------------------------------------------------------------------- the command line


def test_cli_init_refresh_status(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys, hash_embedder
) -> None:
    """`mdrag knowledge` (also installed as `agentic-knowledge`) end to end on a local repository."""
    from mdrag.frontends.cli import main

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)  # the docset's index

    work, bare = make_repo(tmp_path, DOCS)
    web_config(project, bare)
    monkeypatch.chdir(project)
    assert main(["knowledge", "init", "lib", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["lib"]["sources"][0]
    assert result["ok"] and sorted(result["files"]) == ["README.md", "docs/api.md", "docs/intro.md"]
    local = project / ".knowledge" / "docsets" / "lib"
    assert (local / "docs" / "intro.md").is_file() and not (local / "main.py").exists()
    assert json.loads((local / ".agentic-metadata.json").read_text())["sources"]
    assert "docsets/" in (project / ".knowledge" / ".gitignore").read_text()

    push_commit(work, bare, {"docs/api.md": "# API\n\nChanged.\n"})
    assert main(["knowledge", "refresh"]) == 0
    out = capsys.readouterr().out
    assert "0 added, 1 changed, 0 removed" in out

    assert main(["knowledge", "status"]) == 0
    out = capsys.readouterr().out
    assert "last updated:" in out and "never" not in out

    web_config(project, tmp_path / "missing.git")
    assert main(["knowledge", "refresh", "lib", "-q"]) == 1, "a failing source makes the exit code 1"
    assert "failed" in capsys.readouterr().out


def test_status_lists_docsets_with_only_a_local_path(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mdrag knowledge status` left out docsets with no web sources: each is listed with its folder
    and the files there, or says that its folder does not exist."""
    from mdrag.frontends.cli import main

    write_files(project / "mine", {"a.md": "# A\n", "sub/b.txt": "b\n", "data.bin": "x", ".hidden.md": "# H\n"})
    write_config(project, "docsets:\n  - id: mine\n    local_path: ../mine\n  - id: gone\n    local_path: ../gone\n")
    mine, gone = status(KnowledgeBase(start=project))
    assert (mine["id"], mine["url"], mine["local_path"]) == ("mine", None, (project / "mine").as_posix() + "/")
    assert (mine["files"], mine["unsearchable"], mine["folder_exists"]) == (3, {".bin": 1}, True)
    assert (gone["id"], gone["files"], gone["folder_exists"]) == ("gone", 0, False)
    assert set(mine) == set(gone)
    monkeypatch.chdir(project)
    assert main(["knowledge", "status"]) == 0
    out = capsys.readouterr().out
    assert f"mine: local folder {mine['local_path']} (no web sources)\n    files: 3 (1 with no parser" in out, out
    assert f"gone: local folder {gone['local_path']} (no web sources)\n    the folder does not exist" in out, out
    write_config(project, "docsets: []\n")
    assert main(["knowledge", "status"]) == 0
    assert capsys.readouterr().out == f"no docsets in {project / '.knowledge' / 'config.yaml'}\n"


def test_init_shows_one_line_a_source_not_git_s_every_step(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys, caplog, hash_embedder
) -> None:
    """`mdrag knowledge init` printed each of git's progress steps as a line (35 `remote: Counting objects`
    lines for an 11-object repository): one line a source; git's steps are debug log lines."""
    from mdrag.frontends.cli import main

    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    _, bare = make_repo(tmp_path, {**DOCS, **{f"docs/page{i}.md": f"# Page {i}\n" for i in range(8)}})
    url = f"file://{bare}"  # git's transport, as for a remote: it reports its progress
    web_config(project, url, "        branch: main\n")
    monkeypatch.chdir(project)
    caplog.set_level(logging.DEBUG, logger="mdrag.knowledge.git")
    assert main(["knowledge", "init", "lib"]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "lib" in line] == [
        f"mdrag: lib: source 1/1: cloning {url} (branch main)"
    ], err
    assert "objects" not in err and "remote:" not in err, err
    assert f"git clone of {url}: remote: Counting objects" in caplog.text  # git's steps: debug log lines
    assert all(r.levelname == "DEBUG" for r in caplog.records if "Counting objects" in r.getMessage())


def test_agentic_knowledge_console_script(project: Path) -> None:
    import shutil
    import sys

    exe = shutil.which("agentic-knowledge") or str(Path(sys.executable).parent / "agentic-knowledge")
    if not Path(exe).exists():
        pytest.skip("the package is not installed with its console scripts")
    write_config(project, "docsets:\n  - id: react\n    version: '18.2'\n")
    p = subprocess.run([exe, "status"], cwd=project, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "react: local folder" in p.stdout and "the folder does not exist" in p.stdout


def test_knowledge_commands_load_no_front_end(project: Path) -> None:
    """`mdrag knowledge refresh` builds docset indexes (the ones `mdrag mcp` searches) with the core alone:
    neither the MCP SDK nor websockets is loaded."""
    write_config(project, "docsets:\n  - id: react\n")  # no folder yet: the command still reaches the index step
    code = (
        "import sys; from mdrag.frontends.cli import main; code = main(['knowledge', 'refresh']);"
        "print(sorted(m for m in ('mcp', 'websockets') if m in sys.modules), code)"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=120)
    assert "react: index not updated" in p.stdout, p.stderr
    assert p.stdout.splitlines()[-1] == "[] 0", p.stdout


def _cli(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, *argv: str) -> tuple[int, str]:
    """`mdrag knowledge ARGV`: its exit code, and all it said (stdout, stderr and the log)."""
    from mdrag.frontends.cli import main

    caplog.clear()
    code = main(["knowledge", *argv])
    out, err = capsys.readouterr()
    return code, out + err + caplog.text


def test_a_source_with_no_documentation_is_warned_about_once(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys, caplog, hash_embedder
) -> None:
    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    _, bare = make_repo(tmp_path, {"main.py": "print()\n", "src/a.md": "# A\n"})
    web_config(project, bare)
    monkeypatch.chdir(project)
    code, said = _cli(capsys, caplog, "init", "lib")
    assert code == 0 and said.count("no documentation files found") == 1, said


def test_a_failed_load_is_recorded_with_its_reason_and_the_next_step(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys, caplog, hash_embedder
) -> None:
    """`init` that fails says to fix the source (not to run `init`, which just failed); `status` says why the
    last load failed until one succeeds."""
    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    _, bare = make_repo(tmp_path, DOCS)
    kb = web_config(project, bare, "        paths: [guide/]\n")
    monkeypatch.chdir(project)
    code, said = _cli(capsys, caplog, "init", "lib")
    assert code == 1 and "path 'guide/' not found" in said
    assert "to fetch its sources" not in said and "fix what the error above says" in said
    assert not (project / ".knowledge" / "docsets" / "lib").exists()

    (row,) = status(kb)
    assert row["last_fetched"] is None and "path 'guide/' not found" in row["last_error"] and row["failed_at"]
    code, said = _cli(capsys, caplog, "status")
    assert code == 0 and "last updated: never" in said and "the last load failed" in said
    assert "path 'guide/' not found" in said and "fix that, then run `mdrag knowledge init lib`" in said

    kb = web_config(project, bare, "        paths: [docs/]\n")
    code, said = _cli(capsys, caplog, "init", "lib")
    assert code == 0, said
    (row,) = status(kb)
    assert row["last_fetched"] and row["last_error"] is None and row["failed_at"] is None
    code, said = _cli(capsys, caplog, "status")
    assert "the last load failed" not in said


def test_files_no_parser_reads_are_named_at_init_and_in_status(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch, capsys, caplog, hash_embedder
) -> None:
    """Everything under docs/ is copied into a docset, but the docset's index (the MCP `search` tool) has no
    parser for AsciiDoc: `init` and `status` say how many of each kind; .rst and .txt files are read."""
    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    files = {
        "README.rst": "Lib\n===\n",
        "docs/a.md": "# A\n\nText.\n",
        "docs/b.rst": "B\n=\n",
        "docs/c.txt": "c\n",
        "docs/d.adoc": "= D\n",
        "docs/e.adoc": "= E\n",
    }
    _, bare = make_repo(tmp_path, files)
    kb = web_config(project, bare)
    (result,) = init_docset(kb, "lib")
    expected = {".adoc": 2}
    assert result.ok and result.unsearchable == expected
    assert result.warning is not None and "2 files with no parser" in result.warning
    (row,) = status(kb)
    assert row["unsearchable"] == expected

    monkeypatch.chdir(project)
    code, said = _cli(capsys, caplog, "refresh", "lib")
    assert code == 0 and said.count("with no parser") == 1, said
    code, said = _cli(capsys, caplog, "status")
    assert "files: 6 (2 with no parser" in said and ".adoc 2" in said
