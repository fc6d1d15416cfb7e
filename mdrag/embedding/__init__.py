"""Embedders: the local model (torch, onnxruntime or OpenVINO), or an OpenAI-compatible API.

The interface is :class:`~mdrag.embedding.base.Embedder`. A backend is one
module under ``mdrag/embedding/`` with a class that implements it and has the
constructor ``from_config(config)``, plus one line in :data:`EMBEDDERS`.
:func:`make_embedder` picks one from the settings ``embedding.provider`` and
``embedding.backend``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mdrag.embedding.base import Embedder

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["EMBEDDERS", "Embedder", "embedder_name", "make_embedder"]

#: Embedder name -> "module:class", imported when used.
EMBEDDERS = {
    "openai": "mdrag.embedding.openai_compat:OpenAIEmbedder",
    "torch": "mdrag.embedding.local:LocalEmbedder",
    "onnx": "mdrag.embedding.onnx:OnnxEmbedder",
    "openvino": "mdrag.embedding.onnx:OpenVinoEmbedder",
}


def embedder_name(config: Config) -> str:
    """The key of :data:`EMBEDDERS` the settings ask for, ``embedding.backend: auto`` resolved.

    ``auto`` takes the fastest backend that gives the same vectors as torch:
    OpenVINO, then onnxruntime, whichever is installed; torch when neither is,
    or when ``embedding.device`` is not the CPU.
    """
    if config["embedding.provider"] == "openai":
        return "openai"
    backend: str = config["embedding.backend"]
    if backend != "auto":
        return backend
    if config["embedding.device"] != "cpu":
        return "torch"
    from mdrag.embedding.onnx import onnx_available, openvino_available

    if openvino_available():
        return "openvino"
    return "onnx" if onnx_available() else "torch"


def make_embedder(config: Config) -> Embedder:
    """The embedder the configuration asks for (no model is loaded yet)."""
    module_name, _, class_name = EMBEDDERS[embedder_name(config)].partition(":")
    embedder: Embedder = getattr(importlib.import_module(module_name), class_name).from_config(config)
    return embedder
