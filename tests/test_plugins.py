"""The backend registry (mdrag/plugins.py): mdrag's own stores and embedders are registered by entry point,
as a third party's are, and a third party's, installed as a distribution, is used like a built-in one: a store
backend with a URI scheme of its own passes the store contract tests, and its URIs are never taken for paths."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mdrag.embedding
import mdrag.store
from mdrag import plugins, settings
from mdrag.config import load_config
from mdrag.embedding import EmbedderBackend, embedders
from mdrag.errors import ConfigError
from mdrag.store import StoreBackend, in_home, resolve_backend, same_location, store_backends, uri_scheme
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


# A store backend whose stores are reached by URIs of its own scheme, toy:///FOLDER/INDEX: the FAISS store under
# another name. One module and its entry point; the core is not told of it.
TOY = """
from pathlib import Path

from mdrag.settings import backend_setting
from mdrag.store import StoreBackend
from mdrag.store.faiss import FaissStore


def _location(config, name):
    return f"toy://{config.effective('toy.box')}/{name}"


class ToyStore(FaissStore):
    def __init__(self, uri, name, identity, prepare_text):
        super().__init__(Path(uri.removeprefix("toy://")).parent, name, identity, prepare_text)
        self.uri = uri


def _owns(config, name, recorded):
    return f"index {name!r} is a toy's" if recorded == _location(config, name) else None


BACKEND = StoreBackend(
    name="toy",
    title="Toy",
    store=lambda config, name, identity, prepare: ToyStore(_location(config, name), name, identity, prepare),
    location=_location,
    owns=_owns,
    schemes=("toy",),
    settings={
        "toy.box": backend_setting(
            str | None,
            None,
            "the folder of the toy's stores",
            env="MDRAG_TOY_BOX",
            shown="`$MDRAG_HOME/cache/toy`",
            flag="--toy-box",
            metavar="DIR",
            cache_file="toy",
        ),
    },
)
"""


def _install_toy(site: Path) -> None:
    """The distribution `mdrag-toy` as pip would install it: its one module, and its entry point."""
    site.mkdir(exist_ok=True)
    (site / "mdrag_toy.py").write_text(TOY)
    info = site / "mdrag_toy-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mdrag-toy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[mdrag.stores]\ntoy = mdrag_toy:BACKEND\n")


def _fresh_registry() -> None:
    """Forget the entry points read so far, and the settings collected from them: the next read sees the
    distributions on sys.path now."""
    plugins._all_entry_points.cache_clear()
    plugins.entry_points.cache_clear()
    settings._collected.cache_clear()
    settings.model.cache_clear()


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The toy backend installed in this process (its distribution on sys.path); its site folder."""
    site = tmp_path / "site"
    _install_toy(site)
    monkeypatch.syspath_prepend(str(site))
    _fresh_registry()
    yield site
    monkeypatch.undo()
    sys.modules.pop("mdrag_toy", None)
    _fresh_registry()


def test_a_toy_backend_with_its_own_uri_scheme_passes_the_store_contract(tmp_path: Path) -> None:
    """The contract tests, run where the toy is installed, hold it to the contract as they hold the built-in
    stores: every one of them runs on it, and passes."""
    site = tmp_path / "site"
    _install_toy(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "HF_HUB_OFFLINE": "1"}
    pytest_run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_store_contract.py"]
    p = subprocess.run([*pytest_run, "-k", "toy"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    listed = subprocess.run(
        [*pytest_run, "--collect-only"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    ).stdout.splitlines()
    contract = {re.sub(r"\[.*", "", line) for line in listed if "::test_" in line}
    toys = [line for line in listed if re.search(r"\[(.*-)?toy(-.*)?\]$", line)]
    assert len({re.sub(r"\[.*", "", t) for t in toys}) == len(contract) > 10  # every contract test, on the toy
    assert re.search(rf"\b{len(toys)} passed\b", p.stdout) and "skipped" not in p.stdout, p.stdout[-2000:]


def test_a_backends_uris_are_its_own_and_an_unclaimed_scheme_is_an_error(toy: Path, tmp_path: Path) -> None:
    config = load_config({})
    uri = store_backends()["toy"].location(config, "default")
    assert uri.startswith("toy:///") and uri_scheme(uri) == "toy"
    assert not in_home(uri, config.manifest_path())  # a URI, not a file in the home, though its text names it
    assert not same_location(uri, uri.removeprefix("toy://")) and same_location(uri, uri)
    assert uri_scheme(str(tmp_path / "x.db")) is None and uri_scheme("notes:v2.db") is None  # paths
    for unclaimed in ("s3://bucket/index", "db://host/x"):
        with pytest.raises(ConfigError, match=rf"the scheme {unclaimed[:2]}://.*the schemes known: .*toy \(toy\)"):
            uri_scheme(unclaimed)
    # a Milvus URI that is no server is no Lite file either: said before anything is created
    with pytest.raises(ConfigError, match=r"s3://bucket/x has the scheme s3://.*http \(milvus\)"):
        resolve_backend(load_config({"milvus_uri": "s3://bucket/x"}))


def _mdrag_run(site: Path | None, home: Path, *argv: str, **more_env: str) -> subprocess.CompletedProcess[str]:
    path = [str(site), str(ROOT)] if site else [str(ROOT)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.update(more_env)
    env["MARKDOWN_QA_EMBEDDING_PROVIDER"] = "hashed"  # the shelf plugin's embedder: no model to load
    return subprocess.run(
        [sys.executable, "-m", "mdrag", *argv], capture_output=True, text=True, env=env, cwd=home, timeout=300
    )


def _toy_site(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(site, home, docs): the toy backend and the shelf's hashed embedder installed, a home, a folder of one note."""
    site, home, docs = tmp_path / "site", tmp_path / "home", tmp_path / "docs"
    for folder in (home, docs):
        folder.mkdir()
    _install_toy(site)
    _install_plugin(site)  # the shelf's embedder, hashed: no model to load
    (docs / "toy.md").write_text("# Toys\n\nA toy box holds the toys.\n")
    return site, home, docs


def test_an_index_in_a_backend_no_longer_installed_is_an_error_not_a_path(tmp_path: Path) -> None:
    site, home, docs = _toy_site(tmp_path)
    p = _mdrag_run(site, home, "index", str(docs), "--store", "toy", "--json", "-q")
    assert p.returncode == 0, p.stderr
    recorded = json.loads((home / "cache" / "manifests" / "default.json").read_text())["store_uri"]
    assert recorded == f"toy://{home / 'cache' / 'toy'}/default"
    status = _mdrag_run(site, home, "status", "--json")  # store.backend auto: the toy owns the index it built
    assert status.returncode == 0 and json.loads(status.stdout)["backend"] == "toy", status.stderr
    (site / "mdrag_toy-1.0.dist-info" / "entry_points.txt").write_text("")  # the toy uninstalled
    gone = _mdrag_run(site, home, "status", "--json")
    assert gone.returncode == 2, gone.stderr
    assert f"index 'default' was built in {recorded}, a store URI whose scheme no installed" in gone.stderr
    assert "the schemes known: grpc (milvus), http (milvus)" in gone.stderr and "Traceback" not in gone.stderr
    assert sorted(p.name for p in (home / "cache").iterdir()) == ["manifests", "toy"]  # nothing made of the URI


def test_a_backend_brings_its_own_setting_read_like_mdrags(tmp_path: Path) -> None:
    """The toy's setting, declared in its module alone, is a setting as mdrag's own are: shown by `mdrag config`
    with its default and where a value came from, read from the config file, its environment variable and its
    flag (on every command that opens an index), listed in the settings table, checked, and read by the toy."""
    site, home, docs = _toy_site(tmp_path)

    def mdrag(*argv: str, **env: str) -> Any:
        p = _mdrag_run(site, home, *argv, **env)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout) if "--json" in argv else p.stdout

    rows = mdrag("config", "--json")["settings"]
    assert rows["toy.box"] == {"value": str(home / "cache" / "toy"), "source": "default"}
    keys = list(rows)
    assert keys.index("milvus_token") < keys.index("toy.box") == keys.index("store.backend") - 1
    from_env = mdrag("config", "--json", MDRAG_TOY_BOX=str(tmp_path / "from-env"))["settings"]["toy.box"]
    assert from_env == {"value": str(tmp_path / "from-env"), "source": "environment", "variable": "MDRAG_TOY_BOX"}
    (home / "config.yaml").write_text(f"toy:\n  box: {tmp_path / 'from-file'}\n")
    from_file = mdrag("config", "--json")["settings"]["toy.box"]
    assert from_file == {"value": str(tmp_path / "from-file"), "source": "file", "file": str(home / "config.yaml")}
    table = mdrag("config", "--markdown")
    assert "| `toy.box` | `$MDRAG_HOME/cache/toy` | the folder of the toy's stores (`MDRAG_TOY_BOX`) |" in table
    assert "--toy-box DIR" in mdrag("search", "--help")
    flag_box = tmp_path / "from-flag"
    summary = mdrag("index", str(docs), "--store", "toy", "--toy-box", str(flag_box), "--json", "-q")
    assert summary["added"] == 1 and (flag_box / "default.sqlite").is_file()
    recorded = json.loads((home / "cache" / "manifests" / "default.json").read_text())["store_uri"]
    assert recorded == f"toy://{flag_box}/default"
    (home / "config.yaml").write_text("toy:\n  box: 3\n")
    bad = _mdrag_run(site, home, "config")
    assert bad.returncode != 0 and "toy.box must be a string, got 3" in bad.stderr, bad.stderr


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
from mdrag import plugins, settings
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
