"""The backend registry (mdrag/plugins.py): mdrag's own stores and embedders are registered by entry point,
as a third party's are, and a third party's, installed as a distribution, is used like a built-in one."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import mdrag.embedding
import mdrag.store
from mdrag import plugins
from mdrag.embedding import EmbedderBackend, embedders
from mdrag.store import StoreBackend, store_backends
from mdrag.version import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[1]


def _declared(package: Any, kind: type[Any]) -> dict[str, Any]:
    """Every ``kind`` declared at the top level of a module of ``package``: the built-in backends."""
    found: dict[str, Any] = {}
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for attr, value in vars(module).items():
            if isinstance(value, kind):
                found[f"{info.name}:{attr}"] = value
    return found


def test_every_built_in_backend_is_registered_by_its_entry_point() -> None:
    """A backend declared in mdrag but missing from pyproject.toml's entry points (or registered some other
    way) fails here: the registry holds what the installed metadata lists, nothing else."""
    groups = {StoreBackend: [plugins.STORES], EmbedderBackend: [plugins.EMBEDDERS, plugins.LOCAL_EMBEDDERS]}
    for package, kind in ((mdrag.store, StoreBackend), (mdrag.embedding, EmbedderBackend)):
        declared = _declared(package, kind)
        assert declared, f"no {kind.__name__} declared under {package.__name__}"
        for where, backend in declared.items():
            eps = [ep for g in groups[kind] for ep in importlib.metadata.entry_points(group=g, name=backend.name)]
            assert [ep.value for ep in eps] == [where], f"{where} is not registered as entry point {backend.name!r}"
            assert eps[0].dist is not None and eps[0].dist.name == DISTRIBUTION
            assert eps[0].load() is backend
    assert set(store_backends()) == {ep.name for ep in importlib.metadata.entry_points(group=plugins.STORES)}
    embedder_eps = [g for g in groups[EmbedderBackend] for g in importlib.metadata.entry_points(group=g)]
    assert set(embedders()) == {ep.name for ep in embedder_eps}
    assert {"faiss", "milvus"} <= set(store_backends())
    assert {"openai", "torch", "onnx", "openvino"} <= set(embedders())


PLUGIN = """
from mdrag.embedding.base import EmbedderBackend
from mdrag.store import StoreBackend, same_location
from mdrag.store.faiss import FaissStore
from tests.conftest import HashEmbedder


def _location(config, name):
    return str(config.cache_dir / "shelf" / f"{name}.sqlite")


def _owns(config, name, recorded):
    return f"index {name!r} is on the shelf" if recorded and same_location(recorded, _location(config, name)) else None


BACKEND = StoreBackend(
    name="shelf",
    title="Shelf",
    store=lambda config, name, identity, prepare: FaissStore(config.cache_dir / "shelf", name, identity, prepare),
    location=_location,
    owns=_owns,
)
EMBEDDER = EmbedderBackend(name="hashed", embedder=lambda config: HashEmbedder())
"""


def _install_plugin(site: Path) -> None:
    """A distribution `mdrag-shelf` as pip would install it: its module, and its metadata with entry points."""
    (site / "mdrag_shelf.py").write_text(PLUGIN)
    info = site / "mdrag_shelf-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mdrag-shelf\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[mdrag.stores]\nshelf = mdrag_shelf:BACKEND\n\n[mdrag.embedders]\nhashed = mdrag_shelf:EMBEDDER\n"
    )


def _mdrag(site: Path, home: Path, *argv: str) -> Any:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "MDRAG_HOME": str(home),
        "MARKDOWN_QA_EMBEDDING_PROVIDER": "hashed",
        "HF_HUB_OFFLINE": "1",
    }
    p = subprocess.run(
        [sys.executable, "-m", "mdrag", *argv], capture_output=True, text=True, env=env, cwd=site, timeout=300
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_third_party_store_and_embedder_are_used_like_built_in_ones(tmp_path: Path) -> None:
    site, home, docs = tmp_path / "site", tmp_path / "home", tmp_path / "docs"
    for folder in (site, home, docs):
        folder.mkdir()
    _install_plugin(site)
    (docs / "shelf.md").write_text("# Shelves\n\nA shelf holds the books of the library.\n")
    settings = _mdrag(site, home, "config", "--store", "shelf", "--json")["settings"]
    assert settings["store.backend"]["value"] == "shelf" and settings["embedding.provider"]["value"] == "hashed"
    summary = _mdrag(site, home, "index", str(docs), "--store", "shelf", "--json", "-q")
    assert summary["added"] == 1 and (home / "cache" / "shelf" / "default.sqlite").is_file()
    status = _mdrag(site, home, "status", "--json")  # store.backend auto: the shelf owns the index it built
    assert status["backend"] == "shelf" and status["model"]["model"] == "test:hash-64" and status["chunks"] == 1
    results = _mdrag(site, home, "search", "books of the library", "--threshold", "0", "--json")
    assert [r["rel_path"] for r in results] == ["shelf.md"]


def test_entry_points_are_importlib_metadatas_read_without_it(tmp_path: Path) -> None:
    """The registry reads the metadata folders on sys.path itself (importlib.metadata, with the modules it
    imports, is a tenth of a one-shot search's imports beyond the model's); it finds what importlib.metadata
    finds: every group's entry points, a distribution found twice on the path read where it is found first,
    and importlib.metadata itself is not imported for it."""
    first, second = tmp_path / "first", tmp_path / "second"
    for site in (first, second):
        site.mkdir()
        _install_plugin(site)
    (second / "mdrag_shelf-1.0.dist-info" / "entry_points.txt").write_text("[mdrag.stores]\nshadowed = x:Y\n")
    (first / "mdrag_shelf-1.0.dist-info" / "entry_points.txt").write_text(
        "# comment\n[mdrag.stores]\nshelf = mdrag_shelf:BACKEND\n\n[mdrag.embedders]\nhashed=mdrag_shelf:EMBEDDER [x]\n"
    )
    code = """
import json, sys
from mdrag import plugins
mine = {g: sorted([e.name, e.value] for e in eps) for g, eps in plugins._all_entry_points().items()}
lazy = "importlib.metadata" not in sys.modules
import importlib.metadata
every = importlib.metadata.entry_points()
theirs = {g: sorted([e.name, e.value] for e in every.select(group=g)) for g in every.groups}
print(json.dumps([mine, theirs, lazy, plugins.load(plugins.EMBEDDERS, "hashed", object).name]))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(first), str(second), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    mine, theirs, lazy, hashed = json.loads(out.stdout)
    assert mine == theirs and lazy and hashed == "hashed"
    assert ["shelf", "mdrag_shelf:BACKEND"] in mine[plugins.STORES]
    assert ["shadowed", "x:Y"] not in mine[plugins.STORES]
