"""The ONNX graph of a BERT-family sentence-transformers model, written from its weights without torch.

:func:`build_onnx` reads ``config.json`` and ``model.safetensors`` (numpy, through
``safetensors.numpy``) and writes the encoder as HF's ``BertModel`` computes it,
node for node, with the ``onnx`` package: the same interface as the torch
export it replaces (:func:`mdrag.embedding.onnx.export_onnx`), so the runtimes
and the pooling see no difference.

- inputs ``input_ids``, ``attention_mask``, ``token_type_ids``: int64, shape
  ``[batch, sequence]`` (both axes dynamic);
- output ``last_hidden_state``: float32, ``[batch, sequence, hidden]``;
- opset 17 (``LayerNormalization``; GELU written out with ``Erf``, as HF's exact ``gelu``).

The graph: embeddings (word + absolute position + token type, LayerNorm), then per
layer self-attention (Q/K/V projections, heads split, scores / sqrt(head size) plus
``(1 - mask) * float32 min``, softmax, context, output projection, residual,
LayerNorm) and the feed-forward block (intermediate projection, exact GELU,
output projection, residual, LayerNorm). Linear weights are stored transposed
(``x @ W.T`` becomes ``MatMul(x, W_t)``). The bytes depend only on the weights
and config: building twice gives the same file.

Anything else (another ``model_type``, another activation, relative position
embeddings, weights only in ``pytorch_model.bin``) raises
:class:`UnsupportedModelError`, whose message says what is not supported.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from mdrag.errors import EmbeddingError

__all__ = ["OPSET", "UnsupportedModelError", "build_model", "build_onnx", "check_supported"]

log = logging.getLogger(__name__)

OPSET = 17
BUILDER_VERSION = "1"  # written into the model's metadata; part of the cache key (mdrag/embedding/onnx.py)
_MAX_BYTES = 1_900_000_000  # protobuf's 2 GiB limit on one serialized model, with room for the graph


class UnsupportedModelError(EmbeddingError):
    """The model is not one :func:`build_onnx` can write (its message says why)."""


def _config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as e:
        raise UnsupportedModelError(f"cannot read {path}: {e}") from e


def check_supported(model_dir: Path) -> dict[str, Any]:
    """The model's config when :func:`build_onnx` can write it; else :class:`UnsupportedModelError` saying why."""
    model_dir = Path(model_dir)
    cfg = _config(model_dir)
    wrong = {
        "model_type": (cfg.get("model_type"), "bert"),
        "hidden_act": (cfg.get("hidden_act", "gelu"), "gelu"),
        "position_embedding_type": (cfg.get("position_embedding_type", "absolute"), "absolute"),
    }
    for key, (value, wanted) in wrong.items():
        if value != wanted:
            raise UnsupportedModelError(f"{key} is {value!r} in {model_dir / 'config.json'} (only {wanted!r} is built)")
    if cfg.get("is_decoder") or cfg.get("add_cross_attention"):
        raise UnsupportedModelError(f"{model_dir.name} is a decoder (only BERT encoders are built)")
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    if hidden % heads:
        raise UnsupportedModelError(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    if int(cfg.get("num_hidden_layers", 0)) < 1:
        raise UnsupportedModelError(f"{model_dir / 'config.json'} gives no num_hidden_layers")
    weights = model_dir / "model.safetensors"
    if not weights.is_file():
        raise UnsupportedModelError(f"no model.safetensors in {model_dir} (weights in other formats are not read)")
    if weights.stat().st_size > _MAX_BYTES:
        raise UnsupportedModelError(f"{weights} is larger than one ONNX file can hold")
    return cfg


class _Weights:
    """The safetensors tensors by their ``BertModel`` names, whatever prefix the checkpoint gave them."""

    def __init__(self, path: Path) -> None:
        from safetensors.numpy import load_file

        try:
            tensors = load_file(str(path))
        except Exception as e:  # a damaged or truncated file: safetensors raises its own error types
            raise UnsupportedModelError(f"cannot read the weights in {path}: {e}") from e
        anchor = "embeddings.word_embeddings.weight"
        prefixes = sorted(k[: -len(anchor)] for k in tensors if k.endswith(anchor))
        if not prefixes:
            raise UnsupportedModelError(f"{path} holds no {anchor}: not a BERT checkpoint")
        self.prefix = prefixes[0]  # "" for sentence-transformers' BertModel, "bert." for BertFor* checkpoints
        self.tensors = tensors  # name (with prefix) -> array
        self.path = path  # for the messages

    def __call__(self, name: str) -> np.ndarray:
        key = self.prefix + name
        if key not in self.tensors:  # TF-era checkpoints call LayerNorm's weight and bias gamma and beta
            old = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
            if old not in self.tensors:
                raise UnsupportedModelError(f"{self.path} has no tensor {key!r}")
            key = old
        return np.ascontiguousarray(self.tensors[key], dtype=np.float32)


class _Graph:
    """Nodes and initializers in the order they are added, with names that say where they come from."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []  # onnx NodeProto, in topological order
        self.initializers: list[Any] = []  # onnx TensorProto
        self._count = 0  # makes node output names unique

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, output: str | None = None, **attrs: Any) -> str:
        """Add a node; its output is ``output``, or a name made of ``name``, the op and a counter."""
        from onnx import helper

        self._count += 1
        out = output or f"{name}/{op_type}_{self._count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{name}/{op_type}_{self._count}", **attrs))
        return out

    def linear(self, x: str, w: np.ndarray, b: np.ndarray, name: str) -> str:
        """``x @ w.T + b``, as torch's Linear: the weight stored transposed."""
        wt = self.const(f"{name}.weight_t", np.ascontiguousarray(w.T))
        bias = self.const(f"{name}.bias", b)
        return self.op("Add", [self.op("MatMul", [x, wt], name), bias], name)

    def layer_norm(self, x: str, w: np.ndarray, b: np.ndarray, eps: float, name: str, output: str | None = None) -> str:
        scale, bias = self.const(f"{name}.weight", w), self.const(f"{name}.bias", b)
        return self.op("LayerNormalization", [x, scale, bias], name, output, axis=-1, epsilon=eps)


def build_model(model_dir: Path) -> Any:
    """The ``onnx.ModelProto`` of the BERT encoder in ``model_dir`` (see the module docstring)."""
    from onnx import TensorProto, checker, helper

    model_dir = Path(model_dir)
    cfg = check_supported(model_dir)
    w = _Weights(model_dir / "model.safetensors")
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    head_dim = hidden // heads
    eps = float(cfg.get("layer_norm_eps", 1e-12))
    layers = int(cfg["num_hidden_layers"])
    g = _Graph()

    # Embeddings: word + position (rows 0..sequence-1 of the table) + token type, then LayerNorm.
    seq_len = g.op("Shape", ["input_ids"], "embeddings", start=1, end=2)  # [sequence], a 1-D tensor
    positions = g.const("embeddings.position_embeddings", w("embeddings.position_embeddings.weight"))
    pos = g.op(
        "Slice",
        [positions, g.const("zeros_1d", np.array([0], np.int64)), seq_len, g.const("axes_0", np.array([0], np.int64))],
        "embeddings",
    )
    words = g.op(
        "Gather",
        [g.const("embeddings.word_embeddings", w("embeddings.word_embeddings.weight")), "input_ids"],
        "embeddings",
    )
    types = g.op(
        "Gather",
        [g.const("embeddings.token_type_embeddings", w("embeddings.token_type_embeddings.weight")), "token_type_ids"],
        "embeddings",
    )
    x = g.op("Add", [g.op("Add", [words, types], "embeddings"), pos], "embeddings")
    x = g.layer_norm(x, w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"), eps, "embeddings.LayerNorm")

    # The additive mask: [batch, 1, 1, sequence], 0 where attended, float32's min where padded (HF's
    # get_extended_attention_mask).
    mask = g.op(
        "Cast",
        [g.op("Unsqueeze", ["attention_mask", g.const("mask_axes", np.array([1, 2], np.int64))], "mask")],
        "mask",
        to=TensorProto.FLOAT,
    )
    mask = g.op("Sub", [g.const("mask_one", np.array(1.0, np.float32)), mask], "mask")
    mask = g.op("Mul", [mask, g.const("mask_min", np.array(np.finfo(np.float32).min, np.float32))], "mask")

    split = g.const("heads_shape", np.array([0, 0, heads, head_dim], np.int64))  # [batch, seq, heads, head_dim]
    merge = g.const("hidden_shape", np.array([0, 0, hidden], np.int64))
    scale = g.const("attention_scale", np.array(np.sqrt(head_dim), np.float32))
    sqrt_half = g.const("gelu_sqrt2", np.array(np.sqrt(2.0), np.float32))
    half, unit = g.const("gelu_half", np.array(0.5, np.float32)), g.const("gelu_one", np.array(1.0, np.float32))

    for i in range(layers):
        p = f"encoder.layer.{i}."

        def lin(x: str, sub: str, p: str = p) -> str:
            return g.linear(x, w(f"{p}{sub}.weight"), w(f"{p}{sub}.bias"), p + sub)

        def heads_of(t: str, perm: list[int], p: str = p) -> str:
            return g.op("Transpose", [g.op("Reshape", [t, split], p + "attention")], p + "attention", perm=perm)

        q = heads_of(lin(x, "attention.self.query"), [0, 2, 1, 3])  # [batch, heads, seq, head_dim]
        k = heads_of(lin(x, "attention.self.key"), [0, 2, 3, 1])  # [batch, heads, head_dim, seq]
        v = heads_of(lin(x, "attention.self.value"), [0, 2, 1, 3])
        scores = g.op("Div", [g.op("MatMul", [q, k], p + "attention"), scale], p + "attention")
        probs = g.op("Softmax", [g.op("Add", [scores, mask], p + "attention")], p + "attention", axis=-1)
        context = g.op("Transpose", [g.op("MatMul", [probs, v], p + "attention")], p + "attention", perm=[0, 2, 1, 3])
        context = g.op("Reshape", [context, merge], p + "attention")
        attn = g.op("Add", [lin(context, "attention.output.dense"), x], p + "attention.output")
        ln = p + "attention.output.LayerNorm"
        x = g.layer_norm(attn, w(ln + ".weight"), w(ln + ".bias"), eps, ln)

        inner = lin(x, "intermediate.dense")  # exact GELU: x * 0.5 * (1 + erf(x / sqrt(2)))
        erf = g.op("Erf", [g.op("Div", [inner, sqrt_half], p + "intermediate")], p + "intermediate")
        act = g.op(
            "Mul",
            [g.op("Mul", [inner, g.op("Add", [erf, unit], p + "intermediate")], p + "intermediate"), half],
            p + "intermediate",
        )
        out = g.op("Add", [lin(act, "output.dense"), x], p + "output")
        ln = p + "output.LayerNorm"
        last = "last_hidden_state" if i == layers - 1 else None  # the graph's output, named so (no Identity:
        x = g.layer_norm(out, w(ln + ".weight"), w(ln + ".bias"), eps, ln, last)  # OpenVINO drops its name)
    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        g.nodes,
        "bert-encoder",
        [
            helper.make_tensor_value_info(n, TensorProto.INT64, dims)
            for n in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*dims, hidden])],
        g.initializers,
    )
    model = helper.make_model(
        graph,
        producer_name="mdrag",
        producer_version=BUILDER_VERSION,
        opset_imports=[helper.make_opsetid("", OPSET)],
    )
    model.ir_version = 8  # what opset 17 came with: runtimes from onnxruntime 1.13 and OpenVINO 2022.3 read it
    checker.check_model(model)
    return model


def build_onnx(model_dir: Path) -> bytes:
    """The serialized ONNX model of the BERT encoder in ``model_dir``: the same bytes every time."""
    data: bytes = build_model(Path(model_dir)).SerializeToString(deterministic=True)
    return data
