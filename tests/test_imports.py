"""What a one-shot command loads: `mdrag search`, `status`, `get` and `config` import no SDK, server or runtime
they do not use, and the commands that need no model never prepare or load it.

Each command runs in a new process (as a user runs it), under a wrapper that writes the names in
``sys.modules`` at exit to a file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent  # the checkout: its mdrag is the one run

#: Never imported by a one-shot search, status, get or config (the reranker is off by default; the
#: index is embedded with onnxruntime here, so OpenVINO is not used either; the writers' file lock is made
#: only by a command that writes).
UNUSED = (
    "openai",
    "torch",
    "transformers",
    "sentence_transformers",
    "mcp",
    "websockets",
    "pymilvus",
    "openvino",
    "filelock",
)
#: Valid settings are read without it (`mdrag config` reads the docsets' settings too, which need it).
SETTINGS_MODEL = ("pydantic",)
#: What runs the model: imported by none of the commands that need no model.
MODEL_RUNTIMES = ("onnxruntime", "openvino", "torch", "tokenizers")

_WRAPPER = """
import atexit, gc, runpy, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write("\\n".join([*sorted(sys.modules), f"gc.isenabled={gc.isenabled()}"])))
sys.argv = ["mdrag", *sys.argv[2:]]
runpy.run_module("mdrag", run_name="__main__", alter_sys=True)
"""


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARKDOWN_QA_") and k != "MDRAG_STORE"}
    env.update(MDRAG_HOME=str(home), HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _run(home: Path, cwd: Path, *argv: str) -> tuple[int, set[str], str, str]:
    """Run `mdrag argv` in a new process: (exit code, the modules it imported, stdout, stderr)."""
    listing = home.parent / "modules.txt"
    listing.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, str(listing), *argv],
        cwd=cwd,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    modules = set(listing.read_text().split()) if listing.exists() else set()
    assert modules, f"the wrapper wrote no module list: {proc.stderr}"
    return proc.returncode, modules, proc.stdout, proc.stderr


def _roots(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Which of the top-level packages ``names`` were imported (a submodule counts as its package)."""
    return sorted({m.split(".")[0] for m in modules} & set(names))


def _models(home: Path) -> list[tuple[str, int]]:
    """The model cache as it stands: each path under it and its mtime."""
    folder = home / "cache" / "models"
    return sorted((str(p), p.stat().st_mtime_ns) for p in [folder, *folder.rglob("*")]) if folder.exists() else []


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home holding an index of examples/docs, embedded with onnxruntime (made once for this module)."""
    home = tmp_path_factory.mktemp("imports") / "home"
    home.mkdir()
    (home / "config.yaml").write_text("embedding:\n  backend: onnx\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mdrag", "index", str(ROOT / "examples" / "docs"), "-q", "--json"],
        cwd=home,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return home


@pytest.mark.parametrize(
    "argv",
    [
        ("search", "how do I install it"),
        ("search", "install", "--mode", "bm25", "--json"),
        ("status",),
        ("status", "--json"),
        ("get", "getting-started.md"),
        ("config",),
    ],
    ids=["search", "search-bm25", "status", "status-json", "get", "config"],
)
def test_one_shot_commands_import_only_what_they_use(indexed: Path, argv: tuple[str, ...]) -> None:
    before = _models(indexed)
    code, modules, out, err = _run(indexed, indexed, *argv)
    assert code == 0, err
    assert out.strip()
    assert _roots(modules, UNUSED) == [], f"`mdrag {' '.join(argv)}` imported them"
    if argv[0] != "config":
        assert _roots(modules, SETTINGS_MODEL) == [], f"`mdrag {' '.join(argv)}` imported them"
    # the cyclic garbage collector is off for a one-shot command that reads the index, on for the others
    assert f"gc.isenabled={argv[0] == 'config'}" in modules
    if argv[0] in ("search", "get"):  # a website page's URL is read without the docsets' package (slow to import)
        assert not {m for m in modules if m.split(".")[:2] == ["mdrag", "knowledge"]}
    if argv[0] == "search":
        assert "onnxruntime" in modules  # the query is embedded by the backend the settings name
    else:  # no model needed: none prepared, loaded, or even imported
        assert _roots(modules, MODEL_RUNTIMES) == []
        assert _models(indexed) == before


def test_search_of_an_index_that_does_not_exist_fails_without_preparing_the_model(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    home.mkdir()
    code, modules, out, err = _run(home, tmp_path, "search", "anything")
    assert code == 1 and out == ""
    assert "index 'default' does not exist" in err and "run `mdrag index DIR` first" in err
    assert not (home / "cache" / "models").exists()
    assert _roots(modules, MODEL_RUNTIMES) == []


@pytest.mark.parametrize(
    "argv", [("status",), ("get", "guide.md"), ("config",), ("knowledge", "status")], ids=lambda a: " ".join(a)
)
def test_commands_that_need_no_model_never_prepare_it_in_a_new_home(tmp_path: Path, argv: tuple[str, ...]) -> None:
    home = tmp_path / "fresh"
    home.mkdir()
    project = tmp_path / "project"
    (project / ".knowledge").mkdir(parents=True)
    (project / ".knowledge" / "config.yaml").write_text("docsets: []\n")
    code, modules, _, err = _run(home, project, *argv)
    assert code in (0, 1), err  # `get` of an index with no files says so (1)
    assert not (home / "cache" / "models").exists()
    assert _roots(modules, MODEL_RUNTIMES) == []
    assert _roots(modules, UNUSED) == []


def test_status_reports_the_index_without_its_model(indexed: Path) -> None:
    """The model named in `status` comes from the index's records, not from loading it."""
    code, modules, out, err = _run(indexed, indexed, "status", "--json")
    assert code == 0, err
    status = json.loads(out)
    assert status["model"]["model"] == "sentence-transformers/all-MiniLM-L6-v2" and status["chunks"] > 0
    assert _roots(modules, MODEL_RUNTIMES) == []
