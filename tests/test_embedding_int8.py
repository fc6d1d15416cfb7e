"""The int8 model (``embedding.precision: int8``): written once from the float ONNX file, cached with its
checksum, and kept by each index at the precision it was built with."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")

from mdrag.config import load_config  # noqa: E402
from mdrag.embedding import onnx_files  # noqa: E402
from mdrag.embedding.onnx import OnnxEmbedder  # noqa: E402
from mdrag.fileio import file_sha256  # noqa: E402
from mdrag.index import Index  # noqa: E402

pytestmark = pytest.mark.slow

TEXTS = [
    "How do I install the tool on Linux?",
    "Configure pagination: set `pagerSize = 10` in hugo.toml.",
    "## Front matter\n\nThe `date`, `title` and `draft` fields are read from YAML, TOML or JSON.",
    "Deploy to GitHub Pages with a workflow that runs hugo --minify.",
    "Image processing: resize, fill and fit images in a page bundle.",
    "Render hooks override how links, images and headings are rendered.",
    "日本語のテキストと中文文本",
    "Hugo builds static sites from Markdown content, templates and configuration files quickly. " * 40,
]
PAGES = {
    "install.md": "# Installing\n\nInstall the tool on Linux with the package manager, or download the binary.\n",
    "pages.md": "# Pagination\n\nSet `pagerSize = 10` in hugo.toml to show ten pages per pager.\n",
    "deploy.md": "# Deploying\n\nDeploy to GitHub Pages with a workflow that runs hugo --minify on each push.\n",
    "images.md": "# Images\n\nResize, fill and fit images in a page bundle with the image processing methods.\n",
}
QUERIES = ("how do I install it on linux", "ten pages per pager", "publish the site on github")


@pytest.fixture(scope="session")
def int8_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding the float model and its int8 model, written once per run (float first)."""
    cache = tmp_path_factory.mktemp("int8-cache")
    OnnxEmbedder(cache_dir=cache, int8=True).embed(["warm up"])
    return cache


def test_the_int8_model_is_written_beside_the_float_one_with_its_checksum(int8_cache: Path) -> None:
    fp, q8 = OnnxEmbedder(cache_dir=int8_cache), OnnxEmbedder(cache_dir=int8_cache, int8=True)
    path = q8.onnx_path
    assert path == fp.onnx_path.with_name("model.int8.onnx") and path.is_file()
    sidecar = path.with_name("model.int8.onnx.sha256").read_text().splitlines()
    assert sidecar[0].split()[0] == file_sha256(path)
    assert f"source {fp.onnx_path}" in sidecar, "the sidecar names the float file it was made from"
    assert onnx_files.checksum_ok(path) and onnx_files.checksum_ok(fp.onnx_path)
    assert path.stat().st_size < 0.7 * fp.onnx_path.stat().st_size, "the MatMul weights are int8"
    assert not [f for f in path.parent.iterdir() if f.name.startswith(".")], "no temp files left"
    assert q8.identity == {**fp.identity, "precision": "int8"} and "precision" not in fp.identity
    a, b = fp.embed(TEXTS), q8.embed(TEXTS)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.97 and cosines.mean() > 0.98, cosines
    assert not np.allclose(a, b, atol=1e-3), "int8 runs another model than fp32"
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    # The activations are quantized with one range per batch: a text's vector depends a little on its batch.
    np.testing.assert_allclose(q8.embed_query(TEXTS[1]), q8.embed(TEXTS[1:2])[0], atol=1e-5)
    for twin in (q8.background(), q8._single):  # the one-thread twins run the same int8 model
        assert twin.int8 and twin.onnx_path == path


def test_a_damaged_int8_model_is_written_again(
    int8_cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(int8_cache, cache)
    want = OnnxEmbedder(cache_dir=int8_cache, int8=True).embed(TEXTS[:3])
    e = OnnxEmbedder(cache_dir=cache, int8=True)
    path = e.onnx_path
    data = bytearray(path.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 4096] = b"\x00" * 4096  # a flipped block in the weights
    path.write_bytes(bytes(data))
    assert not onnx_files.checksum_ok(path)
    with caplog.at_level(logging.WARNING, logger="mdrag.embedding.onnx"):
        got = e.embed(TEXTS[:3])
    assert "does not match its checksum" in caplog.text
    assert onnx_files.checksum_ok(path)
    np.testing.assert_allclose(got, want, atol=1e-5)  # the same float file gives the same int8 model


def test_the_int8_model_is_written_after_the_float_one_when_neither_exists(int8_cache: Path, tmp_path: Path) -> None:
    e = OnnxEmbedder(cache_dir=tmp_path / "cache", int8=True)
    got = e.embed(TEXTS[:2])
    assert onnx_files.checksum_ok(e.onnx_path) and onnx_files.checksum_ok(e._float_path)
    assert file_sha256(e.onnx_path) == file_sha256(OnnxEmbedder(cache_dir=int8_cache, int8=True).onnx_path)
    np.testing.assert_allclose(got, OnnxEmbedder(cache_dir=int8_cache, int8=True).embed(TEXTS[:2]), atol=1e-5)


def _docs(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in PAGES.items():
        (docs / name).write_text(text, encoding="utf-8")
    return docs


def _index(name: str, precision: str) -> Index:
    return Index(load_config({"index": name, "embedding.backend": "onnx", "embedding.precision": precision}))


def _recorded(home: Path, name: str) -> dict[str, object]:
    model: dict[str, object] = json.loads((home / "cache" / "manifests" / f"{name}.json").read_text())["model"]
    return model


def _dense(index: Index) -> list[list[tuple[str, float]]]:
    return [[(r.chunk_id, r.score) for r in index.search(q, k=4, mode="dense", threshold=0.0)] for q in QUERIES]


@pytest.fixture
def home(mdrag_home: Path, int8_cache: Path) -> Path:
    """The test's home, its model cache holding the two models already."""
    shutil.copytree(int8_cache / "models", mdrag_home / "cache" / "models")
    return mdrag_home


def test_an_index_built_int8_records_it_and_its_queries_run_int8(home: Path, tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    with _index("q8", "int8") as built:
        built.update([docs])
        assert _recorded(home, "q8")["precision"] == "int8"
        want = _dense(built)
    with _index("q8", "fp32") as opened:  # the settings say fp32 now: the index keeps its int8
        assert opened.embedder.identity["precision"] == "int8"
        got = _dense(opened)
        assert opened.status().model_mismatch is None
        (docs / "more.md").write_text("# Taxonomies\n\nGroup pages by tags and categories.\n", encoding="utf-8")
        summary = opened.update([docs])
        assert summary.rebuild is None, "an update embeds the new file with the index's model, and only it"
        assert _recorded(home, "q8")["precision"] == "int8"
    for g, w in zip(got, want):
        assert [c for c, _ in g] == [c for c, _ in w]
        np.testing.assert_allclose([s for _, s in g], [s for _, s in w], atol=1e-5)
    fp = OnnxEmbedder(cache_dir=home / "cache")
    q8 = OnnxEmbedder(cache_dir=home / "cache", int8=True)
    assert abs(float(q8.embed_query(QUERIES[0]) @ fp.embed_query(QUERIES[0])) - 1) > 1e-4, "fp32 would score apart"


def test_an_fp32_index_opened_with_int8_configured_stays_fp32_until_rebuilt(home: Path, tmp_path: Path) -> None:
    docs = _docs(tmp_path)
    with _index("fp", "fp32") as built:
        built.update([docs])
        want = _dense(built)
    assert "precision" not in _recorded(home, "fp")
    with _index("fp", "int8") as opened:
        assert not opened.embedder.int8, "an existing index keeps the precision it was built with"
        got = _dense(opened)
        (docs / "more.md").write_text("# Taxonomies\n\nGroup pages by tags and categories.\n", encoding="utf-8")
        summary = opened.update([docs])
        assert summary.rebuild is None and summary.added == 1, "no rebuild, no int8 vector among fp32 ones"
        assert "precision" not in _recorded(home, "fp")
        rebuilt = opened.update([docs], rebuild=True)  # a rebuild takes the configured precision
        assert rebuilt.chunks_total == len(PAGES) + 1
        assert _recorded(home, "fp")["precision"] == "int8" and opened.embedder.int8
        after = _dense(opened)
    for g, w in zip(got, want):
        np.testing.assert_allclose([s for _, s in g], [s for _, s in w], atol=1e-5)
    with _index("fp", "fp32") as reopened:  # now an int8 index, whatever the settings say
        assert reopened.embedder.int8
        for g, w in zip(_dense(reopened), after):
            np.testing.assert_allclose([s for _, s in g], [s for _, s in w], atol=1e-5)
