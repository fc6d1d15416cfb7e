"""The ONNX graph written from the weights without torch (mdrag/embedding/onnx_build.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")

import onnx  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

from mdrag.embedding import onnx_files  # noqa: E402
from mdrag.embedding.local import DEFAULT_MODEL, resolve_model_dir  # noqa: E402
from mdrag.embedding.onnx import OnnxEmbedder, onnx_model_path  # noqa: E402
from mdrag.embedding.onnx_build import UnsupportedModelError, build_onnx, check_supported  # noqa: E402
from mdrag.extras import MissingExtraError, extra_installed  # noqa: E402
from tests.conftest import SHARED_DATA  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HUGO = SHARED_DATA / "markdown_hugo_docs"
needs_torch = pytest.mark.skipif(
    not extra_installed("torch"), reason="sentence-transformers is not installed (pip install 'mdrag-docs[torch]')"
)


@pytest.fixture(scope="module")
def packaged() -> Path:
    return resolve_model_dir(DEFAULT_MODEL)


@pytest.fixture(scope="module")
def built(packaged: Path) -> bytes:
    return build_onnx(packaged)


def test_the_graph_has_the_exports_interface(built: bytes) -> None:
    model = onnx.load_from_string(built)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]

    def dims(value: onnx.ValueInfoProto) -> list[str | int]:
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    assert [(i.name, i.type.tensor_type.elem_type, dims(i)) for i in model.graph.input] == [
        (name, onnx.TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    (out,) = model.graph.output
    assert (out.name, out.type.tensor_type.elem_type, dims(out)) == (
        "last_hidden_state",
        onnx.TensorProto.FLOAT,
        ["batch", "sequence", 384],
    )
    weights = {t.name for t in model.graph.initializer}
    assert "encoder.layer.0.attention.self.query.weight_t" in weights, "Linear weights are stored transposed"


def test_the_build_gives_the_same_bytes_twice(packaged: Path, built: bytes) -> None:
    assert build_onnx(packaged) == built


def _tiny_bert(folder: Path, prefix: str, **config: object) -> Path:
    """A random two-layer BERT with its weights under ``prefix`` (as BertFor* checkpoints have them)."""
    cfg = {
        "model_type": "bert",
        "architectures": ["BertModel"],
        "hidden_size": 16,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "intermediate_size": 24,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-7,
        "max_position_embeddings": 32,
        "type_vocab_size": 2,
        "vocab_size": 50,
        "position_embedding_type": "absolute",
        **config,
    }
    rng = np.random.default_rng(7)
    h, inter = 16, 24
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (50, h),
        "embeddings.position_embeddings.weight": (32, h),
        "embeddings.token_type_embeddings.weight": (2, h),
        "embeddings.LayerNorm.weight": (h,),
        "embeddings.LayerNorm.bias": (h,),
    }
    for i in range(2):
        p = f"encoder.layer.{i}."
        for sub in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            shapes[f"{p}{sub}.weight"], shapes[f"{p}{sub}.bias"] = (h, h), (h,)
        shapes[f"{p}intermediate.dense.weight"], shapes[f"{p}intermediate.dense.bias"] = (inter, h), (inter,)
        shapes[f"{p}output.dense.weight"], shapes[f"{p}output.dense.bias"] = (h, inter), (h,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}{ln}.weight"], shapes[f"{p}{ln}.bias"] = (h,), (h,)
    tensors = {prefix + k: rng.normal(0, 0.5, s).astype(np.float32) for k, s in shapes.items()}
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def _run(model: bytes, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    return np.asarray(session.run(["last_hidden_state"], feed)[0])


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_weights_are_found_with_or_without_the_bert_prefix(tmp_path: Path, prefix: str) -> None:
    plain = build_onnx(_tiny_bert(tmp_path / "plain", ""))
    assert build_onnx(_tiny_bert(tmp_path / "model", prefix)) == plain
    ids = np.array([[1, 5, 9, 2, 0], [1, 7, 2, 0, 0]], dtype=np.int64)
    mask = (ids != 0).astype(np.int64)
    out = _run(plain, ids, mask)
    assert out.shape == (2, 5, 16) and np.isfinite(out).all()


@needs_torch
def test_a_tiny_bert_equals_transformers(tmp_path: Path) -> None:
    """Another shape than MiniLM's (heads, eps, layers), checked against HF's BertModel itself."""
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertModel

    folder = _tiny_bert(tmp_path / "tiny", "bert.")
    config = BertConfig(**json.loads((folder / "config.json").read_text()))
    model = BertModel(config, add_pooling_layer=False).eval()
    from safetensors.torch import load_file

    state = {k.removeprefix("bert."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    model.load_state_dict(state, strict=False)
    ids = np.array([[1, 5, 9, 2, 0, 0, 0], [1, 7, 2, 3, 4, 8, 2]], dtype=np.int64)
    mask = (ids != 0).astype(np.int64)
    with torch.no_grad():
        want = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state.numpy()
    got = _run(build_onnx(folder), ids, mask)
    np.testing.assert_allclose(got[mask == 1], want[mask == 1], atol=1e-5)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"model_type": "distilbert"}, "model_type"),
        ({"hidden_act": "relu"}, "hidden_act"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ({"is_decoder": True}, "decoder"),
    ],
)
def test_configs_it_cannot_build_are_refused_with_the_reason(
    tmp_path: Path, change: dict[str, object], named: str
) -> None:
    folder = _tiny_bert(tmp_path / "model", "", **change)
    with pytest.raises(UnsupportedModelError, match=named):
        check_supported(folder)
    with pytest.raises(UnsupportedModelError, match=named):
        build_onnx(folder)


def test_weights_only_in_pytorch_format_are_refused(tmp_path: Path) -> None:
    folder = _tiny_bert(tmp_path / "model", "")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(UnsupportedModelError, match="no model.safetensors"):
        build_onnx(folder)


def test_an_unsupported_model_without_torch_names_the_torch_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _tiny_bert(tmp_path / "model", "", hidden_act="relu")
    monkeypatch.setattr(onnx_files, "extra_installed", lambda extra, modules=None: False)
    monkeypatch.setattr("mdrag.extras._found", lambda module: False)
    out = tmp_path / "cache" / "model.onnx"
    with pytest.raises(MissingExtraError, match=r"hidden_act.*pip install 'mdrag-docs\[torch\]'"):
        onnx_files.prepare_onnx(folder, out)
    assert not out.exists()


def test_building_and_embedding_import_no_torch(tmp_path: Path) -> None:
    """A fresh home: the model is written and run, and neither torch nor transformers is imported."""
    script = (
        "import json, sys\n"
        "from mdrag.embedding.onnx import OnnxEmbedder\n"
        "e = OnnxEmbedder()\n"
        "v = e.embed(['How do I install Hugo?', 'Taxonomies'])\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules)\n"
        "print(json.dumps({'heavy': heavy, 'path': str(e.onnx_path), 'shape': list(v.shape)}))\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "MDRAG_HOME": str(tmp_path / "home"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["heavy"] == [], f"imported {out['heavy']}"
    assert out["shape"] == [2, 384]
    path = Path(out["path"])
    assert path.is_relative_to(tmp_path / "home" / "cache" / "models") and path.is_file()


def test_a_home_keeps_one_copy_of_the_model(tmp_path: Path, packaged: Path) -> None:
    """An older file of the same model folder (another key) is removed when the new one is written; the
    written file is the only copy of the weights under the home."""
    cache = tmp_path / "cache"
    stale = cache / "models" / "all-MiniLM-L6-v2-0123456789ab"
    stale.mkdir(parents=True)
    (stale / "model.onnx").write_bytes(b"an older export")
    (stale / "model.onnx.sha256").write_text("0" * 64 + "  model.onnx\n")  # an old sidecar: no source line
    other = cache / "models" / "other-model-0123456789ab"  # another model: kept
    other.mkdir()
    e = OnnxEmbedder(cache_dir=cache)
    e.embed(["hello"])
    assert not stale.exists() and other.exists()
    files = sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file())
    # the ONNX file and its checksum, and beside them the tokenizer and configuration it runs with (so that it
    # runs once the weights package is gone): no copy of the weights, nothing elsewhere
    onnx = [p for p in files if p.name.endswith((".onnx", ".onnx.sha256"))]
    assert onnx == [e.onnx_path.relative_to(cache), Path(str(e.onnx_path.relative_to(cache)) + ".sha256")]
    home = e.onnx_path.parent.relative_to(cache)
    assert all(home in (p.parent, p.parent.parent) for p in files)
    assert not any(p.name in ("model.safetensors", "pytorch_model.bin") for p in files)
    assert e.onnx_path == onnx_model_path(packaged, cache, "all-MiniLM-L6-v2")


def test_an_unchanged_model_is_not_hashed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a written model costs a stat: neither the weights nor model.onnx is read through."""
    cache = tmp_path / "cache"
    OnnxEmbedder(cache_dir=cache, threads=3).embed(["hello"])
    hashed: list[Path] = []
    real = onnx_files.file_sha256

    def counted(path: Path) -> str:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(onnx_files, "file_sha256", counted)
    monkeypatch.setattr("mdrag.fileio.file_sha256", counted)
    fresh = OnnxEmbedder(cache_dir=cache)
    assert onnx_files.checksum_ok(fresh.onnx_path)
    assert hashed == []

    copy = tmp_path / "copy"  # a copied home: other inodes and ctimes, so hashed once, then recorded
    shutil.copytree(cache, copy)
    path = OnnxEmbedder(cache_dir=copy).onnx_path
    assert onnx_files.checksum_ok(path) and hashed == [path]
    assert onnx_files.checksum_ok(path) and hashed == [path]

    st = path.stat()  # rewritten in place with the mtime set back: the ctime still tells
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        f.write(b"\0" * 64)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not onnx_files.checksum_ok(path)


def _real_chunks(limit: int) -> list[str]:
    """Chunks of the Hugo docs (../shared/data), every seventh page; where they are absent, of the
    Markdown files in examples/docs and tests/data."""
    from mdrag.chunking import chunk_document
    from mdrag.parsers import parse_file

    roots = [HUGO / "content" / "en"] if HUGO.is_dir() else [ROOT / "examples" / "docs", ROOT / "tests" / "data"]
    texts: list[str] = []
    for root in roots:
        for path in sorted(root.rglob("*.md"))[:: 7 if HUGO.is_dir() else 1]:
            doc = parse_file(path)
            texts += [c.embed_text for c in chunk_document(doc, str(root), path.relative_to(root).as_posix())]
    return texts[:limit]


@needs_torch
@pytest.mark.slow
def test_vectors_and_neighbours_equal_sentence_transformers(minilm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Real chunks embedded by the graph written without torch and by sentence-transformers: the same
    vectors (cosine at least 0.99999) and, for the Hugo questions, the same ten nearest chunks in order."""
    chunks = _real_chunks(400)
    assert len(chunks) >= 10
    questions = [json.loads(line)["question"] for line in (ROOT / "benchmarks/data/hugo_qa.jsonl").open()][:40]
    built = OnnxEmbedder(cache_dir=tmp_path / "cache")
    got, want = built.embed(chunks), minilm.embed(chunks)
    cosines = (got * want).sum(axis=1)
    assert cosines.min() >= 0.99999, sorted(zip(cosines, chunks))[:3]
    q_got = np.vstack([built.embed_query(q) for q in questions])
    q_want = minilm.embed(questions)
    assert (q_got * q_want).sum(axis=1).min() >= 0.99999
    for q, a, b in zip(questions, q_got, q_want):
        top_got, top_want = np.argsort(-(got @ a))[:10], np.argsort(-(want @ b))[:10]
        assert top_got.tolist() == top_want.tolist(), q
