"""`store.backend: auto`, the default: FAISS for a new index, Milvus for an index already in a Milvus
Lite file and for a Milvus server; an explicit setting wins. An existing index is never orphaned."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from mdrag.config import load_config
from mdrag.frontends.cli import main
from mdrag.index import Index
from mdrag.store import resolve_backend
from tests.conftest import HashEmbedder


def _docs(tmp_path: Path, n: int = 4) -> Path:
    root = tmp_path / "docs"
    root.mkdir(exist_ok=True)
    for i in range(n):
        (root / f"topic{i}.md").write_text(f"# Topic {i}\n\nTopic {i} explains feature{i} and its options.\n")
    return root


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if out.startswith(("{", "[")) else out


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch, hash_embedder: HashEmbedder) -> HashEmbedder:
    """Every Index (the command line's too) embeds with one HashEmbedder, which counts what it embeds."""
    monkeypatch.setattr("mdrag.index.index.make_embedder", lambda config: hash_embedder)
    return hash_embedder


def test_a_fresh_home_indexes_into_faiss(
    tmp_path: Path, mdrag_home: Path, hashed: HashEmbedder, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load_config()["store.backend"] == "auto"
    code, st = _run(capsys, "status", "--json")
    assert code == 0 and st["backend"] == "faiss" and not st["exists"]
    docs = _docs(tmp_path)
    code, summary = _run(capsys, "index", str(docs), "--json", "-q")
    assert code == 0 and summary["added"] == 4
    assert (mdrag_home / "cache" / "faiss" / "default.sqlite").is_file()
    assert not (mdrag_home / "cache" / "milvus.db").exists(), "nothing went to Milvus Lite"
    code, st = _run(capsys, "status", "--json")
    assert code == 0 and st["backend"] == "faiss" and st["chunks"] == summary["chunks_total"]
    assert st["store_uri"] == str(mdrag_home / "cache" / "faiss" / "default.sqlite")
    code, text = _run(capsys, "status")
    assert f"store:        faiss, {mdrag_home / 'cache' / 'faiss' / 'default.sqlite'}" in text
    code, results = _run(capsys, "search", "feature2 options", "--threshold", "0", "--json")
    assert code == 0 and results[0]["rel_path"] == "topic2.md"


@pytest.mark.parametrize("how", ["manifest", "no manifest", "corrupt manifest"])
def test_an_index_built_in_milvus_lite_stays_there(
    tmp_path: Path, mdrag_home: Path, hashed: HashEmbedder, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    """Built with `store.backend: milvus`, then the setting removed: `auto` keeps searching and updating
    the Milvus Lite index, nothing is embedded again, and no FAISS store appears."""
    docs = _docs(tmp_path)
    config_file = mdrag_home / "config.yaml"
    config_file.write_text("store:\n  backend: milvus\n")
    code, built = _run(capsys, "index", str(docs), "--json", "-q")
    assert code == 0 and built["chunks_embedded"] == built["chunks_total"] > 0
    code, before = _run(capsys, "search", "topic feature options", "--threshold", "0", "--json")
    assert code == 0 and len(before) == 4

    config_file.write_text("search:\n  k: 10\n")  # the setting removed: store.backend is auto again
    manifest = mdrag_home / "cache" / "manifests" / "default.json"
    if how == "no manifest":
        manifest.unlink()  # only the Milvus Lite file's collection folder says where the index is
    elif how == "corrupt manifest":
        manifest.write_text("{not json")
    backend, reason = resolve_backend(load_config(), "default")
    assert backend == "milvus" and str(mdrag_home / "cache" / "milvus.db") in reason, reason

    code, again = _run(capsys, "index", str(docs), "--json", "-q")
    assert code == 0 and again["chunks_embedded"] == 0 and again["chunks_total"] == built["chunks_total"]
    assert again["rebuild"] is None if how == "manifest" else again["rebuild"]  # rebuilt from the stored vectors
    code, after = _run(capsys, "search", "topic feature options", "--threshold", "0", "--json")
    assert code == 0 and after == before, "the same results, from the same store"

    (docs / "zebra.md").write_text("# Zebra\n\nZebra stripes and zebra crossings.\n")
    embedded = len(hashed.embedded)
    code, update = _run(capsys, "index", "--json", "-q")
    assert code == 0 and update["added"] == 1 and update["chunks_embedded"] == 1, "only the new file is embedded"
    assert len(hashed.embedded) == embedded + 1
    code, found = _run(capsys, "search", "zebra crossings", "-k", "1", "--threshold", "0", "--json")
    assert code == 0 and found[0]["rel_path"] == "zebra.md"
    code, st = _run(capsys, "status", "--json")
    assert code == 0 and st["backend"] == "milvus" and st["store_uri"] == str(mdrag_home / "cache" / "milvus.db")
    assert st["files"] == 5 and not st["damaged"] and not st["interrupted"]
    assert not (mdrag_home / "cache" / "faiss").exists(), "no FAISS store was made beside it"
    # Another index of the same home is new: it goes to FAISS.
    assert resolve_backend(load_config(), "other")[0] == "faiss"


def test_the_choice_is_logged_with_its_reason(mdrag_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="mdrag.index"):
        Index(load_config({"index": "fresh"}), embedder=HashEmbedder()).close()
    chosen = [r.getMessage() for r in caplog.records if "store (" in r.getMessage()]
    assert chosen == ["index 'fresh': faiss store (store.backend auto: index 'fresh' is new (FAISS))"]


def test_a_milvus_server_picks_milvus_and_explicit_settings_win(
    mdrag_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = load_config({"milvus_uri": "https://user:secret@milvus.example:19530"})
    backend, reason = resolve_backend(server, "docs")
    assert backend == "milvus" and "server" in reason and "secret" not in reason
    for uri in ("http://127.0.0.1:19530", "tcp://10.0.0.2:19530", "grpc://milvus:19530"):
        assert resolve_backend(load_config({"milvus_uri": uri}))[0] == "milvus", uri
    # A Milvus Lite file is not a server: a new index still goes to FAISS.
    assert resolve_backend(load_config({"milvus_uri": str(mdrag_home / "my.db")}))[0] == "faiss"

    # Explicit settings, from a flag, the environment or the file, are used as they are.
    assert resolve_backend(load_config({"store.backend": "milvus"}), "new") == (
        "milvus",
        "store.backend is milvus (from --store)",
    )
    faiss_on_server = {"store.backend": "faiss", "milvus_uri": "http://127.0.0.1:19530"}
    assert resolve_backend(load_config(faiss_on_server))[0] == "faiss"
    monkeypatch.setenv("MDRAG_STORE", "milvus")
    assert resolve_backend(load_config()) == ("milvus", "store.backend is milvus (from MDRAG_STORE)")
    (mdrag_home / "config.yaml").write_text("store:\n  backend: faiss\n")
    assert resolve_backend(load_config()) == ("faiss", "store.backend is faiss (from the config file)")
    monkeypatch.delenv("MDRAG_STORE")
    _write_manifest(mdrag_home, "default", str(mdrag_home / "cache" / "milvus.db"))
    assert resolve_backend(load_config())[0] == "faiss", "the setting wins over what the manifest says"


def _write_manifest(home: Path, name: str, store_uri: str, **extra: Any) -> Path:
    path = home / "cache" / "manifests" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"index": name, "store_uri": store_uri, "model": {}, "chunking": {}, **extra}))
    return path


def test_auto_reads_the_manifest_and_the_lite_folder_without_opening_a_store(mdrag_home: Path) -> None:
    cache = mdrag_home / "cache"
    lite = cache / "milvus.db"
    _write_manifest(mdrag_home, "lite", str(lite))
    _write_manifest(mdrag_home, "flat", str(cache / "faiss" / "flat.sqlite"))
    _write_manifest(mdrag_home, "gone", str(mdrag_home / "elsewhere.db"))  # a Lite file no longer configured
    # Keys in another order (by hand), behind a long first value: the whole file is read.
    path = mdrag_home / "cache" / "manifests" / "reordered.json"
    path.write_text(json.dumps({"files": {"/x" * 40000: {}}, "store_uri": str(lite), "index": "reordered"}))
    (lite / "collections" / "mdrag_nomanifest").mkdir(parents=True)  # what Milvus Lite keeps per collection
    _write_manifest(mdrag_home, "both", str(cache / "faiss" / "both.sqlite"))
    (lite / "collections" / "mdrag_both").mkdir()
    config = load_config()
    assert {name: resolve_backend(config, name)[0] for name in ("lite", "flat", "gone", "reordered")} == {
        "lite": "milvus",
        "flat": "faiss",
        "gone": "faiss",
        "reordered": "milvus",
    }
    assert resolve_backend(config, "nomanifest")[0] == "milvus"
    assert resolve_backend(config, "both")[0] == "faiss", "the manifest says where the index is"
    assert resolve_backend(config, "new")[0] == "faiss"
    # The docsets' Milvus Lite file (`mdrag mcp`) is one more Lite file: the same rules.
    docsets = config.with_overrides({"milvus_uri": str(cache / "docsets.db")})
    assert resolve_backend(docsets, "lite")[0] == "faiss"
    assert not any(p.name == "docsets.db" for p in cache.iterdir())
