"""An option whose extra is not installed is one clear error naming the extra, at once, from every front end.

The extras are installed where the tests run (``make test`` installs ``mdrag-docs[dev]``, which brings them all),
so each test hides an extra's modules: in a subprocess by a wrapper that sets ``sys.modules[name] = None``
before mdrag starts (``import`` then raises ImportError and ``importlib.util.find_spec`` finds nothing, as
when the package is absent), in this process with ``monkeypatch.setitem(sys.modules, ...)``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: the core depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

from mdrag.config import load_config
from mdrag.extras import EXTRAS, Extra, MissingExtraError, extra_installed, require_extra
from mdrag.store import StoreBackend, store_backends

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "examples" / "docs"

# Runs `mdrag ARGV...` with the comma-separated modules in argv[1] hidden.
WITHOUT = """\
import runpy, sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
sys.argv = ["mdrag", *sys.argv[2:]]
runpy.run_module("mdrag", run_name="__main__", alter_sys=True)
"""


def mdrag_without(modules: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, ",".join(modules), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=full,
        cwd=REPO,
    )


def said_once(proc: subprocess.CompletedProcess[str], extra: str) -> None:
    """Exit 2 (a configuration error) with the install command, no traceback."""
    assert proc.returncode == 2, proc.stderr
    assert f"pip install 'mdrag-docs[{extra}]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_require_extra_names_the_missing_module_and_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    milvus = store_backends()["milvus"].extra  # the backend declares its extra
    assert milvus is not None and milvus.name == "milvus"
    require_extra(milvus, "store.backend: milvus")  # installed here: nothing raised
    assert extra_installed(milvus)
    monkeypatch.setitem(sys.modules, "milvus_lite", None)
    assert not extra_installed(milvus)
    assert extra_installed(milvus, ("pymilvus",))  # a server needs pymilvus alone
    with pytest.raises(MissingExtraError) as e:
        require_extra(milvus, "store.backend: milvus")
    assert e.value.extra == "milvus"
    text = str(e.value)
    assert text.startswith("store.backend: milvus needs the mdrag-docs[milvus] extra")
    assert "no module milvus_lite)" in text and "pymilvus" not in text.split("(no module")[1]
    assert "pip install 'mdrag-docs[milvus]'" in text


def test_a_third_party_backend_names_its_own_package() -> None:
    """A backend outside mdrag declares the package that brings its library: the error names that package and
    how to add it beside an installed mdrag, not an extra of mdrag's."""
    lance = Extra("lance", ("lancedb_not_installed",), "the LanceDB store", requirement="mdrag-lance")
    assert not extra_installed(lance)
    never = lambda *args: pytest.fail("not called")  # noqa: E731
    backend = StoreBackend(name="lance", title="LanceDB", store=never, location=never, owns=never, extra=lance)
    with pytest.raises(MissingExtraError) as e:
        backend.check_installed(load_config({}), "default")  # what the core asks of a backend it picks
    assert e.value.extra == "lance"
    assert str(e.value).startswith("store.backend: lance needs mdrag-lance (the LanceDB store), which is not")
    assert "`pip install mdrag-lance`" in str(e.value) and "`pipx inject mdrag-docs mdrag-lance`" in str(e.value)
    assert "mdrag-docs[" not in str(e.value)


def test_every_extra_is_declared_in_pyproject() -> None:
    """The extras the errors name (mdrag's own, and its store backends') are the ones pyproject.toml declares,
    and `all` brings each of them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = project["optional-dependencies"]
    backends = {b.extra.name for b in store_backends().values() if b.extra is not None and not b.extra.requirement}
    assert "milvus" in backends
    for extra in [*EXTRAS, *backends]:
        assert extra in declared, extra
        assert extra in declared["all"][0], declared["all"]
    assert "mdrag-docs[all]" in declared["dev"]
    core = {re.split(r"[<>=;\[ ]", req, maxsplit=1)[0].lower() for req in project["dependencies"]}
    heavy = {"torch", "sentence-transformers", "transformers", "pymilvus", "milvus-lite", "openvino"}
    assert not core & heavy, core & heavy


def test_milvus_server_uri_without_the_extra(mdrag_home: Path) -> None:
    proc = mdrag_without(["pymilvus", "milvus_lite"], "index", str(DOCS), "--milvus-uri", "http://127.0.0.1:9")
    said_once(proc, "milvus")
    assert "Milvus server http://127.0.0.1:9" in proc.stderr
    assert not (mdrag_home / "cache" / "models").exists()  # said before any model was prepared


def test_milvus_lite_store_without_the_extra_on_search(mdrag_home: Path) -> None:
    proc = mdrag_without(["milvus_lite"], "search", "chunk size", "--store", "milvus")
    said_once(proc, "milvus")
    assert "Milvus Lite file" in proc.stderr and "no module milvus_lite" in proc.stderr
    assert not (mdrag_home / "cache" / "models").exists()


def test_rerank_path_without_torch(mdrag_home: Path, tmp_path: Path) -> None:
    model = tmp_path / "cross-encoder"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (mdrag_home / "config.yaml").write_text(f"rerank:\n  path: {model}\n")
    proc = mdrag_without(["sentence_transformers"], "search", "chunk size")
    said_once(proc, "torch")
    assert f"rerank.path '{model}'" in proc.stderr


def test_the_python_api_raises_it_when_the_index_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    from mdrag import Index

    monkeypatch.setitem(sys.modules, "pymilvus", None)
    with pytest.raises(MissingExtraError) as e:
        Index(load_config({"store.backend": "milvus", "milvus_uri": "http://127.0.0.1:9"}))
    assert e.value.extra == "milvus"


def test_the_mcp_tools_answer_it_as_the_tool_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mdrag.frontends.mcp import KnowledgeTools
    from mdrag.knowledge import KnowledgeBase

    project = tmp_path / "project"
    (project / ".knowledge").mkdir(parents=True)
    (project / ".knowledge" / "config.yaml").write_text("docsets:\n  - id: demo\n    name: Demo\n")
    local = Path(KnowledgeBase(project).resolve("demo").local_path)
    local.mkdir(parents=True)
    (local / "a.md").write_text("# A\n\nSome text.\n")
    monkeypatch.setitem(sys.modules, "pymilvus", None)
    tools = KnowledgeTools(KnowledgeBase(project), config=load_config({"milvus_uri": "http://127.0.0.1:9"}))

    async def main() -> str:
        async with tools.running():
            result = await tools.call("search", {"docset": "demo", "query": "text"})
        assert result.is_error
        block = result.content[0]
        return str(getattr(block, "text", ""))

    text = anyio.run(main)
    assert "pip install 'mdrag-docs[milvus]'" in text, text


@pytest.mark.parametrize(
    ("backend", "hidden", "extra"),
    [("openvino", ["openvino"], "openvino"), ("torch", ["sentence_transformers"], "torch")],
)
def test_an_embedding_backend_without_its_extra(
    mdrag_home: Path, backend: str, hidden: list[str], extra: str, tmp_path: Path
) -> None:
    """`embedding.backend` set to a backend whose extra is missing: said by `mdrag index` before anything is read."""
    (mdrag_home / "config.yaml").write_text(f"embedding:\n  backend: {backend}\n")
    proc = mdrag_without(hidden, "index", str(DOCS))
    said_once(proc, extra)
    assert f"embedding.backend: {backend}" in proc.stderr
    assert not (mdrag_home / "cache" / "models").exists()
    assert not (mdrag_home / "cache" / "manifests").exists()  # nothing indexed


def test_auto_runs_the_model_with_onnxruntime_when_openvino_is_missing(mdrag_home: Path) -> None:
    """The default install has no OpenVINO: `auto` then runs the model with onnxruntime, and indexes."""
    proc = mdrag_without(["openvino"], "index", str(DOCS), "-v")
    assert proc.returncode == 0, proc.stderr
    assert "for the onnxruntime runtime" in proc.stderr
    found = mdrag_without(["openvino"], "search", "how do I change the chunk size?", "-k", "1", "--json")
    assert found.returncode == 0, found.stderr
    assert "configuration.md" in found.stdout


def test_serve_says_it_and_does_not_start(mdrag_home: Path) -> None:
    """`mdrag serve` on an index kept in Milvus, without the extra: the same message, and no server."""
    from tests.conftest import free_port

    proc = mdrag_without(
        ["pymilvus", "milvus_lite"], "serve", str(DOCS), "--store", "milvus", "--port", str(free_port())
    )
    assert proc.returncode == 1, proc.stderr
    assert "pip install 'mdrag-docs[milvus]'" in proc.stderr and "Traceback" not in proc.stderr
    assert "listening on" not in proc.stderr
    assert not (mdrag_home / "cache" / "models").exists()
